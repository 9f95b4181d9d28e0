import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createModelServerPool } from '../../src/servers/pools.ts';
import { ModelServerClient } from '../../src/servers/torchserve/client.ts';
import { readyWorkers } from '../../src/servers/torchserve/workers.ts';
import { type PeerProxy, startPeerProxy } from '../support/peer-proxy.ts';
import {
  type ModelServerEmulator,
  type ModelServerEmulatorOptions,
  startModelServerEmulator,
  startModelServerFleet,
} from '../support/modelserver-emulator.ts';

const agent = createModelServerPool({ connections: 2 });
const started: Array<{ close(): Promise<void> }> = [];

async function emulator(opts: ModelServerEmulatorOptions = {}): Promise<ModelServerEmulator> {
  const emu = await startModelServerEmulator(opts);
  started.push(emu);
  return emu;
}
const client = (url: string, token?: string) =>
  new ModelServerClient({ baseURL: url, dispatcher: agent, timeoutMs: 10_000, ...(token ? { token } : {}) });

afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
});
afterAll(() => agent.close());

describe('fleet', () => {
  it('100 instances start and all answer register + scale + describe within a few seconds', async () => {
    const t0 = Date.now();
    const fleet = await startModelServerFleet(100, { workerStartMs: 0 });
    started.push(fleet);
    expect(fleet.urls).toHaveLength(100);
    expect(new Set(fleet.urls).size).toBe(100);
    const startMs = Date.now() - t0;

    await Promise.all(
      fleet.urls.map(async (url) => {
        const c = client(url);
        await c.register({ fileName: 'bert.mar' });
        await c.scale('bert', undefined, { minWorker: 1 });
      }),
    );
    const ready = await Promise.all(
      fleet.urls.map(async (url) => readyWorkers(await client(url).describe('bert'))),
    );
    expect(ready).toEqual(Array(100).fill(1));
    const totalMs = Date.now() - t0;
    expect(startMs).toBeLessThan(3_000);
    expect(totalMs).toBeLessThan(8_000);

    const stats = fleet.stats();
    expect(stats.registrations).toBe(100);
    expect(stats.scales).toBe(100);
    expect(stats.requests['POST /{plugin}/models']).toBe(100);
    expect(stats.requests['GET /models/{name}']).toBe(100);
    // Each instance is its own process: state is not shared.
    expect(fleet.instances[7]!.stats.registrations).toBe(1);
  });

  it('per-instance options: registration latency applies (benchmarks use 200 ms)', async () => {
    const fleet = await startModelServerFleet(3, (i) => ({ registrationLatencyMs: i === 0 ? 200 : 0 }));
    started.push(fleet);
    const t0 = Date.now();
    await client(fleet.urls[0]!).register({ fileName: 'slow.mar' });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(195);
    const t1 = Date.now();
    await client(fleet.urls[1]!).register({ fileName: 'fast.mar' });
    expect(Date.now() - t1).toBeLessThan(150);
  });
});

describe('state', () => {
  it('wipe() is a restarted process: models gone, optionally new keys', async () => {
    const emu = await emulator({ auth: true });
    const key = emu.keys()!.management;
    const c = client(emu.url, key);
    await c.register({ fileName: 'w.mar' });
    expect(await c.listModels()).toHaveLength(1);
    emu.wipe();
    expect(await c.listModels()).toEqual([]);
    expect(await c.describeIfPresent('w')).toBeNull();
    await c.register({ fileName: 'w.mar' }); // registrable again, no 409
    emu.wipe({ rotateKeys: true });
    expect(emu.keys()!.management).not.toBe(key);
    const err = await c.listModels().catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'auth' });
  });

  it('model API gate: POST /models and DELETE answer 405 when disabled, plugins still work', async () => {
    const off = await emulator({ enableModelApi: false });
    const post = await request(`${off.url}/models?url=x.mar`, { method: 'POST' });
    expect(post.statusCode).toBe(405);
    expect(await post.body.json()).toEqual({
      code: 405,
      type: 'MethodNotAllowedException',
      message: 'Requested method is not allowed, please refer to API document.',
    });
    const on = await emulator();
    const ok = await request(`${on.url}/models?url=x.mar`, { method: 'POST' });
    expect(ok.statusCode).toBe(200);
    expect(await ok.body.json()).toEqual({
      status:
        'Model "x" Version: 1.0 registered with 0 initial workers. Use scale workers API to add workers for the model.',
    });
  });
});

