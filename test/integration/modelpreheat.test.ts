/**
 * The ModelPreheat controller against the real apiserver and the manager + peer emulators.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { createSecret, waitFor } from '../support/kube.ts';
import { conditionOf, testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { startOciRegistry, type OciRegistry } from '../support/oci-registry.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import { soloOperatorFlags, startManager, type RunningManager } from '../support/runtime-harness.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { taskID } from '../../src/storage/taskid.ts';
import type { ModelPreheat } from '../../src/api/index.ts';

const GROUP = 'peerload.io';
const VERSION = 'v1alpha1';
const PLURAL = 'modelpreheats';

let kc: k8s.KubeConfig;
let custom: k8s.CustomObjectsApi;
let preheats: PeerloadNamespace;
let ns: string;
let peer: PeerProxy;
let origin: Origin;
let registry: OciRegistry;
let manager: ManagerEmulator;
let operator: RunningManager;

const OPERATOR_FLAGS = () => [
  ...soloOperatorFlags(),
  '--manager-url',
  manager.url,
  // The emulators that spec.manager.url names here (docs/security.md: refused unless allowed).
  '--allowed-manager-hosts',
  '127.0.0.1',
];

beforeAll(async () => {
  ({ kc, ns, custom, peerload: preheats } = await testNamespace('mph'));
  origin = await startOrigin({
    '/models/resnet-18.mar': 'resnet weights',
    '/models/bert.mar': 'bert weights',
  });
  peer = await startPeerProxy();
  registry = await startOciRegistry();
  manager = await startManagerEmulator({ peer });
  operator = await startManager(kc, OPERATOR_FLAGS(), [modelPreheatController]);
});

afterAll(async () => {
  await operator?.stop();
  await Promise.all([manager?.close(), peer?.close(), registry?.close?.(), origin?.close()]);
});

async function create(name: string, spec: Record<string, unknown>): Promise<void> {
  await preheats.createModelPreheat(name, spec);
}

const get = (name: string) => preheats.getModelPreheat(name);

/** Waits until the Succeeded condition has `status` (and optionally `reason`) and returns the object. */
async function until(
  name: string,
  status: 'True' | 'False' | 'Unknown',
  reason?: string,
  timeoutMs = 30_000,
) {
  return preheats.untilModelPreheat(
    name,
    `Succeeded=${status}${reason ? ` (${reason})` : ''}`,
    (o) => {
      const c = conditionOf(o, 'Succeeded');
      return (
        !!c &&
        c.status === status &&
        (!reason || c.reason === reason) &&
        c.observedGeneration === o.metadata.generation
      );
    },
    { timeoutMs, intervalMs: 100 },
  );
}

async function events(name: string): Promise<string[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items.filter((e) => e.regarding?.name === name).map((e) => `${e.type}/${e.reason}`);
}

const secret = (name: string, data: Record<string, string>) => createSecret(kc, ns, name, data);

const fileURL = (path: string, signature = 'sig-1') =>
  `${origin.url}${path}?Expires=1700000000&Signature=${signature}`;

