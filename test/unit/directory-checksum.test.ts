/**
 * Where a directory file's published sha256 (a Hub LFS object's, an OCI layer's through the agent) is checked when
 * the daemon hands over its file as a hard link: a body the daemon streamed while filling the link is hashed as it
 * arrives and not read back; a local hit's link, whose body is never read, is read back. Either way other bytes
 * fail the version with ChecksumMismatch and place nothing.
 */
import { mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import * as checksum from '../../src/place/checksum.ts';
import { DEFAULT_LIMITS, downloadVersion, newProgress, preflight } from '../../src/place/placer.ts';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { linkingDaemon, type Served } from '../support/linking-daemon.ts';
import { sha256 } from '../support/oci-artifacts.ts';

/** Not root and not the owner of the daemon's file, so the link may stay (read-only-link.ts). */
const SERVER_UID = 1000;

describe("a directory file's sha256, checked on a hard-linked file", () => {
  let dispatcher: Agent;
  let dir: string;
  const weights = Buffer.alloc(300_000, 5);
  const other = Buffer.alloc(300_000, 6);
  beforeAll(() => {
    dispatcher = new Agent();
  });
  afterAll(() => dispatcher.close());
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'dir-checksum-'));
    await mkdir(join(dir, 'cache'));
    await mkdir(join(dir, 'root'));
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await rm(dir, { recursive: true, force: true });
  });

  async function placeThrough(serve: () => Served) {
    const daemon = await linkingDaemon(join(dir, 'cache'), serve);
    const root = join(dir, 'root');
    const spec = ModelVersionSpecSchema.parse({
      version: '1',
      files: [
        {
          path: 'w.bin',
          url: 'http://models.example/org/m/resolve/abc/w.bin',
          size: weights.length,
          sha256: sha256(weights).slice('sha256:'.length),
        },
      ],
    });
    const config = {
      root,
      proxy: daemon.url,
      dispatcher,
      hardLinkRoot: root,
      serverUid: SERVER_UID,
      limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
    };
    try {
      const target = await preflight('m', spec, config);
      return { target, progress: await downloadVersion('m', spec, config, newProgress('m', spec)) };
    } finally {
      await daemon.close();
    }
  }

  it('hashes the body of a task the daemon is filling, and does not read the linked file back', async () => {
    const readBack = vi.spyOn(checksum, 'sha256File');
    const { target, progress } = await placeThrough(() => ({ body: weights, finished: false }));
    expect(progress.state).toBe('Ready');
    expect(progress.files[0]).toMatchObject({ hardLink: true, localHit: false });
    expect((await stat(join(target!, 'w.bin'))).nlink).toBe(2);
    expect(readBack).not.toHaveBeenCalled();
  });

  it("reads a local hit's link back, since its body was never read", async () => {
    const readBack = vi.spyOn(checksum, 'sha256File');
    const { progress } = await placeThrough(() => ({ body: weights, finished: true }));
    expect(progress.state).toBe('Ready');
    expect(progress.files[0]).toMatchObject({ hardLink: true, localHit: true });
    expect(readBack).toHaveBeenCalledTimes(1);
  });

  for (const finished of [false, true])
    it(`refuses other bytes ${finished ? "in a local hit's link" : 'in a streamed body'}: ChecksumMismatch, nothing placed`, async () => {
      const { progress } = await placeThrough(() => ({ body: other, finished }));
      expect(progress.state).toBe('Failed');
      expect(progress.reason).toBe('ChecksumMismatch');
      expect(progress.error).toContain(`its bytes hash to sha256 ${sha256(other).slice('sha256:'.length)}`);
      expect(await readdir(join(dir, 'root', 'm')).catch(() => [])).toEqual([]);
    });
});
