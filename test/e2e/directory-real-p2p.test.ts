/**
 * A ModelPreheat of a directory on the REAL Dragonfly network (manager and scheduler v2.5.1, dfdaemon 1.4.2: the
 * run's shared one, test/support/shared-dragonfly.ts), with MinIO as the origin (its own port: its own task ids):
 * the operator lists the prefix with S3 ListObjectsV2, leaves out what `exclude` names, and preheats every file in
 * ONE manager job (the real manager takes `urls`). The job succeeds; each file's task id in status is a task the
 * seed peer's daemon holds (its file is named by the id), and a download of each file through a node peer, signed
 * at another moment, carries that same X-Dragonfly-Task-ID.
 */
import { randomBytes } from 'node:crypto';
import { readdir } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { ProxyAgent, request } from 'undici';

import { ROOT_USER, type DragonflyPeerView, type DragonflyView } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import type { RunningManager } from '../support/runtime-harness.ts';
import { startRealNetworkOperator } from '../support/real-operator.ts';
import { conditionOf, testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';

const BUCKET = fileBucket('models');
const PREFIX = 'llm/tiny/';
// Above 4 MiB each: dfdaemon 1.4 fetches smaller content straight from the origin, without the scheduler.
const FILES: Record<string, Buffer> = {
  'config.bin': randomBytes(5 << 20),
  'model-00001-of-00002.safetensors': randomBytes(5 << 20),
  'model-00002-of-00002.safetensors': randomBytes(6 << 20),
};

let kc: k8s.KubeConfig;
let ns: string;
let peerload: PeerloadNamespace;
let network: DragonflyView;
let minio: MinIO;
let operator: RunningManager;
let jwt: string;

beforeAll(async () => {
  ({ kc, ns, peerload } = await testNamespace('dir-p2p'));
  const core = kc.makeApiClient(k8s.CoreV1Api);
  network = await sharedDragonfly(inject('dragonflyService'), 1);
  jwt = await network.signIn();
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  for (const [path, body] of Object.entries(FILES)) await minio.putObject(BUCKET, PREFIX + path, body);
  await minio.putObject(BUCKET, `${PREFIX}README.md`, 'left out by exclude');
  await core.createNamespacedSecret({
    namespace: ns,
    body: {
      metadata: { name: 's3-credentials' },
      stringData: { access_key: minio.accessKey, secret_key: minio.secretKey },
    },
  });
  await core.createNamespacedSecret({
    namespace: ns,
    body: {
      metadata: { name: 'manager-user' },
      stringData: { username: ROOT_USER.name, password: ROOT_USER.password },
    },
  });
  operator = await startRealNetworkOperator(kc, network.managerURL, [], { servedModels: false });
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await operator?.stop();
  await minio?.stop();
});

/** The daemon's own copy of a task: a file named by the task id under its storage directory. */
async function holds(peer: DragonflyPeerView, taskID: string): Promise<boolean> {
  const entries = await readdir(peer.storageDir, { recursive: true, withFileTypes: true });
  return entries.some((e) => e.isFile() && e.name === taskID);
}

/** A download through a peer's proxy, as a model server's agent or plugin makes it: the daemon's task id. */
async function download(
  peer: DragonflyPeerView,
  url: string,
  tag: string,
): Promise<{ taskID: string; bytes: number }> {
  const agent = new ProxyAgent(peer.proxyURL);
  try {
    // With the tag the credentials give, as the agent and the plugin send it.
    const res = await request(url, {
      dispatcher: agent,
      headers: { 'X-Dragonfly-Use-P2P': 'true', 'X-Dragonfly-Tag': tag },
    });
    const body = Buffer.from(await res.body.arrayBuffer());
    expect(res.statusCode).toBe(200);
    return { taskID: String(res.headers['x-dragonfly-task-id']), bytes: body.length };
  } finally {
    await agent.close();
  }
}

describe('a directory preheated on the real Dragonfly network', () => {
  it('one job for every file of the prefix; each file task id is in the seed daemon and in a later download', async () => {
    const location = minio.location(BUCKET);
    await peerload.createModelPreheat('tiny-dir', {
      objectStorage: {
        ...location,
        credentialsSecretRef: { name: 's3-credentials' },
        prefix: PREFIX,
        exclude: ['*.md'],
      },
      manager: { url: network.managerURL, signInSecretRef: { name: 'manager-user' } },
      retry: { limit: 0 },
    });
    const done = await peerload.untilModelPreheat(
      'tiny-dir',
      'settled',
      (o) => {
        const c = conditionOf(o, 'Succeeded');
        return !!c && c.status !== 'Unknown' && c.observedGeneration === o.metadata.generation;
      },
      { timeoutMs: 300_000, intervalMs: 1000 },
    );
    const s = done.status!;
    const ready = s.conditions!.find((c) => c.type === 'Succeeded')!;
    expect(ready, JSON.stringify(s)).toMatchObject({ status: 'True', reason: 'JobSucceeded' });
    const paths = Object.keys(FILES).sort();
    const bytes = Object.values(FILES).reduce((n, b) => n + b.length, 0);
    expect(s.files).toMatchObject({ count: paths.length, bytes, jobsTotal: 1, jobsSucceeded: 1 });
    expect(s.jobs).toEqual([{ id: s.jobID, state: 'SUCCESS', attempt: 1 }]);

    // The real manager's record of the job: one job, every file's signed URL in `urls`, the README left out.
    const res = await fetch(`${network.managerURL}/api/v1/jobs/${s.jobID}`, {
      headers: { authorization: `Bearer ${jwt}` },
    });
    const record = (await res.json()) as { state: string; args: { urls?: string[] } };
    expect(record.state).toBe('SUCCESS');
    expect(record.args.urls!.map((u) => new URL(u).pathname)).toEqual(
      paths.map((p) => `/${BUCKET}/${PREFIX}${p}`),
    );

    // Each file's task: held by the seed peer's daemon, and the id a later download of the file gets.
    expect(s.tasks!.map((t) => t.url)).toEqual(
      paths.map((p) => `${location.endpoint}/${BUCKET}/${PREFIX}${p}`),
    );
    for (const [i, t] of s.tasks!.entries()) {
      expect(t.taskID).toMatch(/^[0-9a-f]{64}$/);
      // On a miss, what the seed daemon logged of the task says whether it never ran it or let it go.
      const held = await holds(network.seedPeer!, t.taskID);
      const said = held
        ? ''
        : (await network.seedPeer!.logs())
            .split('\n')
            .filter((l) => l.includes(t.taskID))
            .slice(-12)
            .join('\n');
      expect(held, `${paths[i]} ${t.taskID}\n${said}`).toBe(true);
      const { url } = await signObjectURL(location, PREFIX + paths[i]!, minio.credentials(), {
        now: new Date(Date.now() - 90_000),
        expiresSeconds: 3600,
      });
      const got = await download(network.peers[0]!, url, credentialTag(location, minio.credentials()));
      expect(got.taskID, paths[i]).toBe(t.taskID);
      expect(got.bytes).toBe(FILES[paths[i]!]!.length);
    }
  });
});