describe('wire format', () => {
  it("scale answers 202 with TorchServe's no-cache headers", async () => {
    const emu = await emulator();
    await client(emu.url).register({ fileName: 'h.mar' });
    const res = await request(`${emu.url}/models/h?min_worker=1`, { method: 'PUT' });
    const text = await res.body.text();
    expect(res.statusCode).toBe(202);
    expect(JSON.parse(text)).toEqual({ status: 'Processing worker updates...' });
    expect(res.headers['content-type']).toBe('application/json');
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    expect(res.headers['pragma']).toBe('no-cache');
    expect(res.headers['cache-control']).toBe('no-cache; no-store, must-revalidate, private');
    expect(Date.parse(String(res.headers['expires']))).toBeLessThan(Date.now());
    expect(res.headers['content-length']).toBe(String(Buffer.byteLength(text)));
    expect(res.headers['connection']).toBe('keep-alive');
  });

  it('errors are {"code","type","message"} with Connection: close; unknown paths are 404', async () => {
    const emu = await emulator();
    const res = await request(`${emu.url}/models/ghost`);
    expect(res.statusCode).toBe(404);
    expect(res.headers['connection']).toBe('close');
    expect(await res.body.json()).toEqual({
      code: 404,
      type: 'ModelNotFoundException',
      message: 'Model not found: ghost',
    });
    const other = await request(`${emu.url}/nothing/here`);
    expect(other.statusCode).toBe(404);
    expect(((await other.body.json()) as { type: string }).type).toBe('ResourceNotFoundException');
  });

  it('token auth: InvalidKeyException 400 body, /token rotates with the API key and answers an empty 200', async () => {
    const emu = await emulator({ auth: { managementKey: 'mk-000001', apiKey: 'ak-000001' } });
    const denied = await request(`${emu.url}/models`, { headers: { authorization: 'Bearer nope' } });
    expect(denied.statusCode).toBe(400);
    expect(await denied.body.json()).toEqual({
      code: 400,
      type: 'InvalidKeyException',
      message: 'Token Authorization failed. Token either incorrect, expired, or not provided correctly',
    });
    const withMgmt = await request(`${emu.url}/token?type=management`, {
      headers: { authorization: 'Bearer mk-000001' },
    });
    expect(withMgmt.statusCode).toBe(400);
    await withMgmt.body.dump();

    const rotated = await request(`${emu.url}/token?type=management`, {
      headers: { authorization: 'Bearer ak-000001' },
    });
    expect(rotated.statusCode).toBe(200);
    expect(await rotated.body.text()).toBe('');
    const file = JSON.parse(emu.keyFile()!);
    expect(file.API.key).toBe('ak-000001');
    expect(file.management.key).not.toBe('mk-000001');
    expect(file.management['expiration time']).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    expect(Object.keys(file)).toEqual(['management', 'inference', 'API']);
    const old = await request(`${emu.url}/models`, { headers: { authorization: 'Bearer mk-000001' } });
    expect(old.statusCode).toBe(400);
    await old.body.dump();
    expect((await client(emu.url, file.management.key).listModels()).length).toBe(0);
    expect(emu.stats.tokenRotations).toBe(1);
    expect(emu.stats.requests['GET /token']).toBe(2);
  });

  it('failure injection: HTTP errors limited by times and routes; down refuses connections', async () => {
    const emu = await emulator();
    await emu.inject({ mode: 'error', status: 503, routes: ['GET /models/{name}'], times: 2 });
    expect((await request(`${emu.url}/models`)).statusCode).toBe(200);
    const a = await request(`${emu.url}/models/x`);
    expect(a.statusCode).toBe(503);
    await a.body.dump();
    expect((await request(`${emu.url}/models/x`)).statusCode).toBe(503);
    expect((await request(`${emu.url}/models/x`)).statusCode).toBe(404);
    expect(emu.stats.injectedFailures).toBe(2);

    await emu.inject({ mode: 'down' });
    await expect(request(`${emu.url}/models`)).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    await emu.inject(undefined);
    expect((await request(`${emu.url}/models`)).statusCode).toBe(200);
  });
});

