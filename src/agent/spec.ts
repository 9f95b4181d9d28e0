/**
 * What the operator asks the agent for: one version of a model directory (`PUT /v1/models/{name}` body, also the
 * `peerload fetch --spec` file). Each file is a signed URL the operator made, or an object key the agent signs with
 * its mounted credentials just before the download (so a long download never starts on an expired signature).
 * The task identity (filter, tag, application, piece length) is the preheat's, so the downloads hit its tasks.
 */
import { z } from 'zod';
import { OBJECT_STORAGE_TYPES } from '../api/objectstorage.ts';
import { LAYER_FORMATS } from '../oci/media-types.ts';
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

const Header = z.string().regex(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, 'must be an HTTP header name');

const FileSchema = z
  .object({
    path: RelativePath.meta({ description: 'Where the file lands under the version directory.' }),
    url: z.url({ protocol: /^https?$/ }).optional(),
    key: z.string().min(1).max(1024).optional(),
    size: z.number().int().nonnegative().optional(),
    /** Request headers of this file only, over the spec's (a token that may go to this file's host alone). */
    headers: z.record(Header, z.string().max(8192)).optional(),
    /** What the file's bytes must hash to (a Hub LFS object's sha256): checked before the version is placed. */
    sha256: z
      .string()
      .regex(/^[0-9a-f]{64}$/, 'must be 64 lower-case hex digits')
      .optional(),
    /**
     * A tar layer of an OCI artifact: the file is an archive, extracted safely into the version directory once
     * every file is in (src/oci/extract.ts); `path` then only names the archive while it waits beside the version.
     */
    extract: z.enum(LAYER_FORMATS.filter((f) => f !== 'raw') as ['tar', 'tar+gzip', 'tar+zstd']).optional(),
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

export const ModelVersionSpecSchema = z
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
    headers: z.record(Header, z.string().max(8192)).optional(),
    /** Whole download, seconds; bounded by the agent's own deadline. */
    deadlineSeconds: z.number().int().positive().max(86_400).optional(),
    /** Bytes this version may take; bounded by the agent's own cap. */
    maxBytes: z.number().int().positive().optional(),
  })
  .strict()
  .superRefine((s, ctx) => {
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
    const ownHeader = /^(x-dragonfly-|host$|range$|connection$)/i;
    for (const name of Object.keys(s.headers ?? {}))
      if (ownHeader.test(name))
        ctx.addIssue({ code: 'custom', path: ['headers', name], message: 'is set by the agent itself' });
    s.files.forEach((f, i) => {
      for (const name of Object.keys(f.headers ?? {}))
        if (ownHeader.test(name))
          ctx.addIssue({
            code: 'custom',
            path: ['files', i, 'headers', name],
            message: 'is set by the agent itself',
          });
    });
  });

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
