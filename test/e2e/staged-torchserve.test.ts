/**
 * Staged rollouts (spec.rollout.strategy: Staged) on REAL TorchServe 0.12.0 replicas with the endpoint plugin, the
 * operator as a process of its own (`peerload operator`, as a cluster runs it) and a client sending predictions to
 * every replica all through the rollout. The two archives' handlers answer with their version, so the client sees
 * which version served each request:
 * - a good v2: no request fails, every replica switches, and both versions answer only within the switch window;
 * - a v2 whose handler raises at load on one replica: every replica back on v1, no request fails, RolledBack in
 *   status and Events, and the rollback reads nothing from the origin (MinIO behind a counting proxy) nor the peer;
 * - the operator killed with SIGKILL while a replica's set-default is held up (a proxy in front of that replica's
 *   management port delays it): a new operator finishes the switch, and no replica is ever without a default;
 * - a canary (spec.rollout.canary, one replica, probed with a real prediction of v2 on the inference port) whose v2
 *   answers as v1 does: it alone serves v2 for the hold, then the others switch at once;
 * - a canary whose v2 loads but answers wrongly (a label v1 never gave): rolled back before any other replica
 *   served v2, CanaryFailed saying what the probe got, no request failed, nothing read from the origin.
 * Each replica listens on a loopback address of its own (127.0.0.1 to 127.0.0.N), all at one inference port, as
 * pods do: a probe's port is one number in the spec, sent to the canary's own address.
 * The replicas download through the peer-proxy emulator: the P2P network adds nothing to these claims.
 */
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, request, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { freePort } from '../support/ports.ts';
import { waitFor } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { buildModelArchive } from '../support/model-archive.ts';
import { startOperatorProcess, type OperatorProcess } from '../support/operator-process.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../support/plugin.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { startTorchServe, type TorchServe } from '../support/torchserve.ts';
import { mixedWindow, predictions, versionedHandler } from '../support/versioned-model.ts';
import type { RolloutStatus, ServedModel } from '../../src/api/index.ts';

/** Replicas: 4 by default (what this machine runs reliably beside other tests); PEERLOAD_STAGED_REPLICAS to change. */
const N = Number(process.env['PEERLOAD_STAGED_REPLICAS'] ?? 4);
const BUCKET = 'models';
/** The replica whose environment breaks the `bad` model's version 2 at load. */
const BROKEN = N - 1;

let kc: k8s.KubeConfig;
let ns = '';
let sms: PeerloadNamespace;
let work = '';
let minio: MinIO;
let origin: CountingProxy;
let peer: PeerProxy;
const replicas: TorchServe[] = [];
let hold: HoldingProxy;
let operator: OperatorProcess | undefined;
/** Every replica's inference port, each on its own address. */
let inferencePort = 0;

/** Replica i's loopback address. */
const hostOf = (i: number) => `127.0.0.${i + 1}`;

async function putArchive(
  model: string,
  version: string,
  fields: Record<string, string> = {},
): Promise<void> {
  const dir = join(work, `${model}-v${version}`);
  await mkdir(dir, { recursive: true });
  const mar = await buildModelArchive(dir, {
    modelName: model,
    version,
    handler: versionedHandler(model, version, fields),
  });
  await minio.putObject(BUCKET, `${model}/v${version}.mar`, await readFile(mar.path));
}

interface HoldingProxy {
  url: string;
  /** Holds every `set-default` of `model` for `ms` before passing it on; `held` resolves at the first one. */
  holdSetDefault(model: string, ms: number): { held: Promise<void> };
  close(): Promise<void>;
}

