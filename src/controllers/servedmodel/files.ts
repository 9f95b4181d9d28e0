/**
 * The files of a ServedModel that is a directory (spec.files), as a driver receives them (`Registration.files`):
 * object keys and their storage location WITHOUT credentials (the model server's agent signs with its own), and
 * the preheat's task identity, so each download is a hit on the tasks the preheat warmed.
 *
 * Who lists: the ServedModel itself, with preheat.objectStorage's credentials, once per generation (kept in
 * memory: a thousand paths do not fit in status; listed again after an operator restart). Its owned ModelPreheat
 * lists the same prefix with the same rules for its jobs; both statuses show the listing's digest, so a
 * difference (objects changed between the two listings) is visible, and the ServedModel lists again when the
 * preheat's digest differs from its own.
 *
 * A directory's content is fixed per generation, as for the ModelPreheat: a new listing (after an operator restart,
 * or made again) is compared with the digest the object's status recorded for its generation. One that differs is
 * taken only when it is the preheat's listing (the content the preheat warmed); otherwise the objects changed under
 * the generation, and the ServedModel is Stalled until the spec is edited.
 */
import {
  directoryOf,
  parseDuration,
  type ModelPreheat,
  type ServedModel,
  type ServedModelSpec,
} from '../../api/index.ts';
import type { ModelFiles } from '../../servers/driver.ts';
import { credentialsFromSecretData } from '../../storage/credentials.ts';
import { FileSetError, selectFiles, totalBytes, type FileSetSpec } from '../../storage/fileset.ts';
import { redact } from '../../redact.ts';
import { effectiveFilter } from '../../storage/objecturl.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS } from '../../storage/taskid.ts';
import { listingDigest, operatorLister, type Lister } from '../modelpreheat/directory.ts';
import { sourceName } from '../../sources/index.ts';
import { ListError } from '../../storage/list-bounds.ts';

/** A directory's files for one generation, or why there are none. */
export type DirectoryFiles =
  | { ok: true; files: ModelFiles; count: number; bytes: number; digest: string }
  | {
      ok: false;
      /** `final`: only a spec edit lists again; else (the list API failed) the next pass tries again. */
      final: boolean;
      message: string;
    };

export interface ModelDirectoriesDeps {
  /** The data of a Secret of the namespace. */
  secretData(namespace: string, name: string, signal?: AbortSignal): Promise<Record<string, string>>;
  lister?: Lister | undefined;
}

interface Kept {
  uid: string;
  generation: number;
  result: DirectoryFiles;
  /** The preheat's listing digest this listing was made again for (once per digest: never a loop). */
  relistedFor?: string | undefined;
}

/** The files of each ServedModel that is a directory, per generation. */
export class ModelDirectories {
  private readonly deps: ModelDirectoriesDeps;
  private readonly lister: Lister;
  private readonly byKey = new Map<string, Kept>();

  constructor(deps: ModelDirectoriesDeps) {
    this.deps = deps;
    this.lister = deps.lister ?? operatorLister;
  }

  /**
   * The files of `sm`'s generation. `preheat` is the ModelPreheat the gate reads: its task identity is the
   * downloads', and a listing digest of its own that differs from the kept one makes this one list again.
   */
  async of(
    key: string,
    sm: ServedModel,
    spec: ServedModelSpec,
    preheat: ModelPreheat | undefined,
    signal?: AbortSignal,
  ): Promise<DirectoryFiles> {
    const kept = this.byKey.get(key);
    const same =
      kept !== undefined && kept.uid === sm.metadata.uid && kept.generation === sm.metadata.generation;
    const theirs = preheat?.status?.files;
    const differs =
      same &&
      kept.result.ok &&
      theirs !== undefined &&
      theirs.generation === preheat?.metadata.generation &&
      theirs.digest !== kept.result.digest &&
      theirs.digest !== kept.relistedFor;
    if (same && !differs) return kept.result;
    const preheatDigest = theirs?.generation === preheat?.metadata.generation ? theirs?.digest : undefined;
    const result = againstRecorded(sm, spec, await this.list(sm, spec, preheat, signal), preheatDigest);
    // A failed listing call is tried again on the next pass; what the listing found stands for the generation.
    if (result.ok || result.final)
      this.byKey.set(key, {
        uid: sm.metadata.uid ?? '',
        generation: sm.metadata.generation ?? 0,
        result,
        relistedFor: differs ? theirs!.digest : undefined,
      });
    return result;
  }

  forget(key: string): void {
    this.byKey.delete(key);
  }

