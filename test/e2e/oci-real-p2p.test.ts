/**
 * ModelPack artifacts on the REAL Dragonfly network (manager + scheduler v2.5.1, dfdaemon 1.4.2) from the REAL
 * registry (Distribution v3, test/support/registry.ts) behind the counting proxy: modctl builds and pushes a
 * Triton-style model (a 6 MiB raw weights layer, a raw config layer, a tar code layer), and `peerload fetch
 * oci://…` places it on two node peers through each node's proxy. The weights blob crosses from the registry once
 * for both (blobs up to the 4 MiB minimum piece length once per node at most: the daemon does not share them), the
 * placed files hash to the manifest's digests, the tar layer is extracted, and the weights are hard links of the
 * daemon's files. Then the real manager's `type: image` preheat of the ModelPack manifest: it reads the OCI
 * manifest and preheats the config and every layer blob, joining the placements' tasks.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagerClient } from '../../src/manager/client.ts';
import type { PlaceResult } from '../../src/oci/place.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ROOT_USER, startDragonfly, type Dragonfly } from '../support/dragonfly.ts';
import { modctl, peerloadFetch, pushTritonModel } from '../support/modctl.ts';
import { waitFor } from '../support/process.ts';
import { startRegistry, type Registry } from '../support/registry.ts';

/** The daemon's minimum piece length: content up to it is not shared between peers. */
const MIN_PIECE = 4 * 1024 * 1024;
const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const FILES = {
  config: 'name: "simple"\nbackend: "python"\nmax_batch_size: 0\n',
  weights: randomBytes(6 * 1024 * 1024),
  code: 'import numpy as np\n\nclass TritonPythonModel:\n    pass\n',
};

