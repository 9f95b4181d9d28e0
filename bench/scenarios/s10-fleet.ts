/**
 * Scenario 10 (fleet scale, on the manager emulator in its v2.5.1 profile: JWT, 10 job creations per second per
 * named scheduler cluster with 429 past it, and a job ending 30 s after its create, the real manager's first poll):
 *   - 10a: 1 ServedModel on 1,000 nodes (1,000 emulated replicas, one per node, node targeting);
 *   - 10b: then 100 ServedModels on 20 nodes each (created at once; each node hosts two of them).
 * The operator runs as a separate process (s10-fleet-child.ts, the Deployment's NODE_OPTIONS), its RSS sampled every
 * second. Measured: create → Ready; the manager jobs each ServedModel caused; 429s answered and any reported as a
 * failure (a ModelPreheat phase UNREACHABLE or FAILURE, a Warning Event); the largest ServedModel status; the
 * operator's RSS; the Events written.
 * Targets: all Ready, jobs ≤ ⌈nodes / 100⌉ per ServedModel, no 429 reported as failure, RSS ≤ 300 MiB, every
 * ServedModel object ≤ 256 KiB.
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { ModelPreheat, ServedModel } from '../../src/api/index.ts';
import type { KubeObject } from '../../src/runtime/index.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { ServiceEndpoints } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startManagerEmulator } from '../../test/support/manager-emulator.ts';
import { startModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { GVR, benchClient, createSecret, isReady, newNamespace, watchObjects } from '../lib/kube.ts';
import { progress, stat, until, type Row } from '../lib/report.ts';
import { deployedNodeOptions } from './s5-idle.ts';
import { emulatedManagerPreheat } from '../../test/support/resources.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const NODES = 1000;
const SMALL = 100;
const SMALL_NODES = 20;
const JOB_LATENCY_MS = 30_000;
const MiB = 2 ** 20;
const ipOf = (i: number) => `10.200.${Math.floor(i / 250)}.${(i % 250) + 1}`;

/** Runs `fn` over `items`, `n` at a time. */
async function each<T>(items: readonly T[], n: number, fn: (t: T, i: number) => Promise<unknown>) {
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}

