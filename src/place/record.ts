/**
 * A finished version's download, kept under the model root as `<root>/.peerload-records/<directory>/<version>.json`,
 * so a later process reports what it cannot observe again: the agent after `peerload fetch` placed the version in
 * an init container, or after its own restart, still says which files were local hits of the node's peer and which
 * are hard links. Apart from the model's directory: that holds exactly the spec's files, and its versions only. A
 * dot name (no model name starts with one), so a repository scan passes it by. Best effort: a version without a
 * record is Ready without file detail.
 * It holds paths, sizes, task ids and states: never a URL (messages name files by their path in the model).
 */
import { mkdir, readFile, rename, rm, rmdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';

/** What a record needs of a version's progress (placer.ts's VersionProgress). */
export interface Recorded {
  directory: string;
  version: string;
  state: string;
  files: unknown[];
}

export const RECORDS_DIR = '.peerload-records';

export const recordPath = (root: string, directory: string, version: string): string =>
  join(root, RECORDS_DIR, directory, `${version}.json`);

/** Writes the record of a version that is in place (atomically: a reader never sees half of it). */
export async function writeRecord(root: string, progress: Recorded): Promise<void> {
  const path = recordPath(root, progress.directory, progress.version);
  const tmp = `${path}.${process.pid}.tmp`;
  await mkdir(dirname(path), { recursive: true });
  await writeFile(tmp, JSON.stringify(progress));
  await rename(tmp, path);
}

/** The record of a version on disk, or undefined when there is none (or it cannot be read). */
export async function readRecord(
  root: string,
  directory: string,
  version: string,
): Promise<Recorded | undefined> {
  try {
    const r = JSON.parse(await readFile(recordPath(root, directory, version), 'utf8')) as Recorded;
    // Another version's record under this name would mislead: only a record of this version counts.
    return r.version === version && r.state === 'Ready' && Array.isArray(r.files) ? r : undefined;
  } catch {
    return undefined;
  }
}

export async function removeRecord(root: string, directory: string, version: string): Promise<void> {
  await rm(recordPath(root, directory, version), { force: true });
  // The model's own records directory goes with its last record (rmdir(2) removes only an empty one).
  await rmdir(dirname(recordPath(root, directory, version))).catch(() => undefined);
}