/** A proxy in front of one replica's management port: passes everything on, holding `set-default` when told to. */
async function startHoldingProxy(target: string): Promise<HoldingProxy> {
  const upstream = new URL(target);
  let rule: { model: string; ms: number; seen: () => void } | undefined;
  const server: Server = createServer((req, res) => {
    const forward = () => {
      const out = request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: req.url,
          headers: req.headers,
        },
        (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers);
          up.pipe(res);
        },
      );
      out.on('error', () => res.destroy());
      req.pipe(out);
    };
    const r = rule;
    if (
      r &&
      req.method === 'PUT' &&
      new RegExp(`^/models/${r.model}/[^/]+/set-default`).test(req.url ?? '')
    ) {
      r.seen();
      // Passed on even when the caller is gone by then: the request had reached the replica's side of the wire.
      setTimeout(forward, r.ms);
    } else forward();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    holdSetDefault(model, ms) {
      let seen = () => {};
      const held = new Promise<void>((r) => (seen = r));
      rule = { model, ms, seen };
      return { held };
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/**
 * Every `everyMs`, each replica's default of `model` asked directly (GET /models/<model>: the default's
 * description): every answer that is not exactly one version is a violation; `defaults` keeps what was seen.
 */
function sampleDefaults(model: string, everyMs = 50) {
  const violations: string[] = [];
  const seen: Set<string>[] = replicas.map(() => new Set());
  let samples = 0;
  let running = true;
  const loop = (async () => {
    while (running) {
      await Promise.all(
        replicas.map(async (ts, i) => {
          try {
            const res = await fetch(`${ts.managementURL}/models/${model}`, {
              signal: AbortSignal.timeout(30_000),
            });
            const text = await res.text();
            const body = res.status === 200 ? (JSON.parse(text) as { modelVersion: string }[]) : [];
            if (res.status !== 200 || body.length !== 1)
              violations.push(`replica ${i}: ${res.status} ${text.slice(0, 200)}`);
            for (const d of body) seen[i]!.add(d.modelVersion);
          } catch (err) {
            violations.push(`replica ${i}: ${String(err)}`);
          }
        }),
      );
      samples++;
      await new Promise((r) => setTimeout(r, everyMs));
    }
  })();
  return {
    violations,
    seen,
    samples: () => samples,
    async stop() {
      running = false;
      await loop;
    },
  };
}

/** The versions `model` has registered on replica `i`. */
async function versionsOn(i: number, model: string): Promise<string[]> {
  const res = await fetch(`${replicas[i]!.managementURL}/models/${model}/all`);
  if (res.status === 404) return [];
  expect(res.status).toBe(200);
  return ((await res.json()) as { modelVersion: string }[]).map((d) => d.modelVersion).sort();
}

async function defaultOn(i: number, model: string): Promise<string | undefined> {
  const res = await fetch(`${replicas[i]!.managementURL}/models/${model}`);
  if (res.status === 404) return undefined;
  return ((await res.json()) as { modelVersion: string }[])[0]?.modelVersion;
}

async function startOperator(): Promise<OperatorProcess> {
  return startOperatorProcess(inject('kubeconfigPath'), [
    '--no-leader-elect',
    '--leader-election-namespace',
    ns,
    '--namespace',
    ns,
    '--allowed-endpoint-hosts',
    '127.0.0.0/24',
    '--poll-backoff-start',
    '200ms',
    '--poll-backoff-max',
    '1s',
  ]);
}

/** Replica 0 through the holding proxy, the others directly. */
const endpoints = () => replicas.map((ts, i) => (i === 0 ? hold.url : ts.managementURL));

const spec = (model: string, version: string, rollout: Record<string, unknown> = {}) => ({
  modelName: model,
  version,
  fileName: `${model}/v${version}.mar`,
  modelServer: { endpoints: endpoints() },
  workers: { min: 1 },
  rollout: { seedFirst: false, maxConcurrent: N, strategy: 'Staged', ...rollout },
});

/**
 * spec.rollout.canary: one replica, held `holdSeconds`, probed with a prediction of the new version on the
 * inference port whose answer must carry v1's label.
 */
const canaryRollout = (holdSeconds: number) => ({
  canary: {
    replicas: 1,
    holdSeconds,
    probe: {
      port: inferencePort,
      body: '{"data": [1]}',
      expect: { status: 200, fields: [{ path: 'label', equals: 'cat' }] },
    },
  },
});

/** The replica a status label (its endpoint) names. */
function replicaOf(label: string): number {
  const i = endpoints().findIndex((e) => label.includes(e));
  expect(i, `the replica of ${label}`).toBeGreaterThanOrEqual(0);
  return i;
}

const get = (name: string) => sms.getServedModel(name);
const condition = (o: ServedModel, type: string) => o.status?.conditions?.find((c) => c.type === type);

function untilRollout(name: string, phase: RolloutStatus['phase'], timeoutMs = 180_000) {
  return waitFor(
    `${name} rollout ${phase}`,
    async () => {
      const o = await get(name);
      if (o.status?.rollout?.phase === phase) return o;
      throw new Error(
        `status.rollout ${JSON.stringify(o.status?.rollout)}; replicas ${JSON.stringify(o.status?.replicas?.map((r) => r.message ?? r.phase))}`,
      );
    },
    { timeoutMs, intervalMs: 100 },
  );
}

async function onV1(name: string, rollout: Record<string, unknown> = {}): Promise<void> {
  await sms.createServedModel(name, spec(name, '1', rollout));
  await sms.untilReadyOn(name, `${N}/${N}`, { timeoutMs: 240_000, intervalMs: 200 });
  for (let i = 0; i < N; i++) expect(await defaultOn(i, name)).toBe('1');
}

/** Deleted, and its versions gone from every replica (their workers free the machine for the next test). */
async function remove(name: string): Promise<void> {
  await sms.deleteServedModel(name);
  await waitFor(
    `${name} unregistered everywhere`,
    async () => (await Promise.all(replicas.map((_, i) => versionsOn(i, name)))).every((v) => v.length === 0),
    { timeoutMs: 120_000, intervalMs: 500 },
  );
}

async function eventsOf(name: string): Promise<{ type: string; reason: string; note: string }[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items
    .filter((e) => e.regarding?.name === name)
    .map((e) => ({ type: e.type ?? '', reason: e.reason ?? '', note: e.note ?? '' }));
}

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('tsstaged'));
  work = await mkdtemp(join(tmpdir(), 'peerload-staged-ts-'));
  const jar = pluginJar();
  [minio, peer] = await Promise.all([startMinIO(), startPeerProxy()]);
  await minio.createBucket(BUCKET);
  origin = await startCountingProxy(minio.endpoint);
  for (const [m, v] of [
    ['good', '1'],
    ['good', '2'],
    ['bad', '1'],
    ['bad', '2'],
    ['resume', '1'],
    ['resume', '2'],
  ] as const)
    await putArchive(m, v);
  // The canaries' probe checks the label: the promoted v2 answers as v1, the wrong one does not.
  for (const [m, v, label] of [
    ['promote', '1', 'cat'],
    ['promote', '2', 'cat'],
    ['wrong', '1', 'cat'],
    ['wrong', '2', 'dog'],
  ] as const)
    await putArchive(m, v, { label });
  const config = join(work, 'p2p-endpoint.json');
  // The object storage reached through the counting proxy: every byte the replicas read from the origin counted.
  await writePluginConfig(config, {
    ...minioPluginConfig(minio, BUCKET, peer.url),
    object_storage: {
      ...(minioPluginConfig(minio, BUCKET, peer.url)['object_storage'] as object),
      endpoint: origin.url,
    },
  });
  const jarPath = await jar;
  inferencePort = await freePort();
  // One after another: the JVMs' start is most of the machine's two cores.
  for (let i = 0; i < N; i++)
    replicas.push(
      await startTorchServe({
        pluginJars: [jarPath],
        tokenAuth: false,
        config: {
          // Retiring the old version and rolling back unregister (DELETE /models/...): 405 in 0.12 without it.
          enable_model_api: 'true',
          inference_address: `http://${hostOf(i)}:${inferencePort}`,
          management_address: `http://${hostOf(i)}:${await freePort(hostOf(i))}`,
        },
        vmargs: '-Xmx256m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError',
        env: {
          P2P_ENDPOINT_CONFIG: config,
          ...(i === BROKEN ? { PEERLOAD_E2E_BROKEN: 'bad-2' } : {}),
        },
      }),
    );
  hold = await startHoldingProxy(replicas[0]!.managementURL);
  operator = await startOperator();
}, 900_000);

