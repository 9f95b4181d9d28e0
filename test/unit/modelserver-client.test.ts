import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent, request } from 'undici';
import { ReplicaEndpoint } from '../../src/servers/endpoint.ts';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createModelServerPool } from '../../src/servers/pools.ts';
import { parseInstant, parseKeyFile, secretToken } from '../../src/servers/torchserve/auth.ts';
import { ModelServerClient } from '../../src/servers/torchserve/client.ts';
import { extractPluginStatus, parseRegisteredMessage } from '../../src/servers/torchserve/wire.ts';
import { readyWorkers, workerCounts } from '../../src/servers/torchserve/workers.ts';
import { kindForStatus as httpKind } from '../../src/http/classify.ts';
import {
  ModelServerError,
  TORCHSERVE_STATUS_EXCEPTIONS,
  isModelServerError,
} from '../../src/servers/torchserve/errors.ts';

const kindForStatus = (status: number, type?: string) => httpKind(status, type, TORCHSERVE_STATUS_EXCEPTIONS);
import {
  type ModelServerEmulator,
  type ModelServerEmulatorOptions,
  startModelServerEmulator,
} from '../support/modelserver-emulator.ts';

const agent = createModelServerPool();
const started: Array<{ close(): Promise<void> }> = [];

async function emulator(opts: ModelServerEmulatorOptions = {}): Promise<ModelServerEmulator> {
  const emu = await startModelServerEmulator(opts);
  started.push(emu);
  return emu;
}

function client(
  emu: { url: string },
  extra: Partial<ConstructorParameters<typeof ModelServerClient>[0]> = {},
) {
  return new ModelServerClient({ baseURL: emu.url, dispatcher: agent, timeoutMs: 5_000, ...extra });
}

async function failure(p: Promise<unknown>): Promise<ModelServerError> {
  try {
    await p;
  } catch (e) {
    if (isModelServerError(e)) return e;
    throw e;
  }
  throw new Error('expected a ModelServerError, the call succeeded');
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
});
afterAll(async () => {
  await agent.close();
});

const SEED_MESSAGE = (name: string, version = '1.0') =>
  `Model "${name}" Version: ${version} registered with 0 initial workers. Use scale workers API to add workers for the model.`;

