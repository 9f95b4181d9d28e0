/**
 * A tar layer extracted into a model directory, refusing anything that could reach outside it. The archive is read
 * by node-tar's Parser (headers, pax and GNU long names, checksums); what an entry may do is decided here, because
 * node-tar's own extractor skips a bad entry with a warning and goes on, while a model with an unsafe entry must be
 * refused whole, naming the entry, and it has no byte or file-count caps.
 *
 * The rules: a path is relative, without `..`, and never under a symbolic link this extraction made (a link to `.`
 * would make `l/../x` land outside although it reads as inside); regular files and directories only, plus symbolic
 * links and hard links whose target stays inside the directory (a hard link only to a regular file already
 * extracted); no devices, FIFOs or other types; at most `maxFiles` entries and `maxBytes` bytes of file content, and
 * the decompressed stream bounded too (a compression bomb). Files are created exclusively (`wx`): an entry over an
 * existing file (another layer's, or twice in one archive) is refused. Modes keep only the owner's execute bit.
 */
import { createReadStream, createWriteStream, mkdirSync } from 'node:fs';
import { link, symlink } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { Transform, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip, createZstdDecompress } from 'node:zlib';
import { Parser, type ReadEntry } from 'tar';
import { OciError, OciReason } from './errors.ts';
import type { LayerFormat } from './media-types.ts';

export interface ExtractLimits {
  /** Bytes of file content the whole artifact may hold. */
  maxBytes: number;
  /** Entries the whole artifact may hold. */
  maxFiles: number;
}

/** What a placement's extractions share: the caps are for the whole artifact, links for the whole directory. */
export interface ExtractState {
  bytes: number;
  files: number;
  /** Paths (relative, normalized) of the symbolic links made. */
  symlinks: Set<string>;
  /** Paths of the regular files made (hard-link targets). */
  regular: Set<string>;
}

export const newExtractState = (): ExtractState => ({
  bytes: 0,
  files: 0,
  symlinks: new Set(),
  regular: new Set(),
});

/** Why a path may not be an entry's (or a link's target), or undefined; `p` is already normalized. */
function pathProblem(p: string, state: ExtractState): string | undefined {
  if (p === '' || p === '.') return 'it is empty';
  if (p.startsWith('/') || /^[A-Za-z]:/.test(p)) return 'it is absolute';
  if (p === '..' || p.startsWith('../')) return 'it leaves the directory (..)';
  if (p.includes('\0')) return 'it holds a NUL byte';
  const parts = p.split('/');
  for (let i = 1; i < parts.length; i++) {
    const prefix = parts.slice(0, i).join('/');
    if (state.symlinks.has(prefix)) return `it is under the symbolic link ${prefix}`;
  }
  return undefined;
}

/** `raw` as a normalized relative path, or a problem; `..` anywhere in the written path is refused as is. */
function entryPath(raw: string): { path: string } | { problem: string } {
  if (raw.startsWith('/')) return { problem: 'it is absolute' };
  if (raw.split('/').includes('..')) return { problem: 'it has a ".." segment' };
  return { path: posix.normalize(raw).replace(/\/+$/, '') };
}

/** One extraction's context: where it writes, what it names in errors, and the writes it started. */
interface Extraction {
  dir: string;
  layer: string;
  limits: ExtractLimits;
  state: ExtractState;
  /** Each regular file's write, by path (a hard link waits for its target's). */
  written: Map<string, Promise<unknown>>;
}

const unsafe = (x: Extraction, name: string, why: string) =>
  new OciError(OciReason.UnsafeTarEntry, `${x.layer}: the tar entry "${name}" is refused: ${why}`, {
    layer: x.layer,
  });

const writeError = (x: Extraction, e: unknown, name: string) => {
  const code = (e as { code?: string }).code;
  return new OciError(
    OciReason.UnsafeTarEntry,
    `${x.layer}: the tar entry "${name}" cannot be written: ${code === 'EEXIST' ? 'another entry or layer already made that path' : (code ?? String(e))}`,
    { layer: x.layer },
  );
};

/** A regular file's entry: counted against the byte cap and streamed into a new file. */
function placeFile(x: Extraction, entry: ReadEntry, path: string, target: string): Promise<unknown> {
  x.state.bytes += entry.size;
  if (x.state.bytes > x.limits.maxBytes)
    throw new OciError(
      OciReason.LimitExceeded,
      `${x.layer}: the tar entry "${entry.path}" takes the model past the cap of ${x.limits.maxBytes} bytes: raise the byte cap if it is right`,
      { layer: x.layer },
    );
  mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
  const out = createWriteStream(target, { flags: 'wx', mode: (entry.mode ?? 0o644) & 0o100 ? 0o755 : 0o644 });
  x.state.regular.add(path);
  const write = pipeline(entry, out);
  x.written.set(path, write);
  return write;
}