afterAll(async () => {
  await operator?.stop();
  await hold?.close();
  await Promise.allSettled(replicas.map((r) => r.stop()));
  await Promise.allSettled([origin?.close(), peer?.close(), minio?.stop()]);
  if (work) await rm(work, { recursive: true, force: true });
});

describe.sequential(`a Staged rollout on ${N} real TorchServe replicas`, () => {
  it('a good v2: no request fails, every replica switches, both versions answer only within the switch', async () => {
    await onV1('good');
    const client = predictions(replicas, 'good');
    const defaults = sampleDefaults('good');
    try {
      await sms.patchServedModel('good', { spec: { version: '2', fileName: 'good/v2.mar' } });
      const done = await untilRollout('good', 'Complete');
      await sms.untilReadyOn('good', `${N}/${N}`, { timeoutMs: 60_000, intervalMs: 200 });
      // A few answers of v2 on every replica after the end.
      await new Promise((r) => setTimeout(r, 1_000));
      const answers = await client.stop();
      await defaults.stop();
      const r = done.status!.rollout!;
      expect(r).toMatchObject({ version: '2', previousVersion: '1', staged: N, switched: N });
      const failed = answers.filter((a) => a.status !== 200);
      expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([]);
      for (let i = 0; i < N; i++) {
        const mine = answers.filter((a) => a.replica === i);
        expect(mine.at(0)?.version, `replica ${i}`).toBe('1');
        expect(mine.at(-1)?.version, `replica ${i}`).toBe('2');
        // Once v2, never v1 again.
        const firstV2 = mine.findIndex((a) => a.version === '2');
        expect(
          mine.slice(firstV2).every((a) => a.version === '2'),
          `replica ${i}`,
        ).toBe(true);
        expect(await versionsOn(i, 'good')).toEqual(['2']);
      }
      expect(defaults.violations).toEqual([]);
      const clientWindow = mixedWindow(answers, '1', '2');
      console.log(
        `good: ${N} replicas, ${answers.length} predictions, 0 failed; switchWindowMs ${r.switchWindowMs}, ` +
          `client-side mixed window ${clientWindow} ms; ${defaults.samples()} default samples`,
      );
      expect(r.switchWindowMs).toBeLessThan(1_000);
      expect(clientWindow).toBeLessThan(1_000);
      const reasons = (await eventsOf('good')).map((e) => e.reason);
      for (const reason of ['RolloutStaging', 'RolloutSwitching', 'RolloutRetiring', 'RolloutComplete'])
        expect(reasons).toContain(reason);
    } finally {
      await client.stop();
      await defaults.stop();
    }
    await remove('good');
  }, 600_000);

  it('a v2 that cannot load on one replica: every replica back on v1, no request fails, nothing read from the origin', async () => {
    await onV1('bad', { progressDeadlineSeconds: 20 });
    const client = predictions(replicas, 'bad');
    const defaults = sampleDefaults('bad');
    let rollingBack: number | undefined;
    const watch = setInterval(() => {
      void get('bad').then((o) => {
        if (o.status?.rollout?.phase === 'RollingBack') rollingBack ??= performance.now();
      });
    }, 100);
    try {
      await sms.patchServedModel('bad', { spec: { version: '2', fileName: 'bad/v2.mar' } });
      // Every replica but the broken one stages v2 (its archive downloaded once, from the origin).
      await waitFor(
        'bad v2 registered on every replica',
        async () =>
          (await Promise.all(replicas.map((_, i) => versionsOn(i, 'bad')))).every((v) => v.includes('2')),
        { timeoutMs: 120_000, intervalMs: 200 },
      );
      const v2Reads = origin.requests.filter((q) => q.url.includes('bad/v2')).length;
      expect(v2Reads).toBeGreaterThan(0);
      const originBefore = origin.requests.length;
      const peerBefore = peer.requests.length;
      const back = await untilRollout('bad', 'RolledBack', 120_000);
      const rolledBack = performance.now();
      clearInterval(watch);
      const answers = await client.stop();
      await defaults.stop();
      // The rollback read nothing: not from the origin, not through the peer.
      expect(origin.requests.slice(originBefore)).toEqual([]);
      expect(peer.requests.length - peerBefore).toBe(0);
      const r = back.status!.rollout!;
      expect(r).toMatchObject({ version: '2', previousVersion: '1', reason: 'ProgressDeadlineExceeded' });
      expect(r.message).toMatch(/progressDeadlineSeconds/);
      for (let i = 0; i < N; i++) {
        expect(await defaultOn(i, 'bad'), `replica ${i}`).toBe('1');
        expect(await versionsOn(i, 'bad'), `replica ${i}`).toEqual(['1']);
      }
      // Every request answered, by v1 only: no replica served v2.
      const failed = answers.filter((a) => a.status !== 200);
      expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([]);
      expect(new Set(answers.map((a) => a.version))).toEqual(new Set(['1']));
      expect(defaults.violations).toEqual([]);
      expect(condition(back, 'Degraded')).toMatchObject({ status: 'True', reason: 'RolledBack' });
      expect(condition(back, 'Ready')).toMatchObject({ status: 'False', reason: 'RolledBack' });
      const warnings = (await eventsOf('bad')).filter((e) => e.type === 'Warning').map((e) => e.reason);
      expect(warnings).toContain('RolloutRollingBack');
      expect(warnings).toContain('RolloutRolledBack');
      // The rollback's time: from the first look that found it RollingBack to the first that found it RolledBack
      // (100 ms looks; none when one pass did it all).
      console.log(
        `bad: ${N} replicas, ${answers.length} predictions, 0 failed, all v1; v2 read ${v2Reads} times from the ` +
          `origin while staging, 0 during the rollback; rollback ` +
          `${rollingBack === undefined ? 'within one pass' : `${Math.round(rolledBack - rollingBack)} ms`} ` +
          `(RollingBack seen to RolledBack seen); completionTime ${r.completionTime}, lastProgressTime ${r.lastProgressTime}`,
      );
    } finally {
      clearInterval(watch);
      await client.stop();
      await defaults.stop();
    }
    await remove('bad');
  }, 600_000);

  it('the operator killed with SIGKILL mid-switch: a new one finishes it, no replica ever without one default', async () => {
    await onV1('resume');
    const client = predictions(replicas, 'resume');
    const defaults = sampleDefaults('resume');
    try {
      // Replica 0's set-default held 8 s: the switch is under way when the operator dies.
      const { held } = hold.holdSetDefault('resume', 8_000);
      await sms.patchServedModel('resume', { spec: { version: '2', fileName: 'resume/v2.mar' } });
      await held;
      // The others' set-defaults went at once: wait for them, so the kill lands mid-switch.
      await waitFor(
        'the replicas not held switched',
        async () =>
          (await Promise.all(replicas.slice(1).map((_, i) => defaultOn(i + 1, 'resume')))).every(
            (d) => d === '2',
          ),
        { timeoutMs: 30_000, intervalMs: 50 },
      );
      const killedAt = performance.now();
      await operator!.process.kill('SIGKILL');
      expect(operator!.process.child.signalCode).toBe('SIGKILL');
      const mid = await defaultOn(0, 'resume');
      const status = (await get('resume')).status?.rollout;
      console.log(`resume: killed with replica 0 on ${mid}, status.rollout ${JSON.stringify(status)}`);
      expect(mid).toBe('1');
      operator = await startOperator();
      const done = await untilRollout('resume', 'Complete', 120_000);
      const finishedMs = Math.round(performance.now() - killedAt);
      await sms.untilReadyOn('resume', `${N}/${N}`, { timeoutMs: 60_000, intervalMs: 200 });
      await new Promise((r) => setTimeout(r, 500));
      const answers = await client.stop();
      await defaults.stop();
      expect(done.status?.rollout).toMatchObject({ version: '2', previousVersion: '1', switched: N });
      for (let i = 0; i < N; i++) {
        expect(await defaultOn(i, 'resume')).toBe('2');
        expect(await versionsOn(i, 'resume')).toEqual(['2']);
      }
      expect(defaults.violations).toEqual([]);
      for (const s of defaults.seen) expect([...s].sort()).toEqual(['1', '2']);
      const failed = answers.filter((a) => a.status !== 200);
      expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([]);
      const rolledBack = (await eventsOf('resume')).filter((e) => e.reason.startsWith('RolloutRoll'));
      expect(rolledBack).toEqual([]);
      console.log(
        `resume: ${N} replicas, ${defaults.samples()} samples of every default (never none, never two), ` +
          `${answers.length} predictions, 0 failed; Complete ${finishedMs} ms after the kill; ` +
          `client-side mixed window ${mixedWindow(answers, '1', '2')} ms`,
      );
    } finally {
      await client.stop();
      await defaults.stop();
    }
    await remove('resume');
  }, 600_000);

  it('a canary whose v2 passes its probes: it alone serves v2 for the hold, then the others switch at once', async () => {
    const holdMs = 5_000;
    await onV1('promote', canaryRollout(holdMs / 1000));
    const client = predictions(replicas, 'promote');
    try {
      await sms.patchServedModel('promote', { spec: { version: '2', fileName: 'promote/v2.mar' } });
      const done = await untilRollout('promote', 'Complete');
      // A few answers of v2 on every replica after the end.
      await new Promise((r) => setTimeout(r, 1_000));
      const answers = await client.stop();
      const r = done.status!.rollout!;
      expect(r).toMatchObject({ version: '2', previousVersion: '1', switched: N });
      expect(r.canary).toMatchObject({ failures: 0, promoted: true });
      expect(r.canary!.replicas).toHaveLength(1);
      // Probed as the hold began and as it ended at least.
      expect(r.canary!.passes).toBeGreaterThanOrEqual(2);
      const c = replicaOf(r.canary!.replicas[0]!);
      const failed = answers.filter((a) => a.status !== 200);
      expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([]);
      // The client's clock (performance.now) against the operator's holdUntil: the same machine's clock.
      const holdUntil = Date.parse(r.canary!.holdUntil!) - performance.timeOrigin;
      const firstV2 = replicas.map(
        (_, i) => answers.find((a) => a.replica === i && a.version === '2')?.received,
      );
      for (let i = 0; i < N; i++) {
        const mine = answers.filter((a) => a.replica === i);
        expect(firstV2[i], `replica ${i}`).toBeDefined();
        const first = mine.findIndex((a) => a.version === '2');
        expect(
          mine.slice(first).every((a) => a.version === '2'),
          `replica ${i}: once v2, never v1 again`,
        ).toBe(true);
        expect(await versionsOn(i, 'promote'), `replica ${i}`).toEqual(['2']);
        if (i === c) continue;
        // The others served v1 until the hold was over: no answer of v2 sent before holdUntil.
        expect(
          mine.filter((a) => a.version === '2' && a.sent < holdUntil - 50),
          `replica ${i}`,
        ).toEqual([]);
        expect(firstV2[i]! - firstV2[c]!, `replica ${i}`).toBeGreaterThanOrEqual(holdMs - 250);
      }
      const others = firstV2.filter((_, i) => i !== c) as number[];
      const reasons = (await eventsOf('promote')).map((e) => e.reason);
      for (const reason of ['RolloutCanary', 'RolloutSwitching', 'RolloutComplete'])
        expect(reasons).toContain(reason);
      console.log(
        `promote: ${N} replicas, canary replica ${c} (${r.canary!.replicas[0]}), ${r.canary!.passes} probes passed; ` +
          `${answers.length} predictions, 0 failed; the canary's first v2 answer ${Math.round(holdUntil - firstV2[c]!)} ms ` +
          `before holdUntil, the others' ${Math.round(Math.min(...others) - holdUntil)} to ` +
          `${Math.round(Math.max(...others) - holdUntil)} ms after it; switchWindowMs ${r.switchWindowMs}`,
      );
    } finally {
      await client.stop();
    }
    await remove('promote');
  }, 600_000);

  it('a v2 that answers wrongly to the canary probe: rolled back before any other replica served it, no request fails, nothing read from the origin', async () => {
    await onV1('wrong', canaryRollout(30));
    const client = predictions(replicas, 'wrong');
    try {
      const patched = performance.now();
      await sms.patchServedModel('wrong', { spec: { version: '2', fileName: 'wrong/v2.mar' } });
      // Staged on every replica (its archive read from the origin) before the canary switches.
      await waitFor(
        'wrong v2 registered on every replica',
        async () =>
          (await Promise.all(replicas.map((_, i) => versionsOn(i, 'wrong')))).every((v) => v.includes('2')),
        // Often: the canary switches, fails and is rolled back within a few passes of the last registration.
        { timeoutMs: 120_000, intervalMs: 50 },
      );
      const originBefore = origin.requests.length;
      const peerBefore = peer.requests.length;
      const back = await untilRollout('wrong', 'RolledBack', 120_000);
      // A few answers after the rollback.
      await new Promise((r) => setTimeout(r, 500));
      const answers = await client.stop();
      const r = back.status!.rollout!;
      expect(r).toMatchObject({ version: '2', previousVersion: '1', reason: 'CanaryFailed' });
      expect(r.canary).toMatchObject({ passes: 0, failures: 1 });
      expect(r.canary!.replicas).toHaveLength(1);
      const label = r.canary!.replicas[0]!;
      const c = replicaOf(label);
      expect(r.message).toContain(`canary ${label} failed its probe: got label = "dog", expected "cat"`);
      // At the first probe, not at the hold's end.
      expect(Date.parse(r.completionTime!)).toBeLessThan(Date.parse(r.canary!.holdUntil!));
      // The rollback read nothing: not from the origin, not through the peer (v1 never left the replicas).
      expect(origin.requests.slice(originBefore)).toEqual([]);
      expect(peer.requests.length - peerBefore).toBe(0);
      const failed = answers.filter((a) => a.status !== 200);
      expect(failed, JSON.stringify(failed.slice(0, 5))).toEqual([]);
      // Only the canary ever answered v2, and for a while only; every replica's last answer is v1's.
      const v2 = replicas.map((_, i) => answers.filter((a) => a.replica === i && a.version === '2'));
      for (let i = 0; i < N; i++) {
        if (i === c) expect(v2[i]!.length, 'the canary served v2').toBeGreaterThan(0);
        else expect(v2[i], `replica ${i}`).toEqual([]);
        expect(answers.filter((a) => a.replica === i).at(-1)?.version, `replica ${i}`).toBe('1');
        expect(await defaultOn(i, 'wrong'), `replica ${i}`).toBe('1');
        expect(await versionsOn(i, 'wrong'), `replica ${i}`).toEqual(['1']);
      }
      expect(condition(back, 'Degraded')).toMatchObject({ status: 'True', reason: 'RolledBack' });
      expect(condition(back, 'Ready')).toMatchObject({ status: 'False', reason: 'RolledBack' });
      const warnings = (await eventsOf('wrong')).filter((e) => e.type === 'Warning');
      expect(warnings.map((e) => e.reason)).toContain('RolloutRollingBack');
      expect(warnings.find((e) => e.reason === 'RolloutRolledBack')?.note).toContain('CanaryFailed');
      const canaryV2 = v2[c]!;
      console.log(
        `wrong: ${N} replicas, canary replica ${c}; ${r.message}; ${answers.length} predictions, 0 failed; ` +
          `the canary answered v2 ${canaryV2.length} times over ${Math.round(canaryV2.at(-1)!.received - canaryV2[0]!.sent)} ms, ` +
          `the others 0; RolledBack ${Math.round(Date.parse(r.completionTime!) - performance.timeOrigin - patched)} ms after the patch, ` +
          `${Math.round(Date.parse(r.canary!.holdUntil!) - Date.parse(r.completionTime!))} ms before the hold's end; ` +
          `0 origin and 0 peer reads from the staging's end on`,
      );
    } finally {
      await client.stop();
    }
    await remove('wrong');
  }, 600_000);
});
