/**
 * Scenario 5: the operator idle with 10,000 ModelPreheats (status already SUCCESS, written directly: no manager work)
 * and 1,000 ServedModels (static endpoints on 4 model-server emulators, converged before the window) in its caches.
 *
 * The operator runs as a SEPARATE process (`node bin/peerload.js operator ...`), first without leader election,
 * then with it. Once it has settled (every ServedModel Ready and no write for 10 s), a window of `idleSeconds`:
 * RSS from /proc/<pid>/status and CPU from /proc/<pid>/stat every second; apiserver requests from the apiserver's
 * own `apiserver_request_total` (before/after) and from the operator's `rest_client_requests_total`.
 * ServedModels with static endpoints re-check their replicas every 5 min ± 20 %: that is model-server traffic (counted on the
 * emulators), and must not rewrite their status when nothing changed (counted: status patches in the window).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { load } from 'js-yaml';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { KubeObject } from '../../src/runtime/index.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { startModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { freePort } from '../../test/support/ports.ts';
import { startProcess } from '../../test/support/process.ts';
import { GVR, apiserverRequestTotals, benchClient, diffTotals, newNamespace } from '../lib/kube.ts';
import { MiB, mapLimit, progress, sleep, stat, type Row } from '../lib/report.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const PREHEATS = 10_000;
const SERVED = 1_000;
const EMULATORS = 4;
const CLK_TCK = 100;

export interface S5Options {
  reps: number;
  idleSeconds: number;
}

function procSample(pid: number): { rss: number; cpuTicks: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // Fields after the command name (which may hold spaces): state is field 3; utime 14, stime 15.
  const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
  return { rss: rssKiB * 1024, cpuTicks: Number(f[11]) + Number(f[12]) };
}

async function operatorMetrics(port: number): Promise<Map<string, number>> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || !line) continue;
    const i = line.lastIndexOf(' ');
    out.set(line.slice(0, i), Number(line.slice(i + 1)));
  }
  return out;
}

const sumMatching = (m: Map<string, number>, re: RegExp) =>
  [...m].filter(([k]) => re.test(k)).reduce((a, [, v]) => a + v, 0);

interface Window {
  leaderElect: boolean;
  settleSeconds: number;
  cpuPercent: number;
  rssMiB: number;
  rssMaxMiB: number;
  operatorRequests: Record<string, number>;
  apiserverRequests: Record<string, number>;
  nonWatchNonLease: number;
  statusPatches: number;
  modelServerRequests: number;
  reconciles: number;
  /** The operator's own view of its memory at the end of the window (prom-client default metrics), MiB. */
  memory: Record<string, number>;
}

