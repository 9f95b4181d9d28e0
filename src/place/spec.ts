/**
 * What the operator asks the agent for: one version of a model directory (`PUT /v1/models/{name}` body, also the
 * `peerload fetch --spec` file). Each file is a signed URL the operator made, or an object key the agent signs with
 * its mounted credentials just before the download (so a long download never starts on an expired signature).
 * The task identity (filter, tag, application, piece length) is the preheat's, so the downloads hit its tasks.
 *
 * A source's credential (a registry's bearer token, a Hub token) travels once, in `headerSets`, and each file names
 * the set it needs (`headerSet`): per-file copies made the body grow with the file count times the token's size.
 * Per-file `headers` stay accepted, as older operators sent them; the body is bounded on both sides
 * ({@link MAX_SPEC_BYTES}: the agent refuses more, {@link specBody} refuses to build more).
 */
import { z } from 'zod';
import { OBJECT_STORAGE_TYPES } from '../api/objectstorage.ts';
import { pathProblem } from '../storage/fileset.ts';
import type { StorageLocation } from '../storage/objecturl.ts';

/** A model or version name: one path segment, no dot first (never `.`, `..` or a hidden temporary name). */
export const SEGMENT = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/;

const RelativePath = z
  .string()
  .max(1024)
  .superRefine((p, ctx) => {
    const problem = pathProblem(p);
    if (problem) ctx.addIssue({ code: 'custom', message: `must be a relative file path (${problem})` });
  });

/**
 * How an archive the placer extracts is compressed: an OCI tar layer's media type names it (src/oci/media-types.ts
 * takes its layer formats from here), a KServe archive's first bytes tell it (src/place/mount.ts).
 */
export const ARCHIVE_FORMATS = ['tar', 'tar+gzip', 'tar+zstd'] as const;
export type ArchiveFormat = (typeof ARCHIVE_FORMATS)[number];

const Header = z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'must be an HTTP header name');

/** The largest PUT body the agent reads, and the largest the operator builds: 10 000 files with signed URLs fit. */
export const MAX_SPEC_BYTES = 16 * 1024 * 1024;
/** One header value (a registry's bearer token is 1–4 KiB; registries' own request lines stop near 8 KiB). */
export const MAX_HEADER_VALUE = 8192;
/** Header sets of one spec: one per source host that needs a credential. */
const MAX_HEADER_SETS = 16;
/** Headers of one set or one file. */
const MAX_HEADERS = 32;

const Headers = z
  .record(Header, z.string().max(MAX_HEADER_VALUE))
  .refine((h) => Object.keys(h).length <= MAX_HEADERS, `must hold at most ${MAX_HEADERS} headers`);

const HeaderSetName = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, 'must be a name of letters, digits, . _ - (at most 64)');

const FileSchema = z
  .object({
    path: RelativePath.meta({ description: 'Where the file lands under the version directory.' }),
    url: z
      .url({ protocol: /^https?$/ })
      .max(8192)
      .optional(),
    key: z.string().min(1).max(1024).optional(),
    size: z.number().int().nonnegative().optional(),
    /** The spec's `headerSets` entry sent with this file's request (a token that may go to its host alone). */
    headerSet: HeaderSetName.optional(),
    /** Request headers of this file only, over the spec's and its set's: what operators before `headerSets` sent. */
    headers: Headers.optional(),
    /** What the file's bytes must hash to (a Hub LFS object's sha256): checked before the version is placed. */
    sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/, 'must be 64 lower-case hex digits')
      .optional(),
    /**
     * A tar layer of an OCI artifact: the file is an archive, extracted safely into the version directory once
     * every file is in (src/place/extract.ts); `path` then only names the archive while it waits beside the version.
     */
    extract: z.enum(ARCHIVE_FORMATS).optional(),
    /** How messages name the file (an OCI layer: `layer 2 (sha256:ab12…, model.onnx)`); default its path. */
    layer: z.string().max(512).optional(),
  })
  .strict()
  .refine((f) => (f.url === undefined) !== (f.key === undefined), {
    message: 'give exactly one of url (a signed URL) or key (an object key the agent signs)',
  });

const StorageSchema = z
  .object({
    type: z.enum(OBJECT_STORAGE_TYPES),
    bucket: z.string().min(1).max(255).optional(),
    container: z.string().min(1).max(255).optional(),
    accountName: z.string().min(1).max(24).optional(),
    region: z.string().min(1).max(64).optional(),
    endpoint: z.url({ protocol: /^https?$/ }).optional(),
    pathStyle: z.boolean().optional(),
    projectID: z.string().min(1).max(128).optional(),
    /** Validity of the URLs the agent signs, seconds. */
    expiresSeconds: z.number().int().min(60).max(604_800).default(3600),
  })
  .strict();

