/**
 * Scenario 7 (head-of-line): 4 ServedModels whose registrations take 60 s each (4 emulated replicas whose plugin
 * answers after 60 s), then 20 small ServedModels on 4 other replicas (registration 200 ms, workers READY 300 ms
 * after scaling). Measured: the 20 small ones' create → all Ready, next to the same 20 alone (reference, same
 * run, sides alternating). The operator runs with its default --workers 4: before registrations ran in the
 * background, the 4 big rollouts held all 4 workers for minutes and the small ones waited behind them.
 */
import { createServedModelController } from '../../src/controllers/index.ts';
import type { KubeObject } from '../../src/runtime/index.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startModelServerFleet } from '../../test/support/modelserver-emulator.ts';
import { startManager } from '../../test/support/runtime-harness.ts';
import {
  GVR,
  benchClient,
  createServedModel,
  deleteServedModelAndWait,
  isReady,
  newNamespace,
  watchObjects,
} from '../lib/kube.ts';
import { mapLimit, progress, sleep, stat, until, within, type Row } from '../lib/report.ts';

const BIG = 4;
const BIG_REGISTRATION_MS = 60_000;
const SMALL = 20;
const REPLICAS = 4;

export interface S7Options {
  reps: number;
}

export async function scenario7(cp: ControlPlane, o: S7Options): Promise<{ rows: Row[]; raw: unknown }> {
  const kube = benchClient(cp);
  const slow = await startModelServerFleet(REPLICAS, { registrationLatencyMs: BIG_REGISTRATION_MS });
  const fast = await startModelServerFleet(REPLICAS, { registrationLatencyMs: 200, workerStartMs: 300 });
  const ns = await newNamespace(kube, 'bench7');
  const kc = kubeConfig(cp.kubeconfigPath);
  const slowSvc = new ServiceEndpoints(kc, ns, 'slow');
  for (const [i, url] of slow.urls.entries()) await slowSvc.add(`slow-${i}`, url);
  const fastSvc = new ServiceEndpoints(kc, ns, 'fast');
  for (const [i, url] of fast.urls.entries()) await fastSvc.add(`fast-${i}`, url);
  const operator = await startManager(
    kc,
    ['--no-leader-elect', '--namespace', ns, '--poll-backoff-start', '100ms', '--poll-backoff-max', '2s'],
    [(ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher(), cleanupGraceMs: 5_000 })],
  );
  const ready = new Map<string, number>();
  const watch = watchObjects<KubeObject>(kube, GVR.servedModels, ns, (_t, obj, at) => {
    if (!ready.has(obj.metadata.name) && isReady(obj)) ready.set(obj.metadata.name, at);
  });
  const create = (name: string, svc: string) =>
    createServedModel(kube, ns, name, {
      modelName: name,
      fileName: `models/${name}.mar`,
      modelServer: { service: { name: svc } },
      workers: { min: 1 },
    });
  /** Creates the 20 small ones (5 at a time, as `kubectl apply -f dir/` would) and waits for all to be Ready. */
  const smallRollout = async (tag: string): Promise<number> => {
    const names = Array.from({ length: SMALL }, (_, i) => `small-${tag}-${i}`);
    const t0 = performance.now();
    await mapLimit(names, 5, (n) => create(n, 'fast'));
    await until(`${tag}: ${SMALL} small Ready`, 600_000, () => names.every((n) => ready.has(n)));
    const ms = Math.max(...names.map((n) => ready.get(n)!)) - t0;
    await mapLimit(names, 5, (n) => deleteServedModelAndWait(kube, ns, n));
    return ms;
  };
  const alone: number[] = [];
  const loaded: number[] = [];
  const bigReadyDuring: number[] = [];
  try {
    await within('operator informers synced', 30_000, operator.manager.informers.waitForSync());
    await watch.ready;
    await smallRollout('warmup');
    for (let rep = 0; rep < o.reps; rep++) {
      const sides = rep % 2 === 0 ? (['alone', 'loaded'] as const) : (['loaded', 'alone'] as const);
      for (const side of sides) {
        for (const e of fast.instances) e.wipe();
        if (side === 'alone') {
          alone.push(await smallRollout(`a${rep}`));
          progress(`s7 rep ${rep + 1} alone: ${alone.at(-1)!.toFixed(0)} ms`);
          continue;
        }
        const big = Array.from({ length: BIG }, (_, i) => `big-${rep}-${i}`);
        for (const n of big) await create(n, 'slow');
        // The big rollouts are under way (their seed replicas downloading) before the small ones come.
        await sleep(2_000);
        loaded.push(await smallRollout(`l${rep}`));
        bigReadyDuring.push(big.filter((n) => ready.has(n)).length);
        progress(
          `s7 rep ${rep + 1} behind ${BIG} 60 s registrations: ${loaded.at(-1)!.toFixed(0)} ms (big Ready meanwhile: ${bigReadyDuring.at(-1)})`,
        );
        await mapLimit(big, BIG, (n) => deleteServedModelAndWait(kube, ns, n));
      }
    }
  } finally {
    watch.stop();
    await operator.stop();
    await slow.close();
    await fast.close();
    await kube.close();
  }
  const ratio = stat(loaded.map((ms, i) => ms / alone[i]!));
  return {
    rows: [
      {
        id: '7',
        scenario: `${SMALL} small ServedModels created behind ${BIG} whose registrations take 60 s (--workers 4)`,
        metric: `create → all ${SMALL} Ready, seen by a watch`,
        unit: 's',
        value: stat(loaded.map((m) => m / 1000)),
        reference: stat(alone.map((m) => m / 1000)),
        referenceLabel: `(the same ${SMALL} alone)`,
        ratio,
        target: '≤ 1.5× alone',
        pass: ratio.median <= 1.5,
        notes: `${REPLICAS} replicas per Service; big ServedModels Ready while the small ones rolled out: ${bigReadyDuring.join(', ')} (none expected: 60 s)`,
      },
    ],
    raw: { aloneMs: alone, loadedMs: loaded, bigReadyDuring },
  };
}
