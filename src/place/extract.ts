/**
 * A tar layer extracted into a model directory, refusing anything that could reach outside it. The archive is read
 * by node-tar's Parser (headers, pax and GNU long names, checksums); what an entry may do is decided here, because
 * node-tar's own extractor skips a bad entry with a warning and goes on, while a model with an unsafe entry must be
 * refused whole, naming the entry, and it has no byte or file-count caps.
 *
 * The rules: a path is relative, without `..`, and never under a symbolic link (one this extraction made or one
 * already in the directory: writes never go through a link) nor over one; regular files and directories only, plus
 * symbolic links whose target, resolved by path from the link's own directory through every link before it
 * (tar-links.ts), stays inside the directory, and hard links to a regular file already extracted (never to a
 * symbolic link, which would carry its relative target into another directory). Every link is resolved again once
 * the layer is in, since a later link can change where an earlier target leads. No devices, FIFOs or other types;
 * at most `maxFiles` entries and `maxBytes` bytes of file content, the decompressed stream bounded too (a
 * compression bomb), and never past the free space of the directory's volume less `minFreeBytes`, read before the
 * first entry and again as the bytes grow. Files are created exclusively (`wx`): an entry over an existing file
 * (another layer's, or twice in one archive) is refused. Modes keep only the owner's execute bit. A refused
 * extraction leaves what it made; the callers remove their temporary directory.
 */
import { createReadStream, createWriteStream, lstatSync, mkdirSync, readlinkSync } from 'node:fs';
import { link, statfs, symlink } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createZstdDecompress } from 'node:zlib';
import { Parser, type ReadEntry } from 'tar';
import { PlaceError, PlaceReason } from './errors.ts';
import type { ArchiveFormat } from './spec.ts';
import { describeProblem, isAbsoluteTarget, MAX_PATH_BYTES, resolveLink } from './tar-links.ts';

export interface ExtractLimits {
  /** Bytes of file content the whole artifact may hold. */
  maxBytes: number;
  /** Entries the whole artifact may hold. */
  maxFiles: number;
  /** Bytes that must stay free on the directory's volume (default 0: the volume may be filled, not overfilled). */
  minFreeBytes?: number | undefined;
  /** The free bytes of the volume holding a path (default: statfs); tests give a reading of their own. */
  freeBytes?: ((path: string) => Promise<number>) | undefined;
}

/** What a placement's extractions share: the caps are for the whole artifact, links for the whole directory. */
export interface ExtractState {
  bytes: number;
  files: number;
  /** The symbolic links made (relative, normalized paths): their raw target and the layer that made them. */
  symlinks: Map<string, { target: string; layer: string }>;
  /** Paths of the regular files made (hard-link targets). */
  regular: Set<string>;
}

export const newExtractState = (): ExtractState => ({
  bytes: 0,
  files: 0,
  symlinks: new Map(),
  regular: new Set(),
});

/** Free space is read again once this many bytes were written since the last reading (other writers share it). */
const SPACE_REREAD_BYTES = 64 * 1024 * 1024;

const statfsFree = async (path: string): Promise<number> => {
  const fs = await statfs(path);
  return fs.bavail * fs.bsize;
};

/** One extraction's context: where it writes, what it names in errors, and the writes it started. */
interface Extraction {
  dir: string;
  layer: string;
  limits: ExtractLimits;
  state: ExtractState;
  /** Each regular file's write, by path (a hard link waits for its target's). */
  written: Map<string, Promise<unknown>>;
  /** What the directory held before this extraction, by path: a link's target, or null (not a link, or absent). */
  disk: Map<string, string | null>;
  space: {
    /** Bytes that may still be written before the free space must be read again. */
    room: number;
    /** Bytes counted since the last reading. */
    since: number;
    /** Bytes of writes started and not finished (a reading may not show them yet). */
    inFlight: number;
  };
}

/** The raw target of the symbolic link at `path`, made by this placement or already in the directory. */
function linkAt(x: Extraction, path: string): string | undefined {
  const made = x.state.symlinks.get(path);
  if (made) return made.target;
  let known = x.disk.get(path);
  if (known === undefined) {
    // Read with lstat, component by component from the root: every prefix is known not to be a link.
    try {
      known = lstatSync(join(x.dir, path)).isSymbolicLink() ? readlinkSync(join(x.dir, path)) : null;
    } catch {
      known = null;
    }
    // Remembered either way: what this extraction makes later is a link it records itself, or not a link.
    x.disk.set(path, known);
  }
  return known ?? undefined;
}

