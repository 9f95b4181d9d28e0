/**
 * A ModelPreheat of a directory (spec.objectStorage.prefix) against the real apiserver, a real MinIO listing (S3
 * ListObjectsV2, SigV4-verified downloads) and the manager + peer emulators: a 250-file prefix in three jobs of at
 * most 100 URLs, followed to SUCCESS with a bounded status; a failed job retried alone; an empty prefix, caps
 * exceeded and refused credentials as Stalled conditions naming the field; every file's task evicted on delete;
 * an operator restart (the listing lost with the process) continues the same jobs, and a retry that lists again and
 * finds other content stops (DirectoryChanged).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { createSecret, waitFor } from '../support/kube.ts';
import { conditionOf, testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { soloOperatorFlags, startManager, type RunningManager } from '../support/runtime-harness.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';

const BUCKET = 'weights';
const FILES = 250;

let kc: k8s.KubeConfig;
let preheats: PeerloadNamespace;
let ns: string;
let minio: MinIO;
let peer: PeerProxy;
let manager: ManagerEmulator;
let operator: RunningManager;

const shard = (i: number) => `shard-${String(i).padStart(4, '0')}.bin`;

beforeAll(async () => {
  ({ kc, ns, peerload: preheats } = await testNamespace('mph-dir'));
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  const puts: Promise<void>[] = [];
  for (let i = 0; i < FILES; i++) puts.push(minio.putObject(BUCKET, `models/big/${shard(i)}`, `w${i}`));
  puts.push(minio.putObject(BUCKET, 'models/big/README.md', 'not a weight'));
  puts.push(minio.putObject(BUCKET, 'models/big-other/x.bin', 'a sibling prefix'));
  puts.push(minio.putObject(BUCKET, 'models/small/a.json', '{}'));
  puts.push(minio.putObject(BUCKET, 'models/small/b.bin', 'bb'));
  await Promise.all(puts);
  await createSecret(kc, ns, 's3', { access_key: minio.accessKey, secret_key: minio.secretKey });
  peer = await startPeerProxy();
  manager = await startManagerEmulator({ peer });
  operator = await startOperator();
}, 180_000);

const startOperator = () =>
  startManager(kc, [...soloOperatorFlags(), '--manager-url', manager.url], [modelPreheatController]);

afterAll(async () => {
  await operator?.stop();
  await Promise.all([manager?.close(), peer?.close()]);
  await minio?.stop();
});

function objectStorage(extra: Record<string, unknown>, secret = 's3') {
  return {
    ...minio.location(BUCKET),
    credentialsSecretRef: { name: secret },
    ...extra,
  };
}

async function create(name: string, spec: Record<string, unknown>): Promise<void> {
  await preheats.createModelPreheat(name, spec);
}

/** Waits for condition `type` to be `status` with `reason` for the current generation. */
function until(name: string, type: string, status: string, reason: string, timeoutMs = 60_000) {
  return preheats.untilModelPreheat(
    name,
    `${type}=${status} (${reason})`,
    (o) => {
      const c = conditionOf(o, type);
      return c?.status === status && c.reason === reason && c.observedGeneration === o.metadata.generation;
    },
    { timeoutMs, intervalMs: 100 },
  );
}

/** The preheat jobs the emulator got for a resource (its name is in each job's bio). */
const jobsOf = (name: string) =>
  [...manager.jobs.values()].filter((j) => j.type === 'preheat' && j.bio.includes(`${ns}/${name} `));

