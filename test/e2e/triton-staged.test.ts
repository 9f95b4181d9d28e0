/**
 * A Staged rollout (`spec.rollout.strategy: Staged`) on REAL Triton 2.51.0 through the operator, on the REAL
 * Dragonfly network (the run's shared one, test/support/shared-dragonfly.ts: its three node peers), from MinIO behind
 * a counting proxy (its own port: its URLs, so its task ids, are this file's alone). Three Triton replicas, one per
 * node peer (the shared network has three: a fourth replica would need a fourth peer, its agent on the same port of
 * the same address), each with a real `peerload agent`, found through a Service's EndpointSlices. A client sends the
 * echo model's inference (the answer names the version) to every replica without pause all through:
 *   - version 1 (Rolling) Ready on the three;
 *   - version 2, Staged: each agent places its files while version 1 alone answers (no answer of 2 before the switch
 *     starts), then every replica loads it at once (Triton serves the newest loaded version: the load is the
 *     switch) and version 1 goes: 0 failed requests, every replica on 2, the window two versions answered measured
 *     by the client and by the operator (status.rollout.switchWindowMs, the loads included);
 *   - version 3, Staged, whose model.py refuses to initialise on one replica (a marker file in that replica's model
 *     directory, as a node without what the version needs): the switch's load fails there, every replica is back on
 *     2 (the ones that loaded 3 unload it), 3's placed files are removed, RolledBack with LoadFailed in status and
 *     Warning Events, 0 failed requests, and the rollback read nothing from MinIO (version 2's files were not read
 *     again: they never left the replicas);
 *   - version 4, Staged with a canary (one replica) probed with a real inference of version 4 whose output must be
 *     version 2's (the echo adds its version: 4 answers 5 where 2 answered 3): only the canary ever answers 4, it
 *     is rolled back at its first probe, before any other replica loaded 4, CanaryFailed saying what the probe got
 *     against what was expected, 0 failed requests, nothing read from MinIO from the hold's start on.
 */
import * as k8s from '@kubernetes/client-node';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ServedModel } from '../../src/api/index.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import type { DragonflyView } from '../support/dragonfly.ts';
import { waitFor } from '../support/kube.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';
import { startTritonFleet, type TritonFleet } from '../support/triton-fleet.ts';
import { inferEcho, servedVersions } from '../support/triton-echo.ts';

const BUCKET = fileBucket('staged');
const TOKEN = 'triton-staged-agent-token-01234567';
const REPLICAS = 3;
/** The replica version 3 fails to load on. */
const REFUSING = 1;
const MARKER = 'refuse-3';

/** Version 3's model.py: version 1's, refusing to initialise where the marker file is. */
const REFUSING_MODEL_PY = ECHO_MODEL_PY.replace(
  '    def initialize(self, args):\n',
  `    def initialize(self, args):\n        if os.path.exists(os.path.join(args["model_repository"], "${MARKER}")):\n            raise ValueError("this node cannot run version 3")\n`,
);

let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
let ns: string;
let peerload: PeerloadNamespace;
let work: string;
let network: DragonflyView;
let minio: MinIO;
let origin: CountingProxy;
let fleet: TritonFleet;

const prefixOf = (version: string) => `triton/echo/${version}/`;

