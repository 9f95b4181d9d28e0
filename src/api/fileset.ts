/**
 * A model directory in a spec: an object-storage prefix whose files are chosen by include / exclude glob patterns
 * and bounded in count and bytes (ModelPreheat `spec.objectStorage.prefix`, ServedModel `spec.files`). The
 * operator lists the prefix with the provider's list API and applies the same rules as `peerload taskid` and the
 * agent (src/storage/fileset.ts), so every side names the same files.
 */
import { z } from 'zod';
import { withRules } from './common.ts';

/** Default caps: a large LLM checkpoint has a few hundred shards and some hundreds of GB. */
export const DEFAULT_MAX_FILES = 1000;
export const DEFAULT_MAX_BYTES = 1024 ** 4; // 1 TiB

/** Files of one directory at most: with 100 URLs a job, a directory is at most 100 preheat jobs. */
export const MAX_DIRECTORY_FILES = 10_000;

/** A key prefix naming a directory: `models/llama/` (a missing trailing `/` is added), `''` for the bucket root. */
export const DirectoryPrefix = withRules(z.string().max(1024), [
  {
    rule: "!self.startsWith('/')",
    message: 'must not start with / (object keys do not)',
    check: (p) => !p.startsWith('/'),
  },
  {
    rule: "!self.matches(r'[\\x00-\\x1f\\x7f]')",
    message: 'must not contain control characters',
    // eslint-disable-next-line no-control-regex -- control characters are what this rule is about
    check: (p) => !/[\x00-\x1f\x7f]/.test(p),
  },
  {
    rule: "!('/' + self + '/').matches(r'/\\.{1,2}/') && !self.contains('//')",
    message: "must not contain empty, '.' or '..' path segments",
    check: (p) => !/\/\.{1,2}\//.test(`/${p}/`) && !p.includes('//'),
  },
]);

const GlobPatterns = z.array(z.string().min(1).max(256)).max(64);

/** The fields that choose and bound a directory's files once it is listed. */
export const selectionFields = {
  include: GlobPatterns.optional().meta({
    description:
      'Glob patterns on the path relative to the prefix (`*`, `**`, `?`, `[...]`, `{a,b}`); a file is kept when it matches one. Unset: every file. As in a shell, `*` does not match a leading dot.',
  }),
  exclude: GlobPatterns.optional().meta({
    description: 'Glob patterns on the path relative to the prefix; a file that matches one is left out.',
  }),
  maxFiles: z
    .int()
    .min(1)
    .max(MAX_DIRECTORY_FILES)
    .optional()
    .meta({
      description: `Most files the directory may hold after include/exclude (default ${DEFAULT_MAX_FILES}, at most ${MAX_DIRECTORY_FILES}); more is a Stalled condition, not a partial preheat.`,
    }),
  maxBytes: z
    .int()
    .min(1)
    .optional()
    .meta({
      description: `Most bytes the directory's files may hold together (default ${DEFAULT_MAX_BYTES}, 1 TiB); more is a Stalled condition.`,
    }),
};

/** Whether any selection field is set (they apply to a listed prefix only). */
export const hasSelection = (s: {
  include?: unknown;
  exclude?: unknown;
  maxFiles?: unknown;
  maxBytes?: unknown;
}): boolean =>
  s.include !== undefined || s.exclude !== undefined || s.maxFiles !== undefined || s.maxBytes !== undefined;

/** The CEL form of {@link hasSelection}. */
export const HAS_SELECTION_CEL =
  'has(self.include) || has(self.exclude) || has(self.maxFiles) || has(self.maxBytes)';