describe('ModelPreheat of a directory', () => {
  it('a 250-file prefix: three jobs of at most 100 URLs, SUCCESS, a bounded status with each file task id', async () => {
    await create('big', { objectStorage: objectStorage({ prefix: 'models/big/', exclude: ['*.md'] }) });
    const done = await until('big', 'Ready', 'True', 'JobSucceeded');
    const jobs = jobsOf('big');
    expect(jobs.map((j) => (j.args['urls'] as string[]).length)).toEqual([100, 100, 50]);
    const urls = jobs.flatMap((j) => j.args['urls'] as string[]);
    // Every file once, in path order, each URL signed (MinIO verified the signature when the peer fetched it).
    expect(urls.map((u) => new URL(u).pathname)).toEqual(
      Array.from({ length: FILES }, (_, i) => `/${BUCKET}/models/big/${shard(i)}`),
    );
    expect(urls.every((u) => new URL(u).searchParams.has('X-Amz-Signature'))).toBe(true);
    const s = done.status!;
    expect(s).toMatchObject({ state: 'SUCCESS', phase: 'SUCCESS', attempts: 1 });
    expect(s.files).toMatchObject({ count: FILES, jobsTotal: 3, jobsSucceeded: 3, generation: 1 });
    expect(s.files!.bytes).toBe(
      Array.from({ length: FILES }, (_, i) => `w${i}`.length).reduce((a, b) => a + b),
    );
    expect(s.files!.failed).toBeUndefined();
    expect(s.jobs!.map((j) => j.id)).toEqual(jobs.map((j) => j.id));
    expect(s.jobs!.every((j) => j.state === 'SUCCESS' && j.attempt === 1)).toBe(true);
    expect(s.jobID).toBe(jobs[0]!.id);
    // Task ids: the first 100 files in status, each the one the emulated peers computed for the signed URL.
    expect(s.tasks).toHaveLength(100);
    for (const [i, t] of s.tasks!.entries()) {
      const signed = urls[i]!;
      expect(t.url).toBe(signed.split('?')[0]);
      expect(t.taskID).toBe(jobs[0]!.internal.taskIDs[signed]);
    }
    // Bounded and without a signature, whatever the directory's size.
    const text = JSON.stringify(s);
    for (const u of urls) expect(text).not.toContain(new URL(u).searchParams.get('X-Amz-Signature'));
    expect(text).not.toContain(minio.secretKey);
    expect(text.length).toBeLessThan(40_000);
    const ready = s.conditions!.find((c) => c.type === 'Ready')!;
    expect(ready.message).toContain(`the ${FILES} files of prefix "models/big/"`);
  });

  it('a failed job is retried alone; the failed files are named while the retry waits', async () => {
    manager.injectJobFailures(1, 'injected: the seed peer could not fetch');
    await create('retry', {
      objectStorage: objectStorage({ prefix: 'models/big/', include: ['shard-00*'] }),
      retry: { limit: 2, backoff: '3s' },
    });
    const failed = await until('retry', 'Reconciling', 'True', 'JobFailedWillRetry');
    expect(failed.status!.files).toMatchObject({
      count: 100,
      jobsTotal: 1,
      jobsSucceeded: 0,
      failedCount: 100,
    });
    expect(failed.status!.files!.failed).toHaveLength(20);
    expect(failed.status!.files!.failed![0]).toEqual({
      path: shard(0),
      message: expect.stringContaining('injected: the seed peer could not fetch'),
    });
    const done = await until('retry', 'Ready', 'True', 'JobSucceeded');
    expect(done.status).toMatchObject({ attempts: 2 });
    expect(done.status!.jobs).toEqual([{ id: expect.any(Number), state: 'SUCCESS', attempt: 2 }]);
    expect(done.status!.files!.failed).toBeUndefined();
    expect(jobsOf('retry')).toHaveLength(2);
  });

  it('of three jobs, only the failed one is created again', async () => {
    // The first job created fails (chunk 0); the other two succeed.
    manager.injectJobFailures(1, 'injected: first chunk');
    await create('partial', {
      objectStorage: objectStorage({ prefix: 'models/big/', exclude: ['*.md'], maxFiles: 300 }),
      retry: { limit: 1, backoff: '1s' },
    });
    const done = await until('partial', 'Ready', 'True', 'JobSucceeded');
    expect(jobsOf('partial')).toHaveLength(4);
    expect(done.status!.jobs!.map((j) => j.attempt)).toEqual([2, 1, 1]);
    expect(done.status!.files).toMatchObject({ count: FILES, jobsTotal: 3, jobsSucceeded: 3 });
  });

  it('targeted peers: a peer that holds the directory is not preheated again when the targets change', async () => {
    await create('targeted', {
      objectStorage: objectStorage({ prefix: 'models/small/' }),
      scope: 'all_peers',
      targets: { ips: ['127.0.0.1'] },
    });
    const first = await until('targeted', 'Ready', 'True', 'JobSucceeded');
    expect(first.status!.peers).toEqual([
      { ip: '127.0.0.1', hostname: 'seed-peer-0', state: 'Preheated', jobID: first.status!.jobID },
    ]);
    expect(jobsOf('targeted').map((j) => j.args['ips'])).toEqual([['127.0.0.1']]);
    await preheats.patchModelPreheat('targeted', { spec: { targets: { ips: ['127.0.0.1', '127.0.0.2'] } } });
    const second = await until('targeted', 'Ready', 'True', 'JobSucceeded');
    expect(second.metadata.generation).toBe(2);
    // The new generation's job names the new peer only (the emulated scheduler knows none there).
    expect(jobsOf('targeted').map((j) => j.args['ips'])).toEqual([['127.0.0.1'], ['127.0.0.2']]);
    expect(second.status!.peers!.map((p) => [p.ip, p.state])).toEqual([
      ['127.0.0.2', 'Failed'],
      ['127.0.0.1', 'Preheated'],
    ]);
  });

  it('caps exceeded, an empty listing and refused credentials are Stalled, naming the field and the fix', async () => {
    await create('too-many', { objectStorage: objectStorage({ prefix: 'models/big/', maxFiles: 100 }) });
    const many = await until('too-many', 'Stalled', 'True', 'DirectoryTooLarge');
    expect(many.status!.conditions!.find((c) => c.type === 'Stalled')!.message).toMatch(
      /^spec\.objectStorage\.maxFiles: 251 files under prefix "models\/big\/" match include\/exclude, above maxFiles 100: narrow include\/exclude or raise maxFiles/,
    );
    expect(many.status!.phase).toBe('BLOCKED');

    await create('too-big', { objectStorage: objectStorage({ prefix: 'models/small/', maxBytes: 2 }) });
    const big = await until('too-big', 'Stalled', 'True', 'DirectoryTooLarge');
    expect(big.status!.conditions!.find((c) => c.type === 'Stalled')!.message).toContain('raise maxBytes');

    await create('empty', { objectStorage: objectStorage({ prefix: 'models/none/' }) });
    const empty = await until('empty', 'Stalled', 'True', 'NoFilesListed');
    expect(empty.status!.conditions!.find((c) => c.type === 'Stalled')!.message).toContain(
      'no object under prefix "models/none/" matches include/exclude (0 listed)',
    );

    await createSecret(kc, ns, 'wrong', { access_key: minio.accessKey, secret_key: 'wrong-secret-value-42' });
    await create('refused', { objectStorage: objectStorage({ prefix: 'models/small/' }, 'wrong') });
    const refused = await until('refused', 'Stalled', 'True', 'ListFailed');
    const message = refused.status!.conditions!.find((c) => c.type === 'Stalled')!.message;
    expect(message).toMatch(/^cannot list s3 weights prefix "models\/small\/": .*Signature/);
    expect(JSON.stringify(refused)).not.toContain('wrong-secret-value-42');

    // Four resources, no job: nothing was sent to the manager for them.
    for (const name of ['too-many', 'too-big', 'empty', 'refused']) expect(jobsOf(name)).toEqual([]);
    // The schema refuses a prefix beside keys, and patterns without a prefix.
    await expect(
      create('both', {
        objectStorage: objectStorage({ prefix: 'models/small/', keys: ['models/small/a.json'] }),
      }),
    ).rejects.toThrow(/set exactly one of keys \(objects named one by one\) and prefix/);
    await expect(
      create('patterns', { objectStorage: objectStorage({ keys: ['models/small/a.json'], include: ['*'] }) }),
    ).rejects.toThrow(/include, exclude, maxFiles and maxBytes choose the files of a prefix/);
  });

  it('evictOnDelete deletes every file task of the directory, in batches, and every job record', async () => {
    await create('evict', {
      objectStorage: objectStorage({ prefix: 'models/big/', exclude: ['*.md'] }),
      evictOnDelete: true,
      deleteJobOnCleanup: true,
    });
    const done = await until('evict', 'Ready', 'True', 'JobSucceeded');
    const jobIDs = done.status!.jobs!.map((j) => j.id);
    const all = new Set(jobsOf('evict').flatMap((j) => Object.values(j.internal.taskIDs)));
    const others = await preheats.listModelPreheats();
    const inUse = new Set(
      others
        .filter((o) => o.metadata.name !== 'evict')
        .flatMap((o) => (o.status?.tasks ?? []).map((t) => t.taskID)),
    );
    const before = [...manager.jobs.values()].filter((j) => j.type === 'delete_task').length;
    await preheats.deleteModelPreheat('evict');
    await waitFor('evict to be gone', () => preheats.modelPreheatGone('evict'), {
      timeoutMs: 90_000,
      intervalMs: 200,
    });
    const deletes = [...manager.jobs.values()].filter((j) => j.type === 'delete_task').slice(before);
    // Every file's task, but those another live resource's status names (evictOnDelete keeps a task in use).
    const evicted = deletes.map((j) => String(j.args['task_id']));
    expect(new Set(evicted)).toEqual(new Set([...all].filter((id) => !inUse.has(id))));
    expect(evicted.length).toBe(new Set(evicted).size);
    expect(all.size).toBe(FILES);
    for (const id of jobIDs) expect(manager.jobs.has(id)).toBe(false);
  });

  it('an operator restart polls the same jobs (no new one); a retry after a restart finds the prefix changed', async () => {
    for (const f of ['a.bin', 'b.bin']) await minio.putObject(BUCKET, `models/restart/${f}`, f);
    manager.setJobLatency(3000);
    try {
      await create('restart-poll', { objectStorage: objectStorage({ prefix: 'models/restart/' }) });
      const running = await until('restart-poll', 'Reconciling', 'True', 'JobCreated');
      await operator.stop();
      const creates = manager.counters.creates;
      operator = await startOperator();
      const done = await until('restart-poll', 'Ready', 'True', 'JobSucceeded');
      expect(done.status!.jobs!.map((j) => j.id)).toEqual(running.status!.jobs!.map((j) => j.id));
      expect(manager.counters.creates).toBe(creates);
    } finally {
      manager.setJobLatency(0);
    }

    // A failed attempt, then a restart, and the prefix changed meanwhile: the retry lists again and stops.
    manager.injectJobFailures(1, 'injected: before the restart');
    await create('restart-retry', {
      objectStorage: objectStorage({ prefix: 'models/restart/' }),
      retry: { limit: 1, backoff: '3s' },
    });
    await until('restart-retry', 'Reconciling', 'True', 'JobFailedWillRetry');
    await operator.stop();
    await minio.putObject(BUCKET, 'models/restart/c.bin', 'added after the listing');
    operator = await startOperator();
    const changed = await until('restart-retry', 'Stalled', 'True', 'DirectoryChanged');
    expect(changed.status!.conditions!.find((c) => c.type === 'Stalled')!.message).toMatch(
      /^the objects under prefix "models\/restart\/" changed since generation 1 listed them \(2 files, digest [0-9a-f]{16}; now 3 files, digest [0-9a-f]{16}\): a directory's content is fixed per generation, edit the spec to preheat the new content$/,
    );
    expect(jobsOf('restart-retry')).toHaveLength(1);
  });
});
