import { Pool } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { RAW_DEFAULT_FILTERED_QUERY_PARAMS, taskID } from '../../src/storage/taskid.ts';
import {
  startManagerEmulator,
  type ManagerEmulator,
  type ManagerEmulatorOptions,
} from '../support/manager-emulator.ts';
import { startOciRegistry } from '../support/oci-registry.ts';
import { peerBed } from '../support/peer-bed.ts';

const bed = peerBed('registry', () =>
  startOciRegistry({ auth: { username: 'puller', password: 'pull-secret' } }),
);
const emulators: ManagerEmulator[] = [];
const pools: Pool[] = [];

async function emulator(opts: ManagerEmulatorOptions = {}): Promise<{ m: ManagerEmulator; call: Call }> {
  const m = await startManagerEmulator({ peer: bed.peer, ...opts });
  emulators.push(m);
  const pool = new Pool(m.url, { connections: 32 });
  pools.push(pool);
  const call: Call = async (method, path, body, headers = {}) => {
    const res = await pool.request({
      method,
      path,
      headers: { 'content-type': 'application/json', ...headers },
      body: body === undefined ? null : typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await res.body.text();
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return {
      status: res.statusCode,
      headers: res.headers as Record<string, string>,
      text,
      json: json as Json,
    };
  };
  return { m, call };
}

type Json = any;
type Call = (
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  path: string,
  body?: unknown,
  headers?: Record<string, string>,
) => Promise<{ status: number; headers: Record<string, string>; text: string; json: Json }>;

afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.close()));
  await Promise.all(emulators.splice(0).map((m) => m.close()));
  bed.peer.reset();
});

