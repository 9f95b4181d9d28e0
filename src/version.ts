/**
 * The package version and the identity peerload gives itself on the wire: `User-Agent: peerload/<version>` on
 * every HTTP client and `fieldManager=peerload-operator` on every apiserver write, so `managedFields` and audit
 * logs name it instead of `unknown`.
 */
import { createRequire } from 'node:module';

// package.json sits one level above both src/ and dist/, so the same relative path works from either.
export const VERSION: string = (createRequire(import.meta.url)('../package.json') as { version: string })
  .version;
export const USER_AGENT = `peerload/${VERSION}`;
export const FIELD_MANAGER = 'peerload-operator';
