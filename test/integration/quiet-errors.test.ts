/**
 * Remote error text never reaches status. A source endpoint may be any host a tenant names (within the admin's
 * lists), and what answers there may be anything the operator can reach, cloud metadata included: if the first line
 * of its error answer landed in a condition, the tenant would read it back. One hostile listener on loopback answers
 * every source kind's requests with errors that carry planted secret-like values (an `AKIA…` key, a metadata token)
 * in the body, the error message headers and the error code fields:
 * - bucket listings (S3 ListObjectsV2, path style): a provider-shaped 403 whose Code and Message are planted, and
 *   a 404 of plain text, as a metadata service answers;
 * - the Hugging Face Hub API: a 404 and a 503 with a planted X-Error-Code, X-Error-Message and body;
 * - a registry: a manifest 404 with a planted `errors[].code` and message, a token service that refuses with a
 *   planted body, and a manifest 403 after a token was granted.
 * Each object ends with a condition in our words (the status, what to check), and no planted value is in any
 * status, condition, Event or line of the operator's log (at debug level).
 */
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Condition } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { createNamespace, createSecret, kubeConfig, peerloadResources, waitFor } from '../support/kube.ts';
import { capturedLogger, startManager, type RunningManager } from '../support/runtime-harness.ts';

const AKIA = `AKIA${randomBytes(8).toString('hex').toUpperCase()}`;
const TOKEN = `metadata-token-xyz-${randomBytes(6).toString('hex')}`;
/** An all-capitals value: the shape of a registry error code. */
const CODE = `METADATA_TOKEN_${randomBytes(4).toString('hex').toUpperCase().replace(/[0-9]/g, 'Q')}`;
const PLANTED = [AKIA, TOKEN, CODE];
const LINE = `${AKIA} ${TOKEN}`;

let kc: k8s.KubeConfig;
let ns: string;
let hostile: Server;
let host = '';
let url = '';
let operator: RunningManager;
const logs = capturedLogger();
/** Requests by what they asked for: proof that each path was taken. */
const asked = new Set<string>();

type Status = { conditions?: Condition[]; observedGeneration?: number };
type Obj = { metadata: { generation?: number }; status?: Status };
let preheats: ReturnType<typeof peerloadResources<Obj>>;
let served: ReturnType<typeof peerloadResources<Obj>>;

function answer(path: string, res: ServerResponse): void {
  const xml = (status: number, code: string) =>
    res
      .writeHead(status, { 'content-type': 'application/xml' })
      .end(
        `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${LINE}</Message></Error>`,
      );
  const text = (status: number, headers: Record<string, string> = {}) =>
    res.writeHead(status, { 'content-type': 'text/plain', ...headers }).end(`${LINE}\nsecond line`);
  const registryError = (status: number, headers: Record<string, string> = {}) =>
    res
      .writeHead(status, { 'content-type': 'application/json', ...headers })
      .end(JSON.stringify({ errors: [{ code: CODE, message: LINE, detail: { token: TOKEN } }] }));
  if (path.startsWith('/coded')) return void (asked.add('bucket-coded'), xml(403, AKIA));
  if (path.startsWith('/plain')) return void (asked.add('bucket-plain'), text(404));
  const hubError = { 'x-error-code': CODE, 'x-error-message': LINE };
  if (path.startsWith('/api/models/org/gone')) return void (asked.add('hub-404'), text(404, hubError));
  if (path.startsWith('/api/models/org/busy')) return void (asked.add('hub-503'), text(503, hubError));
  if (path.startsWith('/v2/models/gone/manifests/'))
    return void (asked.add('oci-manifest'), registryError(404));
  const bearer = (scope: string) => ({
    'www-authenticate': `Bearer realm="${url}/token/${scope}",service="hostile",scope="repository:models/${scope}:pull"`,
  });
  if (path.startsWith('/v2/models/refused/')) return void registryError(401, bearer('refused'));
  if (path.startsWith('/token/refused')) return void (asked.add('oci-token'), text(401, { 'x-error': LINE }));
  if (path.startsWith('/token/denied'))
    return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"token":"granted-0123"}');
  if (path.startsWith('/v2/models/denied/manifests/'))
    return void (asked.add('oci-denied'), registryError(403, bearer('denied')));
  text(404);
}

beforeAll(async () => {
  kc = kubeConfig(inject('kubeconfigPath'));
  preheats = peerloadResources<Obj>(kc, 'ModelPreheat', 'modelpreheats');
  served = peerloadResources<Obj>(kc, 'ServedModel', 'servedmodels');
  ns = await createNamespace(kc, 'quiet');
  hostile = createServer((req, res) => {
    req.resume();
    answer(req.url ?? '/', res);
  });
  await new Promise<void>((r) => hostile.listen(0, '127.0.0.1', r));
  host = `127.0.0.1:${(hostile.address() as AddressInfo).port}`;
  url = `http://${host}`;
  await createSecret(kc, ns, 'store', {
    access_key: 'AKIAQUIETTESTKEY0001',
    secret_key: 'quiet-test-secret-key-0123456789',
  });
  operator = await startManager(
    kc,
    [
      '--no-leader-elect',
      // Never reached: every object fails at its source.
      '--manager-url',
      'http://127.0.0.1:9',
      // The admin allows the listener for every kind: the rule under test holds for allowed hosts.
      '--allowed-storage-hosts',
      'http://127.0.0.1',
      '--allowed-hub-hosts',
      'http://127.0.0.1',
      '--allowed-registry-hosts',
      'http://127.0.0.1',
      '--allowed-endpoint-hosts',
      '127.0.0.0/8',
      '--poll-backoff-start',
      '100ms',
      '--poll-backoff-max',
      '1s',
    ],
    [modelPreheatController, (ctx) => createServedModelController(ctx, {})],
    { logger: logs.logger },
  );
}, 60_000);