describe('plugin download through the peer proxy', () => {
  let origin: Server;
  let originURL: string;
  let originHits = 0;
  let proxy: PeerProxy;
  const object = Buffer.alloc(256 * 1024, 7);

  beforeAll(async () => {
    origin = createServer((req, res) => {
      originHits++;
      if (!req.url?.startsWith('/bucket/models/')) {
        res.statusCode = 404;
        res.end('NoSuchKey');
        return;
      }
      res.setHeader('content-length', object.length);
      res.end(object);
    });
    await new Promise<void>((r) => origin.listen(0, '127.0.0.1', r));
    originURL = `http://127.0.0.1:${(origin.address() as AddressInfo).port}`;
    proxy = await startPeerProxy();
  });
  afterAll(async () => {
    await proxy.close();
    await new Promise<void>((r) => origin.close(() => r()));
  });

  it('GETs the signed object URL through the proxy with both filter headers; a second replica is a cache hit', async () => {
    let signature = 0;
    const opts: ModelServerEmulatorOptions = {
      proxyURL: proxy.url,
      // A fresh signature on every signing: only the filter makes the task ids equal.
      objectURL: (f) =>
        `${originURL}/bucket/${f}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20250101T000000Z&X-Amz-Signature=${++signature}`,
      tag: 'peerload',
      application: 'torchserve',
    };
    const first = await emulator(opts);
    const second = await emulator(opts);
    const before = proxy.requests.length;
    originHits = 0;

    const r1 = await client(first.url).register({ fileName: 'models/bert.mar' });
    expect(r1.modelName).toBe('bert');
    const seen = proxy.requests.slice(before);
    expect(seen).toHaveLength(1);
    const rec = seen[0]!;
    expect(rec.url).toBe(
      `${originURL}/bucket/models/bert.mar?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Date=20250101T000000Z&X-Amz-Signature=1`,
    );
    const h = Object.fromEntries(Object.entries(rec.headers).map(([k, v]) => [k.toLowerCase(), v]));
    expect(h['x-dragonfly-filtered-query-params']).toBe(
      'X-Amz-Algorithm,X-Amz-Credential,X-Amz-Date,X-Amz-Expires,X-Amz-SignedHeaders,X-Amz-Signature,X-Amz-Security-Token',
    );
    expect(h['x-dragonfly-filter']).toBe(
      'X-Amz-Algorithm&X-Amz-Credential&X-Amz-Date&X-Amz-Expires&X-Amz-SignedHeaders&X-Amz-Signature&X-Amz-Security-Token',
    );
    expect(h['x-dragonfly-tag']).toBe('peerload');
    expect(h['x-dragonfly-application']).toBe('torchserve');
    expect(h['x-dragonfly-use-p2p']).toBe('true');
    expect(first.downloads[0]).toMatchObject({ viaProxy: true, status: 200, bytes: object.length });
    expect(r1.taskID).toBe(rec.taskID);
    expect(r1.taskID).toMatch(/^[0-9a-f]{64}$/);
    expect(r1.localHit).toBe(false); // LocalHit: false (CacheHit is sent only on a hit)

    const r2 = await client(second.url).register({ fileName: 'models/bert.mar' });
    expect(r2.taskID).toBe(r1.taskID);
    expect(r2.localHit).toBe(true);
    expect(originHits).toBe(1);
    expect(second.stats.downloadBytes).toBe(object.length);
  });

  it('an object missing at the origin is a p2p 404 and no model is registered', async () => {
    const emu = await emulator({ proxyURL: proxy.url, objectURL: (f) => `${originURL}/elsewhere/${f}` });
    const err = await client(emu.url)
      .register({ fileName: 'nope.mar' })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'notFound', status: 404 });
    expect(emu.modelNames()).toEqual([]);
  });

  it('a dead proxy is a retryable 502 with X-Dragonfly-Error-Type', async () => {
    const emu = await emulator({
      proxyURL: 'http://127.0.0.1:9',
      objectURL: (f) => `${originURL}/bucket/${f}`,
    });
    const raw = await request(`${emu.url}/p2p/models?file_name=models/x.mar`, { method: 'POST' });
    expect(raw.statusCode).toBe(502);
    expect(raw.headers['x-dragonfly-error-type']).toBe('proxy');
    await raw.body.dump();
    const err = await client(emu.url)
      .register({ fileName: 'models/x.mar' })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ kind: 'retryable', status: 502, serverType: 'DownloadArchiveException' });
  });
});
