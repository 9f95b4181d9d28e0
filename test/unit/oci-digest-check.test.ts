/**
 * `peerload fetch oci://` through the placer (src/cli/fetch-oci-place.ts hands the manifest's files to
 * src/place/placer.ts): where an OCI blob's digest is checked when the daemon hands over its file as a hard link. A body the daemon
 * streamed while filling the link is hashed as it arrives (the file is not read back), and a local hit's link,
 * whose body is never read, is read back. Either way a blob whose bytes are not its digest places nothing.
 */
import { mkdir, mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { RegistryClient } from '../../src/oci/client.ts';
import { OciError, OciReason } from '../../src/oci/errors.ts';
import { DEFAULT_PLACE_LIMITS, placeArtifact } from '../../src/cli/fetch-oci-place.ts';
import { parseReference } from '../../src/oci/reference.ts';
import * as checksum from '../../src/place/checksum.ts';
import { linkingDaemon, type Served } from '../support/linking-daemon.ts';
import { pushModel, sha256, startFakeRegistry, type FakeRegistry } from '../support/oci-artifacts.ts';

const RAW = 'application/vnd.cncf.model.weight.v1.raw';
/** Not root and not the owner of the daemon's file, so the link may stay (read-only-link.ts). */
const SERVER_UID = 1000;

describe("an OCI blob's digest, checked on a hard-linked file", () => {
  let registry: FakeRegistry;
  let dispatcher: Agent;
  let dir: string;
  const weights = Buffer.alloc(200_000, 7);
  const other = Buffer.alloc(200_000, 8);
  beforeAll(async () => {
    registry = await startFakeRegistry();
    dispatcher = new Agent();
    pushModel(registry, 'models/m', 'v1', [{ mediaType: RAW, content: weights, filepath: 'w.bin' }]);
  });
  afterAll(async () => {
    await registry.close();
    await dispatcher.close();
  });
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'oci-digest-'));
    await mkdir(join(dir, 'cache'));
    await mkdir(join(dir, 'root'));
  });
  afterEach(async () => {
    vi.restoreAllMocks();
    await rm(dir, { recursive: true, force: true });
  });

  async function placeThrough(serve: (asked: number) => Served) {
    const daemon = await linkingDaemon(join(dir, 'cache'), serve);
    try {
      return await placeArtifact({
        client: new RegistryClient(registry.host, { dispatcher, plainHTTP: true }),
        ref: parseReference(`${registry.host}/models/m:v1`),
        dest: join(dir, 'root', 'm', '1'),
        proxy: daemon.url,
        dispatcher,
        hardLinkRoot: join(dir, 'root', 'm'),
        serverUid: SERVER_UID,
        limits: { ...DEFAULT_PLACE_LIMITS, minFreeBytes: 0 },
      });
    } finally {
      await daemon.close();
    }
  }

  it('hashes the body of a task the daemon is filling, and does not read the linked file back', async () => {
    const readBack = vi.spyOn(checksum, 'sha256File');
    const r = await placeThrough(() => ({ body: weights, finished: false }));
    expect(r.layers[0]).toMatchObject({ hardLink: true, localHit: false, bytes: weights.length });
    expect((await stat(join(dir, 'root', 'm', '1', 'w.bin'))).nlink).toBe(2);
    expect(readBack).not.toHaveBeenCalled();
  });

  it("reads a local hit's link back, since its body was never read", async () => {
    const readBack = vi.spyOn(checksum, 'sha256File');
    const r = await placeThrough(() => ({ body: weights, finished: true }));
    expect(r.layers[0]).toMatchObject({ hardLink: true, localHit: true });
    expect(readBack).toHaveBeenCalledTimes(1);
  });

  it('hashes a body the daemon cut and was asked for again from its start, not the two attempts together', async () => {
    const r = await placeThrough((asked) => ({
      body: weights,
      finished: false,
      ...(asked === 0 ? { cutAt: 70_000 } : {}),
    }));
    expect(r.layers[0]).toMatchObject({ hardLink: true, bytes: weights.length });
  });

  for (const finished of [false, true])
    it(`refuses other bytes ${finished ? "in a local hit's link" : 'in a streamed body'}, naming the layer, and places nothing`, async () => {
      let caught: unknown;
      await placeThrough(() => ({ body: other, finished })).catch((e: unknown) => (caught = e));
      expect(caught).toBeInstanceOf(OciError);
      expect((caught as OciError).reason).toBe(OciReason.DigestMismatch);
      expect((caught as OciError).message).toContain(
        `its bytes hash to sha256 ${sha256(other).slice(7)}, not the ${sha256(weights).slice(7)} its source publishes`,
      );
      expect((caught as OciError).message).toMatch(/^layer 0 \(sha256:[0-9a-f]{12}, w\.bin\)/);
      expect(await readdir(join(dir, 'root', 'm'))).toEqual([]);
    });
});