const ModelVersionSpecBase = z
  .object({
    version: z
      .string()
      .regex(SEGMENT, 'must be one path segment of letters, digits, . _ - (not starting with .)'),
    /** The model's directory under the agent's root; default the model name. */
    directory: RelativePath.optional(),
    files: z.array(FileSchema).min(1).max(10_000),
    storage: StorageSchema.optional(),
    filter: z
      .array(z.string().regex(/^[^&,\s]+$/))
      .max(64)
      .optional(),
    tag: z.string().max(256).optional(),
    application: z.string().max(256).optional(),
    pieceLength: z.number().int().positive().optional(),
    /** Extra request headers (e.g. the preheat's `headers`); X-Dragonfly-* ones are the agent's. */
    headers: Headers.optional(),
    /** Named header sets the files refer to (`files[].headerSet`): each source's credential once. */
    headerSets: z
      .record(HeaderSetName, Headers)
      .refine((h) => Object.keys(h).length <= MAX_HEADER_SETS, `must hold at most ${MAX_HEADER_SETS} sets`)
      .optional(),
    /** Whole download, seconds; bounded by the agent's own deadline. */
    deadlineSeconds: z.number().int().positive().max(86_400).optional(),
    /** Bytes this version may take; bounded by the agent's own cap. */
    maxBytes: z.number().int().positive().optional(),
  })
  .strict();

export const ModelVersionSpecSchema = ModelVersionSpecBase.superRefine((s, ctx) => {
  if (s.files.some((f) => f.key !== undefined) && s.storage === undefined)
    ctx.addIssue({ code: 'custom', path: ['storage'], message: 'is required when a file gives a key' });
  const seen = new Set<string>();
  s.files.forEach((f, i) => {
    if (seen.has(f.path))
      ctx.addIssue({ code: 'custom', path: ['files', i, 'path'], message: `"${f.path}" is listed twice` });
    seen.add(f.path);
    // A file's path may not be another's directory: `a` and `a/b` cannot both be files.
    if (s.files.some((g) => g.path.startsWith(`${f.path}/`)))
      ctx.addIssue({
        code: 'custom',
        path: ['files', i, 'path'],
        message: `"${f.path}" is also a directory`,
      });
  });
  headerProblems(s, ctx);
});

const OWN_HEADER = /^(x-dragonfly-|host$|range$|connection$)/i;

/** Headers the agent sets itself, anywhere in the spec, and files naming a header set the spec lacks. */
function headerProblems(s: z.output<typeof ModelVersionSpecBase>, ctx: z.RefinementCtx): void {
  const own = (headers: Record<string, string> | undefined, path: (string | number)[]) => {
    for (const name of Object.keys(headers ?? {}))
      if (OWN_HEADER.test(name))
        ctx.addIssue({ code: 'custom', path: [...path, name], message: 'is set by the agent itself' });
  };
  own(s.headers, ['headers']);
  for (const [set, headers] of Object.entries(s.headerSets ?? {})) own(headers, ['headerSets', set]);
  s.files.forEach((f, i) => {
    own(f.headers, ['files', i, 'headers']);
    if (f.headerSet !== undefined && s.headerSets?.[f.headerSet] === undefined)
      ctx.addIssue({
        code: 'custom',
        path: ['files', i, 'headerSet'],
        message: `names "${f.headerSet}", which headerSets does not hold`,
      });
  });
}

export type ModelVersionSpec = z.output<typeof ModelVersionSpecSchema>;

/** The storage location of a spec's keys. */
export function specLocation(spec: ModelVersionSpec): StorageLocation | undefined {
  if (!spec.storage) return undefined;
  const { expiresSeconds: _expires, ...location } = spec.storage;
  return { ...location, filteredQueryParams: spec.filter };
}

/** A zod error as one line naming each field: `files[2].path: must be ...; version: ...`. */
export function specProblems(error: z.ZodError): string {
  return error.issues
    .slice(0, 5)
    .map((i) => {
      const field = i.path.map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`)).join('');
      return `${field.replace(/^\./, '') || 'body'}: ${i.message}`;
    })
    .join('; ');
}

/** {@link specBody}'s refusal: the spec would be larger than the agent reads. */
export class SpecTooLargeError extends Error {
  readonly reason = 'SpecTooLarge';
  constructor(message: string) {
    super(message);
    this.name = 'SpecTooLargeError';
  }
}

/**
 * A spec as the agent's PUT body, refused once it would pass `max` bytes: the files are serialized one at a time
 * and the sum checked as it grows, so the sender never holds more than the cap (and one file) whatever a source's
 * listing or credential held. Hand-written because JSON.stringify of the whole spec first builds all of it.
 */
export function specBody(
  spec: Readonly<{ files: readonly unknown[] } & Record<string, unknown>>,
  max: number = MAX_SPEC_BYTES,
): string {
  const { files, ...rest } = spec;
  const head = JSON.stringify(rest);
  let size = Buffer.byteLength(head) + '"files":[],'.length;
  const tooLarge = (done: number) =>
    new SpecTooLargeError(
      `the version spec is larger than the ${max} bytes an agent reads (at file ${done} of ${files.length}): ` +
        'fewer files per version, or shorter paths, URLs and headers',
    );
  if (size > max) throw tooLarge(0);
  const parts: string[] = [];
  for (const f of files) {
    const text = JSON.stringify(f);
    size += Buffer.byteLength(text) + 1;
    if (size > max) throw tooLarge(parts.length);
    parts.push(text);
  }
  const fields = head === '{}' ? '' : `${head.slice(1, -1)},`;
  return `{${fields}"files":[${parts.join(',')}]}`;
}
