/**
 * Nothing secret leaks. Known secret values are planted in every Secret the operator reads (object-store keys and
 * session token, the manager's access token, the model servers' key files) and in every field of recorded manager
 * and model-server answers (job results of a success and a failure, error bodies): signed URLs with credentials in
 * their query and userinfo, free text quoting the keys, each value also JSON-escaped, `\u0026`-escaped and
 * percent-encoded, a short password, and a token that straddles the length bound of a message. Both controllers run
 * through success and failure paths; none of the values, in none of these forms, may appear in status, conditions,
 * Events or the operator's log at debug level.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createSecret, waitFor } from '../support/kube.ts';
import { startModelServerEmulator, type ModelServerEmulator } from '../support/modelserver-emulator.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../support/endpointslices.ts';
import { capturedLogger, startManager, type RunningManager } from '../support/runtime-harness.ts';
import { modelPreheatController } from '../../src/controllers/modelpreheat/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';

// Planted in Secrets the operator reads.
const ACCESS_KEY = 'AKIAPLANTEDACCESSKEY7';
const SECRET_KEY = 'planted-secret-key-2f9c';
const SESSION_TOKEN = 'planted-session-token-7d1e';
const MANAGER_TOKEN = 'planted-manager-pat-5b3a';
const MGMT_KEYS = ['planted-mgmt-key-8c4d', 'planted-mgmt-key-9e0f'];
const API_KEYS = ['planted-api-key-1a2b', 'planted-api-key-3c4d'];
const INFERENCE_KEYS = ['planted-inference-key-5e6f', 'planted-inference-key-7a8b'];
// In the manager's Secret next to its token: a short password, values that JSON and URLs escape.
const SHORT_PASSWORD = 'Zq7-pw';
const ESCAPED_SECRET = 'planted&escaped<secret>"9d\\';
const ENCODED_SECRET = 'planted encoded/secret+4e!';
// Planted only in answers, inside URLs (a signature, a password in userinfo, a fragment).
const SIGNATURE = 'planted0signature0value0c0ffee';
const URL_PASSWORD = 'planted-url-password-6a7b';

const SECRETS = [
  ACCESS_KEY,
  SECRET_KEY,
  SESSION_TOKEN,
  MANAGER_TOKEN,
  ...MGMT_KEYS,
  ...API_KEYS,
  ...INFERENCE_KEYS,
  SIGNATURE,
  URL_PASSWORD,
  SHORT_PASSWORD,
  ESCAPED_SECRET,
  ENCODED_SECRET,
];

/** A value as JSON writes it (without the quotes) and as Go's encoding/json does (HTML characters as \u00XX). */
const jsonForm = (v: string) => JSON.stringify(v).slice(1, -1);
const goJSONForm = (v: string) =>
  jsonForm(v).replace(/[<>&]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
/** As Go's url.QueryEscape writes it. */
const goQueryForm = (v: string) =>
  encodeURIComponent(v)
    .replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
    .replace(/%20/g, '+');
/** Every form a secret may take in the text around it. */
const forms = (v: string) => [v, encodeURIComponent(v), goQueryForm(v), jsonForm(v), goJSONForm(v)];

const SIGNED_URL =
  `https://${ACCESS_KEY}:${URL_PASSWORD}@models.s3.eu-west-1.amazonaws.com/m.mar?X-Amz-Algorithm=AWS4-HMAC-SHA256` +
  `&X-Amz-Credential=${ACCESS_KEY}%2F20261123%2Feu-west-1%2Fs3%2Faws4_request&X-Amz-Security-Token=${SESSION_TOKEN}` +
  `&X-Amz-Signature=${SIGNATURE}#${SIGNATURE}`;
const QUOTING =
  `GET ${SIGNED_URL}: 403 (key ${ACCESS_KEY} / ${SECRET_KEY}, session ${SESSION_TOKEN}, Bearer ${MANAGER_TOKEN}, ` +
  `password ${SHORT_PASSWORD}, sent {"secret":"${goJSONForm(ESCAPED_SECRET)}"} and ` +
  `?s=${goQueryForm(ENCODED_SECRET)}&t=${encodeURIComponent(ENCODED_SECRET)})`;
/** A token placed so that a message cut at 1,024 characters before redaction would keep its first 12. */
const STRADDLING = `${'x'.repeat(1011)} ${MANAGER_TOKEN} and more`;

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns = '';
let operator: RunningManager;
let manager: Server;
let managerURL = '';
const replicas: ModelServerEmulator[] = [];
const logs = capturedLogger();
/** What the recorded manager was sent: proof that the planted values did flow through the operator. */
const managerSaw: string[] = [];

/** A job as the manager serialises it (src/manager/types.ts), every string field carrying secrets. */
function recordedJob(id: number, state: 'PENDING' | 'SUCCESS' | 'FAILURE'): Record<string, unknown> {
  const peer = { url: SIGNED_URL, hostname: `seed-${SECRET_KEY}`, ip: MANAGER_TOKEN, description: QUOTING };
  return {
    id,
    created_at: '2026-11-23T00:00:00Z',
    updated_at: '2026-11-23T00:00:01Z',
    task_id: 'group_9523f30a-0000-4000-8000-000000000000',
    bio: QUOTING,
    type: 'preheat',
    state,
    args: { type: 'file', urls: [SIGNED_URL], headers: { Authorization: `Bearer ${MANAGER_TOKEN}` } },
    result:
      state === 'PENDING'
        ? null
        : {
            group_uuid: 'group_9523f30a-0000-4000-8000-000000000000',
            state,
            job_states: [
              {
                task_uuid: `task_${SESSION_TOKEN}`,
                task_name: QUOTING,
                state,
                error: state === 'FAILURE' ? QUOTING : '',
                results: [
                  {
                    success_tasks: state === 'SUCCESS' ? [peer] : [],
                    failure_tasks: state === 'FAILURE' ? [peer] : [peer],
                    scheduler_cluster_id: 1,
                  },
                ],
              },
            ],
          },
    user_id: 0,
    scheduler_clusters: [{ id: 1, name: QUOTING }],
  };
}

/** Recorded manager: job 1 succeeds, job 2 fails, and a resource named `rejected` gets a 422 quoting secrets. */
async function startRecordedManager(): Promise<void> {
  const jobs = new Map<number, 'SUCCESS' | 'FAILURE'>();
  manager = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      managerSaw.push(`${req.method} ${req.url} ${req.headers.authorization ?? ''} ${body}`);
      const send = (status: number, json: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(json));
      };
      if (req.method === 'POST' && req.url === '/oapi/v1/jobs') {
        if (body.includes('/rejected ')) return send(422, { errors: `invalid args: ${QUOTING}` });
        if (body.includes('/cut ')) return send(422, { errors: STRADDLING });
        const id = jobs.size + 1;
        jobs.set(id, body.includes('/fails ') ? 'FAILURE' : 'SUCCESS');
        return send(200, recordedJob(id, 'PENDING'));
      }
      const m = /^\/oapi\/v1\/jobs\/(\d+)$/.exec(req.url ?? '');
      const state = m ? jobs.get(Number(m[1])) : undefined;
      if (req.method === 'GET' && state) return send(200, recordedJob(Number(m![1]), state));
      send(404, { message: `record not found: ${QUOTING}` });
    });
  });
  await new Promise<void>((r) => manager.listen(0, '127.0.0.1', r));
  managerURL = `http://127.0.0.1:${(manager.address() as AddressInfo).port}`;
}