describe('manager emulator: preheat really downloads', () => {
  it('image preheat resolves the manifest list for the platform and preheats every blob', async () => {
    const { m, call } = await emulator();
    const img = bed.registry.pushImage('models/resnet', 'v1', { platforms: ['linux/amd64', 'linux/arm64'] });
    const arm = img.images.find((i) => i.platform === 'linux/arm64')!;
    const res = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: {
        type: 'image',
        url: img.manifestURL,
        username: 'puller',
        password: 'pull-secret',
        platform: 'linux/arm64',
      },
    });
    expect(res.status).toBe(200);
    expect(res.json.state).toBe('PENDING');
    const job = await m.waitForJob(res.json.id);
    expect(job.state).toBe('SUCCESS');
    expect(job.internal.urls).toEqual(arm.blobURLs);
    for (const u of arm.blobURLs)
      expect(bed.peer.hasTask(taskID({ url: u, filter: RAW_DEFAULT_FILTERED_QUERY_PARAMS.split('&') }))).toBe(
        true,
      );
    expect(bed.peer.stats.originBytes).toBe(arm.bytes);
    // amd64 blobs were not downloaded.
    const amd = img.images.find((i) => i.platform === 'linux/amd64')!;
    expect(bed.registry.requests.some((r) => amd.blobURLs.some((u) => u.endsWith(r.path)))).toBe(false);

    const got = await call('GET', `/api/v1/jobs/${job.id}`);
    expect(got.json.state).toBe('SUCCESS');
    const results = got.json.result.job_states[0].results[0];
    expect(results.success_tasks.map((t: { url: string }) => t.url).sort()).toEqual([...arm.blobURLs].sort());
    expect(results.failure_tasks).toEqual([]);
    expect(results.scheduler_cluster_id).toBe(1);
  });

  it('image preheat without registry credentials ends in FAILURE with the reason', async () => {
    const { m, call } = await emulator();
    const img = bed.registry.pushImage('models/private', 'v1');
    const res = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'image', url: img.manifestURL },
    });
    const job = await m.waitForJob(res.json.id);
    expect(job.state).toBe('FAILURE');
    const got = await call('GET', `/api/v1/jobs/${job.id}`);
    expect(got.json.result.job_states[0].error).toContain('401');
  });

  it('file preheat fills defaults, downloads url + urls and reports both task lists', async () => {
    const { m, call } = await emulator();
    const blob1 = bed.registry.putBlob('files', 'file-one');
    const blob2 = bed.registry.putBlob('files', 'file-two');
    const auth = 'Basic ' + Buffer.from('puller:pull-secret').toString('base64');
    const u1 = `${bed.registry.url}/v2/files/blobs/${blob1}`;
    const u2 = `${bed.registry.url}/v2/files/blobs/${blob2}`;
    const res = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: u1, urls: [u2], headers: { Authorization: auth }, tag: 't1' },
      scheduler_cluster_ids: [1],
    });
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({
      id: 1,
      type: 'preheat',
      state: 'PENDING',
      result: null,
      bio: '',
      user_id: 0,
      scheduler_clusters: [{ id: 1, name: 'cluster-1' }],
      args: {
        scope: 'single_seed_peer',
        concurrent_task_count: 8,
        concurrent_peer_count: 500,
        timeout: 3_600_000_000_000,
        filtered_query_params: RAW_DEFAULT_FILTERED_QUERY_PARAMS,
        tag: 't1',
      },
    });
    expect(res.json.task_id).toMatch(/^group_[0-9a-f-]{36}$/);
    const job = await m.waitForJob(1);
    expect(job.state).toBe('SUCCESS');
    expect(job.internal.urls).toEqual([u1, u2]);
    expect(job.internal.taskIDs[u1]).toBe(
      taskID({ url: u1, filter: RAW_DEFAULT_FILTERED_QUERY_PARAMS.split('&'), tag: 't1' }),
    );
    expect(bed.peer.hasTask(job.internal.taskIDs[u1]!)).toBe(true);
    const second = await call('POST', '/api/v1/jobs', { type: 'preheat', args: { type: 'file', url: u1 } });
    expect(second.json.id).toBe(2);
  });

  it('accepts the legacy `filter` and can answer with `status` and the legacy args key', async () => {
    const { m, call } = await emulator({ statusField: 'status', argsDialect: 'legacy' });
    const res = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: {
        type: 'file',
        url: `${bed.registry.url}/v2/x/blobs/sha256:${'0'.repeat(64)}?Expires=1&Signature=2`,
        filter: 'Expires&Signature',
      },
    });
    expect(res.json.status).toBe('PENDING');
    expect(res.json.state).toBeUndefined();
    expect(res.json.args.filter).toBe('Expires&Signature');
    const job = await m.waitForJob(res.json.id);
    // The blob does not exist (and needs auth): the seed peer download fails, and like the real manager (v2.5.1,
    // scope single_seed_peer) the job still ends SUCCESS, with both peer lists null.
    expect(job.state).toBe('SUCCESS');
    expect(job.internal.urls).toHaveLength(1);
    const got = await call('GET', `/api/v1/jobs/${job.id}`);
    expect(got.json.status).toBe('SUCCESS');
    expect(got.json.result.job_states[0].results[0]).toMatchObject({
      success_tasks: null,
      failure_tasks: null,
    });
  });

  it('injected FAILURE, partial failure and PascalCase results', async () => {
    const { m, call } = await emulator({ resultCase: 'pascal', peers: [] });
    m.injectJobFailures(1, 'boom');
    m.injectPartialFailures(1);
    const a = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: 'http://x/a' },
    });
    const b = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: 'http://x/b' },
    });
    expect((await m.waitForJob(a.json.id)).state).toBe('FAILURE');
    expect((await m.waitForJob(b.json.id)).state).toBe('SUCCESS');
    const ga = await call('GET', `/api/v1/jobs/${a.json.id}`);
    expect(ga.json.result.JobStates[0].Error).toBe('boom');
    const gb = await call('GET', `/api/v1/jobs/${b.json.id}`);
    expect(gb.json.result.GroupUUID).toBe(gb.json.task_id);
    expect(gb.json.result.JobStates[0].Results[0].FailureTasks).toHaveLength(1);
    expect(gb.json.result.JobStates[0].Results[0].SuccessTasks[0].URL).toBe('http://x/b');
  });

  it('walks the running states with latency', async () => {
    // Each state visible for 200 ms: a loaded machine still sees every one.
    const { call } = await emulator({ peers: [], runningStates: true, jobLatencyMs: 600 });
    const res = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: 'http://x/a' },
    });
    const seen = new Set<string>();
    while (seen.size < 10) {
      const g = await call('GET', `/api/v1/jobs/${res.json.id}`);
      seen.add(g.json.state);
      if (g.json.state === 'SUCCESS') break;
      await new Promise((r) => setTimeout(r, 10));
    }
    expect([...seen]).toEqual(expect.arrayContaining(['PENDING', 'RECEIVED', 'STARTED', 'SUCCESS']));
  });
});

