/** peerload names itself on the wire: User-Agent on every HTTP client, fieldManager on every apiserver write. */
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManagerClient } from '../../src/manager/client.ts';
import { ModelServerClient } from '../../src/modelserver/client.ts';
import { GVR } from '../../src/api/index.ts';
import { KubeClient } from '../../src/runtime/index.ts';
import { FIELD_MANAGER, KUBE_IDENTITY, USER_AGENT, VERSION } from '../../src/version.ts';
import pkg from '../../package.json' with { type: 'json' };

const seen: { method: string; url: string; userAgent: string | undefined }[] = [];
const server = createServer((req: IncomingMessage, res) => {
  seen.push({ method: req.method!, url: req.url!, userAgent: req.headers['user-agent'] });
  req.resume();
  res.setHeader('content-type', 'application/json');
  if (req.url!.startsWith('/api/v1/jobs/7'))
    res.end(JSON.stringify({ id: 7, state: 'SUCCESS', type: 'preheat', args: {} }));
  else if (req.url!.startsWith('/models/')) res.end('[]');
  else
    res.end(JSON.stringify({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x', namespace: 'n' } }));
});
let base = '';
beforeAll(async () => {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe('wire identity', () => {
  it('the version is the package version', () => {
    expect(VERSION).toBe(pkg.version);
    expect(USER_AGENT).toBe(`peerload/${pkg.version}`);
  });

  it('the kube client sends User-Agent and fieldManager=peerload-operator on create, update and patch only', async () => {
    const kube = new KubeClient(
      {
        getCurrentCluster: () => ({ name: 'c', server: base, skipTLSVerify: false }),
        getCurrentUser: () => ({ name: 'u' }),
        applyToHTTPSOptions: async () => {},
      } as never,
      KUBE_IDENTITY,
    );
    const cms = kube.resource<never>({ group: '', version: 'v1', resource: 'configmaps' } as never);
    const cm = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'x', namespace: 'n' } } as never;
    seen.length = 0;
    await cms.create(cm);
    await cms.update(cm);
    await cms.patch('n', 'x', { data: {} });
    await kube.resource(GVR.servedModels).patchStatus('n', 'x', { status: {} });
    await cms.patch('n', 'x', {}, { fieldManager: 'kubectl' });
    await cms.get('n', 'x');
    await cms.delete('n', 'x');
    const fm = seen.map((r) => `${r.method} ${new URL(r.url, base).searchParams.get('fieldManager')}`);
    expect(fm).toEqual([
      `POST ${FIELD_MANAGER}`,
      `PUT ${FIELD_MANAGER}`,
      `PATCH ${FIELD_MANAGER}`,
      `PATCH ${FIELD_MANAGER}`,
      'PATCH kubectl',
      'GET null',
      'DELETE null',
    ]);
    expect(new Set(seen.map((r) => r.userAgent))).toEqual(new Set([USER_AGENT]));
  });

  it("the runtime's kube client names no product of its own: without an identity it sends neither", async () => {
    const kube = new KubeClient({
      getCurrentCluster: () => ({ name: 'c', server: base, skipTLSVerify: false }),
      getCurrentUser: () => ({ name: 'u' }),
      applyToHTTPSOptions: async () => {},
    } as never);
    const cms = kube.resource<never>({ group: '', version: 'v1', resource: 'configmaps' } as never);
    seen.length = 0;
    await cms.create({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name: 'x', namespace: 'n' },
    } as never);
    expect(new URL(seen[0]!.url, base).searchParams.has('fieldManager')).toBe(false);
    expect(seen[0]!.userAgent ?? '').not.toContain('peerload');
  });

  it('the manager and model-server clients send User-Agent peerload/<version>', async () => {
    seen.length = 0;
    const manager = new ManagerClient({ baseURL: base });
    await manager.getJob(7).catch(() => undefined);
    await manager.close?.();
    await new ModelServerClient({ baseURL: base }).describeIfPresent('m').catch(() => undefined);
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expect(new Set(seen.map((r) => r.userAgent))).toEqual(new Set([USER_AGENT]));
  });
});
