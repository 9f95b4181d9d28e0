/**
 * The version spec moved to the placer (src/place/spec.ts, the placer's input); this name stays for the importers
 * that still use it until they import the placer's module.
 */
export * from '../place/spec.ts';