describe('manager emulator: contract errors', () => {
  it('answers every error row of the contract', async () => {
    const { m, call } = await emulator({ peers: [] });
    const bad = await call('POST', '/api/v1/jobs', '{not json');
    expect(bad.status).toBe(422);
    expect(typeof bad.json.errors).toBe('string');
    expect((await call('POST', '/api/v1/jobs', { type: 'nope', args: {} })).json).toEqual({
      errors: 'Unknow type',
    });
    const oneof = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'tarball', url: 'http://x' },
    });
    expect(oneof.status).toBe(422);
    expect(oneof.json.errors).toContain("'oneof'");
    const ns = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: 'http://x', timeout: '30m' },
    });
    expect(ns.status).toBe(422);
    expect(ns.json.errors).toContain('time.Duration');
    const piece = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: 'http://x', piece_length: 1024 },
    });
    expect(piece.status).toBe(422);
    expect(await call('POST', '/api/v1/jobs', { type: 'preheat', args: { type: 'file' } })).toMatchObject({
      status: 500,
      json: { message: 'invalid params: url is required' },
    });
    expect(
      await call('POST', '/api/v1/jobs', {
        type: 'preheat',
        args: { type: 'file', url: 'http://x' },
        scheduler_cluster_ids: [7],
      }),
    ).toMatchObject({ status: 404, json: { message: 'scheduler cluster id 7: record not found' } });
    expect(await call('GET', '/api/v1/jobs/99')).toMatchObject({
      status: 404,
      json: { message: 'record not found' },
    });
    expect((await call('GET', '/api/v1/jobs/abc')).status).toBe(422);

    m.injectRateLimit(1, 3);
    const limited = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: 'http://x' },
    });
    expect(limited.status).toBe(429);
    expect(limited.text).toBe('rate limit exceeded');
    expect(limited.headers['content-type']).toMatch(/^text\/plain/);
    expect(limited.headers['retry-after']).toBe('3');

    m.injectServerErrors(1, 503, 'scheduler unavailable');
    expect(await call('GET', '/api/v1/jobs')).toMatchObject({
      status: 503,
      json: { message: 'scheduler unavailable' },
    });
    expect(m.counters.creates).toBe(7);
    expect(m.jobs.size).toBe(0);
  });

  it('500 candidate schedulers not found without scheduler clusters', async () => {
    const { call } = await emulator({ peers: [], schedulerClusters: [] });
    const r = await call('POST', '/api/v1/jobs', {
      type: 'preheat',
      args: { type: 'file', url: 'http://x' },
    });
    expect(r).toMatchObject({ status: 500, json: { message: 'candidate schedulers not found' } });
  });

  it('PAT on /oapi/v1: header or query, 401 without, 403 expired / inactive / missing scope', async () => {
    const { call } = await emulator({
      peers: [],
      tokens: [
        'good',
        { token: 'old', expiresAt: Date.now() - 1000 },
        { token: 'off', active: false },
        { token: 'clusters-only', scopes: ['cluster'] },
      ],
    });
    expect(await call('GET', '/oapi/v1/jobs')).toMatchObject({
      status: 401,
      json: { message: 'Unauthorized' },
    });
    expect((await call('GET', '/oapi/v1/jobs', undefined, { authorization: 'Bearer nope' })).status).toBe(
      401,
    );
    expect((await call('GET', '/oapi/v1/jobs', undefined, { authorization: 'Bearer good' })).status).toBe(
      200,
    );
    expect((await call('GET', '/oapi/v1/jobs?access_token=good')).status).toBe(200);
    expect(await call('GET', '/oapi/v1/jobs', undefined, { authorization: 'Bearer old' })).toMatchObject({
      status: 403,
      json: { message: 'Token has expired' },
    });
    expect((await call('GET', '/oapi/v1/jobs', undefined, { authorization: 'Bearer off' })).status).toBe(403);
    expect(
      (await call('GET', '/oapi/v1/jobs', undefined, { authorization: 'Bearer clusters-only' })).status,
    ).toBe(403);
    // /api/v1 stays open (manager <= v2.4.0).
    expect((await call('GET', '/api/v1/jobs')).status).toBe(200);
  });

  it('JWT on /api/v1: sign-in, Bearer / cookie / ?token=, expiry', async () => {
    const { m, call } = await emulator({
      peers: [],
      apiAuth: 'jwt',
      users: [{ name: 'admin', password: 'pw' }],
      jwtTTLms: 300,
    });
    expect((await call('GET', '/api/v1/jobs')).status).toBe(401);
    expect((await call('POST', '/api/v1/users/signin', { name: 'admin', password: 'wrong' })).status).toBe(
      401,
    );
    const s = await call('POST', '/api/v1/users/signin', { name: 'admin', password: 'pw' });
    expect(s.status).toBe(200);
    expect(Date.parse(s.json.expire)).toBeGreaterThan(Date.now());
    const token = s.json.token as string;
    expect((await call('GET', '/api/v1/jobs', undefined, { authorization: `Bearer ${token}` })).status).toBe(
      200,
    );
    expect((await call('GET', '/api/v1/jobs', undefined, { cookie: `jwt=${token}` })).status).toBe(200);
    expect((await call('GET', `/api/v1/jobs?token=${token}`)).status).toBe(200);
    const created = await call(
      'POST',
      '/api/v1/jobs',
      { type: 'preheat', args: { type: 'file', url: 'http://x' } },
      { authorization: `Bearer ${token}` },
    );
    expect(created.json.user_id).toBe(1);
    await new Promise((r) => setTimeout(r, 350));
    expect(await call('GET', '/api/v1/jobs', undefined, { authorization: `Bearer ${token}` })).toMatchObject({
      status: 401,
      json: { message: 'Token is expired' },
    });
    expect(m.counters.signIns).toBe(2);
  });
});

