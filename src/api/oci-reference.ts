/**
 * An OCI reference as registries and their clients write it: `registry[:port]/repository[:tag][@sha256:<hex>]`,
 * optionally behind `oci://` (KServe's scheme). The grammar is distribution/reference's; unlike Docker's clients no
 * registry and no tag are implied: a model comes from the registry the reference names, and `latest` is never
 * guessed (say `:latest` to mean it). The grammar is the API's (spec.source.oci.reference is checked with it at
 * admission); src/oci/reference.ts gives the registry client its errors.
 */

export interface OciReference {
  /** `host[:port]`, lower-cased host. */
  registry: string;
  /** `models/triton/simple`. */
  repository: string;
  tag?: string | undefined;
  /** `sha256:<64 hex>`. */
  digest?: string | undefined;
}

const HOST_PART = '(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)';
const HOST = new RegExp(`^(?:${HOST_PART}(?:\\.${HOST_PART})*|\\[[0-9a-fA-F:.]+\\])(?::[0-9]{1,5})?$`);
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;
const TAG = /^[\w][\w.-]{0,127}$/;
export const DIGEST = /^sha256:[a-f0-9]{64}$/;
const MAX_NAME = 255;

/** A reference that does not parse: the message says what to write instead. */
export class InvalidOciReferenceError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InvalidOciReferenceError';
  }
}

const invalid = (text: string, why: string) =>
  new InvalidOciReferenceError(`OCI reference "${text}": ${why}`);

/** Parses a reference; throws an {@link InvalidOciReferenceError} that says what to write instead. Pure. */
export function parseOciReference(input: string): OciReference {
  const text = input.trim();
  let rest = text.startsWith('oci://') ? text.slice('oci://'.length) : text;
  if (/^[a-z][a-z0-9+.-]*:\/\//i.test(rest))
    throw invalid(text, 'only oci:// or no scheme at all: registry/repository:tag');
  let digest: string | undefined;
  const at = rest.indexOf('@');
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!DIGEST.test(digest))
      throw invalid(text, 'the digest must be sha256: followed by 64 lower-case hex digits');
  }
  const slash = rest.indexOf('/');
  if (slash <= 0)
    throw invalid(text, 'name the registry and the repository, e.g. registry.example.com/models/resnet:v1');
  const registry = rest.slice(0, slash);
  let name = rest.slice(slash + 1);
  if (!HOST.test(registry) || !(registry.includes('.') || registry.includes(':') || registry === 'localhost'))
    throw invalid(
      text,
      `"${registry}" is not a registry host: the first part must be a host name with a dot or a port, or localhost (no registry is implied)`,
    );
  let tag: string | undefined;
  const colon = name.lastIndexOf(':');
  if (colon >= 0) {
    tag = name.slice(colon + 1);
    name = name.slice(0, colon);
    if (!TAG.test(tag))
      throw invalid(text, 'a tag is 1 to 128 letters, digits, _ . - and does not start with . or -');
  }
  if (name === '' || !name.split('/').every((c) => PATH_COMPONENT.test(c)))
    throw invalid(
      text,
      'the repository is lower-case path components of letters and digits separated by . _ __ or -, joined by /',
    );
  if (registry.length + 1 + name.length > MAX_NAME)
    throw invalid(text, `the name is longer than ${MAX_NAME} characters`);
  if (tag === undefined && digest === undefined)
    throw invalid(text, 'give a tag (:v1) or a digest (@sha256:...); none is implied');
  return { registry: registry.toLowerCase(), repository: name, tag, digest };
}

/** The reference written back: `registry/repository[:tag][@digest]`. */
export function formatReference(ref: OciReference): string {
  return `${ref.registry}/${ref.repository}${ref.tag !== undefined ? `:${ref.tag}` : ''}${ref.digest !== undefined ? `@${ref.digest}` : ''}`;
}
