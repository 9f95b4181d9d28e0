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
  const writes: Promise<unknown>[] = [];
  const written = new Map<string, Promise<unknown>>();
  let refusal: OciError | undefined;
  const parser = new Parser({
    strict: true,
    onReadEntry: (entry: ReadEntry) => {
      if (refusal) return entry.resume();
      try {
        const w = place(entry);
        if (w) writes.push(w.catch((e: unknown) => stop(writeError(e, entry.path))));
      } catch (e) {
        stop(e);
        entry.resume();
      }
    },
  });
  const stop = (e: unknown) => {
    refusal ??=
      e instanceof OciError
        ? e
        : new OciError(OciReason.InvalidArchive, `${layer}: ${String((e as Error)?.message ?? e)}`, {
            layer,
          });
    parser.abort(refusal);
  };
  const unsafe = (name: string, why: string) =>
    new OciError(OciReason.UnsafeTarEntry, `${layer}: the tar entry "${name}" is refused: ${why}`, { layer });
  const writeError = (e: unknown, name: string) =>
    new OciError(
      OciReason.UnsafeTarEntry,
      `${layer}: the tar entry "${name}" cannot be written: ${(e as { code?: string }).code === 'EEXIST' ? 'another entry or layer already made that path' : ((e as { code?: string }).code ?? String(e))}`,
      { layer },
    );

  /** Checks one entry and starts its write; returns the write to wait for, if any. */
  function place(entry: ReadEntry): Promise<unknown> | undefined {
    const name = entry.path;
    const p = entryPath(name);
    if ('problem' in p) throw unsafe(name, p.problem);
    const problem = pathProblem(p.path, state);
    if (problem) throw unsafe(name, problem);
    if (++state.files > limits.maxFiles)
      throw new OciError(
        OciReason.LimitExceeded,
        `${layer}: the model holds more than ${limits.maxFiles} files: raise the file cap if it is right`,
        { layer },
      );
    const target = join(dir, p.path);
    switch (entry.type) {
      case 'Directory':
        mkdirSync(target, { recursive: true, mode: 0o755 });
        entry.resume();
        return undefined;
      case 'File':
      case 'OldFile':
      case 'ContiguousFile': {
        state.bytes += entry.size;
        if (state.bytes > limits.maxBytes)
          throw new OciError(
            OciReason.LimitExceeded,
            `${layer}: the tar entry "${name}" takes the model past the cap of ${limits.maxBytes} bytes: raise the byte cap if it is right`,
            { layer },
          );
        mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
        const out = createWriteStream(target, {
          flags: 'wx',
          mode: (entry.mode ?? 0o644) & 0o100 ? 0o755 : 0o644,
        });
        state.regular.add(p.path);
        const write = pipeline(entry, out);
        written.set(p.path, write);
        return write;
      }
      case 'SymbolicLink': {
        const to = entry.linkpath ?? '';
        if (to === '' || to.startsWith('/'))
          throw unsafe(name, `its link target "${to}" is absolute or empty`);
        const resolved = posix.normalize(posix.join(posix.dirname(p.path), to));
        // A link to the directory itself is inside; writing under it is what is refused.
        const why = resolved === '.' ? undefined : pathProblem(resolved, state);
        if (why) throw unsafe(name, `its link target "${to}" ${why.replace(/^it /, '')}`);
        mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
        state.symlinks.add(p.path);
        entry.resume();
        return symlink(to, target);
      }
      case 'Link': {
        const raw = entry.linkpath ?? '';
        const to = entryPath(raw);
        if ('problem' in to)
          throw unsafe(name, `its hard-link target "${raw}" ${to.problem.replace(/^it /, '')}`);
        const why = pathProblem(to.path, state);
        if (why) throw unsafe(name, `its hard-link target "${raw}" ${why.replace(/^it /, '')}`);
        if (!state.regular.has(to.path))
          throw unsafe(name, `its hard-link target "${raw}" is not a regular file extracted before it`);
        mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
        entry.resume();
        // The target's own write may still be running (files are streamed as the archive is read).
        return (written.get(to.path) ?? Promise.resolve()).then(() => link(join(dir, to.path), target));
      }
      default:
        throw unsafe(
          name,
          `it is a ${entry.type} entry; a model holds regular files, directories and links only`,
        );
    }
  }

  // The decompressed stream is bounded too: tar headers and padding are at most 1.5 KiB per entry above the content.
  const maxStream = limits.maxBytes + (limits.maxFiles + 2) * 1536;
  let streamed = 0;
  const bound = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      streamed += chunk.length;
      if (streamed > maxStream)
        cb(
          new OciError(OciReason.LimitExceeded, `${layer}: the archive unpacks past ${maxStream} bytes`, {
            layer,
          }),
        );
      else cb(null, chunk);
    },
  });
  // node-tar's Parser is an EventEmitter with write/end, not a Node stream: this Writable feeds it with back-pressure.
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
  parser.on('error', (e: unknown) => sink.destroy(refusal ?? (e as Error)));
  const source = createReadStream(blob);
  try {
    if (format === 'tar') await pipeline(source, bound, sink);
    else await pipeline(source, format === 'tar+gzip' ? createGunzip() : createZstdDecompress(), bound, sink);
  } catch (e) {
    if (!refusal)
      refusal =
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
