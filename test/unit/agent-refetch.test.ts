/**
 * A poisoned P2P task heals (src/place/refetch.ts): an origin that once served other bytes than a layer's digest
 * left them in the node's daemon under the blob's task, which the daemon answers from its cache from then on. The
 * agent's next download of that digest asks under a fresh task identity (a `peerload-refetch-<n>` tag component),
 * so it reads the origin again and places the good bytes once the origin serves them. A failed version leaves no
 * model directory behind, and removing a model's last version removes the directory too.
 */
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { request } from 'undici';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { downloadVersion, newProgress, preflight } from '../../src/place/placer.ts';
import { REFETCH_DIR, markPoisoned, refetchCount, refetchTag } from '../../src/place/refetch.ts';
import { startAgentServer } from '../../src/agent/server.ts';
import { RegistryClient } from '../../src/oci/client.ts';
import { DEFAULT_PLACE_LIMITS, placeArtifact } from '../../src/cli/fetch-oci-place.ts';
import { parseReference } from '../../src/oci/reference.ts';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { TAG_HEADER, taskID } from '../../src/storage/taskid.ts';
import { registryCredentialTag } from '../../src/storage/credential-tag.ts';
import { pushModel, sha256, startFakeRegistry } from '../support/oci-artifacts.ts';
import { downloaderConfig, peerBed } from '../support/peer-bed.ts';

let root: string;
const bed = peerBed('registry', startFakeRegistry);
beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'agent-refetch-'));
  bed.peer.reset();
});
afterEach(() => rm(root, { recursive: true, force: true }));

const config = () => downloaderConfig(bed, root);

/** `repo`:v1 of one layer, `blob`'s published bytes, whose registry serves other bytes for it until blob.heal(). */
function pushPoisoned(repo: string, blob: { good: Buffer; digest: string }): void {
  pushModel(bed.registry, repo, 'v1', [
    { mediaType: 'application/vnd.cncf.model.weight.v1.raw', content: blob.good, filepath: 'w.bin' },
  ]);
  bed.registry.putWrongBlob(repo, blob.digest, Buffer.from(blob.good).fill(1, 0, 1));
}

/** `peerload fetch oci://` of `repo`:v1 into root/<its last part>/1 through the bed's peer, with `tag` when given. */
const fetchOf = (repo: string, tag?: string) => () =>
  placeArtifact({
    client: new RegistryClient(bed.registry.host, { dispatcher: bed.dispatcher, plainHTTP: true }),
    ref: parseReference(`${bed.registry.host}/${repo}:v1`),
    dest: join(root, repo.split('/').pop()!, '1'),
    proxy: bed.peer.url,
    dispatcher: bed.dispatcher,
    limits: { ...DEFAULT_PLACE_LIMITS, minFreeBytes: 0 },
    ...(tag === undefined ? {} : { tag }),
  });

/** A blob of `repo` whose origin serves other bytes until `heal()`; the spec of a version holding it. */
function poisonedBlob(repo: string) {
  const good = Buffer.from(`the published bytes of ${repo} `.repeat(2_000));
  const bad = Buffer.from(good);
  bad.writeUInt8(bad.readUInt8(1234) ^ 0x01, 1234); // one flipped bit, as a tampering proxy in front of the origin would
  const digest = sha256(good);
  bed.registry.putWrongBlob(repo, digest, bad);
  const url = `${bed.registry.url}/v2/${repo}/blobs/${digest}`;
  const spec = (version: string) =>
    ModelVersionSpecSchema.parse({
      version,
      files: [
        {
          path: 'w.bin',
          url,
          size: good.length,
          sha256: digest.slice('sha256:'.length),
          layer: `layer 0 (${digest.slice(0, 19)}, w.bin)`,
        },
      ],
    });
  return { good, digest, url, spec, heal: () => bed.registry.putBlob(repo, good) };
}

async function place(name: string, spec: ReturnType<ReturnType<typeof poisonedBlob>['spec']>) {
  const target = await preflight(name, spec, config());
  return { target, progress: await downloadVersion(name, spec, config(), newProgress(name, spec)) };
}