beforeAll(async () => {
  ({ kc, ns, core, peerload } = await testNamespace('triton-staged'));
  work = await mkdtemp(join(tmpdir(), 'peerload-triton-staged-'));
  network = await sharedDragonfly(inject('dragonflyService'), REPLICAS);
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  origin = await startCountingProxy(minio.endpoint);
  for (const v of ['1', '2', '3', '4']) {
    const objects: Record<string, Buffer> = {
      'model.py': Buffer.from(v === '3' ? REFUSING_MODEL_PY : ECHO_MODEL_PY),
      'offset.json': Buffer.from(JSON.stringify({ offset: Number(v) })),
      'weights.bin': randomBytes(5 * 1024 * 1024),
    };
    for (const [p, body] of Object.entries(objects))
      await minio.putObject(BUCKET, `${prefixOf(v)}${p}`, body);
  }
  fleet = await startTritonFleet({
    kc,
    core,
    ns,
    work,
    network,
    agentToken: TOKEN,
    models: ['echo'],
    secrets: { 's3-credentials': { access_key: minio.accessKey, secret_key: minio.secretKey } },
    agentCredentials: minio,
    flags: [],
  });
  await writeFile(join(fleet.replicas[REFUSING]!.root, 'echo', MARKER), 'no\n');
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await fleet?.stop();
  await Promise.allSettled([origin?.close(), minio?.stop()]);
  if (work) await rm(work, { recursive: true, force: true });
});

