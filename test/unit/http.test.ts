import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_ERROR_BODY_BYTES, ResponseTooLargeError, parseBody } from '../../src/http/body.ts';
import {
  INVALID_RESPONSE,
  UNUSABLE_RESPONSE_KIND,
  kindForStatus,
  safeToRepeat,
  transportCode,
} from '../../src/http/classify.ts';
import { HttpError, MAX_DETAIL, boundDetail, type HttpErrorInit } from '../../src/http/errors.ts';
import { InFlightLimit } from '../../src/http/limit.ts';
import { sendRequest, type HttpRequest } from '../../src/http/request.ts';
import { NO_RETRIES, parseRetryAfter, withRetries } from '../../src/http/retry.ts';
import { ManagerClient } from '../../src/manager/client.ts';
import { MANAGER_STATUS_EXCEPTIONS, ManagerError } from '../../src/manager/errors.ts';
import { ModelServerClient } from '../../src/servers/torchserve/client.ts';
import { ModelServerError, TORCHSERVE_STATUS_EXCEPTIONS } from '../../src/servers/torchserve/errors.ts';

const managerKind = (status: number, message: string) =>
  kindForStatus(status, message, MANAGER_STATUS_EXCEPTIONS);
const modelServerKind = (status: number, type?: string) =>
  kindForStatus(status, type, TORCHSERVE_STATUS_EXCEPTIONS);

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
const routes = new Map<string, Handler>();
let server: Server;
let origin: string;
const agent = new Agent({ connections: 8 });