describe('register', () => {
  it('registers through the p2p plugin with every parameter and 0 workers', async () => {
    const emu = await emulator({ modelVersion: '2.1' });
    const res = await client(emu).register({
      fileName: 'models/resnet-18.mar',
      handler: 'image_classifier',
      runtime: 'python',
      batchSize: 4,
      maxBatchDelay: 50,
      responseTimeout: 30,
      startupTimeout: 90,
    });
    expect(res).toMatchObject({
      httpStatus: 200,
      status: SEED_MESSAGE('resnet-18', '2.1'),
      modelName: 'resnet-18',
      version: '2.1',
      initialWorkers: 0,
      workersPending: false,
    });
    const [m] = emu.model('resnet-18');
    expect(m).toMatchObject({
      handler: 'image_classifier',
      batchSize: 4,
      maxBatchDelay: 50,
      responseTimeout: 30,
    });
    expect(m?.startupTimeout).toBe(90);
    expect(emu.stats.requests['POST /{plugin}/models']).toBe(1);
  });

  it('uses model_name and reports pending workers on 202 when initial workers are asked for', async () => {
    const emu = await emulator({ workerStartMs: 10_000 });
    const res = await client(emu).register({
      fileName: 'a.mar',
      modelName: 'alpha',
      initialWorkers: 2,
      synchronous: false,
    });
    expect(res).toMatchObject({
      httpStatus: 202,
      workersPending: true,
      modelName: 'alpha',
      initialWorkers: 2,
    });
    expect(emu.model('alpha')[0]?.workers).toHaveLength(2);
  });

  it('a POST while the plugin downloads the same archive is inProgress (202 DownloadInProgress), not an error', async () => {
    const emu = await emulator({ registrationLatencyMs: 300 });
    const c = client(emu);
    const first = c.register({ fileName: 'models/tiny.mar' });
    await sleep(50);
    const second = await c.register({ fileName: 'models/tiny.mar' });
    expect(second).toMatchObject({ httpStatus: 202, inProgress: true, workersPending: false });
    expect(second.status).toContain('in progress');
    expect((await first).inProgress).toBeUndefined();
    expect(emu.stats.pluginRegistrationsStarted).toBe(1);
    // Once the first is done the next POST is answered by the model server: already registered.
    expect((await failure(c.register({ fileName: 'models/tiny.mar' }))).kind).toBe('conflict');
  });

  it("maps a duplicate registration to a conflict with the server type, in our words (the server's text is not quoted)", async () => {
    const emu = await emulator();
    const c = client(emu);
    await c.register({ fileName: 'dup.mar' });
    const err = await failure(c.register({ fileName: 'dup.mar' }));
    expect(err.kind).toBe('conflict');
    expect(err.status).toBe(409);
    expect(err.serverType).toBe('ConflictStatusException');
    expect(err.serverMessage).toBe('the server reports a conflict');
    expect(err.endpoint).toBe(emu.url);
  });

  it('a p2p 404 (object missing) is notFound, and url= is a terminal bad request', async () => {
    const origin = await emulator(); // any server answering 404 for unknown paths serves as a missing object
    const emu = await emulator({ objectURL: (f) => `${origin.url}/bucket/${f}` });
    const err = await failure(client(emu).register({ fileName: 'missing.mar' }));
    expect(err.kind).toBe('notFound');
    expect(err.status).toBe(404);
    const raw = await request(`${emu.url}/p2p/models?file_name=x.mar&url=http://elsewhere/x.mar`, {
      method: 'POST',
    });
    expect(raw.statusCode).toBe(400);
    const body = (await raw.body.json()) as { Status: string };
    expect(body.Status).toMatch(/url/);
  });

  it('old dragonfly plugin: success body is invalid JSON and is still recognised', async () => {
    const emu = await emulator();
    const raw = await request(`${emu.url}/dragonfly/models?file_name=probe.mar`, { method: 'POST' });
    const text = await raw.body.text();
    expect(raw.statusCode).toBe(200);
    expect(() => JSON.parse(text)).toThrow();
    expect(text).toContain('Model "probe" Version: 1.0 registered');

    const res = await client(emu, { pluginPath: 'dragonfly' }).register({ fileName: 'squeezenet.mar' });
    expect(res).toMatchObject({
      httpStatus: 200,
      modelName: 'squeezenet',
      version: '1.0',
      workersPending: false,
    });
  });

  it('old dragonfly plugin: a 200 carrying a failure is an error, never a success', async () => {
    const emu = await emulator({ objectURL: () => 'http://127.0.0.1:9/never' });
    const c = client(emu, { pluginPath: 'dragonfly' });
    const dl = await failure(c.register({ fileName: 'quoted.mar' }));
    expect(dl.status).toBe(200);
    expect(dl.code).toBe('PLUGIN_FAILURE');
    expect(dl.kind).toBe('retryable');
    expect(dl.serverMessage).toContain('Failed to download model file "quoted.mar"');
    expect(emu.modelNames()).toEqual([]);

    const emu2 = await emulator();
    const c2 = client(emu2, { pluginPath: 'dragonfly' });
    await c2.register({ fileName: 'twice.mar' });
    const dup = await failure(c2.register({ fileName: 'twice.mar' }));
    expect(dup).toMatchObject({ kind: 'conflict', status: 200, serverType: 'ConflictStatusException' });
  });

  it('old dragonfly plugin on TorchServe 0.12: NoSuchMethodError 500 is retryable with the server type', async () => {
    const emu = await emulator({ legacyPluginSignatureMismatch: true });
    const err = await failure(client(emu, { pluginPath: 'dragonfly' }).register({ fileName: 'x.mar' }));
    expect(err).toMatchObject({ kind: 'retryable', status: 500, serverType: 'NoSuchMethodError' });
  });

  describe('against a misbehaving server', () => {
    let server: Server;
    let url: string;
    let next: { status: number; body: string } = { status: 200, body: '' };
    beforeAll(async () => {
      server = createServer((_req, res) => {
        res.statusCode = next.status;
        res.end(next.body);
      });
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    afterAll(() => new Promise<void>((r) => server.close(() => r())));

    it('a 200 whose Status is not the registration message is an error', async () => {
      next = { status: 200, body: '{"Status": "Something went wrong"}' };
      const err = await failure(client({ url }).register({ fileName: 'a.mar' }));
      expect(err).toMatchObject({
        status: 200,
        code: 'PLUGIN_FAILURE',
        serverMessage: 'Something went wrong',
      });
    });

    it('a 200 with garbage is an invalid response (retryable, as in the manager client: src/http/classify.ts)', async () => {
      next = { status: 200, body: '<html>hello</html>' };
      const err = await failure(client({ url }).register({ fileName: 'a.mar' }));
      expect(err).toMatchObject({ kind: 'retryable', code: 'INVALID_RESPONSE', status: 200 });
      next = { status: 200, body: '{"other": 1}' };
      const err2 = await failure(client({ url }).register({ fileName: 'a.mar' }));
      expect(err2.code).toBe('INVALID_RESPONSE');
    });

    it("quotes none of the server's text: an address behind a Service may be anything the operator reaches", async () => {
      const planted = ['AKIAPLANTEDMETADATA7', 'metadata-token-xyz'];
      const line = planted.join(' ');
      const quiet = (e: Error) => {
        for (const p of planted) expect(`${e.message} ${JSON.stringify(e)}`).not.toContain(p);
      };
      for (const [status, body] of [
        [500, JSON.stringify({ code: 500, type: planted[0], message: line })],
        [404, `${line}\nsecond line`],
        [200, `${line}\n`],
        [200, JSON.stringify({ other: line })],
      ] as const) {
        next = { status, body };
        const err = await failure(client({ url }).register({ fileName: 'a.mar' }));
        expect(err.status).toBe(status);
        expect(err.serverType).toBeUndefined();
        quiet(err);
        next = { status, body };
        quiet(await failure(client({ url }).describe('x')));
      }
      // A type TorchServe documents is kept.
      next = {
        status: 404,
        body: JSON.stringify({ code: 404, type: 'ModelNotFoundException', message: line }),
      };
      const known = await failure(client({ url }).describe('x'));
      expect(known.message).toContain('ModelNotFoundException: the server has no such resource');
      quiet(known);
    });

    it("vLLM, OIP servers and the agent: no server text quoted, but the agent's own error shape", async () => {
      const planted = ['AKIAPLANTEDMETADATA7', 'metadata-token-xyz'];
      const line = planted.join(' ');
      const dispatcher = new Agent();
      const endpoint = (role: string) =>
        new ReplicaEndpoint({ baseURL: url, role, dispatcher, defaultTimeoutMs: 5_000 });
      const call = async (role: string) => {
        const e = endpoint(role);
        return e.failure('load m', await e.send('load m', 'POST', '/x', undefined, {}));
      };
      try {
        for (const body of [
          `${line}\nsecond line`,
          JSON.stringify({ error: line }),
          JSON.stringify({ error: { message: line, type: planted[0], code: 500 } }),
          JSON.stringify({ error: { reason: planted[0], message: line } }),
        ])
          for (const role of ['vLLM', 'model server', 'agent']) {
            next = { status: 500, body };
            const err = await call(role);
            expect(err.message).toContain('HTTP 500): the server failed');
            for (const p of planted) expect(`${err.message} ${JSON.stringify(err)}`).not.toContain(p);
          }
        // The agent's own answer (a reason word and its message) is kept; another server's in that shape is not.
        next = {
          status: 409,
          body: JSON.stringify({ error: { reason: 'DiskBudgetExceeded', message: 'needs 9 bytes' } }),
        };
        expect((await call('agent')).message).toContain('DiskBudgetExceeded: needs 9 bytes');
        next = {
          status: 409,
          body: JSON.stringify({ error: { reason: 'DiskBudgetExceeded', message: 'needs 9 bytes' } }),
        };
        expect((await call('vLLM')).message).not.toContain('needs 9 bytes');
      } finally {
        await dispatcher.close();
      }
    });

    it('describe rejects a body that is not an array of descriptions', async () => {
      next = { status: 200, body: '{"modelName": "x"}' };
      const err = await failure(client({ url }).describe('x'));
      expect(err).toMatchObject({ kind: 'retryable', code: 'INVALID_RESPONSE' });
    });

    it('a response larger than maxResponseBytes is refused', async () => {
      next = { status: 200, body: `[${'"x",'.repeat(10_000)}"x"]` };
      const err = await failure(client({ url }, { maxResponseBytes: 1024 }).describe('x'));
      expect(err.code).toBe('RESPONSE_TOO_LARGE');
    });
  });
});

describe('describe, list, scale, set-default, unregister', () => {
  it('describe is an array; workers show UNLOADING, then READY; the helpers count READY only', async () => {
    const emu = await emulator({ workerStartMs: 300 });
    const c = client(emu);
    await c.register({ fileName: 'm.mar' });
    let d = await c.describe('m');
    expect(Array.isArray(d)).toBe(true);
    expect(d).toHaveLength(1);
    expect(d[0]).toMatchObject({ modelName: 'm', modelVersion: '1.0', minWorkers: 0, workers: [] });

    const s = await c.scale('m', undefined, { minWorker: 3, maxWorker: 3 });
    expect(s).toEqual({ httpStatus: 202, status: 'Processing worker updates...', state: 'accepted' });
    d = await c.describe('m');
    expect(d[0]?.workers.map((w) => w.status)).toEqual(['UNLOADING', 'UNLOADING', 'UNLOADING']);
    expect(workerCounts(d)).toEqual({ ready: 0, notReady: 3, total: 3 });
    await sleep(350);
    d = await c.describe('m');
    expect(readyWorkers(d)).toBe(3);
    expect(readyWorkers(d[0]!)).toBe(3);
    expect(readyWorkers(d, '9.9')).toBe(0);
    expect(d[0]).toMatchObject({ minWorkers: 3, maxWorkers: 3 });
  });

  it('describe of an absent model is notFound; describeIfPresent gives null', async () => {
    const emu = await emulator();
    const c = client(emu);
    const err = await failure(c.describe('nope'));
    expect(err).toMatchObject({
      kind: 'notFound',
      status: 404,
      serverType: 'ModelNotFoundException',
      serverMessage: 'the server has no such resource',
    });
    expect(await c.describeIfPresent('nope')).toBeNull();
    await c.register({ fileName: 'yes.mar' });
    expect(await c.describeIfPresent('yes')).toHaveLength(1);
  });

  it('versions: describe all, set-default, unregister refuses the default while others exist', async () => {
    let version = '1.0';
    const emu = await emulator({ modelVersion: () => version });
    const c = client(emu);
    await c.register({ fileName: 'v.mar' });
    version = '2.0';
    await c.register({ fileName: 'v.mar' });
    const all = await c.describe('v', 'all');
    expect(all.map((d) => d.modelVersion).sort()).toEqual(['1.0', '2.0']);
    expect((await c.describe('v', '2.0'))[0]?.modelVersion).toBe('2.0');
    expect((await c.describe('v'))[0]?.modelVersion).toBe('1.0');

    const forbidden = await failure(c.unregister('v', '1.0'));
    expect(forbidden).toMatchObject({
      kind: 'terminal',
      status: 403,
      serverType: 'InvalidModelVersionException',
    });

    const sd = await c.setDefault('v', '2.0');
    expect(sd.status).toBe('Default vesion succsesfully updated for model "v" to "2.0"');
    expect(emu.defaultVersion('v')).toBe('2.0');
    const missing = await failure(c.setDefault('v', '3.0'));
    expect(missing).toMatchObject({ kind: 'notFound', serverType: 'ModelVersionNotFoundException' });

    expect((await c.unregister('v', '1.0')).status).toBe('Model "v" unregistered');
    expect((await c.unregister('v')).httpStatus).toBe(200);
    expect(emu.modelNames()).toEqual([]);
    expect((await failure(c.unregister('v'))).kind).toBe('notFound');
  });

  it('unregister with the model API disabled is a terminal 405', async () => {
    const emu = await emulator({ enableModelApi: false });
    const c = client(emu);
    await c.register({ fileName: 'g.mar' }); // plugins are dispatched before the gate
    const err = await failure(c.unregister('g'));
    expect(err).toMatchObject({ kind: 'terminal', status: 405, serverType: 'MethodNotAllowedException' });
  });

  it('scale: synchronous 200 and 206, bad bounds 400, unknown model 404', async () => {
    const emu = await emulator({ workerStartMs: 100, syncScaleWaitMs: 1_000 });
    const c = client(emu);
    await c.register({ fileName: 's.mar' });
    const sync = await c.scale('s', undefined, { minWorker: 1, synchronous: true });
    expect(sync).toEqual({ httpStatus: 200, status: 'Workers scaled to 1 for model: s', state: 'scaled' });
    expect(readyWorkers(await c.describe('s'))).toBe(1);

    const slow = await emulator({ workerStartMs: 5_000, syncScaleWaitMs: 50 });
    await client(slow).register({ fileName: 's.mar' });
    const partial = await client(slow).scale('s', '1.0', { minWorker: 2, synchronous: true });
    expect(partial).toMatchObject({
      httpStatus: 206,
      state: 'inProgress',
      status: 'Workers scaling in progress...',
    });

    const bad = await failure(c.scale('s', undefined, { minWorker: 3, maxWorker: 1 }));
    expect(bad).toMatchObject({
      kind: 'terminal',
      status: 400,
      serverMessage: 'the server refused the request as invalid (its own log says why)',
    });
    expect((await failure(c.scale('zzz', undefined, { minWorker: 1 }))).kind).toBe('notFound');
    await expect(c.scale('s', undefined, { minWorker: -1 })).rejects.toThrow(TypeError);
  });

  it("listModels follows nextPageToken, including TorchServe's empty page after an exactly full one", async () => {
    const emu = await emulator();
    const c = client(emu);
    const names = Array.from({ length: 200 }, (_, i) => `m${String(i).padStart(3, '0')}`);
    for (let i = 0; i < names.length; i += 20) {
      await Promise.all(names.slice(i, i + 20).map((n) => c.register({ fileName: `${n}.mar` })));
    }
    const first = await c.listModelsPage({ limit: 100 });
    expect(first.models).toHaveLength(100);
    expect(first.nextPageToken).toBe('100');
    emu.resetStats();
    const all = await c.listModels();
    expect(all.map((m) => m.modelName)).toEqual(names);
    expect(emu.stats.requests['GET /models']).toBe(3); // 100 + 100 (token "200") + empty page
    await c.register({ fileName: 'zzz.mar' });
    expect(await c.listModels()).toHaveLength(201);
  });
});

describe('error mapping', () => {
  it('kindForStatus follows the contract table', () => {
    expect(kindForStatus(400, 'InvalidKeyException')).toBe('auth');
    expect(kindForStatus(400, 'BadRequestException')).toBe('terminal');
    expect(kindForStatus(404)).toBe('notFound');
    expect(kindForStatus(409)).toBe('conflict');
    for (const s of [408, 500, 502, 503, 507]) expect(kindForStatus(s)).toBe('retryable');
    for (const s of [400, 403, 405, 413]) expect(kindForStatus(s)).toBe('terminal');
  });

  it('injected 5xx / 408 answers are retryable and keep the server type, never its message', async () => {
    const emu = await emulator();
    const c = client(emu);
    for (const [status, type] of [
      [503, 'ServiceUnavailableException'],
      [507, 'OutOfMemoryError'],
      [408, 'RequestTimeoutException'],
      [500, 'InternalServerException'],
    ] as const) {
      await emu.inject({ mode: 'error', status, message: `boom ${status}`, times: 1 });
      const err = await failure(c.listModels());
      expect(err).toMatchObject({
        kind: 'retryable',
        status,
        serverType: type,
        serverMessage:
          status === 408 ? 'the server asks to try again later' : 'the server failed (its own log says why)',
      });
      expect(err.message).not.toContain('boom');
      expect(err.message).toContain(`HTTP ${status}`);
    }
    expect(await c.listModels()).toEqual([]); // `times: 1` used up
  });

  it('a server that is down is a retryable network error; it answers again once back', async () => {
    const emu = await emulator();
    const c = client(emu);
    await emu.inject({ mode: 'down' });
    const err = await failure(c.describe('x'));
    expect(err).toMatchObject({ kind: 'retryable', status: 0, code: 'ECONNREFUSED' });
    await emu.inject(undefined);
    expect(await c.listModels()).toEqual([]);
  });

  it('a slow server hits the per-request time-out (retryable TIMEOUT)', async () => {
    const emu = await emulator();
    await emu.inject({ mode: 'slow', delayMs: 1_000 });
    const t0 = Date.now();
    const err = await failure(client(emu, { timeoutMs: 150 }).listModels());
    expect(err).toMatchObject({ kind: 'retryable', code: 'TIMEOUT', status: 0 });
    expect(Date.now() - t0).toBeLessThan(900);
    // The per-call override wins.
    const ok = await client(emu, { timeoutMs: 150 }).listModels({ timeoutMs: 3_000 });
    expect(ok).toEqual([]);
  });

  it("a caller's abort is passed through, not turned into a model-server error", async () => {
    const emu = await emulator();
    await emu.inject({ mode: 'slow', delayMs: 1_000 });
    const ac = new AbortController();
    const p = client(emu).listModels({ signal: ac.signal });
    setTimeout(() => ac.abort(new Error('stop now')), 50);
    await expect(p).rejects.toThrow('stop now');
  });
});

describe('token authorization', () => {
  it('a fixed key works; a wrong or missing key is an auth error without the key in it', async () => {
    const emu = await emulator({ auth: { managementKey: 'mgmt-key-1', apiKey: 'api-key-1' } });
    expect(await client(emu, { token: 'mgmt-key-1' }).listModels()).toEqual([]);

    const wrong = await failure(client(emu, { token: 'wrong-key-9' }).listModels());
    expect(wrong).toMatchObject({
      kind: 'auth',
      status: 400,
      serverType: 'InvalidKeyException',
      code: 'TOKEN_UNAVAILABLE',
    });
    expect(wrong.serverMessage).toMatch(
      /the server refused the request as invalid \(its own log says why\) \(no other key/,
    );
    expect(wrong.message).not.toContain('wrong-key-9');
    expect(emu.stats.tokenRotations).toBe(0);

    const none = await failure(client(emu).listModels());
    expect(none).toMatchObject({
      kind: 'auth',
      status: 400,
      serverType: 'InvalidKeyException',
      serverMessage: 'the server refused the request as invalid (its own log says why)',
    });
  });

  it('an expired key (per the key file) is renewed ONCE for 20 concurrent calls, before they are sent', async () => {
    const emu = await emulator({ auth: true });
    const token = secretToken(() => emu.keyFile()!);
    const c = client(emu, { token });
    await c.register({ fileName: 'k.mar' });
    const before = emu.keys()!.management;
    emu.expireManagementKey();
    const results = await Promise.all(Array.from({ length: 20 }, () => c.describe('k')));
    expect(results.every((r) => r[0]?.modelName === 'k')).toBe(true);
    expect(emu.stats.tokenRotations).toBe(1);
    expect(emu.stats.authFailures).toBe(0);
    expect(emu.keys()!.management).not.toBe(before);
  });

  it('a key the server rejects is renewed ONCE for 20 concurrent calls, each retried once', async () => {
    const emu = await emulator({ auth: true });
    // The file handed to the client claims a far-future expiry: only the server's 400 tells it the key is dead.
    const read = () =>
      emu.keyFile()!.replace(/"expiration time": "[^"]+"/g, '"expiration time": "2999-01-01T00:00:00Z"');
    const c = client(emu, { token: secretToken(read) });
    emu.expireManagementKey();
    const results = await Promise.all(Array.from({ length: 20 }, () => c.listModels()));
    expect(results).toHaveLength(20);
    expect(emu.stats.authFailures).toBe(20);
    expect(emu.stats.tokenRotations).toBe(1);
    expect(emu.stats.requests['GET /models']).toBe(40);
    // A late caller still holding nothing stale: no further rotation.
    await c.listModels();
    expect(emu.stats.tokenRotations).toBe(1);
  });

  it('renewal fails cleanly: stale key file source, wrong API key, bare key', async () => {
    const emu = await emulator({ auth: true });
    const stale = emu
      .keyFile()!
      .replace(/"expiration time": "[^"]+"/g, '"expiration time": "2999-01-01T00:00:00Z"');
    emu.expireManagementKey();
    const c1 = client(emu, { token: secretToken(() => stale, { rereadAttempts: 2, rereadDelayMs: 10 }) });
    const e1 = await failure(c1.listModels());
    expect(e1).toMatchObject({ kind: 'auth', status: 400, code: 'TOKEN_UNAVAILABLE' });
    expect(e1.serverMessage).toMatch(/still holds the rejected key/);
    expect(emu.stats.tokenRotations).toBe(1);
    for (const k of Object.values(emu.keys()!)) expect(e1.message).not.toContain(k);
    const staleAPI = JSON.parse(stale).API.key as string;
    expect(e1.message).not.toContain(staleAPI);

    const wrongAPI = stale.replace(staleAPI, 'notTheApiKey');
    const e2 = await failure(client(emu, { token: secretToken(() => wrongAPI) }).listModels());
    expect(e2).toMatchObject({ kind: 'auth', status: 400, operation: 'renew management key' });
    expect(e2.serverMessage).toMatch(/API key of the key file was rejected/);
    expect(e2.message).not.toContain('notTheApiKey');
  });

  it('key file helpers: parse Java instants and refuse malformed files without echoing them', () => {
    expect(parseInstant('2024-01-16T22:23:32.952499Z')).toBe(Date.UTC(2024, 0, 16, 22, 23, 32, 952));
    expect(parseInstant('2024-01-16T22:23:32Z')).toBe(Date.UTC(2024, 0, 16, 22, 23, 32));
    expect(parseInstant('yesterday')).toBeUndefined();
    expect(() => parseKeyFile('{"secretvalue')).toThrow(/not valid JSON/);
    try {
      parseKeyFile('{"secretvalue');
    } catch (e) {
      expect(String(e)).not.toContain('secretvalue');
    }
    expect(() => parseKeyFile('{"management": {}}')).toThrow(/management.key/);
  });
});

describe('body helpers', () => {
  it('extractPluginStatus reads valid JSON, the legacy hand-formatted body, and p2p extras', () => {
    expect(
      extractPluginStatus('{\n\t"Status": "Model "x" Version: 1.0 registered with 0 initial workers."\n}\n'),
    ).toEqual({
      validJSON: false,
      status: 'Model "x" Version: 1.0 registered with 0 initial workers.',
    });
    expect(extractPluginStatus('{"Status":"ok","TaskID":"abc","CacheHit":"true"}')).toEqual({
      validJSON: true,
      status: 'ok',
      taskID: 'abc',
      localHit: true,
    });
    // The plugin: LocalHit true or false once through P2P; CacheHit only when true. LocalHit wins.
    expect(extractPluginStatus('{"Status":"ok","TaskID":"abc","LocalHit":false}')).toMatchObject({
      localHit: false,
    });
    expect(
      extractPluginStatus('{"Status":"ok","TaskID":"abc","LocalHit":true,"CacheHit":true}'),
    ).toMatchObject({ localHit: true });
    expect(extractPluginStatus('{"Status":"ok"}').localHit).toBeUndefined();
    expect(extractPluginStatus('nonsense')).toEqual({ validJSON: false });
    expect(parseRegisteredMessage(SEED_MESSAGE('a.b-c', '1.2.3'))).toEqual({
      modelName: 'a.b-c',
      version: '1.2.3',
      initialWorkers: 0,
    });
    expect(parseRegisteredMessage('Processing worker updates...')).toBeUndefined();
  });
});