const spec = (version: string) => ({
  modelName: 'echo',
  version,
  files: { prefix: prefixOf(version) },
  modelServer: {
    driver: 'triton',
    service: { name: 'triton' },
    agent: { port: fleet.agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
  },
  preheat: {
    create: true,
    objectStorage: {
      type: 's3',
      bucket: BUCKET,
      endpoint: origin.url,
      pathStyle: true,
      region: minio.region,
      credentialsSecretRef: { name: 's3-credentials' },
    },
    manager: { url: network.managerURL, signInSecretRef: { name: 'manager-user' } },
  },
});

interface Answer {
  replica: number;
  at: number;
  version?: string;
  error?: string;
}

/** Inference requests to every replica, one after another on each, until stopped: what each answered, and when. */
function client(): { answers: Answer[]; stop(): Promise<Answer[]> } {
  const answers: Answer[] = [];
  let stopped = false;
  const loops = fleet.replicas.map(async (r, replica) => {
    while (!stopped) {
      try {
        const a = await inferEcho(r.server, [1]);
        answers.push({ replica, at: Date.now(), version: a.model_version });
      } catch (err) {
        answers.push({ replica, at: Date.now(), error: (err as Error).message });
      }
      await new Promise((res) => setTimeout(res, 20));
    }
  });
  return {
    answers,
    async stop() {
      stopped = true;
      await Promise.all(loops);
      return answers;
    },
  };
}

const failuresOf = (answers: Answer[]) =>
  fleet.replicas.map((_, i) => answers.filter((a) => a.replica === i && a.error !== undefined));

/** Per replica: its last answer of `from`, its first of `to` (ms after `t0`), and its longest wait between answers. */
function timeline(answers: Answer[], from: string, to: string, t0: number): string {
  return fleet.replicas
    .map((_, i) => {
      const mine = answers.filter((a) => a.replica === i);
      const lastOld = mine.filter((a) => a.version === from).at(-1)?.at;
      const firstNew = mine.find((a) => a.version === to)?.at;
      const gap = Math.max(0, ...mine.slice(1).map((a, k) => a.at - mine[k]!.at));
      const rel = (t: number | undefined) => (t === undefined ? '-' : String(t - t0));
      return `replica ${i}: last ${from} at ${rel(lastOld)} ms, first ${to} at ${rel(firstNew)} ms, longest wait ${gap} ms`;
    })
    .join('; ');
}

/** From the first answer of `to` on any replica to the last of `from` after it: the window clients met both. */
function mixedWindow(answers: Answer[], from: string, to: string): number {
  const first = answers.find((a) => a.version === to)?.at;
  if (first === undefined) return 0;
  const lastOld = answers.filter((a) => a.version === from && a.at >= first).at(-1)?.at;
  return lastOld === undefined ? 0 : lastOld - first;
}

async function rollout(what: string, ok: (sm: ServedModel) => boolean): Promise<ServedModel> {
  return (await waitFor(
    what,
    async () => {
      const o = await peerload.getServedModel('echo');
      return o.status?.observedGeneration === o.metadata?.generation && ok(o) ? o : undefined;
    },
    { timeoutMs: 300_000, intervalMs: 500 },
  ))!;
}

async function eventsOf(reason: string): Promise<k8s.EventsV1Event[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items.filter((e) => e.reason === reason && e.regarding?.name === 'echo');
}

const absent = (path: string) =>
  stat(path).then(
    () => false,
    () => true,
  );

describe('a Staged rollout on real Triton replicas, a client answering all through', () => {
  it('version 1 is Ready on every replica', async () => {
    await peerload.createServedModel('echo', spec('1'));
    await rollout('echo Ready at 1', (o) => o.status?.ready === `${REPLICAS}/${REPLICAS}`);
    for (const r of fleet.replicas) expect(await servedVersions(r.server, 'echo')).toEqual(['1']);
  });

  it('version 2, Staged: placed while 1 answers, then every replica switches at once: 0 failed requests', async () => {
    const traffic = client();
    await peerload.patchServedModel('echo', {
      spec: {
        version: '2',
        files: { prefix: prefixOf('2') },
        rollout: { strategy: 'Staged', progressDeadlineSeconds: 300 },
      },
    });
    const sm = await rollout(
      'echo rolled out to 2',
      (o) => o.status?.rollout?.phase === 'Complete' && o.status.ready === `${REPLICAS}/${REPLICAS}`,
    );
    // A few answers after the old version went.
    await new Promise((res) => setTimeout(res, 1000));
    const answers = await traffic.stop();
    const r = sm.status!.rollout!;
    const window = mixedWindow(answers, '1', '2');
    const perReplica = fleet.replicas.map((_, i) => answers.filter((a) => a.replica === i).length);
    console.log(
      `staged switch to 2 on ${REPLICAS} Tritons: status.rollout ${JSON.stringify(r)}; client window ${window} ms; requests per replica ${perReplica.join(', ')}; from the switch's start: ${timeline(answers, '1', '2', Date.parse(r.switchStartTime!))}`,
    );
    expect(failuresOf(answers)).toEqual(fleet.replicas.map(() => []));
    expect(r).toMatchObject({ version: '2', previousVersion: '1', replicas: REPLICAS, switched: REPLICAS });
    expect(r.switchWindowMs).toBeGreaterThanOrEqual(0);
    // Nothing answered 2 before the switch started: staging placed the files only.
    const switchStart = Date.parse(r.switchStartTime!);
    expect(answers.filter((a) => a.version === '2' && a.at < switchStart)).toEqual([]);
    // Each replica moved once: after its first answer of 2, never 1 again.
    for (const i of fleet.replicas.keys()) {
      const mine = answers.filter((a) => a.replica === i);
      const first = mine.findIndex((a) => a.version === '2');
      expect(first, `replica ${i}`).toBeGreaterThan(0);
      expect(
        mine.slice(first).filter((a) => a.version !== '2'),
        `replica ${i}`,
      ).toEqual([]);
      expect(
        mine.slice(0, first).every((a) => a.version === '1'),
        `replica ${i}`,
      ).toBe(true);
    }
    // Clients met both versions for no longer than the operator's window (the loads sent together).
    expect(window).toBeLessThanOrEqual(r.switchWindowMs! + 200);
    for (const rep of fleet.replicas) {
      expect(await servedVersions(rep.server, 'echo')).toEqual(['2']);
      await waitFor('version 1 removed', () => absent(join(rep.root, 'echo/1')), {
        timeoutMs: 60_000,
        intervalMs: 500,
      });
    }
  });

  it('version 3 fails to load on one replica: every replica back on 2, RolledBack, 0 failed requests, nothing read from MinIO', async () => {
    const v2Reads = () => origin.requests.filter((q) => q.url.includes(prefixOf('2'))).length;
    const readsBefore = v2Reads();
    const v2Files = await Promise.all(fleet.replicas.map((r) => stat(join(r.root, 'echo/2/weights.bin'))));
    const traffic = client();
    await peerload.patchServedModel('echo', { spec: { version: '3', files: { prefix: prefixOf('3') } } });
    const sm = await rollout('echo rolled back from 3', (o) => o.status?.rollout?.phase === 'RolledBack');
    await new Promise((res) => setTimeout(res, 1000));
    const answers = await traffic.stop();
    const r = sm.status!.rollout!;
    const rollingBack = await eventsOf('RolloutRollingBack');
    const rolledBack = await eventsOf('RolloutRolledBack');
    const served3 = fleet.replicas.map((_, i) => answers.some((a) => a.replica === i && a.version === '3'));
    const undone = answers.filter((a) => a.version === '3').at(-1)?.at;
    console.log(
      `staged rollout of 3 rolled back: status.rollout ${JSON.stringify(r)}; replicas that answered 3 for a while: ${served3.join(', ')}; ${answers.length} answers; from the switch's start: ${timeline(answers, '2', '3', Date.parse(r.switchStartTime!))}; the last answer of 3 ${undone === undefined ? '-' : undone - Date.parse(r.switchStartTime!)} ms after it, RolledBack at ${Date.parse(r.completionTime!) - Date.parse(r.switchStartTime!)} ms`,
    );
    expect(r).toMatchObject({ version: '3', previousVersion: '2', reason: 'LoadFailed' });
    // The server's own words stay in its log (a replica's answer text is never repeated in status): the load's
    // refusal, named.
    expect(r.message).toMatch(/could not load 3: .*load echo failed \(HTTP 400\)/);
    expect(r.message).toContain(`triton-${REFUSING}`);
    for (const c of ['Ready', 'Degraded'])
      expect(sm.status?.conditions?.find((x) => x.type === c)?.reason, c).toBe('RolledBack');
    expect(rollingBack.map((e) => e.type)).toEqual(['Warning']);
    expect(rolledBack.map((e) => e.type)).toEqual(['Warning']);
    // Every request answered, on every replica; the refusing one never served 3.
    expect(failuresOf(answers)).toEqual(fleet.replicas.map(() => []));
    expect(served3[REFUSING]).toBe(false);
    for (const [i, rep] of fleet.replicas.entries()) {
      expect(await servedVersions(rep.server, 'echo'), `replica ${i}`).toEqual(['2']);
      expect(await absent(join(rep.root, 'echo/3')), `replica ${i}: 3's files removed`).toBe(true);
      // Version 2 never left: the same file, not fetched again.
      const now = await stat(join(rep.root, 'echo/2/weights.bin'));
      expect([now.ino, now.mtimeMs], `replica ${i}`).toEqual([v2Files[i]!.ino, v2Files[i]!.mtimeMs]);
      const last = answers.filter((a) => a.replica === i).at(-1);
      expect(last?.version, `replica ${i}`).toBe('2');
    }
    expect(v2Reads()).toBe(readsBefore);
    // Nothing at all was read from MinIO from the switch on: the switch loaded placed files, the rollback unloaded.
    const since = Date.parse(r.switchStartTime!);
    expect(
      origin.requests
        .filter((q) => performance.timeOrigin + (q.startedAt ?? 0) >= since)
        .map((q) => `${q.method} ${q.url.split('?')[0]}`),
    ).toEqual([]);
  });

  it('version 4 answers wrongly to the canary probe: rolled back before any other replica served it, 0 failed requests, nothing read from MinIO', async () => {
    const holdMs = 30_000;
    const v2Files = await Promise.all(fleet.replicas.map((r) => stat(join(r.root, 'echo/2/weights.bin'))));
    const traffic = client();
    await peerload.patchServedModel('echo', {
      spec: {
        version: '4',
        files: { prefix: prefixOf('4') },
        rollout: {
          canary: {
            replicas: 1,
            holdSeconds: holdMs / 1000,
            // What version 2 answers to INPUT0 [1]; version 4's echo answers [5].
            probe: {
              body: JSON.stringify({
                inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1], data: [1] }],
              }),
              expect: { status: 200, fields: [{ path: 'outputs.0.data', equals: '[3]' }] },
            },
          },
        },
      },
    });
    const sm = await rollout('echo rolled back from 4', (o) => o.status?.rollout?.phase === 'RolledBack');
    await new Promise((res) => setTimeout(res, 1000));
    const answers = await traffic.stop();
    const r = sm.status!.rollout!;
    expect(r).toMatchObject({ version: '4', previousVersion: '2', reason: 'CanaryFailed' });
    expect(r.canary).toMatchObject({ passes: 0, failures: 1 });
    expect(r.canary!.replicas).toHaveLength(1);
    const label = r.canary!.replicas[0]!;
    const c = Number(/^pod triton-(\d+) /.exec(label)?.[1]);
    expect(c, label).toBeGreaterThanOrEqual(0);
    expect(r.message).toContain(
      `canary ${label} failed its probe: got outputs.0.data = "[5]", expected "[3]"`,
    );
    // At its first probe, not at the hold's end.
    expect(Date.parse(r.completionTime!)).toBeLessThan(Date.parse(r.canary!.holdUntil!));
    for (const x of ['Ready', 'Degraded'])
      expect(sm.status?.conditions?.find((y) => y.type === x)?.reason, x).toBe('RolledBack');
    expect((await eventsOf('RolloutRollingBack')).map((e) => e.type)).toContain('Warning');
    const rolledBack = (await eventsOf('RolloutRolledBack')).filter((e) => e.note?.includes('CanaryFailed'));
    expect(rolledBack.map((e) => e.type)).toEqual(['Warning']);
    // Every request answered; only the canary ever answered 4; every replica's last answer is 2's.
    expect(failuresOf(answers)).toEqual(fleet.replicas.map(() => []));
    const v4 = fleet.replicas.map((_, i) => answers.filter((a) => a.replica === i && a.version === '4'));
    for (const [i, rep] of fleet.replicas.entries()) {
      if (i === c) expect(v4[i]!.length, 'the canary answered 4').toBeGreaterThan(0);
      else expect(v4[i], `replica ${i}`).toEqual([]);
      expect(answers.filter((a) => a.replica === i).at(-1)?.version, `replica ${i}`).toBe('2');
      expect(await servedVersions(rep.server, 'echo'), `replica ${i}`).toEqual(['2']);
      expect(await absent(join(rep.root, 'echo/4')), `replica ${i}: 4's files removed`).toBe(true);
      const now = await stat(join(rep.root, 'echo/2/weights.bin'));
      expect([now.ino, now.mtimeMs], `replica ${i}`).toEqual([v2Files[i]!.ino, v2Files[i]!.mtimeMs]);
    }
    // Nothing read from MinIO from the hold's start on (the canary's load had answered): the probe, and the
    // rollback (4 unloaded, its placed files removed).
    const holdStart = Date.parse(r.canary!.holdUntil!) - holdMs;
    expect(
      origin.requests
        .filter((q) => performance.timeOrigin + (q.startedAt ?? 0) >= holdStart)
        .map((q) => `${q.method} ${q.url.split('?')[0]}`),
    ).toEqual([]);
    console.log(
      `canary of 4 rolled back: status.rollout ${JSON.stringify(r)}; the canary (replica ${c}) answered 4 ${v4[c]!.length} times, ` +
        `from ${v4[c]![0]!.at - holdStart} to ${v4[c]!.at(-1)!.at - holdStart} ms after the hold's start; the others 0; ` +
        `${answers.length} answers, 0 failed; RolledBack ${Date.parse(r.completionTime!) - holdStart} ms after the hold's start`,
    );
  });

  it('deleting the ServedModel unloads every replica', async () => {
    await peerload.deleteServedModel('echo');
    await waitFor('echo gone', () => peerload.servedModelGone('echo'), {
      timeoutMs: 180_000,
      intervalMs: 1000,
    });
    for (const r of fleet.replicas) expect(await servedVersions(r.server, 'echo')).toEqual([]);
  });
});