beforeAll(async () => {
  server = createServer((req, res) => {
    const h = routes.get(new URL(req.url ?? '/', 'http://x').pathname);
    if (h) h(req, res);
    else res.writeHead(404).end('no route');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await agent.close();
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

class TestError extends HttpError {}
const toError = (init: HttpErrorInit) => new TestError('test server', init);

function req(path: string, extra: Partial<HttpRequest> = {}): HttpRequest {
  return {
    dispatcher: agent,
    origin,
    path,
    method: 'GET',
    headers: {},
    timeoutMs: 2_000,
    operation: `get ${path}`,
    ...extra,
  };
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  throw new Error('expected a rejection, the call succeeded');
}

describe('sendRequest', () => {
  it('returns any status with its body and headers; only transport failures throw', async () => {
    routes.set('/teapot', (_q, s) => s.writeHead(418, { 'x-a': '1' }).end('short and stout'));
    const res = await sendRequest(req('/teapot'), toError);
    expect(res).toMatchObject({ status: 418, text: 'short and stout' });
    expect(res.headers['x-a']).toBe('1');
  });

  it('a body over the bound is refused (chunked, no content-length), one under it is read whole', async () => {
    routes.set('/big', (_q, s) => {
      s.writeHead(200, { 'content-type': 'text/plain' });
      for (let i = 0; i < 64; i++) s.write('x'.repeat(1024));
      s.end();
    });
    const err = await rejection(sendRequest(req('/big', { maxResponseBytes: 16 * 1024 }), toError));
    expect(err).toBeInstanceOf(TestError);
    expect(err).toMatchObject({ kind: UNUSABLE_RESPONSE_KIND, status: 200, code: 'RESPONSE_TOO_LARGE' });
    expect((err as Error).message).toBe(
      'test server get /big failed (HTTP 200): response larger than 16384 bytes',
    );
    expect((err as Error).cause).toBeInstanceOf(ResponseTooLargeError);
    const ok = await sendRequest(req('/big', { maxResponseBytes: 64 * 1024 }), toError);
    expect(ok.text).toHaveLength(64 * 1024);
  });

  it('an error answer is cut to its first 64 KiB: a 1 MB body of a and :// reaches a short message, fast', async () => {
    const body = 'a'.repeat(1e6) + '://';
    routes.set('/error-body', (_q, s) => s.writeHead(500, { 'content-type': 'text/plain' }).end(body));
    const res = await sendRequest(req('/error-body'), toError);
    expect(res.status).toBe(500);
    expect(res.text).toBe(body.slice(0, MAX_ERROR_BODY_BYTES));
    // What a client makes of it: the detail every error keeps, redacted and bounded.
    const started = performance.now();
    const detail = boundDetail(res.text);
    expect(detail.length).toBeLessThanOrEqual(MAX_DETAIL + 1);
    const err = new TestError('test server', { kind: 'retryable', status: 500, operation: 'get', detail });
    expect(err.message.length).toBeLessThan(MAX_DETAIL + 100);
    expect(performance.now() - started).toBeLessThan(1_000);
  });

  it('no headers within the time-out is a retryable TIMEOUT, and it does not wait for the server', async () => {
    routes.set('/slow-headers', (_q, s) => void setTimeout(() => s.end('late'), 1_500));
    const t0 = Date.now();
    const err = await rejection(sendRequest(req('/slow-headers', { timeoutMs: 150 }), toError));
    expect(err).toMatchObject({ kind: 'retryable', status: 0, code: 'TIMEOUT' });
    expect((err as Error).message).toContain('no complete answer within 150 ms');
    expect(Date.now() - t0).toBeLessThan(1_000);
  });

  it('a body that stalls after the headers is a TIMEOUT too: the time-out covers the whole exchange', async () => {
    routes.set('/slow-body', (_q, s) => {
      s.writeHead(200);
      s.write('part');
      setTimeout(() => s.end('rest'), 1_500);
    });
    const t0 = Date.now();
    const err = await rejection(sendRequest(req('/slow-body', { timeoutMs: 200 }), toError));
    expect(err).toMatchObject({ kind: 'retryable', code: 'TIMEOUT' });
    expect(Date.now() - t0).toBeLessThan(1_000);
  });

  it("a caller's abort ends the exchange with the caller's own reason, not an HTTP error", async () => {
    routes.set('/hang', (_q, s) => void setTimeout(() => s.end('late'), 1_500));
    const ac = new AbortController();
    const reason = new Error('reconcile cancelled');
    setTimeout(() => ac.abort(reason), 50);
    const t0 = Date.now();
    expect(await rejection(sendRequest(req('/hang', { signal: ac.signal }), toError))).toBe(reason);
    expect(Date.now() - t0).toBeLessThan(1_000);
    // Already aborted: nothing is sent.
    let hits = 0;
    routes.set('/count', (_q, s) => {
      hits++;
      s.end('ok');
    });
    expect(await rejection(sendRequest(req('/count', { signal: ac.signal }), toError))).toBe(reason);
    expect(hits).toBe(0);
  });

  it('a refused connection is a retryable network error with its code; no secret reaches the message', async () => {
    const closed = createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((r) => closed.close(() => r()));
    const err = await rejection(
      sendRequest(
        req('/x', { origin: `http://127.0.0.1:${port}`, secrets: ['sekrit-token-value'] }),
        toError,
      ),
    );
    expect(err).toMatchObject({ kind: 'retryable', status: 0, code: 'ECONNREFUSED', retryable: true });
    expect((err as Error).message).not.toContain('sekrit-token-value');
  });
});

describe('classification', () => {
  it('one table: network errors, 408, 429, 5xx retryable; 401 auth; 404 notFound; 409 conflict; other 4xx and 3xx terminal', () => {
    const table: [number, string][] = [
      [408, 'retryable'],
      [429, 'retryable'],
      [500, 'retryable'],
      [502, 'retryable'],
      [503, 'retryable'],
      [507, 'retryable'],
      [401, 'auth'],
      [404, 'notFound'],
      [409, 'conflict'],
      [400, 'terminal'],
      [403, 'terminal'],
      [405, 'terminal'],
      [413, 'terminal'],
      [422, 'terminal'],
      [301, 'terminal'],
    ];
    for (const [status, kind] of table) {
      expect(kindForStatus(status), `HTTP ${status}`).toBe(kind);
      // The clients follow it, apart from their contracts' documented exceptions.
      if (status !== 403) expect(managerKind(status, 'boom'), `manager ${status}`).toBe(kind);
      expect(modelServerKind(status), `model server ${status}`).toBe(kind);
    }
    expect(managerKind(403, 'forbidden')).toBe('auth');
    expect(managerKind(500, 'invalid params: url is required')).toBe('terminal');
    expect(modelServerKind(400, 'InvalidKeyException')).toBe('auth');
  });

  it('transport codes: undici time-outs are TIMEOUT, nested causes are found, unknown is NETWORK', () => {
    expect(transportCode({ code: 'UND_ERR_HEADERS_TIMEOUT' })).toBe('TIMEOUT');
    expect(transportCode({ code: 'UND_ERR_BODY_TIMEOUT' })).toBe('TIMEOUT');
    expect(transportCode(new DOMException('t', 'TimeoutError'))).toBe('TIMEOUT');
    expect(transportCode(new Error('fetch failed', { cause: { code: 'ECONNRESET' } }))).toBe('ECONNRESET');
    expect(transportCode(new Error('?'))).toBe('NETWORK');
  });

  it('a POST is repeated only when the server surely did not act on it', () => {
    expect(safeToRepeat('GET', { status: 0, code: 'TIMEOUT' })).toBe(true);
    expect(safeToRepeat('POST', { status: 429 })).toBe(true);
    expect(safeToRepeat('POST', { status: 0, code: 'ECONNREFUSED' })).toBe(true);
    expect(safeToRepeat('POST', { status: 0, code: 'TIMEOUT' })).toBe(false);
    expect(safeToRepeat('POST', { status: 503 })).toBe(false);
  });

  it('an unusable 2xx body is classified the same way by both clients (retryable INVALID_RESPONSE)', async () => {
    routes.set('/api/v1/jobs/1', (_q, s) => s.writeHead(200, { 'content-type': 'text/html' }).end('<html>'));
    routes.set('/models/m', (_q, s) => s.writeHead(200, { 'content-type': 'text/html' }).end('<html>'));
    const manager = new ManagerClient({ baseURL: origin, dispatcher: agent });
    const modelServer = new ModelServerClient({ baseURL: origin, dispatcher: agent });
    const a = await rejection(manager.getJob(1));
    const b = await rejection(modelServer.describe('m'));
    expect(a).toBeInstanceOf(ManagerError);
    expect(b).toBeInstanceOf(ModelServerError);
    for (const e of [a, b]) {
      expect(e).toBeInstanceOf(HttpError);
      expect(e).toMatchObject({ kind: 'retryable', status: 200, code: INVALID_RESPONSE, retryable: true });
    }
  });

  it('both clients bound bodies and take an AbortSignal', async () => {
    routes.set('/api/v1/jobs/2', (_q, s) => s.end(JSON.stringify({ id: 2, pad: 'x'.repeat(4096) })));
    const manager = new ManagerClient({ baseURL: origin, dispatcher: agent, maxResponseBytes: 1024 });
    expect(await rejection(manager.getJob(2))).toMatchObject({ code: 'RESPONSE_TOO_LARGE' });
    routes.set('/api/v1/jobs/3', (_q, s) => void setTimeout(() => s.end('{}'), 1_500));
    const ac = new AbortController();
    setTimeout(() => ac.abort(new Error('stop')), 50);
    const err = await rejection(manager.getJob(3, { signal: ac.signal }));
    expect((err as Error).message).toBe('stop');
  });
});

describe('errors', () => {
  it('a message says who, what and where; details are bounded and redacted', () => {
    const e = new TestError('test server', {
      kind: 'terminal',
      status: 400,
      operation: 'create thing',
      detail: boundDetail('bad token abcdefgh123 in https://u:p@h.example/x?sig=s3cr3t', ['abcdefgh123']),
    });
    expect(e.message).toBe(
      'test server create thing failed (HTTP 400): bad token *** in https://h.example/x?sig=***',
    );
    expect(e.retryable).toBe(false);
    expect(boundDetail('y'.repeat(MAX_DETAIL + 50))).toHaveLength(MAX_DETAIL + 1);
  });

  it('parseBody names what did not fit', () => {
    const schema = z.object({ id: z.number() });
    expect(parseBody('{"id": 3}', schema)).toEqual({ ok: true, data: { id: 3 } });
    expect(parseBody('<html>', schema)).toEqual({ ok: false, problem: 'body is not JSON' });
    const wrong = parseBody('{"id": "x"}', schema);
    expect(wrong.ok).toBe(false);
    expect(!wrong.ok && wrong.problem).toMatch(/^unexpected body \(id: /);
  });
});

describe('retries and the in-flight limit', () => {
  const retry = { attempts: 2, minDelayMs: 1, maxDelayMs: 1_000 };
  const fail = (init: Partial<HttpErrorInit>) => () =>
    Promise.reject(
      new TestError('s', { kind: 'retryable', status: 503, operation: 'op', detail: 'd', ...init }),
    );

  it('repeats retryable failures up to the attempts; never a terminal one or an unsafe POST', async () => {
    let n = 0;
    const flaky = () => (++n < 3 ? fail({})() : Promise.resolve('ok'));
    expect(await withRetries('GET', retry, flaky)).toBe('ok');
    expect(n).toBe(3);
    let posts = 0;
    await rejection(withRetries('POST', retry, () => (posts++, fail({ status: 0, code: 'TIMEOUT' })())));
    expect(posts).toBe(1);
    let terminal = 0;
    await rejection(withRetries('GET', retry, () => (terminal++, fail({ kind: 'terminal', status: 400 })())));
    expect(terminal).toBe(1);
    let none = 0;
    await rejection(withRetries('GET', NO_RETRIES, () => (none++, fail({})())));
    expect(none).toBe(1);
  });

  it('waits the Retry-After, and does not wait one longer than maxDelayMs', async () => {
    let n = 0;
    const t0 = Date.now();
    await rejection(withRetries('GET', retry, () => (n++, fail({ status: 429, retryAfterMs: 120 })())));
    expect(n).toBe(3);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(200);
    let m = 0;
    await rejection(withRetries('GET', retry, () => (m++, fail({ status: 429, retryAfterMs: 60_000 })())));
    expect(m).toBe(1);
    expect(parseRetryAfter('7')).toBe(7_000);
    expect(parseRetryAfter('soon')).toBeUndefined();
  });

  it("a caller's abort ends a back-off wait and a wait for a slot", async () => {
    const ac = new AbortController();
    const reason = new Error('gone');
    setTimeout(() => ac.abort(reason), 30);
    const t0 = Date.now();
    const long = { attempts: 1, minDelayMs: 10_000, maxDelayMs: 60_000 };
    const waiting = withRetries('GET', long, fail({ status: 429, retryAfterMs: 10_000 }), ac.signal);
    expect(await rejection(waiting)).toBe(reason);
    expect(Date.now() - t0).toBeLessThan(5_000);

    const limit = new InFlightLimit(1);
    await limit.acquire();
    const waiter = new AbortController();
    const queued = limit.acquire(waiter.signal);
    expect(limit.waiting).toBe(1);
    waiter.abort(reason);
    expect(await rejection(queued)).toBe(reason);
    expect(limit.waiting).toBe(0);
    limit.release();
    expect(limit.active).toBe(0);
    await limit.run(async () => expect(limit.active).toBe(1));
    expect(limit.peak).toBe(1);
  });
});
