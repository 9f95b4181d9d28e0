/**
 * Tar extraction judged by where links lead, not by how they read: every symbolic link resolved from its own
 * directory through the links before it (this archive's, an earlier layer's, the directory's own), refused when it
 * leaves the root, however the text folds; the links a model really uses still extract. And the bytes an archive
 * unpacks to bounded by the cap and by the volume's free space (read through an injected reading), before and
 * during the extraction, with nothing left behind when refused.
 */
import {
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  realpath,
  rm,
  symlink,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { Pax } from 'tar';
import { extractArchive } from '../../src/place/mount.ts';
import { PlaceError, PlaceReason } from '../../src/place/errors.ts';
import {
  extractLayer,
  newExtractState,
  type ExtractLimits,
  type ExtractState,
} from '../../src/place/extract.ts';
import { gzip, tarOf, type TarEntry } from '../support/oci-artifacts.ts';

const LAYER = 'layer 2 (sha256:0123456789ab, code)';
let dir: string;
let out: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tar-links-'));
  out = join(dir, 'out');
  await mkdir(out);
});
afterEach(() => rm(dir, { recursive: true, force: true }));

const limits: ExtractLimits = { maxBytes: 1 << 20, maxFiles: 100 };
let blobs = 0;
async function extract(
  entries: TarEntry[],
  lim = limits,
  state: ExtractState = newExtractState(),
  layer = LAYER,
) {
  const blob = join(dir, `blob-${blobs++}`);
  await writeFile(blob, tarOf(entries));
  return extractLayer(blob, 'tar', out, layer, lim, state);
}

async function refusal(p: Promise<unknown>): Promise<PlaceError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  expect(e, 'the archive was extracted').toBeInstanceOf(PlaceError);
  return e as PlaceError;
}

const sym = (path: string, linkpath: string): TarEntry => ({ path, type: 'SymbolicLink', linkpath });
const dirs = (path: string): TarEntry => ({ path, type: 'Directory' });
const DEEP = 'a/b/c/d/e/f/g/h';