/** A link entry (symbolic or hard) whose target stays inside the directory. */
function placeLink(x: Extraction, entry: ReadEntry, path: string, target: string): Promise<unknown> {
  const name = entry.path;
  const raw = entry.linkpath ?? '';
  mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
  if (entry.type === 'SymbolicLink') {
    if (raw === '' || raw.startsWith('/'))
      throw unsafe(x, name, `its link target "${raw}" is absolute or empty`);
    const resolved = posix.normalize(posix.join(posix.dirname(path), raw));
    // A link to the directory itself is inside; writing under it is what is refused.
    const why = resolved === '.' ? undefined : pathProblem(resolved, x.state);
    if (why) throw unsafe(x, name, `its link target "${raw}" ${why.replace(/^it /, '')}`);
    x.state.symlinks.add(path);
    entry.resume();
    return symlink(raw, target);
  }
  const to = entryPath(raw);
  if ('problem' in to)
    throw unsafe(x, name, `its hard-link target "${raw}" ${to.problem.replace(/^it /, '')}`);
  const why = pathProblem(to.path, x.state);
  if (why) throw unsafe(x, name, `its hard-link target "${raw}" ${why.replace(/^it /, '')}`);
  if (!x.state.regular.has(to.path))
    throw unsafe(x, name, `its hard-link target "${raw}" is not a regular file extracted before it`);
  entry.resume();
  // The target's own write may still be running (files are streamed as the archive is read).
  return (x.written.get(to.path) ?? Promise.resolve()).then(() => link(join(x.dir, to.path), target));
}

/** Checks one entry and starts its write; returns the write to wait for, if any. Throws a refusal. */
function placeEntry(x: Extraction, entry: ReadEntry): Promise<unknown> | undefined {
  const name = entry.path;
  const p = entryPath(name);
  if ('problem' in p) throw unsafe(x, name, p.problem);
  const problem = pathProblem(p.path, x.state);
  if (problem) throw unsafe(x, name, problem);
  if (++x.state.files > x.limits.maxFiles)
    throw new OciError(
      OciReason.LimitExceeded,
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
    case 'Link':
      return placeLink(x, entry, p.path, target);
    default:
      throw unsafe(
        x,
        name,
        `it is a ${entry.type} entry; a model holds regular files, directories and links only`,
      );
  }
}

/**
 * Streams the blob, decompressed as `format` says and bounded (tar headers and padding are at most 1.5 KiB per
 * entry above the content: more is a compression bomb), into node-tar's Parser, which is an EventEmitter with
 * write/end rather than a Node stream: a Writable feeds it with back-pressure.
 */
async function feed(
  blob: string,
  format: Exclude<LayerFormat, 'raw'>,
  parser: Parser,
  x: Extraction,
): Promise<void> {
  const maxStream = x.limits.maxBytes + (x.limits.maxFiles + 2) * 1536;
  let streamed = 0;
  const bound = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      streamed += chunk.length;
      if (streamed > maxStream)
        cb(
          new OciError(OciReason.LimitExceeded, `${x.layer}: the archive unpacks past ${maxStream} bytes`, {
            layer: x.layer,
          }),
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

/**
 * Extracts the tar layer in `blob` (compressed as `format` says) into `dir`. `layer` names it in errors; `state`
 * carries the caps and links across the artifact's layers. Resolves with the files and bytes it made.
 */
export async function extractLayer(
  blob: string,
  format: Exclude<LayerFormat, 'raw'>,
  dir: string,
  layer: string,
  limits: ExtractLimits,
  state: ExtractState,
): Promise<{ files: number; bytes: number }> {
  const start = { files: state.files, bytes: state.bytes };
  const x: Extraction = { dir, layer, limits, state, written: new Map() };
  const writes: Promise<unknown>[] = [];
  let refusal: OciError | undefined;
  const stop = (e: unknown) => {
    refusal ??=
      e instanceof OciError
        ? e
        : new OciError(OciReason.InvalidArchive, `${layer}: ${String((e as Error)?.message ?? e)}`, {
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
      e instanceof OciError
        ? e
        : new OciError(
            OciReason.InvalidArchive,
            `${layer} is not a readable ${format} archive: ${(e as { code?: string }).code ?? (e as Error).message}`,
            { layer },
          );
  }
  await Promise.allSettled(writes);
  if (refusal) throw refusal;
  return { files: state.files - start.files, bytes: state.bytes - start.bytes };
}