describe('ModelPreheat', () => {
  it('file: creates the job, follows it to SUCCESS, reports task ids, and a differently signed download hits the cache', async () => {
    await create('file-happy', {
      url: fileURL('/models/resnet-18.mar'),
      filteredQueryParams: ['Expires', 'Signature'],
    });
    const done = await until('file-happy', 'True', 'JobSucceeded');
    const job = manager.jobs.get(done.status!.jobID!)!;
    expect(job.type).toBe('preheat');
    expect(job.args).toMatchObject({
      type: 'file',
      url: fileURL('/models/resnet-18.mar'),
      filtered_query_params: 'Expires&Signature',
    });
    expect(done.status).toMatchObject({
      state: 'SUCCESS',
      attempts: 1,
      jobGeneration: 1,
      observedGeneration: 1,
    });
    expect(done.status!.groupID).toMatch(/^group_[0-9a-f-]{36}$/);
    expect(done.status!.completedAt).toBeTruthy();
    expect(done.status!.successCount).toBeGreaterThanOrEqual(1);

    // The operator's default rule: the tested daemon, client 1.4.
    const expectedID = taskID({
      url: fileURL('/models/resnet-18.mar'),
      filter: ['Expires', 'Signature'],
      rule: '1.4',
    });
    expect(done.status!.tasks).toEqual([
      { url: expect.stringContaining('Signature=***'), taskID: expectedID },
    ]);
    expect(peer.hasTask(expectedID)).toBe(true);

    // The Done-when: the same object, signed again, downloaded through the peer is a cache hit.
    const originBytes = origin.stats.bytes;
    const res = await fetch(`${peer.url}/`, { method: 'GET' }).catch(() => undefined);
    void res;
    const hit = await proxiedGet(fileURL('/models/resnet-18.mar', 'sig-2'), ['Expires', 'Signature']);
    expect(hit.status).toBe(200);
    expect(hit.headers['x-dragonfly-task-id']).toBe(expectedID);
    expect(origin.stats.bytes).toBe(originBytes);

    expect(await events('file-happy')).toEqual(expect.arrayContaining(['Normal/JobSucceeded']));
  });

  it('image: resolves the manifest and preheats every blob', async () => {
    const image = registry.pushImage('ml/torchserve', '0.12.0');
    await create('image-happy', { type: 'image', url: image.manifestURL, platform: 'linux/amd64' });
    const done = await until('image-happy', 'True', 'JobSucceeded');
    const job = manager.jobs.get(done.status!.jobID!)!;
    expect(job.args).toMatchObject({ type: 'image', url: image.manifestURL });
    expect([...job.internal.urls].sort()).toEqual([...image.images[0]!.blobURLs].sort());
  });

  it('FAILURE is retried with backoff and then succeeds', async () => {
    manager.injectJobFailures(1, 'seed peer download failed');
    await create('retry-then-ok', {
      url: fileURL('/models/bert.mar'),
      retry: { limit: 2, backoff: '500ms' },
    });
    const failed = await until('retry-then-ok', 'Unknown', 'JobFailedWillRetry');
    expect(failed.status!.conditions![0]!.message).toContain('seed peer download failed');
    // Between attempts: STATE RETRYING (not FAILURE) and Reconciling, not Stalled.
    expect(failed.status!.phase).toBe('RETRYING');
    expect(health(failed)).toEqual([
      'Ready=Unknown/JobFailedWillRetry',
      'Reconciling=True/JobFailedWillRetry',
    ]);
    const done = await until('retry-then-ok', 'True', 'JobSucceeded');
    expect(done.status!.attempts).toBe(2);
    expect(health(done)).toEqual(['Ready=True/JobSucceeded']);
    expect(done.status!.phase).toBe('SUCCESS');
    expect(await events('retry-then-ok')).toContain('Warning/JobFailedWillRetry');
  });

  it('stops after the retry limit with the manager error', async () => {
    manager.injectJobFailures(2, 'no space left on device');
    await create('retry-exhausted', {
      url: fileURL('/models/bert.mar'),
      retry: { limit: 1, backoff: '200ms' },
    });
    const failed = await until('retry-exhausted', 'False', 'JobFailed');
    expect(failed.status).toMatchObject({ state: 'FAILURE', phase: 'FAILURE', attempts: 2 });
    expect(health(failed)).toEqual(['Ready=False/JobFailed', 'Stalled=True/JobFailed']);
    expect(failed.status!.conditions![0]!.message).toMatch(/after 2 attempt\(s\).*no space left on device/);
    const creates = manager.counters.creates;
    await new Promise((r) => setTimeout(r, 1000));
    expect(manager.counters.creates).toBe(creates); // no hot loop after the end
  });

  it('a 422 from the manager is a final condition carrying the manager message', async () => {
    manager.injectServerErrors(1, 422, "Key: 'CreatePreheatJobRequest.Args' Error:Field validation failed");
    await create('bad-args', { url: fileURL('/models/bert.mar') });
    const failed = await until('bad-args', 'False', 'InvalidJobArgs');
    expect(failed.status!.conditions![0]!.message).toContain('Field validation failed');
  });

  it('an unknown scheduler cluster is reported by name', async () => {
    await create('unknown-cluster', { url: fileURL('/models/bert.mar'), schedulerClusterIDs: [7] });
    const failed = await until('unknown-cluster', 'False', 'SchedulerClusterNotFound');
    expect(failed.status!.conditions![0]!.message).toContain('scheduler cluster 7 does not exist');
  });

  it('a job SUCCESS with no peer holding the content (origin 404, as the real manager ends it) is a failure', async () => {
    await create('origin-404', { url: fileURL('/models/missing.mar'), retry: { limit: 0 } });
    const failed = await until('origin-404', 'False', 'NoPeerSucceeded');
    expect(failed.status!.state).toBe('FAILURE');
    expect(failed.status!.conditions![0]!.message).toMatch(/ended SUCCESS but no peer reported the content/);
    expect(failed.status!.successCount).toBe(0);
  });

  it('429 with Retry-After is honoured (within the poll range: at most --poll-backoff-max, 1 s here)', async () => {
    manager.injectRateLimit(1, 1);
    const t0 = Date.now();
    await create('rate-limited', { url: fileURL('/models/bert.mar') });
    await until('rate-limited', 'Unknown', 'ManagerRateLimited');
    await until('rate-limited', 'True', 'JobSucceeded');
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
  });

  it('manager down, then back: Unknown with the cause, then success without a crash loop', async () => {
    await manager.stop();
    await create('manager-down', { url: fileURL('/models/bert.mar') });
    const down = await until('manager-down', 'Unknown', 'ManagerUnavailable');
    expect(down.status!.conditions![0]!.message).toMatch(/create the preheat job/);
    expect(down.status!.phase).toBe('UNREACHABLE'); // the STATE column is not empty while the manager is down
    expect(health(down)).toEqual(['Ready=Unknown/ManagerUnavailable', 'Reconciling=True/ManagerUnavailable']);
    await manager.start();
    await until('manager-down', 'True', 'JobSucceeded', 60_000);
  });

  it('a spec change creates a new job for the new generation', async () => {
    await create('spec-change', { url: fileURL('/models/bert.mar') });
    const first = await until('spec-change', 'True', 'JobSucceeded');
    await preheats.patchModelPreheat('spec-change', { spec: { url: fileURL('/models/resnet-18.mar') } });
    const second = await waitFor('generation 2 succeeded', async () => {
      const o = await get('spec-change');
      return o.status?.jobGeneration === 2 && o.status.state === 'SUCCESS' ? o : undefined;
    });
    expect(second.status!.jobID).not.toBe(first.status!.jobID);
    expect(manager.jobs.get(second.status!.jobID!)!.args.url).toBe(fileURL('/models/resnet-18.mar'));
  });

  it('an operator restart mid-poll continues the same job', async () => {
    manager.setJobLatency(4000);
    try {
      await create('restart', { url: fileURL('/models/bert.mar') });
      const running = await waitFor('job created', async () =>
        (await get('restart')).status?.jobID ? get('restart') : undefined,
      );
      await operator.stop();
      const creates = manager.counters.creates;
      operator = await startManager(kc, OPERATOR_FLAGS(), [modelPreheatController]);
      const done = await until('restart', 'True', 'JobSucceeded');
      expect(done.status!.jobID).toBe(running.status!.jobID);
      expect(manager.counters.creates).toBe(creates);
    } finally {
      manager.setJobLatency(0);
    }
  });

  it('one status write when the job is done at once; JobCreated first when it is not, or when the manager is slow', async () => {
    // Every write of the object reaches a watch as its own event, so the recorded sequence is the write sequence.
    const seen = new Map<string, string[]>();
    const watch = await new k8s.Watch(kc).watch(
      `/apis/${GROUP}/${VERSION}/namespaces/${ns}/${PLURAL}`,
      {},
      (_type: string, o: ModelPreheat) => {
        const c = o.status?.conditions?.find((x) => x.type === 'Succeeded');
        if (!c) return;
        seen.set(o.metadata.name!, [...(seen.get(o.metadata.name!) ?? []), `${c.status}/${c.reason}`]);
      },
      () => {},
    );
    // A manager without seed peers ends its jobs before the create's answer is sent: the first look finds them done.
    const instant = await startManagerEmulator({});
    try {
      await create('at-once', {
        url: fileURL('/models/resnet-18.mar', 'sig-at-once'),
        manager: { url: instant.url },
      });
      const atOnce = await until('at-once', 'True', 'JobSucceeded');
      expect(atOnce.status!.jobID).toBeGreaterThan(0);
      expect(atOnce.status!.startedAt).toBeDefined();
      expect(atOnce.status!.successCount).toBe(1);
      expect(instant.jobs.get(atOnce.status!.jobID!)!.state).toBe('SUCCESS');

      manager.setJobLatency(1_000);
      await create('later', { url: fileURL('/models/bert.mar', 'sig-later') });
      await until('later', 'True', 'JobSucceeded');

      // A manager that answers only after the look's 2 s bound: the job id is still written without waiting for it.
      manager.setJobLatency(0);
      manager.setRequestDelay(2_500);
      await create('slow-manager', { url: fileURL('/models/bert.mar', 'sig-slow') });
      await until('slow-manager', 'True', 'JobSucceeded', 60_000);
      await waitFor(
        'the last watch events',
        async () => (seen.get('slow-manager')?.length ?? 0) >= 2 || undefined,
      ).catch((e: unknown) => {
        throw new Error(`${String(e)}: ${JSON.stringify([...seen])}`);
      });
      expect(seen.get('at-once')).toEqual(['True/JobSucceeded']);
      expect(seen.get('later')).toEqual(['Unknown/JobCreated', 'True/JobSucceeded']);
      expect(seen.get('slow-manager')).toEqual(['Unknown/JobCreated', 'True/JobSucceeded']);
    } finally {
      manager.setRequestDelay(0);
      manager.setJobLatency(0);
      watch.abort();
      await instant.close();
    }
  });

  it('ModelPreheat status when the manager answers `status` instead of `state` (as v2.0.2 documents it)', async () => {
    const seedDialect = await startManagerEmulator({ peer, statusField: 'status' });
    try {
      await create('status-dialect', { url: fileURL('/models/bert.mar'), manager: { url: seedDialect.url } });
      const done = await until('status-dialect', 'True', 'JobSucceeded');
      expect(done.status!.state).toBe('SUCCESS');
    } finally {
      await seedDialect.close();
    }
  });

  it('legacy managers get `filter`; /oapi/v1 with a personal access token; sign-in for /api/v1 JWT', async () => {
    const legacy = await startManagerEmulator({ peer, argsDialect: 'legacy' });
    const oapi = await startManagerEmulator({ peer, tokens: ['pat-secret-value'] });
    const jwt = await startManagerEmulator({
      peer,
      apiAuth: 'jwt',
      users: [{ name: 'peerload', password: 'pw-secret' }],
    });
    try {
      await secret('pat', { token: 'pat-secret-value' });
      await secret('user', { username: 'peerload', password: 'pw-secret' });
      await create('legacy', {
        url: fileURL('/models/bert.mar'),
        filteredQueryParams: ['Expires', 'Signature'],
        manager: { url: legacy.url, argsDialect: 'legacy' },
      });
      await create('oapi', {
        url: fileURL('/models/bert.mar'),
        manager: { url: oapi.url, apiPath: '/oapi/v1', tokenSecretRef: { name: 'pat', key: 'token' } },
      });
      await create('jwt', {
        url: fileURL('/models/bert.mar'),
        manager: { url: jwt.url, signInSecretRef: { name: 'user' } },
      });
      for (const name of ['legacy', 'oapi', 'jwt']) await until(name, 'True', 'JobSucceeded');
      const legacyBody = JSON.parse(legacy.log.find((r) => r.method === 'POST')!.body);
      expect(legacyBody.args.filter).toBe('Expires&Signature');
      expect(legacyBody.args.filtered_query_params).toBeUndefined();
      expect(oapi.log.some((r) => r.path.startsWith('/oapi/v1/jobs') && r.status === 200)).toBe(true);
      expect(jwt.counters.signIns).toBe(1);
    } finally {
      await Promise.all([legacy.close(), oapi.close(), jwt.close()]);
    }
  });

  it('401 and 403 from bad credentials are conditions that name the cause, never the secret', async () => {
    const oapi = await startManagerEmulator({
      peer,
      tokens: [{ token: 'expired-token-value', expiresAt: Date.now() - 1000 }],
    });
    try {
      await secret('wrong-pat', { token: 'wrong-token-value' });
      await secret('expired-pat', { token: 'expired-token-value' });
      const mgr = (name: string) => ({
        url: oapi.url,
        apiPath: '/oapi/v1',
        tokenSecretRef: { name, key: 'token' },
      });
      await create('pat-401', { url: fileURL('/models/bert.mar'), manager: mgr('wrong-pat') });
      await create('pat-403', { url: fileURL('/models/bert.mar'), manager: mgr('expired-pat') });
      await create('pat-missing', { url: fileURL('/models/bert.mar'), manager: mgr('no-such-secret') });
      const unauthorized = await until('pat-401', 'Unknown', 'ManagerAuthFailed');
      const expired = await until('pat-403', 'Unknown', 'ManagerAuthFailed');
      const missing = await until('pat-missing', 'Unknown', 'SecretNotFound');
      expect(unauthorized.status!.conditions![0]!.message).toContain('401');
      expect(expired.status!.conditions![0]!.message).toMatch(/403.*expired/i);
      expect(missing.status!.conditions![0]!.message).toContain(`Secret ${ns}/no-such-secret not found`);
      // Auth refused, Secret missing: Stalled (needs a fix) and BLOCKED, while Succeeded stays open.
      expect(health(unauthorized)).toEqual([
        'Ready=False/ManagerAuthFailed',
        'Stalled=True/ManagerAuthFailed',
      ]);
      expect(health(missing)).toEqual(['Ready=False/SecretNotFound', 'Stalled=True/SecretNotFound']);
      expect(unauthorized.status!.phase).toBe('BLOCKED');
      const everything = JSON.stringify([
        unauthorized,
        expired,
        await events('pat-401'),
        await events('pat-403'),
      ]);
      expect(everything).not.toContain('wrong-token-value');
      expect(everything).not.toContain('expired-token-value');

      // Fixing the Secret is picked up by the retries (backoff), without touching the resource.
      oapi.addToken('wrong-token-value');
      await until('pat-401', 'True', 'JobSucceeded', 60_000);
    } finally {
      await oapi.close();
    }
  });

  it('deleteJobOnCleanup: a finalizer deletes the manager job record with the resource', async () => {
    await create('cleanup', { url: fileURL('/models/bert.mar'), deleteJobOnCleanup: true });
    const done = await until('cleanup', 'True', 'JobSucceeded');
    expect(done.metadata.finalizers).toContain('peerload.io/delete-manager-job');
    const jobID = done.status!.jobID!;
    expect(manager.jobs.has(jobID)).toBe(true);
    await preheats.deleteModelPreheat('cleanup');
    await waitFor('resource gone', () => preheats.modelPreheatGone('cleanup'));
    expect(manager.jobs.has(jobID)).toBe(false);
  });

  it('kubectl get shows type, state and job id', async () => {
    const table = (await custom.listNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace: ns, plural: PLURAL },
      k8s.setHeaderOptions('Accept', 'application/json;as=Table;v=v1;g=meta.k8s.io'),
    )) as {
      columnDefinitions: { name: string }[];
      rows: { cells: unknown[]; object: { metadata: { name: string } } }[];
    };
    const cols = table.columnDefinitions.map((c) => c.name);
    const row = table.rows.find((r) => r.cells[0] === 'file-happy')!;
    const cell = (name: string) => row.cells[cols.indexOf(name)];
    expect(cell('Type')).toBe('file');
    expect(cell('State')).toBe('SUCCESS');
    expect(typeof cell('Job')).toBe('number');
  });
});