const secret = (name: string, stringData: Record<string, string>) => createSecret(kc, ns, name, stringData);

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('redact'));
  await startRecordedManager();
  for (const i of [0, 1]) {
    replicas.push(
      await startModelServerEmulator({
        auth: { managementKey: MGMT_KEYS[i]!, apiKey: API_KEYS[i]!, inferenceKey: INFERENCE_KEYS[i]! },
        workerStartMs: 20,
      }),
    );
  }
  await secret('store', { access_key: ACCESS_KEY, secret_key: SECRET_KEY, session_token: SESSION_TOKEN });
  await secret('manager', {
    token: MANAGER_TOKEN,
    password: SHORT_PASSWORD,
    api_secret: ESCAPED_SECRET,
    session_key: ENCODED_SECRET,
  });
  await secret('ts-keys', { 'ts-0.json': replicas[0]!.keyFile()!, 'ts-1.json': replicas[1]!.keyFile()! });
  operator = await startManager(
    kc,
    [
      '--no-leader-elect',
      '--poll-backoff-start',
      '100ms',
      '--poll-backoff-max',
      '1s',
      // The manager emulator that spec.manager.url names (refused unless allowed).
      '--allowed-manager-hosts',
      '127.0.0.1',
    ],
    [modelPreheatController, (ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher() })],
    { logger: logs.logger },
  );
});

afterAll(async () => {
  await operator?.stop();
  await new Promise((r) => manager?.close(r));
  for (const r of replicas) await r.close();
});

const preheatSpec = {
  objectStorage: {
    type: 's3',
    bucket: 'models',
    region: 'eu-west-1',
    credentialsSecretRef: { name: 'store' },
    keys: ['m.mar'],
  },
  manager: { url: '', apiPath: '/oapi/v1', tokenSecretRef: { name: 'manager', key: 'token' } },
  retry: { limit: 0 },
};

async function createPreheat(name: string): Promise<void> {
  await sms.createModelPreheat(name, {
    ...preheatSpec,
    manager: { ...preheatSpec.manager, url: managerURL },
  });
}

const getPreheat = (name: string) => sms.getModelPreheat(name);
const getServedModel = (name: string) => sms.getServedModel(name);

/** Every place a secret would be a leak, in any of its forms, or the start of the straddling token. */
function leaks(text: string): string[] {
  const found = SECRETS.filter((s) => forms(s).some((f) => text.includes(f)));
  if (text.includes(MANAGER_TOKEN.slice(0, 12))) found.push(`the first 12 characters of ${MANAGER_TOKEN}`);
  return found;
}