/** Why a path may not be an entry's (or a hard link's target), or undefined; `p` is already normalized. */
function pathProblem(p: string, x: Extraction): string | undefined {
  if (p === '' || p === '.') return 'it is empty';
  if (p.startsWith('/') || /^[A-Za-z]:/.test(p)) return 'it is absolute';
  if (p === '..' || p.startsWith('../')) return 'it leaves the directory (..)';
  if (p.includes('\0')) return 'it holds a NUL byte';
  if (Buffer.byteLength(p) > MAX_PATH_BYTES) return `it is longer than ${MAX_PATH_BYTES} bytes`;
  for (let i = p.indexOf('/'); i !== -1; i = p.indexOf('/', i + 1)) {
    const prefix = p.slice(0, i);
    if (linkAt(x, prefix) !== undefined) return `it is under the symbolic link ${prefix}`;
  }
  return undefined;
}

/** `raw` as a normalized relative path, or a problem; `..` anywhere in the written path is refused as is. */
function entryPath(raw: string): { path: string } | { problem: string } {
  if (raw.startsWith('/')) return { problem: 'it is absolute' };
  if (raw.split('/').includes('..')) return { problem: 'it has a ".." segment' };
  return { path: posix.normalize(raw).replace(/\/+$/, '') };
}

const unsafe = (x: Extraction, name: string, why: string, layer = x.layer) =>
  new PlaceError(PlaceReason.UnsafeTarEntry, `${layer}: the tar entry "${name}" is refused: ${why}`, {
    layer,
  });

const writeError = (x: Extraction, e: unknown, name: string) => {
  if (e instanceof PlaceError) return e;
  const code = (e as { code?: string }).code;
  return new PlaceError(
    PlaceReason.UnsafeTarEntry,
    `${x.layer}: the tar entry "${name}" cannot be written: ${code === 'EEXIST' ? 'another entry or layer already made that path' : (code ?? String(e))}`,
    { layer: x.layer },
  );
};

const noSpace = (x: Extraction, what: string, free: number) =>
  new PlaceError(
    PlaceReason.InsufficientStorage,
    `${x.layer}: ${what}: the volume has ${free} bytes free and ${x.limits.minFreeBytes ?? 0} must stay free: free space on the volume or make it larger`,
    { layer: x.layer },
  );

/** The volume's free bytes less the margin, read now. */
async function readRoom(x: Extraction): Promise<{ free: number; room: number }> {
  const free = await (x.limits.freeBytes ?? statfsFree)(x.dir);
  return { free, room: free - (x.limits.minFreeBytes ?? 0) };
}

/**
 * Holds `size` bytes of the volume for an entry, reading the free space again when the last reading does not
 * cover them or is `SPACE_REREAD_BYTES` old; throws InsufficientStorage when they do not fit.
 */
async function reserve(x: Extraction, name: string, size: number): Promise<void> {
  const s = x.space;
  if (size > s.room || s.since + size > SPACE_REREAD_BYTES) {
    const { free, room } = await readRoom(x);
    // A write still running may not show in the reading yet: count it again rather than not at all.
    s.room = room - s.inFlight;
    s.since = 0;
    if (size > s.room) throw noSpace(x, `the tar entry "${name}" needs ${size} bytes`, free);
  }
  s.room -= size;
  s.since += size;
}

/** A regular file's entry: counted against the byte cap, then, once the volume has room, streamed into a file. */
function placeFile(x: Extraction, entry: ReadEntry, path: string, target: string): Promise<unknown> {
  const size = entry.size;
  x.state.bytes += size;
  if (x.state.bytes > x.limits.maxBytes)
    throw new PlaceError(
      PlaceReason.LimitExceeded,
      `${x.layer}: the tar entry "${entry.path}" takes the model past the cap of ${x.limits.maxBytes} bytes: raise the byte cap if it is right`,
      { layer: x.layer },
    );
  x.state.regular.add(path);
  // The parser hands over the next entry only once this one is read, so reservations never overlap.
  const write = reserve(x, entry.path, size).then(() => {
    x.space.inFlight += size;
    mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
    const out = createWriteStream(target, {
      flags: 'wx',
      mode: (entry.mode ?? 0o644) & 0o100 ? 0o755 : 0o644,
    });
    return pipeline(entry, out).finally(() => (x.space.inFlight -= size));
  });
  x.written.set(path, write);
  return write;
}

