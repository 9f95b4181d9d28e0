/**
 * An OCI reference as the registry client uses it: the API's grammar (src/api/oci-reference.ts), its refusal as
 * the client's own error (`InvalidReference`).
 */
import { InvalidOciReferenceError, parseOciReference, type OciReference } from '../api/oci-reference.ts';
import { OciError, OciReason } from './errors.ts';

export { DIGEST, formatReference, type OciReference } from '../api/oci-reference.ts';

/** Parses a reference; throws an {@link OciError} (`InvalidReference`) that says what to write instead. */
export function parseReference(input: string): OciReference {
  try {
    return parseOciReference(input);
  } catch (e) {
    if (e instanceof InvalidOciReferenceError) throw new OciError(OciReason.InvalidReference, e.message);
    throw e;
  }
}
