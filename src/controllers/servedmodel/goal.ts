/**
 * What every replica of a ServedModel converges to, and the identity of one replica's registration of it (a new
 * version, archive or directory listing starts a new registration).
 */
import type { ServedModelSpec } from '../../api/index.ts';
import { directoryName, type DirectoryFiles } from './files.ts';
import type { RegistrationId } from './registrations.ts';
import type { ReplicaGoal } from './replica.ts';
import type { Replica } from './replicas.ts';

/** A directory's files as listed for this generation. */
export type ListedDirectory = Extract<DirectoryFiles, { ok: true }>;

/** What every replica converges to; `dir`: the directory's files of this generation (spec.files), or the files
 *  its source resolved to (spec.source). */
export function goalOf(spec: ServedModelSpec, dir?: ListedDirectory): ReplicaGoal {
  return {
    modelName: spec.modelName,
    version: spec.version,
    fileName: spec.fileName ?? directoryName(spec),
    ...(dir ? { files: dir.files, filesDigest: dir.digest } : {}),
    minWorkers: spec.workers.min,
    maxWorkers: spec.workers.max ?? spec.workers.min,
    options: { ...spec.registration },
  };
}

/** What a registration is of: the wanted version and archive or directory listing. */
export const registrationVersion = (goal: ReplicaGoal): string =>
  `${goal.version ?? ''}|${goal.fileName}${goal.files ? `|${goal.filesDigest}` : ''}`;

export function registrationId(key: string, uid: string, goal: ReplicaGoal, r: Replica): RegistrationId {
  return { uid, owner: key, replica: r.endpoint, version: registrationVersion(goal) };
}