describe('symbolic links resolved by path', () => {
  it.each([
    [
      // The finding's pair: q reads as the root, pw as etc/passwd inside it; through q, pw is the host's.
      'a link whose target goes through an earlier link and up (q, then pw)',
      [
        dirs(`${DEEP}/`),
        sym(`${DEEP}/q`, '../'.repeat(8)),
        sym('pw', `${DEEP}/q/${'../'.repeat(9)}etc/passwd`),
      ],
      /"pw" is refused: its link target ".*" leaves the directory \(\.\.\) through the symbolic link a\/b\/c\/d\/e\/f\/g\/h\/q$/,
    ],
    [
      'a link to the directory, then a link through it twice and up',
      [sym('up', '.'), sym('esc', 'up/up/../..')],
      /"esc" is refused: its link target "up\/up\/..\/.." leaves the directory \(\.\.\) through the symbolic links up, up$/,
    ],
    [
      'a chain of links (esc -> a/l2 -> b/l1 -> ../..), then up',
      [dirs('a/b/'), sym('a/b/l1', '../..'), sym('a/l2', 'b/l1'), sym('esc', 'a/l2/../x')],
      /"esc" is refused: .* leaves the directory \(\.\.\) through the symbolic links a\/l2, a\/b\/l1/,
    ],
    [
      'a link that a later link turns outward (l -> x/y/../.., then x -> .)',
      [sym('l', 'x/y/../..'), sym('x', '.')],
      /"l" is refused: its link target "x\/y\/..\/.." leaves the directory \(\.\.\) through the symbolic link x, once the links after it are made/,
    ],
  ] as [string, TarEntry[], RegExp][])(
    'refuses %s, naming the layer and the entry',
    async (_what, entries, why) => {
      const e = await refusal(extract(entries));
      expect(e.reason).toBe(PlaceReason.UnsafeTarEntry);
      expect(e.layer).toBe(LAYER);
      expect(e.message).toMatch(new RegExp(`^${LAYER.replace(/[()]/g, '\\$&')}: the tar entry `));
      expect(e.message).toMatch(why);
    },
  );

  it("makes nothing that leads out: the finding's q is the root itself, and pw is never made", async () => {
    await refusal(
      extract([
        dirs(`${DEEP}/`),
        sym(`${DEEP}/q`, '../'.repeat(8)),
        sym('pw', `${DEEP}/q/${'../'.repeat(9)}etc/passwd`),
      ]),
    );
    expect(await realpath(join(out, DEEP, 'q'))).toBe(await realpath(out));
    await expect(lstat(join(out, 'pw'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('resolves through links of an earlier layer, and names the layer that made the escaping link', async () => {
    const state = newExtractState();
    await extract([sym('l', 'x/y/../..')], limits, state, 'layer 0 (sha256:aaaaaaaaaaaa, a)');
    const e = await refusal(extract([sym('x', '.')], limits, state, 'layer 1 (sha256:bbbbbbbbbbbb, b)'));
    expect(e.reason).toBe(PlaceReason.UnsafeTarEntry);
    expect(e.message).toMatch(/^layer 0 \(sha256:aaaaaaaaaaaa, a\): the tar entry "l" is refused/);
  });

  it('resolves through links already in the directory, and writes nothing through them', async () => {
    const outside = join(dir, 'outside');
    await mkdir(outside);
    await symlink('.', join(out, 'pre'));
    await symlink(outside, join(out, 'away'));
    const e1 = await refusal(extract([sym('esc', 'pre/../x')]));
    expect(e1.message).toMatch(
      /"esc" is refused: .* leaves the directory \(\.\.\) through the symbolic link pre/,
    );
    const e2 = await refusal(extract([{ path: 'away/planted', body: 'x' }]));
    expect(e2.message).toMatch(/"away\/planted" is refused: it is under the symbolic link away/);
    expect(await readdir(outside)).toEqual([]);
  });

  it.each([
    ['an absolute target', [sym('l', '/etc/passwd')], /its link target "\/etc\/passwd" is absolute/],
    [
      'a hard link to an earlier symbolic link (its relative target would move with it)',
      [
        dirs('a/b/'),
        { path: 'a/f', body: 'x' },
        sym('a/b/l', '../f'),
        { path: 'h', type: 'Link', linkpath: 'a/b/l' },
      ],
      /"h" is refused: its hard-link target "a\/b\/l" is a symbolic link/,
    ],
    [
      'a hard link through a directory link',
      [dirs('a/'), { path: 'a/f', body: 'x' }, sym('d', 'a'), { path: 'h', type: 'Link', linkpath: 'd/f' }],
      /"h" is refused: its hard-link target "d\/f" is under the symbolic link d/,
    ],
    [
      'a file written through a directory link',
      [dirs('sub/'), sym('d', 'sub'), { path: 'd/x', body: 'x' }],
      /"d\/x" is refused: it is under the symbolic link d/,
    ],
    [
      'a file replacing a link',
      [{ path: 'f', body: 'x' }, sym('l', 'f'), { path: 'l', body: 'y' }],
      /"l" is refused: it would replace the symbolic link l/,
    ],
    [
      'a directory replacing a link',
      [sym('l', '.'), dirs('l/')],
      /"l\/" is refused: it would replace the symbolic link l/,
    ],
    [
      'a link replacing a file',
      [{ path: 'f', body: 'x' }, sym('f', '.')],
      /"f" (is refused|cannot be written: another entry or layer already made that path)/,
    ],
    [
      'a loop of links',
      [sym('a', 'b'), sym('b', 'a'), sym('c', 'a/x')],
      /more than 40 symbolic links \(a loop\)/,
    ],
    ['a link through itself', [sym('s', 's/../..')], /"s" is refused: .*(a loop|leaves the directory)/],
  ] as [string, TarEntry[], RegExp][])('still refuses %s', async (_what, entries, why) => {
    const e = await refusal(extract(entries));
    expect(e.reason).toBe(PlaceReason.UnsafeTarEntry);
    expect(e.message).toMatch(why);
  });

  it('bounds the work: a target past PATH_MAX, and a resolution of more than 1024 steps, are refused', async () => {
    // A pax header carries a link target of any length (node-tar's parser reads up to 1 MiB of them).
    const longLink = async (target: string) => {
      const blob = join(dir, `pax-${blobs++}`);
      const pax = new Pax({ path: 'l', linkpath: target }).encode();
      await writeFile(blob, Buffer.concat([pax, tarOf([sym('l', 'short')])]));
      return refusal(extractLayer(blob, 'tar', out, LAYER, limits, newExtractState()));
    };
    expect((await longLink('d/'.repeat(2100))).message).toMatch(
      /"l" is refused: its link target "(d\/)+" is longer than 4095 bytes/,
    );
    expect((await longLink('d/../'.repeat(600))).message).toMatch(
      /"l" is refused: .* takes more than 1024 steps to resolve/,
    );
  });

  it("refuses an empty target (node-tar's parser already does: a link needs a target)", async () => {
    const e = await refusal(extract([sym('l', '')]));
    expect(e.reason).toBe(PlaceReason.InvalidArchive);
    expect(e.message).toMatch(/linkpath required/);
  });

  it('extracts the links a model uses: relative, to links, through directory links, to the root, dangling until later', async () => {
    const r = await extract([
      dirs('./'),
      dirs('1/'),
      { path: './1/model.py', body: 'print(1)\n' },
      sym('1/alias.py', 'model.py'),
      sym('top.py', '1/alias.py'), // a link to a link
      sym('v', '1'),
      sym('via.py', 'v/model.py'), // a target through a directory link
      sym('v2', 'v'),
      sym('1/up.py', '../v2/./alias.py'),
      sym('self', '.'),
      sym('self2', './'),
      sym('1/later.txt', '../late.txt'), // dangling until the file below
      { path: 'late.txt', body: 'late' },
      { path: 'same.py', type: 'Link', linkpath: '1/model.py' },
    ]);
    for (const p of ['1/alias.py', 'top.py', 'via.py', '1/up.py', 'same.py', 'self/1/model.py'])
      expect(await readFile(join(out, p), 'utf8')).toBe('print(1)\n');
    expect(await readFile(join(out, '1/later.txt'), 'utf8')).toBe('late');
    expect(await readlink(join(out, 'via.py'))).toBe('v/model.py');
    expect(r.bytes).toBe(9 + 4);
  });
});

describe('uncompressed bytes: the cap and the free space', () => {
  const reading = (values: number[]) => {
    const calls: string[] = [];
    const freeBytes = (path: string) => {
      calls.push(path);
      return Promise.resolve(values[Math.min(calls.length, values.length) - 1]!);
    };
    return { calls, freeBytes };
  };
  const files = (n: number, size: number): TarEntry[] =>
    Array.from({ length: n }, (_, i) => ({ path: `w/f${i}`, body: Buffer.alloc(size, i) }));

  it('refuses before the first entry when the volume has no room past the margin', async () => {
    const r = reading([1000]);
    const e = await refusal(extract(files(1, 10), { ...limits, minFreeBytes: 1000, freeBytes: r.freeBytes }));
    expect(e.reason).toBe(PlaceReason.InsufficientStorage);
    expect(e.message).toBe(
      `${LAYER}: nothing can be unpacked: the volume has 1000 bytes free and 1000 must stay free: free space on the volume or make it larger`,
    );
    expect(r.calls).toEqual([out]);
    expect(await readdir(out)).toEqual([]);
  });

  it('refuses the entry that does not fit, counting the margin', async () => {
    const r = reading([100_000]);
    const e = await refusal(
      extract(files(3, 30_000), { ...limits, minFreeBytes: 20_000, freeBytes: r.freeBytes }),
    );
    expect(e.reason).toBe(PlaceReason.InsufficientStorage);
    expect(e.message).toMatch(
      /the tar entry "w\/f2" needs 30000 bytes: the volume has 100000 bytes free and 20000 must stay free/,
    );
  });

  it('reads the free space again during the extraction: another writer filling the volume stops it', async () => {
    // The first reading leaves room for two entries; by the third the volume has filled.
    const filled = reading([70_000, 10_000]);
    const e = await refusal(extract(files(3, 30_000), { ...limits, freeBytes: filled.freeBytes }));
    expect(e.message).toMatch(/"w\/f2" needs 30000 bytes: the volume has 10000 bytes free/);
    expect(filled.calls.length).toBe(2);
    // And space freed meanwhile lets it go on.
    await rm(out, { recursive: true, force: true });
    const freed = reading([70_000, 1_000_000]);
    const r = await extract(files(3, 30_000), { ...limits, freeBytes: freed.freeBytes });
    expect(r).toEqual({ files: 3, bytes: 90_000 });
    expect(freed.calls.length).toBe(2);
  });

  it('a gzip bomb stops at the free space, not at the 1 TiB cap, and KServe extraction leaves no directory', async () => {
    const archive = join(dir, 'model.tar.gz');
    await writeFile(archive, gzip(tarOf(files(4, 4 << 20))));
    const dest = join(dir, 'extracted');
    const r = reading([6 << 20]);
    const e = await refusal(
      extractArchive(archive, dest, {
        maxBytes: 1024 ** 4,
        maxFiles: 100,
        minFreeBytes: 0,
        freeBytes: r.freeBytes,
      }),
    );
    expect(e.reason).toBe(PlaceReason.InsufficientStorage);
    expect(e.message).toMatch(/^model\.tar\.gz: the tar entry "w\/f1" needs 4194304 bytes/);
    await expect(lstat(dest)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it("the spec's byte cap refuses too, and KServe extraction removes what it unpacked", async () => {
    const archive = join(dir, 'model.tar');
    await writeFile(archive, tarOf([{ path: 'small', body: 'x' }, ...files(1, 2000)]));
    const dest = join(dir, 'extracted');
    const e = await refusal(extractArchive(archive, dest, { maxBytes: 1000, maxFiles: 10 }));
    expect(e.reason).toBe(PlaceReason.LimitExceeded);
    await expect(lstat(dest)).rejects.toMatchObject({ code: 'ENOENT' });
  });
});