describe('a digest mismatch poisons no retry', () => {
  it('names the layer and both digests, places nothing, and leaves no model directory', async () => {
    const blob = poisonedBlob('models/once');
    const { progress } = await place('once', blob.spec('1'));
    expect(progress).toMatchObject({ state: 'Failed', reason: 'ChecksumMismatch' });
    expect(progress.error).toMatch(
      new RegExp(
        `^layer 0 \\(sha256:[0-9a-f]{12}, w\\.bin\\): its bytes hash to sha256 [0-9a-f]{64}, not the ${blob.digest.slice(7)} its source publishes$`,
      ),
    );
    expect(progress.error).not.toMatch(/network/);
    // The task that served the bytes is named in the file's report (an admin may evict it).
    expect(progress.files[0]!.taskID).toBe(taskID({ url: blob.url }));
    expect(existsSync(join(root, 'once'))).toBe(false);
    expect(await refetchCount(root, blob.digest.slice(7))).toBe(1);
  });

  it('the retry asks under a fresh task, reads the healed origin and is Ready; a later download keeps that task', async () => {
    const blob = poisonedBlob('models/heal');
    expect((await place('heal', blob.spec('1'))).progress.state).toBe('Failed');
    const poisoned = taskID({ url: blob.url });
    expect(bed.peer.hasTask(poisoned)).toBe(true); // the daemon holds the other bytes under the blob's task
    blob.heal();
    const originBefore = bed.peer.stats.originRequests;
    const { target, progress } = await place('heal', blob.spec('1'));
    expect(progress.state).toBe('Ready');
    expect(await readFile(join(target!, 'w.bin'))).toEqual(blob.good);
    const fresh = taskID({ url: blob.url, tag: 'peerload-refetch-1' });
    expect(progress.files[0]).toMatchObject({ taskID: fresh, expectedTaskID: fresh, localHit: false });
    expect(bed.peer.stats.originRequests - originBefore).toBe(1);
    expect(bed.peer.requests.at(-1)!.headers[TAG_HEADER.toLowerCase()]).toBe('peerload-refetch-1');
    // Another version of the same layer (or this agent after a restart) asks for the healed task: a local hit.
    const again = await place('heal', blob.spec('2'));
    expect(again.progress.files[0]).toMatchObject({ taskID: fresh, localHit: true });
  });

  it('an origin that still serves other bytes poisons the fresh task too: the next retry uses another one', async () => {
    const blob = poisonedBlob('models/stubborn');
    expect((await place('stubborn', blob.spec('1'))).progress.state).toBe('Failed');
    const second = await place('stubborn', blob.spec('1'));
    expect(second.progress).toMatchObject({ state: 'Failed', reason: 'ChecksumMismatch' });
    expect(second.progress.files[0]!.taskID).toBe(taskID({ url: blob.url, tag: 'peerload-refetch-1' }));
    blob.heal();
    const third = await place('stubborn', blob.spec('1'));
    expect(third.progress.state).toBe('Ready');
    expect(third.progress.files[0]!.taskID).toBe(taskID({ url: blob.url, tag: 'peerload-refetch-2' }));
  });
});

describe("a private blob's retry keeps its credentials' tag", () => {
  // The fresh task of a retry is the blob's credential-tagged task plus the refetch component: without the
  // credentials' tag the retry would be a public task any pod could name at the node's proxy.
  const credTag = (repo: string) =>
    registryCredentialTag(bed.registry.url, repo, { username: 'robot', password: 'registry-secret-7' });

  it("the agent: the first download under the credentials' tag, the retry under it and peerload-refetch-1", async () => {
    const blob = poisonedBlob('models/private-heal');
    const tag = credTag('models/private-heal');
    const spec = (version: string) => ModelVersionSpecSchema.parse({ ...blob.spec(version), tag });
    const first = await place('private-heal', spec('1'));
    expect(first.progress).toMatchObject({ state: 'Failed', reason: 'ChecksumMismatch' });
    expect(first.progress.files[0]!.taskID).toBe(taskID({ url: blob.url, tag }));
    blob.heal();
    const { progress } = await place('private-heal', spec('1'));
    expect(progress.state).toBe('Ready');
    const fresh = taskID({ url: blob.url, tag: `${tag}/peerload-refetch-1` });
    expect(progress.files[0]).toMatchObject({ taskID: fresh, expectedTaskID: fresh });
    expect(bed.peer.requests.at(-1)!.headers[TAG_HEADER.toLowerCase()]).toBe(`${tag}/peerload-refetch-1`);
  });

  it("peerload fetch oci://: the retry's tag is the credentials' tag with peerload-refetch-1", async () => {
    const blob = poisonedBlob('models/private-fetched');
    const tag = credTag('models/private-fetched');
    pushPoisoned('models/private-fetched', blob);
    const fetchIt = fetchOf('models/private-fetched', tag);
    await expect(fetchIt()).rejects.toMatchObject({ reason: 'DigestMismatch' });
    blob.heal();
    const placed = await fetchIt();
    expect(placed.layers[0]!.taskID).toBe(taskID({ url: blob.url, tag: `${tag}/peerload-refetch-1` }));
    expect(bed.peer.requests.at(-1)!.headers[TAG_HEADER.toLowerCase()]).toBe(`${tag}/peerload-refetch-1`);
  });
});