/** A symbolic link whose target, resolved by path through every link, stays inside the directory. */
function placeSymlink(x: Extraction, entry: ReadEntry, path: string, target: string): Promise<unknown> {
  const raw = entry.linkpath ?? '';
  // Recorded before its own target is resolved, as the kernel will see it: a target through itself is a loop.
  x.state.symlinks.set(path, { target: raw, layer: x.layer });
  const r = resolveLink(path, raw, (p) => linkAt(x, p));
  if ('problem' in r) throw unsafe(x, entry.path, `its link target "${raw}" ${describeProblem(r)}`);
  mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
  entry.resume();
  return symlink(raw, target);
}

/** A hard link to a regular file extracted before it (or already placed), by a path through no link. */
function placeHardLink(x: Extraction, entry: ReadEntry, target: string): Promise<unknown> {
  const name = entry.path;
  const raw = entry.linkpath ?? '';
  const to = isAbsoluteTarget(raw) ? { problem: 'it is absolute' } : entryPath(raw);
  if ('problem' in to)
    throw unsafe(x, name, `its hard-link target "${raw}" ${to.problem.replace(/^it /, '')}`);
  const why = pathProblem(to.path, x);
  if (why) throw unsafe(x, name, `its hard-link target "${raw}" ${why.replace(/^it /, '')}`);
  if (linkAt(x, to.path) !== undefined)
    throw unsafe(
      x,
      name,
      `its hard-link target "${raw}" is a symbolic link: a hard link would carry its relative target into another directory`,
    );
  if (!x.state.regular.has(to.path))
    throw unsafe(x, name, `its hard-link target "${raw}" is not a regular file extracted before it`);
  mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
  entry.resume();
  // The target's own write may still be running (files are streamed as the archive is read).
  return (x.written.get(to.path) ?? Promise.resolve()).then(() => link(join(x.dir, to.path), target));
}

/** Checks one entry and starts its write; returns the write to wait for, if any. Throws a refusal. */
function placeEntry(x: Extraction, entry: ReadEntry): Promise<unknown> | undefined {
  const name = entry.path;
  const p = entryPath(name);
  if ('problem' in p) throw unsafe(x, name, p.problem);
  // `./`, the root itself, heads every archive made by `tar -C dir .`: it exists already and changes nothing.
  if (p.path === '.' && entry.type === 'Directory') return void entry.resume();
  const problem = pathProblem(p.path, x);
  if (problem) throw unsafe(x, name, problem);
  // A directory entry would be taken as the link's target; anything else would fail on it, less clearly.
  if (linkAt(x, p.path) !== undefined) throw unsafe(x, name, `it would replace the symbolic link ${p.path}`);
  if (++x.state.files > x.limits.maxFiles)
    throw new PlaceError(
      PlaceReason.LimitExceeded,
      `${x.layer}: the model holds more than ${x.limits.maxFiles} files: raise the file cap if it is right`,
      { layer: x.layer },
    );
  const target = join(x.dir, p.path);
  switch (entry.type) {
    case 'Directory':
      mkdirSync(target, { recursive: true, mode: 0o755 });
      entry.resume();
      return undefined;
    case 'File':
    case 'OldFile':
    case 'ContiguousFile':
      return placeFile(x, entry, p.path, target);
    case 'SymbolicLink':
      return placeSymlink(x, entry, p.path, target);
    case 'Link':
      return placeHardLink(x, entry, target);
    default:
      throw unsafe(
        x,
        name,
        `it is a ${entry.type} entry; a model holds regular files, directories and links only`,
      );
  }
}

/**
 * Every symbolic link of the placement resolved again with all links now known: a link made later can change
 * where an earlier target leads (`l -> x/y/../..` is the root until `x -> .` makes it the root's parent).
 */
