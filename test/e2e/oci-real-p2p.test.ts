/**
 * ModelPack artifacts on the REAL Dragonfly network (manager + scheduler v2.5.1, dfdaemon 1.4.2; the run's shared one,
 * test/support/shared-dragonfly.ts) from the REAL registry (Distribution v3, test/support/registry.ts) behind the
 * counting proxy (its own port: its blob URLs, so their task ids, are this file's alone): modctl builds and pushes a
 * Triton-style model (a 6 MiB raw weights layer, a raw config layer, a tar code layer), and `peerload fetch
 * oci://…` places it on two node peers through each node's proxy. The weights blob crosses from the registry once
 * for both (blobs up to the 4 MiB minimum piece length once per node at most: the daemon does not share them), the
 * placed files hash to the manifest's digests, the tar layer is extracted, and the weights are hard links of the
 * daemon's files.
 *
 * Then the preheat. The real manager's `type: image` preheat cannot read a registry on loopback: its registry
 * client dials through a guard that refuses every address that is not global unicast (127.0.0.0/8 included), so
 * the job is refused at creation. A `type: file` preheat of the layers' blob URLs is what works: the placements
 * that follow are local hits of exactly those tasks, and the registry is not read again.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ManagerClient } from '../../src/manager/client.ts';
import { ManagerError } from '../../src/manager/errors.ts';
import type { PlaceResult } from '../../src/cli/fetch-oci-place.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ROOT_USER, type DragonflyView } from '../support/dragonfly.ts';
import { modctl, nodePlacementArgs, peerloadFetch, pushTritonModel, type Modctl } from '../support/modctl.ts';
import { jobEnd } from '../support/job-end.ts';
import { startRegistry, type Registry } from '../support/registry.ts';
import { sharedDragonfly } from '../support/shared-dragonfly.ts';

/** The daemon's minimum piece length: content up to it is not shared between peers. */
const MIN_PIECE = 4 * 1024 * 1024;
const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
const FILES = {
  config: 'name: "simple"\nbackend: "python"\nmax_batch_size: 0\n',
  weights: randomBytes(6 * 1024 * 1024),
  code: 'import numpy as np\n\nclass TritonPythonModel:\n    pass\n',
};