describe('manager emulator: list, patch, delete, downtime, scale', () => {
  it('lists with a Link header, patches and deletes', async () => {
    const { call } = await emulator({ peers: [] });
    for (let i = 0; i < 25; i++)
      await call('POST', '/api/v1/jobs', { type: 'preheat', args: { type: 'file', url: `http://x/${i}` } });
    const page2 = await call('GET', '/api/v1/jobs?page=2&per_page=10&type=preheat');
    expect(page2.status).toBe(200);
    expect(page2.json).toHaveLength(10);
    expect(page2.json[0].id).toBe(15);
    expect(page2.headers['link']).toBe(
      '</api/v1/jobs?page=1&per_page=10&type=preheat>;rel=prev,</api/v1/jobs?page=3&per_page=10&type=preheat>;rel=next,' +
        '</api/v1/jobs?page=1&per_page=10&type=preheat>;rel=first,</api/v1/jobs?page=3&per_page=10&type=preheat>;rel=last',
    );
    const patched = await call('PATCH', '/api/v1/jobs/3', { bio: 'hello' });
    expect(patched.json.bio).toBe('hello');
    const del = await call('DELETE', '/api/v1/jobs/3');
    expect(del.status).toBe(200);
    expect(del.text).toBe('');
    expect((await call('GET', '/api/v1/jobs/3')).status).toBe(404);
    expect((await call('DELETE', '/api/v1/jobs/3')).status).toBe(404);
  });

  it('goes down and comes back on the same port with its state', async () => {
    const { m, call } = await emulator({ peers: [] });
    await call('POST', '/api/v1/jobs', { type: 'preheat', args: { type: 'file', url: 'http://x' } });
    const port = m.port;
    await m.stop();
    await expect(call('GET', '/api/v1/jobs/1')).rejects.toThrow();
    await m.start();
    expect(m.port).toBe(port);
    expect((await call('GET', '/api/v1/jobs/1')).json.id).toBe(1);
  });

  it('handles 1,000 jobs quickly and counts requests per route', async () => {
    const { m, call } = await emulator({ peers: [] });
    const started = Date.now();
    const ids = await Promise.all(
      Array.from({ length: 1000 }, async (_, i) => {
        const r = await call('POST', '/api/v1/jobs', {
          type: 'preheat',
          args: { type: 'file', url: `http://x/${i}` },
        });
        return r.json.id as number;
      }),
    );
    await Promise.all(ids.map((id) => m.waitForJob(id)));
    await Promise.all(ids.map((id) => call('GET', `/api/v1/jobs/${id}`)));
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(new Set(ids).size).toBe(1000);
    expect([...m.jobs.values()].every((j) => j.state === 'SUCCESS')).toBe(true);
    expect(m.counters.creates).toBe(1000);
    expect(m.counters.gets).toBe(1000);
    expect(m.counters.byRoute['POST /api/v1/jobs']).toBe(1000);
    expect(m.counters.byRoute['GET /api/v1/jobs/:id']).toBe(1000);
  });
});
