/**
 * Integrity failures are named and healed, through the operator against the real apiserver: two Triton emulators,
 * each with a real `peerload agent` beside it, behind the peer-proxy emulator (which, as the real daemon, keeps what
 * the origin sent under the blob's task and answers it from its cache from then on), the real Triton driver, and an
 * in-process registry whose blob is tampered with (one flipped bit) until the test heals it.
 * - The replicas refuse the layer: Ready False with reason ChecksumMismatch (Reconciling, not Stalled), each
 *   replica's message names the layer and both digests and no network error; nothing is placed.
 * - Retried with back-off; once the origin serves the published bytes the retry (under a fresh task: the poisoned
 *   one is still in the peer) places them and the object is Ready 2/2.
 * - An archive entry leaving the directory is UnsafeArchive and Stalled.
 * - Deleted, neither leaves anything in the servers' repositories: no model directory, empty or not.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServedModel } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { createSecret, waitFor } from '../support/kube.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import {
  gzip,
  pushModel,
  sha256,
  startFakeRegistry,
  tarOf,
  type FakeRegistry,
} from '../support/oci-artifacts.ts';
import {
  startEmulatedReplicas,
  type EmulatedReplica,
  type EmulatedReplicas,
} from '../support/oip-replicas.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { soloOperatorFlags, startManager, type RunningManager } from '../support/runtime-harness.ts';

const TOKEN = 'agent-token-integrity-0123456789';
const IPS = ['127.0.0.85', '127.0.0.86'];
const RAW = 'application/vnd.cncf.model.weight.v1.raw';

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns: string;
let work: string;
let fake: FakeRegistry;
let peer: PeerProxy;
let dispatcher: Agent;
let operator: RunningManager;
let agentPort: number;
let emulated: EmulatedReplicas;
let replicas: EmulatedReplica[] = [];

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('sm-integrity'));
  work = await mkdtemp(join(tmpdir(), 'peerload-sm-integrity-'));
  fake = await startFakeRegistry();
  await createSecret(kc, ns, 'agent-token', { token: TOKEN });
  peer = await startPeerProxy();
  dispatcher = new Agent();
  emulated = await startEmulatedReplicas({ ips: IPS, dir: work, token: TOKEN, proxy: peer.url, dispatcher });
  ({ port: agentPort, replicas } = emulated);
  operator = await startManager(
    kc,
    [...soloOperatorFlags(), '--allowed-endpoint-hosts', '127.0.0.0/8'],
    [(ctx) => createServedModelController(ctx, {})],
  );
}, 120_000);

afterAll(async () => {
  await operator?.stop();
  await emulated?.close();
  await dispatcher?.close();
  await peer?.close();
  await fake?.close();
  if (work) await rm(work, { recursive: true, force: true });
});

const get = (name: string) => sms.getServedModel(name);

const create = (name: string, repo: string) =>
  sms.createServedModel(name, {
    modelName: name,
    version: '1',
    source: { oci: { reference: `${fake.host}/${repo}:v1`, plainHTTP: true } },
    // Both replicas at once, so each says it.
    rollout: { seedFirst: false },
    modelServer: {
      driver: 'triton',
      endpoints: replicas.map((r) => r.server.url),
      agent: { port: agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
    },
  });

const condition = (o: ServedModel, type: string) => o.status?.conditions?.find((c) => c.type === type);

async function deleteAndWait(name: string) {
  await sms.deleteServedModel(name);
  await waitFor(`${name} gone`, () => sms.servedModelGone(name), { timeoutMs: 60_000, intervalMs: 300 });
}

describe('a layer whose bytes are not its digest', () => {
  const good = randomBytes(300_000);
  const bad = Buffer.from(good);
  bad.writeUInt8(bad.readUInt8(4_321) ^ 0x01, 4_321); // a tampering proxy's one flipped bit
  const digest = sha256(good);

  it('is ChecksumMismatch naming the layer and both digests, retried with back-off, and Ready once the origin heals', async () => {
    pushModel(fake, 'models/tampered', 'v1', [{ mediaType: RAW, content: good, filepath: 'w.bin' }]);
    fake.putWrongBlob('models/tampered', digest, bad);
    const blobURL = `${fake.url}/v2/models/tampered/blobs/${digest}`;
    await create('tampered', 'models/tampered');
    const failing = (await waitFor(
      'tampered: ChecksumMismatch on both replicas',
      async () => {
        const o = await get('tampered');
        const rs = o.status?.replicas ?? [];
        const both =
          rs.length === 2 &&
          rs.every((r) => r.phase === 'Failed' && /ChecksumMismatch/.test(r.message ?? ''));
        return condition(o, 'Ready')?.reason === 'ChecksumMismatch' && both ? o : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    ))!;
    expect(condition(failing, 'Ready')).toMatchObject({ status: 'False' });
    expect(condition(failing, 'Reconciling')).toMatchObject({ status: 'True', reason: 'ChecksumMismatch' });
    expect(condition(failing, 'Stalled')).toBeUndefined();
    for (const r of failing.status!.replicas!) {
      expect(r.phase).toBe('Failed');
      expect(r.message).toMatch(
        /failed \(reported by the agent\): ChecksumMismatch: layer 0 \(sha256:[0-9a-f]{12}, w\.bin\)/,
      );
      expect(r.message).toContain(`not the ${digest.slice('sha256:'.length)} its source publishes`);
      expect(r.message).toContain(`its bytes hash to sha256 ${sha256(bad).slice('sha256:'.length)}`);
      expect(r.message).not.toMatch(/network/);
    }
    for (const r of replicas) expect(await readdir(r.root)).not.toContain('tampered');
    // The peer holds the tampered bytes under the blob's task: what every retry of main asked for again.
    expect(peer.hasTask(taskID({ url: blobURL }))).toBe(true);

    // While the origin serves other bytes, retries (each under a fresh task) keep failing: never Ready. Their
    // doubling back-off is unit-tested (servedmodel-policy, registrations); here only a bound on the attempts.
    const asked = () => peer.requests.filter((q) => q.url === blobURL).length;
    const before = asked();
    await new Promise((r) => setTimeout(r, 2_000));
    expect(asked() - before).toBeLessThanOrEqual(2 * 4);
    expect(condition(await get('tampered'), 'Ready')).toMatchObject({
      status: 'False',
      reason: 'ChecksumMismatch',
    });

    fake.putBlob('models/tampered', good);
    const ready = (await waitFor(
      'tampered Ready 2/2 once the origin serves the published bytes',
      async () => {
        const o = await get('tampered');
        return o.status?.ready === '2/2' && condition(o, 'Ready')?.status === 'True' ? o : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    ))!;
    expect(condition(ready, 'Ready')!.reason).toBe('AllReplicasReady');
    for (const r of replicas) {
      expect(await readFile(join(r.root, 'tampered', '1', 'w.bin'))).toEqual(good);
      // Placed from a fresh task, not the poisoned one.
      const file = r.agent.versions.get('tampered')!.get('1')!.files[0]!;
      expect(file.taskID).toMatch(/^[0-9a-f]{64}$/);
      expect(file.taskID).not.toBe(taskID({ url: blobURL }));
    }
  });

  it('an archive entry leaving the directory is UnsafeArchive and Stalled', async () => {
    const escape = gzip(tarOf([{ path: '../../escaped.txt', body: 'x' }]));
    pushModel(fake, 'models/escape', 'v1', [
      { mediaType: RAW, content: Buffer.from('good weights'), filepath: 'w.bin' },
      { mediaType: 'application/vnd.cncf.model.code.v1.tar+gzip', content: escape, filepath: 'code' },
    ]);
    await create('escape', 'models/escape');
    const o = (await waitFor(
      'escape Stalled UnsafeArchive',
      async () => {
        const x = await get('escape');
        return condition(x, 'Stalled')?.reason === 'UnsafeArchive' ? x : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    ))!;
    expect(condition(o, 'Ready')).toMatchObject({ status: 'False', reason: 'UnsafeArchive' });
    expect(condition(o, 'Stalled')!.message).toMatch(/reported by the agent\): UnsafeTarEntry: layer 1/);
    expect(condition(o, 'Stalled')!.message).not.toMatch(/network/);
  });

  it('deleted, neither leaves a model directory in any server repository', async () => {
    await deleteAndWait('tampered');
    await deleteAndWait('escape');
    for (const r of replicas) {
      const left = (await readdir(r.root)).filter((n) => n === 'tampered' || n === 'escape');
      expect(left).toEqual([]);
    }
  });
});