describe('peerload fetch oci:// heals the same way', () => {
  it('a blob served wrongly is asked for under a fresh task next time, and placed once the registry heals', async () => {
    const blob = poisonedBlob('models/fetched');
    pushPoisoned('models/fetched', blob);
    const fetchIt = fetchOf('models/fetched');
    await expect(fetchIt()).rejects.toMatchObject({ reason: 'DigestMismatch' });
    expect(await refetchCount(root, blob.digest.slice(7))).toBe(1);
    blob.heal();
    const placed = await fetchIt();
    expect(placed.layers[0]!.taskID).toBe(taskID({ url: blob.url, tag: 'peerload-refetch-1' }));
    expect(await readFile(join(root, 'fetched', '1', 'w.bin'))).toEqual(blob.good);
  });
});

describe('refetch counts', () => {
  it('are kept per digest on the model volume, ignore anything but a digest, and join the spec tag', async () => {
    const hex = 'a'.repeat(64);
    expect(await refetchCount(root, hex)).toBe(0);
    expect(await markPoisoned(root, hex)).toBe(1);
    expect(await markPoisoned(root, hex)).toBe(2);
    expect(await readFile(join(root, REFETCH_DIR, hex), 'utf8')).toBe('2');
    expect(await markPoisoned(root, '../../etc/passwd')).toBe(0);
    await writeFile(join(root, REFETCH_DIR, 'b'.repeat(64)), 'garbage');
    expect(await refetchCount(root, 'b'.repeat(64))).toBe(0);
    expect(refetchTag(undefined, 0)).toBeUndefined();
    expect(refetchTag('team', 0)).toBe('team');
    expect(refetchTag(undefined, 3)).toBe('peerload-refetch-3');
    expect(refetchTag('team/peerload-cred-x', 1)).toBe('team/peerload-cred-x/peerload-refetch-1');
  });
});

describe("the agent's delete", () => {
  it("removes the model's directory with its last version, and a failed version's", async () => {
    const tokenPath = join(root, '..', `token-${Date.now()}`);
    await writeFile(tokenPath, 'agent-token-refetch-0123');
    const agent = await startAgentServer({
      ...config(),
      token: async () => (await readFile(tokenPath, 'utf8')).trim(),
    });
    const call = (method: 'PUT' | 'DELETE', path: string, body?: unknown) =>
      request(`${agent.url}${path}`, {
        method,
        dispatcher: bed.dispatcher,
        headers: { authorization: 'Bearer agent-token-refetch-0123', 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      }).then(async (r) => ({ status: r.statusCode, body: await r.body.text() }));
    try {
      const blob = poisonedBlob('models/gone');
      blob.heal();
      expect((await call('PUT', '/v1/models/gone', blob.spec('1'))).status).toBe(202);
      await agent.idle();
      expect(existsSync(join(root, 'gone', '1', 'w.bin'))).toBe(true);
      expect((await call('DELETE', '/v1/models/gone/versions/1')).status).toBe(200);
      expect(existsSync(join(root, 'gone'))).toBe(false);
      expect(existsSync(join(root, '.peerload-records', 'gone'))).toBe(false);
      const bad = poisonedBlob('models/bad');
      expect((await call('PUT', '/v1/models/bad', bad.spec('1'))).status).toBe(202);
      await agent.idle();
      expect(agent.versions.get('bad')!.get('1')!.state).toBe('Failed');
      expect((await call('DELETE', '/v1/models/bad/versions/1')).status).toBe(200);
      expect(existsSync(join(root, 'bad'))).toBe(false);
    } finally {
      await agent.close();
      await rm(tokenPath, { force: true });
    }
  });
});