describe('redaction (planted secrets)', () => {
  it('ModelPreheat success, failure and a rejected request; ServedModel success and failure: no secret anywhere', async () => {
    // ModelPreheat: a job that succeeds, one that fails, one the manager rejects.
    for (const name of ['succeeds', 'fails', 'rejected', 'cut']) await createPreheat(name);
    const succeeded = await waitFor('success recorded', async () => {
      const o = await getPreheat('succeeds');
      return o.status?.state === 'SUCCESS' ? o : undefined;
    });
    const failed = await waitFor('failure recorded', async () => {
      const o = await getPreheat('fails');
      return o.status?.conditions?.some((c) => c.reason === 'JobFailed') ? o : undefined;
    });
    const rejected = await waitFor('rejection recorded', async () => {
      const o = await getPreheat('rejected');
      return o.status?.conditions?.some((c) => c.reason === 'InvalidJobArgs') ? o : undefined;
    });
    const cut = await waitFor('long rejection recorded', async () => {
      const o = await getPreheat('cut');
      return o.status?.conditions?.some((c) => c.reason === 'InvalidJobArgs') ? o : undefined;
    });
    expect(cut.status!.conditions!.find((c) => c.type === 'Succeeded')!.message).toContain('xxx');
    // The paths were taken, and the per-peer results are there, redacted rather than dropped.
    expect(succeeded.status!.successTasks![0]!.url).toBe(
      'https://models.s3.eu-west-1.amazonaws.com/m.mar?X-Amz-Algorithm=***&X-Amz-Credential=***&X-Amz-Security-Token=***&X-Amz-Signature=***',
    );
    expect(succeeded.status!.successTasks![0]!.hostname).toBe('seed-***');
    expect(failed.status!.failureTasks![0]!.description).toContain('X-Amz-Signature=***');
    expect(failed.status!.conditions!.find((c) => c.type === 'Succeeded')!.message).toContain('GET https://');
    expect(rejected.status!.conditions!.find((c) => c.type === 'Succeeded')!.message).toContain('HTTP 422');
    // ... and the planted values did reach the operator and go through it.
    const sent = managerSaw.join('\n');
    expect(sent).toContain(`Bearer ${MANAGER_TOKEN}`);
    expect(sent).toContain(`X-Amz-Credential=${ACCESS_KEY}`);
    expect(sent).toContain(encodeURIComponent(SESSION_TOKEN));
    // The answers' text (as the operator decodes it) carried the escaped forms: the leak check below is not vacuous.
    expect(QUOTING).toContain(goJSONForm(ESCAPED_SECRET));
    expect(QUOTING).toContain(goQueryForm(ENCODED_SECRET));
    expect(QUOTING).toContain(encodeURIComponent(ENCODED_SECRET));
    expect(QUOTING).toContain(` ${SHORT_PASSWORD},`);

    // ServedModel: replica 0 registers; replica 1 fails with an answer quoting keys and the signed URL.
    await replicas[1]!.inject({
      mode: 'error',
      status: 500,
      type: 'DownloadArchiveException',
      message: `${QUOTING}; management key ${MGMT_KEYS[1]}, API key ${API_KEYS[1]}, inference ${INFERENCE_KEYS[1]}`,
      routes: ['POST /{plugin}/models'],
    });
    await ServiceEndpoints.of(
      kc,
      ns,
      'ts',
      replicas.map((r) => r.url),
    );
    await sms.createServedModel('served', {
      modelName: 'resnet-18',
      fileName: 'models/resnet-18.mar',
      modelServer: {
        service: { name: 'ts' },
        managementTokenSecretRef: { name: 'ts-keys', key: '{pod}.json' },
      },
      rollout: { seedFirst: false },
    });
    const served = await waitFor('1 ready, 1 failing', async () => {
      const o = await getServedModel('served');
      const degraded = o.status?.conditions?.find((c) => c.type === 'Degraded');
      return o.status?.ready === '1/2' && degraded?.status === 'True' ? o : undefined;
    });
    const failing = served.status!.replicas!.find((r) => r.pod === 'ts-1')!;
    expect(failing.message).toContain('DownloadArchiveException');
    // The server's own text is not quoted at all (an address behind a Service may be anything): its status and type.
    expect(failing.message).toContain('HTTP 500');
    expect(failing.message).not.toContain('X-Amz-Signature');

    // Deletion: unregisters and lets go (its Events pass the same boundary).
    await sms.deleteServedModel('served');
    await waitFor('ServedModel released', () => sms.servedModelGone('served'));
    await operator.manager.events.flush();
    const events = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
    const reasons = events.items.map((e) => e.reason);
    expect(reasons).toEqual(
      expect.arrayContaining([
        'JobSucceeded',
        'JobFailed',
        'InvalidJobArgs',
        'ModelRegistered',
        'Unregistered',
      ]),
    );
    const logText = logs.text();
    expect(logText).toContain('"level":"debug"');

    const everything = {
      preheats: await Promise.all(['succeeds', 'fails', 'rejected', 'cut'].map(getPreheat)),
      servedModel: served,
      events: events.items.map((e) => ({ reason: e.reason, note: e.note, action: e.action })),
    };
    expect(leaks(JSON.stringify(everything)), 'status, conditions or Events').toEqual([]);
    expect(leaks(logText), 'the debug log').toEqual([]);
  });
});