  private async list(
    sm: ServedModel,
    spec: ServedModelSpec,
    preheat: ModelPreheat | undefined,
    signal?: AbortSignal,
  ): Promise<DirectoryFiles> {
    const dir = spec.files!;
    const os = spec.preheat!.objectStorage!;
    const rules: FileSetSpec = {
      prefix: dir.prefix,
      files: dir.keys,
      include: dir.include,
      exclude: dir.exclude,
      maxFiles: dir.maxFiles,
      maxBytes: dir.maxBytes,
    };
    let chosen;
    try {
      if (dir.keys) chosen = selectFiles(rules);
      else {
        const data = await this.deps.secretData(
          sm.metadata.namespace!,
          os.credentialsSecretRef!.name,
          signal,
        );
        const credentials = credentialsFromSecretData(os.type, data, {
          secretName: `${sm.metadata.namespace}/${os.credentialsSecretRef!.name}`,
        });
        chosen = selectFiles(rules, await this.lister(os, credentials, dir.prefix, { signal }));
      }
    } catch (err) {
      if (err instanceof FileSetError)
        return {
          ok: false,
          final: true,
          message: `spec.files.${err.field}: ${err.message} (the prefix is listed again when the spec changes)`,
        };
      // ListError and CredentialsError are redacted already; a missing Secret names itself. A listing over a size
      // bound stands for the generation: the same store would send as much again.
      const final = err instanceof ListError && err.failure === 'tooLarge';
      return { ok: false, final, message: redact((err as Error).message) };
    }
    return {
      ok: true,
      files: modelFiles(spec, preheat, chosen),
      count: chosen.length,
      bytes: totalBytes(chosen),
      digest: listingDigest(chosen),
    };
  }
}

/**
 * `listed` checked against the listing the object's status recorded for its generation (status.files is written
 * with the conditions of the generation it was listed for): the same digest, or the preheat's, or a final refusal.
 */
export function againstRecorded(
  sm: ServedModel,
  spec: ServedModelSpec,
  listed: DirectoryFiles,
  preheatDigest: string | undefined,
): DirectoryFiles {
  const recorded = sm.status?.observedGeneration === sm.metadata.generation ? sm.status?.files : undefined;
  if (!listed.ok || !recorded || listed.digest === recorded.digest || listed.digest === preheatDigest)
    return listed;
  return {
    ok: false,
    final: true,
    message:
      `spec.files: the objects under prefix "${spec.files!.prefix}" changed since this generation listed them ` +
      `(${recorded.count} files, digest ${recorded.digest}; now ${listed.count} files, digest ${listed.digest}): ` +
      "a directory's content is fixed per generation, edit the spec to place the new content",
  };
}

/**
 * What a driver receives: each file's key and path, the storage location without credentials, and the task
 * identity of the preheat (its filter, else the location's, else the manager's default; its tag, application and
 * piece length).
 */
export function modelFiles(
  spec: ServedModelSpec,
  preheat: ModelPreheat | undefined,
  chosen: readonly { key: string; path: string; size?: number | undefined }[],
): ModelFiles {
  const os = spec.preheat!.objectStorage!;
  const p = preheat?.spec;
  const own = effectiveFilter({
    type: os.type,
    filteredQueryParams: p?.objectStorage?.filteredQueryParams ?? os.filteredQueryParams,
  });
  return {
    files: chosen.map((f) => ({
      path: f.path,
      key: f.key,
      ...(f.size !== undefined ? { size: f.size } : {}),
    })),
    storage: {
      type: os.type,
      bucket: os.bucket,
      container: os.container,
      accountName: os.accountName,
      region: os.region,
      endpoint: os.endpoint,
      pathStyle: os.pathStyle,
      projectID: os.projectID,
      expiresSeconds: Math.max(60, Math.min(604_800, Math.round(parseDuration(os.signedURLExpiry) / 1000))),
    },
    filter: own.length > 0 ? own : [...DEFAULT_FILTERED_QUERY_PARAMS],
    ...(p?.tag !== undefined ? { tag: p.tag } : {}),
    ...(p?.application !== undefined ? { application: p.application } : {}),
    ...(p?.pieceLength !== undefined ? { pieceLength: p.pieceLength } : {}),
  };
}

/** The directory a spec names, for messages and the registration's identity. */
export const directoryName = (spec: ServedModelSpec): string => {
  if (spec.source) return sourceName(spec.source);
  return directoryOf(spec.files?.prefix ?? '') || '(bucket root)';
};