describe('ModelPack artifacts on the real Dragonfly network', () => {
  let network: Dragonfly;
  let registry: Registry;
  let counting: CountingProxy;
  let dir: string;
  let reference: string;
  /** Requests the registry saw before the placements (modctl's push). */
  let pushed: number;
  /** Body bytes of blob GETs the registry served since the push (ranges and probes included). */
  const served = (digest: string) =>
    counting.requests
      .slice(pushed)
      .filter((q) => q.method === 'GET' && q.url.includes(`/blobs/${digest}`))
      .reduce((sum, q) => sum + q.bytes, 0);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'oci-real-'));
    registry = await startRegistry();
    counting = await startCountingProxy(registry.url);
    network = await startDragonfly({ nodePeers: 2 });
    reference = `${new URL(counting.url).host}/models/simple:v1`;
    await pushTritonModel(await modctl(join(dir, 'modctl')), join(dir, 'src'), reference, FILES);
    pushed = counting.requests.length;
  });
  afterAll(async () => {
    await network?.stop();
    await counting?.close();
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function fetchOn(peer: number): Promise<PlaceResult> {
    const root = join(dir, `node${peer}`, 'simple');
    await mkdir(root, { recursive: true });
    const { code, out, err } = await peerloadFetch([
      `oci://${reference}`,
      join(root, '1'),
      '--proxy',
      network.peers[peer]!.proxyURL,
      '--plain-http',
      '--hard-link-root',
      root,
      '--min-free-bytes',
      '0',
      '--json',
    ]);
    expect(err).toEqual([]);
    expect(code).toBe(0);
    return JSON.parse(out[0]!) as PlaceResult;
  }

  it('places the artifact modctl pushed on two node peers, the weights blob read from the registry once', async () => {
    const manifest = JSON.parse(
      await (
        await fetch(`${registry.url}/v2/models/simple/manifests/v1`, {
          headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
        })
      ).text(),
    ) as {
      artifactType: string;
      layers: { mediaType: string; digest: string; annotations: Record<string, string> }[];
    };
    // What modctl v0.2.2 writes: the older vnd.cnai types for its build, a vnd.cncf tar layer for the attachment.
    expect(manifest.artifactType).toBe('application/vnd.cnai.model.manifest.v1+json');
    expect(manifest.layers.map((l) => l.mediaType).sort()).toEqual([
      'application/vnd.cnai.model.weight.config.v1.raw',
      'application/vnd.cnai.model.weight.v1.raw',
      'application/vnd.cncf.model.code.v1.tar',
    ]);

    const first = await fetchOn(0);
    const second = await fetchOn(1);
    for (const [i, r] of [first, second].entries()) {
      const root = join(dir, `node${i}`, 'simple', '1');
      expect(await readFile(join(root, '1/weights.bin'))).toEqual(FILES.weights);
      expect(await readFile(join(root, 'config.pbtxt'), 'utf8')).toBe(FILES.config);
      expect(await readFile(join(root, '1/model.py'), 'utf8')).toBe(FILES.code);
      // The files hash to the manifest's raw layers' digests.
      for (const l of manifest.layers.filter((x) => x.mediaType.endsWith('.raw')))
        expect(sha256(await readFile(join(root, l.annotations['org.cnai.model.filepath']!)))).toBe(l.digest);
      const weights = r.layers.find((l) => l.filepath === '1/weights.bin')!;
      expect(weights, JSON.stringify(r.layers)).toMatchObject({
        bytes: FILES.weights.length,
        files: 1,
        hardLink: true,
      });
      expect((await stat(join(root, '1/weights.bin'))).nlink).toBeGreaterThanOrEqual(2);
      expect(r.layers.find((l) => l.mediaType.endsWith('.tar'))).toMatchObject({ files: 1 });
      expect(r.layers.every((l) => l.taskID !== undefined && l.localHit === false)).toBe(true);
    }
    // Both nodes joined the same task per blob.
    expect(second.layers.map((l) => l.taskID)).toEqual(first.layers.map((l) => l.taskID));
    // The 6 MiB weights blob crossed from the registry once for both nodes (plus the daemons' 1-byte range
    // probes); a blob up to the 4 MiB minimum piece length never travels between peers, so it may cross once per
    // node (docs/dragonfly.md).
    for (const l of first.layers) {
      const bound = l.bytes > MIN_PIECE ? l.bytes + 2 : 2 * l.bytes + 2;
      expect(served(l.digest), l.digest).toBeGreaterThanOrEqual(l.bytes);
      expect(served(l.digest), l.digest).toBeLessThanOrEqual(bound);
    }
  });

  it("the real manager's image preheat takes the ModelPack manifest and preheats its config and every layer", async () => {
    const manager = new ManagerClient({
      baseURL: network.managerURL,
      auth: { type: 'signIn', username: ROOT_USER.name, password: ROOT_USER.password },
    });
    try {
      const manifest = JSON.parse(
        await (await fetch(`${registry.url}/v2/models/simple/manifests/v1`)).text(),
      ) as { config: { digest: string }; layers: { digest: string; size: number }[] };
      const before = counting.requests.length;
      const job = await manager.createPreheatJob({
        type: 'image',
        url: `${counting.url}/v2/models/simple/manifests/v1`,
        scope: 'all_peers',
      });
      const done = await waitFor(
        'the image preheat job to end',
        async () => {
          const j = await manager.getJob(job.id);
          return (j.state === 'SUCCESS' || j.state === 'FAILURE') && j;
        },
        { timeoutMs: 180_000, intervalMs: 1000 },
      );
      const seen = counting.requests.slice(before);
      expect(done.state, JSON.stringify({ result: done.result, seen })).toBe('SUCCESS');
      // The manager read the manifest (an OCI manifest: its ocischema parser does not look at artifactType) ...
      expect(
        seen.some((q) => q.method === 'GET' && q.url.includes('/manifests/v1') && q.status === 200),
      ).toBe(true);
      // ... and preheated its references: the config blob, which no placement reads, crossed once ...
      const reads = (digest: string) =>
        counting.requests
          .filter((q) => q.method === 'GET' && q.url.includes(`/blobs/${digest}`) && q.status === 200)
          .reduce((sum, q) => sum + q.bytes, 0);
      await waitFor('the config blob preheated', () => reads(manifest.config.digest) > 0, {
        timeoutMs: 60_000,
      });
      // ... and every layer is the task the placements made (the same blob URL): still one registry read each.
      for (const l of manifest.layers) expect(reads(l.digest)).toBe(l.size);
    } finally {
      await manager.close();
    }
  });
});
