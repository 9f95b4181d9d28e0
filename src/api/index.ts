export * from './common.ts';
export * from './manager.ts';
export * from './clustermanager.ts';
export * from './objectstorage.ts';
export * from './modelpreheat.ts';
export * from './servedmodel.ts';
export * from './source-oci.ts';
export { KINDS, customResourceDefinition } from './crd.ts';
export * from './resources.ts';
