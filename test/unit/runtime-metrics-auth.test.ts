/**
 * The secure metrics server without an apiserver: the self-signed certificate is a valid serving certificate,
 * /metrics answers only what the authorizer allows while the probes stay open, and the TokenReview /
 * SubjectAccessReview cache is used and bounded. (test/integration/metrics-auth.test.ts: the real apiserver.)
 */
import { X509Certificate } from 'node:crypto';
import { Agent, fetch } from 'undici';
import { Registry } from 'prom-client';
import { afterAll, describe, expect, it } from 'vitest';
import { DelegatedAuth, HealthServer, KubeClient, selfSignedCertificate } from '../../src/runtime/index.ts';
import type { IncomingMessage } from 'node:http';

const agents: Agent[] = [];
afterAll(() => Promise.all(agents.map((a) => a.close())));

describe('selfSignedCertificate', () => {
  it('names every DNS name and IP, verifies with its own key, serves TLS only, and is no CA', () => {
    const p = selfSignedCertificate(['op-7f9c', 'localhost', '127.0.0.1', '::1', 'fd00::1:2'], 30);
    const x = new X509Certificate(p.cert);
    expect(x.subject).toBe('CN=op-7f9c');
    expect(x.subjectAltName).toBe(
      'DNS:op-7f9c, DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1, IP Address:FD00:0:0:0:0:0:1:2',
    );
    expect(x.verify(x.publicKey)).toBe(true);
    expect(x.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(x.checkHost('localhost')).toBe('localhost');
    expect(x.ca).toBe(false);
    expect(x.keyUsage).toEqual(['1.3.6.1.5.5.7.3.1']);
    const days = (Date.parse(x.validTo) - Date.parse(x.validFrom)) / 86_400_000;
    expect(days).toBeCloseTo(30 + 1 / 24, 3);
    expect(Date.parse(x.validFrom)).toBeLessThan(Date.now());
    // Two certificates never share a serial number or a key.
    const y = new X509Certificate(selfSignedCertificate(['op-7f9c']).cert);
    expect(y.serialNumber).not.toBe(x.serialNumber);
    expect(y.publicKey.export({ format: 'jwk' })).not.toEqual(x.publicKey.export({ format: 'jwk' }));
  });
});

describe('HealthServer with TLS and an authorizer', () => {
  it('gives /metrics only to whom the authorizer allows; the probes need no token', async () => {
    const registry = new Registry();
    const tls = selfSignedCertificate(['localhost', '127.0.0.1']);
    const seen: string[] = [];
    const server = new HealthServer(registry, {
      tls,
      authorizeMetrics: async (req: IncomingMessage, path: string) => {
        seen.push(`${req.method} ${path}`);
        const auth = req.headers.authorization;
        if (!auth) return { allowed: false, status: 401, message: 'Unauthorized' };
        if (auth !== 'Bearer good') return { allowed: false, status: 403, message: 'Authorization denied' };
        return { allowed: true, user: 'u' };
      },
    });
    server.liveness.set('ping', () => true);
    const port = await server.listen('127.0.0.1:0');
    const agent = new Agent({ connect: { ca: tls.cert } });
    agents.push(agent);
    const get = async (path: string, token?: string) => {
      const r = await fetch(`https://127.0.0.1:${port}${path}`, {
        dispatcher: agent,
        headers: token ? { authorization: `Bearer ${token}` } : {},
      });
      return { status: r.status, body: await r.text(), auth: r.headers.get('www-authenticate') };
    };
    try {
      expect(server.secure).toBe(true);
      expect(await get('/metrics')).toEqual({ status: 401, body: 'Unauthorized\n', auth: 'Bearer' });
      expect((await get('/metrics', 'bad')).status).toBe(403);
      expect((await get('/metrics', 'good')).status).toBe(200);
      expect((await get('/metrics?x=1', 'good')).status).toBe(200);
      expect(seen).toEqual(['GET /metrics', 'GET /metrics', 'GET /metrics', 'GET /metrics']);
      expect(await get('/healthz')).toMatchObject({
        status: 200,
        body: '[+]ping ok\nhealthz check passed\n',
      });
      // A new certificate is served from the next connection on.
      const next = selfSignedCertificate(['localhost', '127.0.0.1']);
      server.setCertificate(next);
      const nextAgent = new Agent({ connect: { ca: next.cert } });
      agents.push(nextAgent);
      expect((await fetch(`https://127.0.0.1:${port}/healthz`, { dispatcher: nextAgent })).status).toBe(200);
      expect(server.certificate).toBe(next.cert);
    } finally {
      await server.close();
    }
  });
});

describe('DelegatedAuth', () => {
  /** A KubeClient whose requests are answered here: tokens "user-N" authenticate, and only user-1 may get /metrics. */
  function fakeKube() {
    const calls: { path: string; body: any }[] = [];
    const kube = {
      request: async (_method: string, path: string, opts: { body: any }) => {
        calls.push({ path, body: opts.body });
        if (path.endsWith('/tokenreviews')) {
          const token: string = opts.body.spec.token;
          if (token === 'broken') throw new Error('apiserver down');
          return /^user-\d+$/.test(token)
            ? { status: { authenticated: true, user: { username: token, groups: ['g'] } } }
            : { status: { authenticated: false, error: 'invalid bearer token' } };
        }
        return { status: { allowed: opts.body.spec.user === 'user-1' } };
      },
    } as unknown as KubeClient;
    return { kube, calls };
  }
  const req = (token?: string, method = 'GET') =>
    ({ method, headers: token ? { authorization: `Bearer ${token}` } : {} }) as IncomingMessage;

  it('reviews the token, then the user on the path and verb; caches both answers', async () => {
    const { kube, calls } = fakeKube();
    const auth = new DelegatedAuth(kube);
    expect(await auth.authorize(req(), '/metrics')).toMatchObject({ allowed: false, status: 401 });
    expect(calls).toHaveLength(0);
    expect(await auth.authorize(req('nope'), '/metrics')).toMatchObject({ allowed: false, status: 401 });
    expect(await auth.authorize(req('user-2'), '/metrics')).toEqual({
      allowed: false,
      status: 403,
      message: 'Authorization denied for user user-2',
    });
    expect(await auth.authorize(req('user-1', 'HEAD'), '/metrics')).toEqual({
      allowed: true,
      user: 'user-1',
    });
    expect(calls.map((c) => c.path.split('/').pop())).toEqual([
      'tokenreviews',
      'tokenreviews',
      'subjectaccessreviews',
      'tokenreviews',
      'subjectaccessreviews',
    ]);
    expect(calls[4]!.body.spec).toEqual({
      user: 'user-1',
      groups: ['g'],
      nonResourceAttributes: { path: '/metrics', verb: 'get' },
    });
    // Cached: no more calls for the same tokens.
    for (const t of ['nope', 'user-2', 'user-1']) await auth.authorize(req(t), '/metrics');
    expect(calls).toHaveLength(5);
  });

  it('answers 500 when the apiserver cannot be asked, and never echoes the token', async () => {
    const { kube } = fakeKube();
    const d = await new DelegatedAuth(kube).authorize(req('broken'), '/metrics');
    expect(d).toEqual({ allowed: false, status: 500, message: 'Authentication failed' });
  });

  it('keeps at most maxEntries answers, dropping the oldest', async () => {
    const { kube, calls } = fakeKube();
    const auth = new DelegatedAuth(kube, { maxEntries: 8 });
    for (let i = 0; i < 100; i++) await auth.authorize(req(`user-${i}`), '/metrics');
    expect(auth.cached).toEqual({ users: 8, decisions: 8 });
    const before = calls.length;
    await auth.authorize(req('user-99'), '/metrics'); // newest: cached
    expect(calls.length).toBe(before);
    await auth.authorize(req('user-0'), '/metrics'); // oldest: dropped, asked again
    expect(calls.length).toBe(before + 2);
  });
});