/** Ready, Reconciling and Stalled as `type=status/reason`, in that order, the absent ones left out. */
function health(o: {
  status?: { conditions?: { type: string; status: string; reason: string }[] };
}): string[] {
  return ['Ready', 'Reconciling', 'Stalled'].flatMap((t) => {
    const c = o.status?.conditions?.find((x) => x.type === t);
    return c ? [`${t}=${c.status}/${c.reason}`] : [];
  });
}

/** GET through the peer proxy (absolute-form request line), with both filter headers. */
async function proxiedGet(
  url: string,
  filter: string[],
): Promise<{ status: number; headers: Record<string, string> }> {
  const { request } = await import('node:http');
  const proxy = new URL(peer.url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        host: proxy.hostname,
        port: proxy.port,
        method: 'GET',
        path: url,
        // What the plugin sends: without Use-P2P a daemon with stock proxy.rules would not use P2P.
        headers: {
          'X-Dragonfly-Use-P2P': 'true',
          'X-Dragonfly-Filtered-Query-Params': filter.join(','),
          'X-Dragonfly-Filter': filter.join('&'),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () =>
          resolve({ status: res.statusCode ?? 0, headers: res.headers as Record<string, string> }),
        );
      },
    );
    req.on('error', reject);
    req.end();
  });
}
