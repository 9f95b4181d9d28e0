/**
 * A model straight from a Hugging Face repository (ServedModel `spec.source.huggingface`): the repository and a
 * revision the operator resolves to a commit sha once per generation, the files chosen and bounded as for a
 * directory in a bucket, and the token kept to the Hub hosts the admin allows (`--allowed-hub-hosts`).
 */
import { z } from 'zod';
import { COMMIT_SHA, DEFAULT_REVISION, repoProblem, revisionProblem } from './hub-reference.ts';
import { RootURL, SecretKeyRef, withRules } from './common.ts';
import { selectionFields } from './fileset.ts';

/** `namespace/name`: the Hub's repository id rules (reference.ts), in CEL and TypeScript. */
const PART = '[A-Za-z0-9]([A-Za-z0-9._-]{0,94}[A-Za-z0-9])?';

export const HubRepo = withRules(z.string().min(3).max(193), [
  {
    rule: `self.matches(r'^${PART}/${PART}$') && !self.contains('--') && !self.contains('..')`,
    message:
      'must be namespace/name (e.g. meta-llama/Llama-3.1-8B-Instruct): each part 1 to 96 letters, digits, - _ . (not starting or ending with - or ., no -- or ..)',
    check: (r) => repoProblem(r) === undefined,
  },
]);

export const HubRevision = withRules(z.string().min(1).max(256), [
  {
    rule: "!self.matches(r'[\\x00-\\x20\\x7f~^:?*\\[\\\\]') && !self.contains('..')",
    message: 'must be a branch, tag or commit sha (no spaces, control characters, ~ ^ : ? * [ \\ or ..)',
    check: (r) => revisionProblem(r) === undefined,
  },
]);

export const HubSource = z.object({
  repo: HubRepo.meta({ description: 'The repository id, namespace/name (a model repository).' }),
  revision: HubRevision.default(DEFAULT_REVISION).meta({
    description:
      'A branch, tag or commit sha (default main). The operator resolves it to a commit once per generation (status.source.huggingface.commit) and places the files at that commit: a branch that moves changes nothing until the spec changes or the peerload.io/refresh-source annotation takes a new value.',
  }),
  ...selectionFields,
  tokenSecretRef: SecretKeyRef.optional().meta({
    description:
      'A Hub user access token (hf_...) for a gated or private repository. It goes only to a Hub host the admin allows (--allowed-hub-hosts), as a request header of the listing and of each file the Hub serves itself.',
  }),
  endpoint: RootURL.optional().meta({
    description:
      'The Hub: a mirror or an Enterprise Hub, http(s)://host[:port]. Default https://huggingface.co. A token goes to it only when the admin allows its host.',
  }),
});
export type HubSource = z.infer<typeof HubSource>;

/** What a source's revision resolved to (status.source.huggingface of both kinds). */
export const HubCommit = z.object({
  repo: z.string().meta({ description: 'spec.source.huggingface.repo.' }),
  revision: z.string().meta({ description: 'spec.source.huggingface.revision.' }),
  commit: z.string().meta({ description: 'The commit sha the revision named when it was resolved.' }),
});

/** Whether a revision is a full commit sha already (nothing moves under it). */
export const isCommit = (revision: string): boolean => COMMIT_SHA.test(revision);
