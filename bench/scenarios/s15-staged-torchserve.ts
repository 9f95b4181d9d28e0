/**
 * Scenario 15 (a Staged rollout on real TorchServe 0.12.0 with the endpoint plugin): 4 replicas named as static
 * endpoints, archives from MinIO behind a counting proxy through the peer-proxy emulator, the operator in-process, a
 * client sending predictions to every replica throughout (each archive's handler answers with its version).
 * Each repetition:
 *   - 15a: version 1 → 2 (good): status.rollout.switchWindowMs, and the client-side window in which both versions
 *          answered (first v2 request sent → last v1 answer received);
 *   - 15b: version 1 → 2 whose handler raises at load on the last replica, progressDeadlineSeconds 10: the rollback
 *          (the status first seen RollingBack → first seen RolledBack, 100 ms looks), with what the origin served
 *          during it.
 * Targets: 15a both windows < 1 s, no failed prediction; 15b rollback < 5 s, nothing read from the origin, no failed
 * prediction, every answer v1.
 */
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ServedModel } from '../../src/api/index.ts';
import { createServedModelController } from '../../src/controllers/index.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { startCountingProxy } from '../../test/support/counting-proxy.ts';
import { loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { startMinIO } from '../../test/support/minio.ts';
import { buildModelArchive } from '../../test/support/model-archive.ts';
import { startPeerProxy } from '../../test/support/peer-proxy.ts';
import { minioPluginConfig, pluginJar, writePluginConfig } from '../../test/support/plugin.ts';
import { soloOperatorFlags, startManager } from '../../test/support/runtime-harness.ts';
import { startTorchServe, type TorchServe } from '../../test/support/torchserve.ts';
import { mixedWindow, predictions, versionedHandler } from '../../test/support/versioned-model.ts';
import { GVR, benchClient, createServedModel, deleteServedModelAndWait, newNamespace } from '../lib/kube.ts';
import { progress, sleep, stat, type Row } from '../lib/report.ts';

const N = 4;
const BUCKET = 'models';

export interface S15Options {
  reps: number;
}

interface Run {
  rep: number;
  switchWindowMs: number;
  clientWindowMs: number;
  goodPredictions: number;
  goodFailed: number;
  rollbackMs: number;
  rollbackOriginRequests: number;
  badPredictions: number;
  badFailed: number;
  badNotV1: number;
}

export async function scenario15(cp: ControlPlane, o: S15Options): Promise<{ rows: Row[]; raw: unknown }> {
  const cleanup: (() => Promise<unknown>)[] = [];
  try {
    const work = await mkdtemp(join(tmpdir(), 'peerload-bench15-'));
    cleanup.push(() => rm(work, { recursive: true, force: true }));
    const jar = pluginJar();
    const minio = await startMinIO();
    cleanup.push(() => minio.stop());
    await minio.createBucket(BUCKET);
    const origin = await startCountingProxy(minio.endpoint);
    cleanup.push(() => origin.close());
    const peer = await startPeerProxy();
    cleanup.push(() => peer.close());
    for (const [model, version] of [
      ['good', '1'],
      ['good', '2'],
      ['bad', '1'],
      ['bad', '2'],
    ] as const) {
      const dir = join(work, `${model}-v${version}`);
      await mkdir(dir, { recursive: true });
      const mar = await buildModelArchive(dir, {
        modelName: model,
        version,
        handler: versionedHandler(model, version),
      });
      await minio.putObject(BUCKET, `${model}/v${version}.mar`, await readFile(mar.path));
    }
    const config = join(work, 'p2p-endpoint.json');
    const plugin = minioPluginConfig(minio, BUCKET, peer.url);
    await writePluginConfig(config, {
      ...plugin,
      object_storage: { ...(plugin['object_storage'] as object), endpoint: origin.url },
    });
    const jarPath = await jar;
    const replicas: TorchServe[] = [];
    cleanup.push(() => Promise.allSettled(replicas.map((r) => r.stop())));
    for (let i = 0; i < N; i++)
      replicas.push(
        await startTorchServe({
          pluginJars: [jarPath],
          tokenAuth: false,
          config: { enable_model_api: 'true' },
          vmargs: '-Xmx256m -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError',
          env: { P2P_ENDPOINT_CONFIG: config, ...(i === N - 1 ? { PEERLOAD_E2E_BROKEN: 'bad-2' } : {}) },
        }),
      );

    const kube = benchClient(cp);
    const kc = kubeConfig(cp.kubeconfigPath);
    const ns = await newNamespace(kube, 'bench15');
    const operator = await startManager(
      kc,
      ['--namespace', ns, ...soloOperatorFlags(), '--allowed-endpoint-hosts', '127.0.0.1'],
      [(ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher() })],
    );
    cleanup.push(() => operator.stop());
    const sm = kube.resource<ServedModel>(GVR.servedModels);
    const get = (name: string) => sm.get(ns, name);
    const until = async (what: string, ms: number, ok: (o: ServedModel) => boolean) => {
      const deadline = Date.now() + ms;
      for (;;) {
        const o = await get(what.split(' ')[0]!);
        if (ok(o)) return o;
        if (Date.now() > deadline)
          throw new Error(
            `${what} not within ${ms} ms: ${JSON.stringify(o.status?.rollout ?? o.status?.ready)}`,
          );
        await sleep(100);
      }
    };
    const onV1 = async (name: string, rollout: Record<string, unknown>) => {
      await createServedModel(kube, ns, name, {
        modelName: name,
        version: '1',
        fileName: `${name}/v1.mar`,
        modelServer: { endpoints: replicas.map((r) => r.managementURL) },
        workers: { min: 1 },
        rollout: { seedFirst: false, maxConcurrent: N, strategy: 'Staged', ...rollout },
      });
      await until(`${name} Ready ${N}/${N}`, 300_000, (o) => o.status?.ready === `${N}/${N}`);
    };
    const toV2 = (name: string) => sm.patch(ns, name, { spec: { version: '2', fileName: `${name}/v2.mar` } });

    const runs: Run[] = [];
    for (let rep = 0; rep < o.reps; rep++) {
      await onV1('good', {});
      let client = predictions(replicas, 'good');
      await toV2('good');
      const done = await until('good Complete', 300_000, (x) => x.status?.rollout?.phase === 'Complete');
      await sleep(500);
      const good = await client.stop();
      await deleteServedModelAndWait(kube, ns, 'good');

      await onV1('bad', { progressDeadlineSeconds: 10 });
      client = predictions(replicas, 'bad');
      await toV2('bad');
      const rollingBack = await until('bad RollingBack', 300_000, (x) =>
        ['RollingBack', 'RolledBack'].includes(x.status?.rollout?.phase ?? ''),
      );
      const rbSeen = performance.now();
      const originBefore = origin.requests.length;
      await until('bad RolledBack', 120_000, (x) => x.status?.rollout?.phase === 'RolledBack');
      const rollbackMs =
        rollingBack.status?.rollout?.phase === 'RolledBack' ? 0 : Math.round(performance.now() - rbSeen);
      const bad = await client.stop();
      const r: Run = {
        rep,
        switchWindowMs: done.status?.rollout?.switchWindowMs ?? NaN,
        clientWindowMs: mixedWindow(good, '1', '2'),
        goodPredictions: good.length,
        goodFailed: good.filter((a) => a.status !== 200).length,
        rollbackMs,
        rollbackOriginRequests: origin.requests.length - originBefore,
        badPredictions: bad.length,
        badFailed: bad.filter((a) => a.status !== 200).length,
        badNotV1: bad.filter((a) => a.status === 200 && a.version !== '1').length,
      };
      runs.push(r);
      progress(`s15 ${JSON.stringify(r)}`);
      await deleteServedModelAndWait(kube, ns, 'bad');
      // The replicas unregister as the ServedModel goes: wait for it before the next repetition registers again.
      await sleep(2_000);
    }

    const rows: Row[] = [
      {
        id: '15a',
        scenario: `15 Staged rollout, ${N} real TorchServe replicas, a client predicting throughout`,
        metric: 'switch window (status.rollout.switchWindowMs)',
        unit: 'ms',
        value: stat(runs.map((r) => r.switchWindowMs)),
        reference: stat(runs.map((r) => r.clientWindowMs)),
        referenceLabel: '(client side: first v2 request sent → last v1 answer received)',
        target: '< 1 s both, no failed prediction',
        pass: runs.every((r) => r.switchWindowMs < 1000 && r.clientWindowMs < 1000 && r.goodFailed === 0),
        notes: `predictions per run ${runs.map((r) => `${r.goodPredictions} (${r.goodFailed} failed)`).join(', ')}`,
      },
      {
        id: '15b',
        scenario: `15 Staged rollback, ${N} real TorchServe replicas, v2's handler raises at load on one`,
        metric: 'rollback (RollingBack seen → RolledBack seen, 100 ms looks)',
        unit: 'ms',
        value: stat(runs.map((r) => r.rollbackMs)),
        target: '< 5 s, nothing from the origin, every prediction answered by v1',
        pass: runs.every(
          (r) =>
            r.rollbackMs < 5000 && r.rollbackOriginRequests === 0 && r.badFailed === 0 && r.badNotV1 === 0,
        ),
        notes:
          `origin requests during the rollback ${runs.map((r) => r.rollbackOriginRequests).join(', ')}; ` +
          `predictions ${runs.map((r) => `${r.badPredictions} (${r.badFailed} failed, ${r.badNotV1} not v1)`).join(', ')}; ` +
          `the rollback starts after progressDeadlineSeconds (10 s): a worker that never gets READY is not a failed load`,
      },
    ];
    return { rows, raw: { runs, replicas: N } };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}