describe('ModelPack artifacts on the real Dragonfly network', () => {
  let network: DragonflyView;
  let registry: Registry;
  let counting: CountingProxy;
  let dir: string;
  let reference: string;
  let tool: Modctl;
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
    network = await sharedDragonfly(inject('dragonflyService'), 2);
    reference = `${new URL(counting.url).host}/models/simple:v1`;
    tool = await modctl(join(dir, 'modctl'));
    await pushTritonModel(tool, join(dir, 'src'), reference, FILES);
    pushed = counting.requests.length;
    await network.preheatable;
  });
  afterAll(async () => {
    await counting?.close();
    await registry?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function fetchOn(peer: number, ref = reference, name = 'simple'): Promise<PlaceResult> {
    const root = join(dir, `node${peer}`, name);
    await mkdir(root, { recursive: true });
    const { code, out, err } = await peerloadFetch([
      `oci://${ref}`,
      join(root, '1'),
      ...nodePlacementArgs(network.peers[peer]!.proxyURL, root),
      '--plain-http',
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
    // The 6 MiB weights blob crossed from the registry once for both nodes, plus a 1-byte range probe from each
    // peer that took part: the two node peers and the seed peer the scheduler sends the first download back to
    // source through. A blob up to the 4 MiB minimum piece length never travels between peers, so it may cross
    // once per node (docs/dragonfly.md).
    for (const l of first.layers) {
      const bound = l.bytes > MIN_PIECE ? l.bytes + 3 : 2 * l.bytes + 3;
      const gets = counting.requests
        .slice(pushed)
        .filter((q) => q.method === 'GET' && q.url.includes(`/blobs/${l.digest}`));
      expect(served(l.digest), JSON.stringify(gets)).toBeGreaterThanOrEqual(l.bytes);
      expect(served(l.digest), JSON.stringify(gets)).toBeLessThanOrEqual(bound);
    }
  });

  it("the manager refuses an image preheat of a loopback registry; a file preheat of the layers' blob URLs is what placements then hit", async () => {
    const files = {
      config: 'name: "simple2"\nbackend: "python"\nmax_batch_size: 0\n',
      weights: randomBytes(6 * 1024 * 1024),
      code: 'class TritonPythonModel:\n    """v2"""\n',
    };
    const ref2 = `${new URL(counting.url).host}/models/simple:v2`;
    await pushTritonModel(tool, join(dir, 'src2'), ref2, files);
    const manifest = JSON.parse(
      await (
        await fetch(`${registry.url}/v2/models/simple/manifests/v2`, {
          headers: { accept: 'application/vnd.oci.image.manifest.v1+json' },
        })
      ).text(),
    ) as { layers: { digest: string; size: number }[] };
    const blobURL = (digest: string) => `${counting.url}/v2/models/simple/blobs/${digest}`;
    const manager = new ManagerClient({
      baseURL: network.managerURL,
      auth: { type: 'signIn', username: ROOT_USER.name, password: ROOT_USER.password },
    });
    try {
      const before = counting.requests.length;
      // The manager's registry client refuses to dial a loopback address: the job is refused when it is created,
      // before any request reaches the registry.
      const refused = await manager
        .createPreheatJob({
          type: 'image',
          url: `${counting.url}/v2/models/simple/manifests/v2`,
          scope: 'all_peers',
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      expect(refused).toBeInstanceOf(ManagerError);
      expect((refused as ManagerError).status).toBe(500);
      expect((refused as ManagerError).message).toContain('ip 127.0.0.1 is invalid');
      expect(counting.requests.length).toBe(before);

      const job = await manager.createPreheatJob({
        type: 'file',
        urls: manifest.layers.map((l) => blobURL(l.digest)),
        // This file's node peers (the shared network has more): the seed peer and these two read the blobs.
        scope: 'all_peers',
        ips: network.peers.map((p) => p.ip),
      });
      const done = await jobEnd(manager, job.id, { timeoutMs: 180_000, intervalMs: 1000 });
      expect(done.state, JSON.stringify(done.result)).toBe('SUCCESS');
      const preheated = counting.requests.length;

      const placed = [await fetchOn(0, ref2, 'simple2'), await fetchOn(1, ref2, 'simple2')];
      for (const r of placed) {
        for (const l of r.layers) {
          // The daemon's id of the placement's task is the id of the preheated blob URL, with no tag.
          expect(l, JSON.stringify(r.layers)).toMatchObject({
            taskID: taskID({ url: blobURL(l.digest) }),
            localHit: true,
          });
        }
        expect(r.layers.find((l) => l.filepath === '1/weights.bin')).toMatchObject({ hardLink: true });
      }
      const root = join(dir, 'node1', 'simple2', '1');
      expect(await readFile(join(root, '1/weights.bin'))).toEqual(files.weights);
      expect(await readFile(join(root, '1/model.py'), 'utf8')).toBe(files.code);
      // The placements read nothing from the registry but the manifest; the preheat read each blob once, a blob
      // up to the minimum piece length once per peer it went to (the seed peer and the two node peers).
      expect(
        counting.requests.slice(preheated).filter((q) => q.url.includes('/blobs/')),
        'registry blob requests after the preheat',
      ).toEqual([]);
      const reads = (digest: string) =>
        counting.requests
          .slice(before)
          .filter((q) => q.method === 'GET' && q.url.includes(`/blobs/${digest}`))
          .reduce((sum, q) => sum + q.bytes, 0);
      for (const l of manifest.layers) {
        expect(reads(l.digest), l.digest).toBeGreaterThanOrEqual(l.size);
        expect(reads(l.digest), l.digest).toBeLessThanOrEqual(
          l.size > MIN_PIECE ? l.size + 3 : 3 * l.size + 3,
        );
      }
    } finally {
      await manager.close();
    }
  });
});