export async function scenario5(cp: ControlPlane, o: S5Options): Promise<{ rows: Row[]; raw: unknown }> {
  const kube = benchClient(cp);
  const work = await mkdtemp(join(tmpdir(), 'peerload-bench-idle-'));
  const fleet = await startModelServerFleet(EMULATORS, { registrationLatencyMs: 0, workerStartMs: 50 });
  const windows: Window[] = [];
  try {
    // ---- 10,000 ModelPreheats with status SUCCESS, written directly.
    const ns = await newNamespace(kube, 'bench5');
    const mph = kube.resource(GVR.modelPreheats);
    const t0 = Date.now();
    await mapLimit(
      Array.from({ length: PREHEATS }, (_, i) => i),
      32,
      async (i) => {
        const name = `p-${i}`;
        const created = await mph.create({
          apiVersion: 'peerload.io/v1alpha1',
          kind: 'ModelPreheat',
          metadata: { name, namespace: ns },
          spec: { url: `http://127.0.0.1:9/models/${name}.mar` },
        } as unknown as KubeObject);
        const gen = created.metadata.generation ?? 1;
        const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
        await mph.patchStatus(ns, name, {
          status: {
            observedGeneration: gen,
            state: 'SUCCESS',
            jobID: i + 1,
            groupID: `group_${String(i).padStart(12, '0')}`,
            managerURL: 'http://127.0.0.1:9',
            jobGeneration: gen,
            attempts: 1,
            startedAt: now,
            completedAt: now,
            tasks: [{ url: `http://127.0.0.1:9/models/${name}.mar`, taskID: '0'.repeat(64) }],
            successCount: 1,
            failureCount: 0,
            conditions: [
              {
                type: 'Succeeded',
                status: 'True',
                observedGeneration: gen,
                lastTransitionTime: now,
                reason: 'JobSucceeded',
                message: `preheat job ${i + 1} succeeded on 1 peer(s)`,
              },
            ],
          },
        });
      },
    );
    progress(
      `s5: ${PREHEATS} ModelPreheats with status SUCCESS in ${((Date.now() - t0) / 1000).toFixed(0)} s`,
    );
    // ---- 1,000 ServedModels, static endpoints (2 of the 4 emulators each), finalizer already in place.
    const sm = kube.resource(GVR.servedModels);
    await mapLimit(
      Array.from({ length: SERVED }, (_, i) => i),
      32,
      (i) =>
        sm.create({
          apiVersion: 'peerload.io/v1alpha1',
          kind: 'ServedModel',
          metadata: { name: `s-${i}`, namespace: ns, finalizers: ['peerload.io/unregister-model'] },
          spec: {
            modelName: `s-${i}`,
            fileName: `models/s-${i}.mar`,
            modelServer: { endpoints: [fleet.urls[i % EMULATORS]!, fleet.urls[(i + 1) % EMULATORS]!] },
            workers: { min: 1 },
          },
        } as unknown as KubeObject),
    );
    progress(`s5: ${SERVED} ServedModels created`);

    for (const leaderElect of [false, true]) {
      const port = await freePort();
      const profile = process.env['BENCH_PROFILE'] === '1';
      const args = [
        ...(profile
          ? [
              '--heapsnapshot-signal=SIGUSR2',
              '--cpu-prof',
              `--cpu-prof-dir=${join(ROOT, 'bench/results/profiles')}`,
            ]
          : []),
        join(ROOT, 'bin/peerload.js'),
        'operator',
        '--kubeconfig',
        cp.kubeconfigPath,
        leaderElect ? '--leader-elect' : '--no-leader-elect',
        '--leader-election-namespace',
        'default',
        '--metrics-address',
        `127.0.0.1:${port}`,
        // The bench reads the operator's own gauges over plain HTTP (no token to review).
        '--no-metrics-secure',
        '--log-level',
        'warn',
        // The ServedModels' static endpoints (refused unless allowed).
        '--allowed-endpoint-hosts',
        '127.0.0.1',
      ];
      if (profile) mkdirSync(join(ROOT, 'bench/results/profiles'), { recursive: true });
      const proc = startProcess(
        'operator',
        join(ROOT, 'node_modules/.bin/node'),
        args,
        join(work, `operator-${leaderElect}.log`),
        {
          cwd: profile ? join(ROOT, 'bench/results/profiles') : ROOT,
          // The operator runs with the Deployment's NODE_OPTIONS: the bench measures what is deployed.
          env: { ...process.env, ...deployedNodeOptions() },
        },
      );
      const pid = proc.child.pid!;
      try {
        // ---- settle: every ServedModel Ready, then no write by the operator and no request to the model servers for
        // 10 s (bounded: 5 minutes). Without the second part a restarted operator, whose ServedModels are already
        // Ready, "settled" while its start-up reconciles (2,000 describes) were still running into the window.
        const settleStart = Date.now();
        let lastActivity = -1;
        let quietSince = Date.now();
        for (;;) {
          if (Date.now() - settleStart > 300_000)
            throw new Error('the operator did not settle within 5 minutes');
          if (proc.child.exitCode !== null)
            throw new Error(`operator exited (${proc.child.exitCode}); log ${proc.logPath}`);
          await sleep(1000);
          let m: Map<string, number>;
          try {
            m = await operatorMetrics(port);
          } catch {
            continue;
          }
          const activity =
            sumMatching(m, /^rest_client_requests_total\{.*method="(POST|PATCH|DELETE)"/) +
            fleet.stats().totalRequests;
          if (activity !== lastActivity) {
            lastActivity = activity;
            quietSince = Date.now();
            continue;
          }
          if (Date.now() - quietSince < 10_000) continue;
          const list = await sm.list(ns, { limit: 2000 });
          const ready = list.items.filter((x) =>
            (
              (x['status'] as { conditions?: { type: string; status: string }[] } | undefined)?.conditions ??
              []
            ).some((c) => c.type === 'Ready' && c.status === 'True'),
          ).length;
          if (ready === SERVED) break;
          quietSince = Date.now();
        }
        const settleSeconds = (Date.now() - settleStart) / 1000;
        progress(
          `s5 (leader election ${leaderElect ? 'on' : 'off'}): settled after ${settleSeconds.toFixed(0)} s; measuring ${o.idleSeconds} s`,
        );

        // ---- the windows: `reps` consecutive windows of `idleSeconds` each
        for (let rep = 0; rep < o.reps; rep++) {
          const apiBefore = await apiserverRequestTotals(cp);
          const opBefore = await operatorMetrics(port);
          const msBefore = fleet.stats().totalRequests;
          const samples: { at: number; rss: number; cpuTicks: number }[] = [];
          const start = performance.now();
          while (performance.now() - start < o.idleSeconds * 1000) {
            samples.push({ at: performance.now(), ...procSample(pid) });
            await sleep(1000);
          }
          samples.push({ at: performance.now(), ...procSample(pid) });
          const opAfter = await operatorMetrics(port);
          const apiAfter = await apiserverRequestTotals(cp);
          const msAfter = fleet.stats().totalRequests;
          if (profile && rep === o.reps - 1) {
            // BENCH_PROFILE=1: where the idle operator's resident memory is (bench/tools/smaps-summary.ts reads the
            // copy), taken before the heap snapshot, which grows the process; then the snapshot
            // (bench/results/profiles/Heap.*.heapsnapshot).
            const row = leaderElect ? '5b' : '5a';
            for (const f of ['smaps', 'smaps_rollup'])
              writeFileSync(
                join(ROOT, 'bench/results/profiles', `${f}-${row}-${pid}.txt`),
                readFileSync(`/proc/${pid}/${f}`),
              );
            process.kill(pid, 'SIGUSR2');
            await sleep(15_000);
          }

          // CPU over the whole window (the 60 s re-checks come in bursts: a mean over the window, not per second).
          const first = samples[0]!;
          const last = samples[samples.length - 1]!;
          const cpuPercent =
            ((last.cpuTicks - first.cpuTicks) / CLK_TCK / ((last.at - first.at) / 1000)) * 100;
          const rssMiB = stat(samples.map((x) => x.rss / MiB)).median;
          const opDiff: Record<string, number> = {};
          for (const [k, v] of opAfter) {
            if (!k.startsWith('rest_client_requests_total')) continue;
            const d = v - (opBefore.get(k) ?? 0);
            if (d > 0) opDiff[k.replace('rest_client_requests_total', '')] = d;
          }
          const api = diffTotals(apiBefore, apiAfter);
          const nonWatchNonLease = Object.entries(api)
            .filter(([k]) => !k.startsWith('WATCH ') && !/ leases$/.test(k))
            .reduce((a, [, v]) => a + v, 0);
          const reconciles =
            sumMatching(opAfter, /^controller_runtime_reconcile_total/) -
            sumMatching(opBefore, /^controller_runtime_reconcile_total/);
          const memory: Record<string, number> = {};
          for (const [k, v] of opAfter) {
            if (
              /^nodejs_(heap_size_(total|used)_bytes|external_memory_bytes|heap_space_size_(used|total)_bytes)/.test(
                k,
              ) ||
              k.startsWith('process_resident_memory_bytes')
            )
              memory[k] = Math.round((v / MiB) * 10) / 10;
          }
          windows.push({
            memory,
            leaderElect,
            settleSeconds,
            cpuPercent,
            rssMiB,
            rssMaxMiB: Math.max(...samples.map((s) => s.rss / MiB)),
            operatorRequests: opDiff,
            apiserverRequests: api,
            nonWatchNonLease,
            statusPatches: api['PATCH servedmodels/status'] ?? 0,
            modelServerRequests: msAfter - msBefore,
            reconciles,
          });
          progress(
            `s5 (leader election ${leaderElect ? 'on' : 'off'}) window ${rep + 1}: CPU ${cpuPercent.toFixed(2)} %, RSS median ${rssMiB.toFixed(0)}, max ${windows.at(-1)!.rssMaxMiB.toFixed(0)} MiB; ` +
              `operator requests ${JSON.stringify(opDiff)}; apiserver ${JSON.stringify(api)}; model-server requests ${msAfter - msBefore}; reconciles ${reconciles}`,
          );
        }
      } finally {
        const t = Date.now();
        await proc.stop(30_000);
        progress(`s5: operator stopped (SIGTERM) in ${((Date.now() - t) / 1000).toFixed(1)} s`);
      }
    }
  } finally {
    await fleet.close();
    await kube.close();
    await rm(work, { recursive: true, force: true });
  }

  const rows: Row[] = [];
  for (const leaderElect of [false, true]) {
    const ws = windows.filter((w) => w.leaderElect === leaderElect);
    if (ws.length === 0) continue;
    const le = leaderElect ? 'leader election on' : 'leader election off';
    const scenario = `idle operator process, ${PREHEATS.toLocaleString('en')} ModelPreheats + ${SERVED.toLocaleString('en')} ServedModels, ${le}`;
    const suffix = leaderElect ? 'b' : 'a';
    const cpu = stat(ws.map((w) => w.cpuPercent));
    const rssMax = Math.max(...ws.map((w) => w.rssMaxMiB));
    const opNonWatch = ws.map((w) => Object.values(w.operatorRequests).reduce((a, b) => a + b, 0));
    const mem = ws.at(-1)!.memory;
    // The operator's own count (every request its client made) is the verdict; the apiserver's count also holds
    // the apiserver's own loopback traffic (its identity lease, the `kubernetes` Service endpoints). With leader
    // election a renewal is a GET and a PUT of the Lease every retry period (2 s).
    const requestsOK = ws.every((w, i) =>
      leaderElect
        ? Object.keys(w.operatorRequests).every((k) => /method="(GET|PUT)"/.test(k)) &&
          opNonWatch[i]! <= 2 * Math.ceil(o.idleSeconds / 2) + 2 &&
          opNonWatch[i]! <=
            (w.apiserverRequests['GET leases'] ?? 0) + (w.apiserverRequests['PUT leases'] ?? 0)
        : opNonWatch[i] === 0,
    );
    rows.push(
      {
        id: `5${suffix}1`,
        scenario,
        metric: `RSS (median of 1 s samples, per ${o.idleSeconds} s window)`,
        unit: 'MiB',
        value: stat(ws.map((w) => w.rssMiB)),
        target: '≤ 256 MiB',
        pass: rssMax <= 256,
        notes:
          `max RSS sample ${rssMax.toFixed(1)} MiB; settled ${ws[0]!.settleSeconds.toFixed(0)} s after start; at the end V8 heap used ` +
          `${mem['nodejs_heap_size_used_bytes'] ?? '?'} MiB of ${mem['nodejs_heap_size_total_bytes'] ?? '?'} MiB total, external ${mem['nodejs_external_memory_bytes'] ?? '?'} MiB`,
      },
      {
        id: `5${suffix}2`,
        scenario,
        metric: `CPU, % of one core (utime+stime over each ${o.idleSeconds} s window)`,
        unit: '%',
        value: cpu,
        target: '≤ 2 %',
        pass: cpu.median <= 2,
        notes: `per window: ${ws.map((w) => `${w.reconciles} reconciles, ${w.modelServerRequests} model-server requests`).join('; ')} (static-endpoint re-checks every 5 min ± 20 %; a window right after start may hold the start-up reconciles)`,
      },
      {
        id: `5${suffix}3`,
        scenario,
        metric: `operator's non-watch apiserver requests per ${o.idleSeconds} s${leaderElect ? ' (Lease GET/PUT only?)' : ''}`,
        unit: '',
        value: stat(opNonWatch),
        target: '0 except lease renewals',
        pass: requestsOK,
        notes:
          `last window: apiserver_request_total delta ${JSON.stringify(ws.at(-1)!.apiserverRequests)} (${ws.at(-1)!.nonWatchNonLease} outside WATCH and leases: ` +
          `the apiserver's own loopback requests for the \`kubernetes\` Service endpoints; its identity-lease renewals are in "leases"); ` +
          `operator's own count ${JSON.stringify(ws.at(-1)!.operatorRequests)}; ServedModel status patches per window ${ws.map((w) => w.statusPatches).join('/')}`,
      },
    );
  }
  return { rows, raw: { preheats: PREHEATS, servedModels: SERVED, emulators: EMULATORS, windows } };
}

/** NODE_OPTIONS of the operator container in deploy/base/deployment.yaml, if it sets one. */
export function deployedNodeOptions(): { NODE_OPTIONS?: string } {
  const deployment = load(readFileSync(join(ROOT, 'deploy/base/deployment.yaml'), 'utf8')) as {
    spec: { template: { spec: { containers: { env?: { name: string; value?: string }[] }[] } } };
  };
  const value = deployment.spec.template.spec.containers[0]?.env?.find(
    (e) => e.name === 'NODE_OPTIONS',
  )?.value;
  return value ? { NODE_OPTIONS: value } : {};
}
