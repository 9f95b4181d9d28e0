/**
 * The placer's `mount` destination (placer.ts): KServe's destination (`/mnt/models`) is an emptyDir's mount point,
 * which a rename cannot replace, so the version is placed whole into a hidden staging directory on the same volume
 * and its entries are then moved up into the destination one by one. A single file that is an archive KServe
 * extracts (`.tar`, `.tar.gz`, `.tgz`) is extracted there and removed, as KServe's initializer does.
 */
import { mkdir, open, readdir, rename, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { extractLayer, newExtractState, type ExtractLimits } from './extract.ts';

/** The staging directory's prefix: a dot name, so a model server's scan passes it by. */
export const STAGING_PREFIX = '.peerload-fetch-';

/** Removes staging directories an interrupted earlier run (the init container restarted) left in `dest`. */
export async function removeStaleStaging(dest: string): Promise<void> {
  for (const e of await readdir(dest).catch(() => []))
    if (e.startsWith(STAGING_PREFIX)) await rm(join(dest, e), { recursive: true, force: true });
}

/** Moves every entry of `from` into `dest` (replacing what a previous run left under the same name). */
export async function moveEntries(from: string, dest: string): Promise<string[]> {
  await mkdir(dest, { recursive: true });
  const names = await readdir(from);
  for (const name of names) {
    await rm(join(dest, name), { recursive: true, force: true });
    await rename(join(from, name), join(dest, name));
  }
  return names;
}

/**
 * The archive kind KServe's initializer extracts a single downloaded file as: Python's mimetypes on the name
 * (`application/x-tar` for .tar, .tar.gz, .tgz, .tar.bz2, .tar.xz...; `application/zip` for .zip).
 */
export function archiveKind(name: string): 'tar' | 'unsupported' | undefined {
  const n = name.toLowerCase();
  if (/\.(tar|tar\.gz|tgz)$/.test(n)) return 'tar';
  if (/\.(zip|tar\.bz2|tbz2?|tar\.xz|txz)$/.test(n)) return 'unsupported';
  return undefined;
}

/**
 * Extracts the tar archive at `file` (gzip-compressed or not: told by its first bytes, as Python's tarfile does)
 * into `dest` and removes it, with the OCI layers' extractor: every entry stays under `dest`, unsafe entries
 * refuse the whole archive, and the caps and the volume's free space bound what it may unpack to. A refused
 * archive leaves no `dest` behind (what it unpacked so far is removed).
 */
export async function extractArchive(
  file: string,
  dest: string,
  limits: ExtractLimits,
): Promise<{ files: number; bytes: number }> {
  const head = Buffer.alloc(2);
  const fd = await open(file, 'r');
  try {
    await fd.read(head, 0, 2, 0);
  } finally {
    await fd.close();
  }
  const format = head[0] === 0x1f && head[1] === 0x8b ? 'tar+gzip' : 'tar';
  let made;
  try {
    made = await extractLayer(file, format, dest, basename(file), limits, newExtractState());
  } catch (e) {
    await rm(dest, { recursive: true, force: true });
    throw e;
  }
  await rm(file, { force: true });
  return made;
}