export async function scenario10(cp: ControlPlane): Promise<{ rows: Row[]; raw: unknown }> {
  const cleanup: (() => Promise<unknown>)[] = [];
  try {
    const kube = benchClient(cp);
    const kc = kubeConfig(cp.kubeconfigPath);
    const ns = await newNamespace(kube, 'bench10');
    const manager = await startManagerEmulator({
      version: 'v2.5.1',
      jobLatencyMs: JOB_LATENCY_MS,
      runningStates: true,
      nodePeers: Array.from({ length: NODES }, (_, i) => ({ ip: ipOf(i), hostname: `node-peer-${i}` })),
    });
    cleanup.push(() => manager.close());
    const fleet = await startModelServerFleet(NODES, { registrationLatencyMs: 200, workerStartMs: 100 });
    cleanup.push(() => fleet.close());
    progress(`s10: ${NODES} Nodes, EndpointSlices of ${NODES + SMALL * SMALL_NODES} pods`);
    const nodes = Array.from({ length: NODES }, (_, i) => `${ns}-n${i}`);
    await each(nodes, 16, (name, i) => ServiceEndpoints.createNode(kc, name, ipOf(i)));
    cleanup.push(() =>
      each(nodes, 16, (name) =>
        kube
          .resource(GVR.nodes)
          .delete(undefined, name)
          .catch(() => undefined),
      ),
    );
    const big = new ServiceEndpoints(kc, ns, 'big');
    await each(fleet.urls, 16, (url, i) => big.add(`big-${i}`, url, true, nodes[i]));
    const small = Array.from({ length: SMALL }, (_, k) => k);
    await each(small, 4, async (k) => {
      const svc = new ServiceEndpoints(kc, ns, `small-${k}`);
      for (let j = 0; j < SMALL_NODES; j++) {
        const i = (k * SMALL_NODES + j) % NODES;
        await svc.add(`small-${k}-${j}`, fleet.urls[i]!, true, nodes[i]);
      }
    });
    for (const [name, stringData] of [
      ['s3', { access_key: 'AKIAEXAMPLE', secret_key: 'secret-example' }],
      ['manager-user', { username: 'root', password: 'dragonfly' }],
    ] as const)
      await createSecret(kube, ns, name, stringData);

    const child = spawn(
      join(ROOT, 'node_modules/.bin/node'),
      [
        join(ROOT, 'bench/scenarios/s10-fleet-child.ts'),
        cp.kubeconfigPath,
        '--no-leader-elect',
        '--namespace',
        ns,
        '--allowed-manager-hosts',
        '127.0.0.1',
        '--log-level',
        'warn',
      ],
      { env: { ...process.env, ...deployedNodeOptions() }, stdio: ['ignore', 'pipe', 'inherit'] },
    );
    cleanup.push(async () => {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    });
    for await (const line of createInterface({ input: child.stdout! })) if (line === 'ready') break;
    const rss: number[] = [];
    const sampler = setInterval(() => {
      const status = readFileSync(`/proc/${child.pid}/status`, 'utf8');
      rss.push(Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN) / 1024);
    }, 1_000);
    cleanup.push(async () => clearInterval(sampler));

    const ready = new Map<string, number>();
    const watch = watchObjects<KubeObject>(kube, GVR.servedModels, ns, (_t, obj, at) => {
      if (!ready.has(obj.metadata.name) && isReady(obj)) ready.set(obj.metadata.name, at);
    });
    cleanup.push(async () => watch.stop());
    await watch.ready;
    const create = (name: string, service: string) =>
      kube.resource(GVR.servedModels).create({
        apiVersion: 'peerload.io/v1alpha1',
        kind: 'ServedModel',
        metadata: { name, namespace: ns },
        spec: {
          modelName: name,
          fileName: `models/${name}.mar`,
          modelServer: { service: { name: service } },
          rollout: { maxConcurrent: 100 },
          preheat: emulatedManagerPreheat(manager.url),
        },
      } as KubeObject);

    progress('s10a: 1 ServedModel on 1,000 nodes');
    const t0 = performance.now();
    await create('big', 'big');
    await until('big Ready', 900_000, () => ready.has('big'));
    const bigMs = ready.get('big')! - t0;
    progress(`s10a: Ready after ${(bigMs / 1000).toFixed(1)} s`);
    progress('s10b: 100 ServedModels on 20 nodes each, created at once');
    const t1 = performance.now();
    await each(small, 20, (k) => create(`small-${k}`, `small-${k}`));
    await until('all small Ready', 900_000, () => small.every((k) => ready.has(`small-${k}`)));
    const smallMs = small.map((k) => ready.get(`small-${k}`)! - t1);
    progress(`s10b: all Ready after ${(Math.max(...smallMs) / 1000).toFixed(1)} s`);
    // The jobs end (30 s after their create): status then counts every node preheated.
    await new Promise((r) => setTimeout(r, JOB_LATENCY_MS + 10_000));

    const sms = (await kube.resource<ServedModel>(GVR.servedModels).list(ns)).items as ServedModel[];
    const bytes = (o: unknown) => Buffer.byteLength(JSON.stringify(o));
    const sizes = new Map(sms.map((sm) => [sm.metadata.name, bytes(sm)]));
    const mphs = (await kube.resource<ModelPreheat>(GVR.modelPreheats).list(ns)).items as ModelPreheat[];
    const jobs = [...manager.jobs.values()].filter((j) => j.type === 'preheat');
    const jobsOf = (sm: string) =>
      jobs.filter((j) => new RegExp(`^peerload ${ns}/${sm}-preheat(-\\d+)? `).test(String(j.bio ?? '')))
        .length;
    const creates = manager.counters.byRoute['POST /api/v1/jobs'] ?? 0;
    const limited = creates - jobs.length;
    const loud = mphs.filter((m) => ['UNREACHABLE', 'FAILURE', 'BLOCKED'].includes(m.status?.phase ?? ''));
    const events = (await kube.resource<KubeObject>(GVR.events).list(ns)).items as (KubeObject & {
      type?: string;
      reason?: string;
    })[];
    const warnings = events.filter((e) => e.type === 'Warning');
    const bigSM = sms.find((s) => s.metadata.name === 'big')!;
    const smallJobs = small.map((k) => jobsOf(`small-${k}`));
    const raw = {
      bigMs,
      smallMs,
      bigJobs: jobsOf('big'),
      smallJobs,
      creates,
      limited,
      loud: loud.map((m) => `${m.metadata.name}: ${m.status?.phase}`),
      warnings: warnings.map((e) => `${e.reason}`),
      events: events.length,
      rssMiB: rss,
      sizes: Object.fromEntries(sizes),
      bigStatus: { ...bigSM.status, replicas: undefined, replicaRows: bigSM.status?.replicas?.length },
    };
    progress(`s10 ${JSON.stringify({ ...raw, rssMiB: undefined, sizes: undefined, smallMs: undefined })}`);
    const maxSize = Math.max(...sizes.values());
    const rssMax = Math.max(...rss);
    const allReady = ready.has('big') && small.every((k) => ready.has(`small-${k}`));
    const rows: Row[] = [
      {
        id: '10a',
        scenario: '10 fleet: 1 ServedModel on 1,000 nodes (emulator, v2.5.1 profile)',
        metric: 'create → Ready; jobs created',
        unit: 's',
        value: stat([bigMs / 1000]),
        target: 'all Ready, jobs ≤ 10',
        pass: ready.has('big') && jobsOf('big') <= Math.ceil(NODES / 100),
        notes: `${jobsOf('big')} jobs; nodePreheat ${JSON.stringify(bigSM.status?.nodePreheat)}; object ${sizes.get('big')} bytes`,
      },
      {
        id: '10b',
        scenario: '10 fleet: 100 ServedModels on 20 nodes each, created at once',
        metric: 'create → each Ready',
        unit: 's',
        value: stat(smallMs.map((m) => m / 1000)),
        target: 'all Ready, 1 job each',
        pass: allReady && smallJobs.every((n) => n <= 1),
        notes: `jobs per ServedModel: max ${Math.max(...smallJobs)}, total ${smallJobs.reduce((a, b) => a + b, 0)}`,
      },
      {
        id: '10c',
        scenario: '10 fleet: the manager rate limit (10 creations/s per cluster)',
        metric: '429s answered / reported as a failure',
        unit: 'count',
        value: stat([limited]),
        target: 'none reported as failure',
        pass: loud.length === 0 && warnings.length === 0,
        notes: `${creates} creates, ${jobs.length} jobs; ModelPreheats UNREACHABLE/FAILURE/BLOCKED at the end: ${loud.length}; Warning Events ${warnings.length}; Events in all ${events.length}`,
      },
      {
        id: '10d',
        scenario: '10 fleet: operator RSS (separate process, the Deployment NODE_OPTIONS)',
        metric: 'RSS, 1 s samples',
        unit: 'MiB',
        value: stat(rss),
        target: '≤ 300 MiB',
        pass: rssMax <= 300,
        notes: `max ${rssMax.toFixed(0)} MiB`,
      },
      {
        id: '10e',
        scenario: '10 fleet: largest ServedModel object',
        metric: 'JSON bytes',
        unit: 'KiB',
        value: stat([maxSize / 1024]),
        target: '≤ 256 KiB',
        pass: maxSize <= 256 * 1024,
        notes: `big: ${((sizes.get('big') ?? 0) / 1024).toFixed(1)} KiB with ${bigSM.status?.replicas?.length} replica rows`,
      },
    ];
    void MiB;
    return { rows, raw };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}