function recheckLinks(x: Extraction, linksBefore: number): PlaceError | undefined {
  // Only a new link can change where another leads.
  if (x.state.symlinks.size === linksBefore) return undefined;
  for (const [path, { target, layer }] of x.state.symlinks) {
    const r = resolveLink(path, target, (p) => linkAt(x, p));
    if ('problem' in r)
      return unsafe(
        x,
        path,
        `its link target "${target}" ${describeProblem(r)}, once the links after it are made`,
        layer,
      );
  }
  return undefined;
}

/**
 * Streams the blob, decompressed as `format` says and bounded (tar headers and padding are at most 1.5 KiB per
 * entry above the content: more is a compression bomb), into node-tar's Parser, which is an EventEmitter with
 * write/end rather than a Node stream: a Writable feeds it with back-pressure.
 */
async function feed(blob: string, format: ArchiveFormat, parser: Parser, x: Extraction): Promise<void> {
  const maxStream = x.limits.maxBytes + (x.limits.maxFiles + 2) * 1536;
  let streamed = 0;
  const bound = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      streamed += chunk.length;
      if (streamed > maxStream)
        cb(
          new PlaceError(
            PlaceReason.LimitExceeded,
            `${x.layer}: the archive unpacks past ${maxStream} bytes`,
            {
              layer: x.layer,
            },
          ),
        );
      else cb(null, chunk);
    },
  });
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      if (parser.write(chunk)) cb();
      else parser.once('drain', () => cb());
    },
    final(cb) {
      parser.once('end', () => cb());
      parser.end();
    },
  });
  parser.on('error', (e: unknown) => sink.destroy(e as Error));
  const source = createReadStream(blob);
  if (format === 'tar') await pipeline(source, bound, sink);
  else await pipeline(source, format === 'tar+gzip' ? createGunzip() : createZstdDecompress(), bound, sink);
}

/** node-tar's own words for a malformed entry (`TAR_ENTRY_INVALID: linkpath required`), else the error's code. */
function archiveProblem(e: unknown): string {
  const { code, message } = e as { code?: string; message?: string };
  if (code?.startsWith('TAR_') && message) return `${code}: ${message}`;
  return code ?? String(message ?? e);
}

/**
 * Extracts the tar layer in `blob` (compressed as `format` says) into `dir`. `layer` names it in errors; `state`
 * carries the caps and links across the artifact's layers. Resolves with the files and bytes it made; throws an
 * PlaceError: UnsafeTarEntry, InvalidArchive, LimitExceeded (a cap), InsufficientStorage (the volume's free space).
 */
export async function extractLayer(
  blob: string,
  format: ArchiveFormat,
  dir: string,
  layer: string,
  limits: ExtractLimits,
  state: ExtractState,
): Promise<{ files: number; bytes: number }> {
  const start = { files: state.files, bytes: state.bytes };
  const linksBefore = state.symlinks.size;
  const x: Extraction = {
    dir,
    layer,
    limits,
    state,
    written: new Map(),
    disk: new Map(),
    space: { room: 0, since: 0, inFlight: 0 },
  };
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  const before = await readRoom(x);
  if (before.room <= 0) throw noSpace(x, 'nothing can be unpacked', before.free);
  x.space.room = before.room;
  const writes: Promise<unknown>[] = [];
  let refusal: PlaceError | undefined;
  const stop = (e: unknown) => {
    refusal ??=
      e instanceof PlaceError
        ? e
        : new PlaceError(PlaceReason.InvalidArchive, `${layer}: ${String((e as Error)?.message ?? e)}`, {
            layer,
          });
    parser.abort(refusal);
  };
  const parser: Parser = new Parser({
    strict: true,
    onReadEntry: (entry: ReadEntry) => {
      if (refusal) return entry.resume();
      try {
        const w = placeEntry(x, entry);
        if (w) writes.push(w.catch((e: unknown) => stop(writeError(x, e, entry.path))));
      } catch (e) {
        stop(e);
        entry.resume();
      }
    },
  });
  try {
    await feed(blob, format, parser, x);
  } catch (e) {
    refusal ??=
      e instanceof PlaceError
        ? e
        : new PlaceError(
            PlaceReason.InvalidArchive,
            `${layer} is not a readable ${format} archive: ${archiveProblem(e)}`,
            { layer },
          );
  }
  await Promise.allSettled(writes);
  refusal ??= recheckLinks(x, linksBefore);
  if (refusal) throw refusal;
  return { files: state.files - start.files, bytes: state.bytes - start.bytes };
}