afterAll(async () => {
  await operator?.stop();
  await new Promise((r) => hostile?.close(r));
});

const bucket = (name: string) => ({
  objectStorage: {
    type: 's3',
    bucket: name,
    endpoint: url,
    pathStyle: true,
    region: 'us-east-1',
    credentialsSecretRef: { name: 'store' },
    prefix: 'm/',
  },
});
const hub = (repo: string) => ({ source: { huggingface: { endpoint: url, repo } } });
const oci = (repository: string) => ({
  modelName: repository,
  version: '1',
  source: { oci: { reference: `${host}/models/${repository}:v1`, plainHTTP: true } },
  modelServer: {
    driver: 'triton',
    endpoints: ['http://127.0.0.1:9'],
    agent: { port: 9, tokenSecretRef: { name: 'store', key: 'secret_key' } },
  },
});

/** The first condition of the object's generation whose reason is one of `reasons`. */
async function failedWith(kind: 'preheat' | 'served', name: string, reasons: RegExp): Promise<Condition> {
  const get = () => (kind === 'preheat' ? preheats : served).get(ns, name);
  return waitFor(
    `${name}: a condition with reason ${reasons}`,
    async () => {
      const o = await get();
      return o.status?.conditions?.find(
        (c) => reasons.test(c.reason) && c.status !== 'Unknown' && c.message.length > 0,
      );
    },
    { timeoutMs: 60_000, intervalMs: 200 },
  );
}

describe("a source's error answers are not quoted", () => {
  it('bucket, Hub and registry errors planted with secret-like lines: none in status, conditions, Events or logs', async () => {
    for (const b of ['coded', 'plain']) await preheats.create(ns, `bucket-${b}`, bucket(b));
    for (const r of ['gone', 'busy']) await preheats.create(ns, `hub-${r}`, hub(`org/${r}`));
    for (const r of ['gone', 'refused', 'denied']) await served.create(ns, `oci-${r}`, oci(r));

    const conditions = {
      coded: await failedWith('preheat', 'bucket-coded', /^ListFailed$/),
      plain: await failedWith('preheat', 'bucket-plain', /^ListFailed$/),
      hubGone: await failedWith('preheat', 'hub-gone', /^HubBadAnswer$/),
      hubBusy: await failedWith('preheat', 'hub-busy', /^HubUnavailable$/),
      ociGone: await failedWith('served', 'oci-gone', /^RegistryError|NotFound$/),
      ociRefused: await failedWith('served', 'oci-refused', /^Unauthorized$/),
      ociDenied: await failedWith('served', 'oci-denied', /^Forbidden$/),
    };
    await operator.manager.events.flush();
    const events = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
    const objects = await Promise.all([
      ...['bucket-coded', 'bucket-plain', 'hub-gone', 'hub-busy'].map((n) => preheats.get(ns, n)),
      ...['oci-gone', 'oci-refused', 'oci-denied'].map((n) => served.get(ns, n)),
    ]);
    const status = JSON.stringify(objects.map((o) => o.status));
    const notes = JSON.stringify(events.items.map((e) => ({ reason: e.reason, note: e.note })));
    const logText = logs.text();
    expect(logText).toContain('"level":"debug"');
    expect(events.items.length).toBeGreaterThan(0);
    const found = (text: string) => [...PLANTED, 'second line'].filter((p) => text.includes(p));
    expect(found(status), 'status and conditions').toEqual([]);
    expect(found(notes), 'Events').toEqual([]);
    expect(found(logText), "the operator's log").toEqual([]);
    // Every path was taken (the checks above are not vacuous), and each condition still says what happened, in our
    // words.
    expect([...asked].sort()).toEqual(
      [
        'bucket-coded',
        'bucket-plain',
        'hub-404',
        'hub-503',
        'oci-denied',
        'oci-manifest',
        'oci-token',
      ].sort(),
    );
    expect(conditions.coded.message).toMatch(
      /cannot list s3 coded prefix "m\/": HTTP 403: check the credentials/,
    );
    expect(conditions.plain.message).toContain('HTTP 404');
    expect(conditions.hubGone.message).toContain('HTTP 404');
    expect(conditions.hubBusy.message).toContain('HTTP 503');
    expect(conditions.ociGone.message).toContain('404');
    expect(conditions.ociRefused.message).toContain('401');
    expect(conditions.ociDenied.message).toContain('403');
  }, 120_000);
});
