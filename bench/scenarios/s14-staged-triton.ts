/**
 * Scenario 14 (a Staged rollout on real Triton, on the REAL Dragonfly network: manager and scheduler v2.5.1, dfdaemon
 * 1.4.2 as a seed peer and 4 node peers on their own 127.0.0.x addresses, MinIO behind a counting proxy). Four
 * Triton replicas (python echo model, with a data file of `--size14-mib` it never reads), each with a real agent on
 * its node peer's address, found through a Service's EndpointSlices. Per repetition, one ServedModel of its own (its own model name and prefixes):
 *   - version 1 created (Rolling), Ready on the 4;
 *   - the reference: version 2 with `Rolling`, the window the replicas served different versions (a poller per
 *     replica reads which version a request without one reaches: the newest loaded; first replica on 2 → last);
 *   - version 3 with `Staged`: the same window read the same way, and status.rollout.switchWindowMs (the operator's:
 *     first load sent → last answered, the loads included);
 *   - version 4 with `Staged`, whose model.py refuses to initialise on replica 1: the switch's load fails there and
 *     every replica goes back to 3; measured: the switch's start → RolledBack (status.rollout), and what MinIO served
 *     from the switch on (nothing: version 3 never left the replicas).
 * Targets: 14a the Staged window no longer than the Rolling one; 14c every replica back on 3 with 0 bytes from the
 * origin. 14b (the operator's window) is informational.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import type { ServedModel } from '../../src/api/index.ts';
import { newest } from '../../src/servers/oip/triton-config.ts';
import type { ControlPlane } from '../../test/support/controlplane.ts';
import { ServiceEndpoints, loopbackDispatcher } from '../../test/support/endpointslices.ts';
import { kubeConfig } from '../../test/support/kube.ts';
import { ECHO_CONFIG_PBTXT, ECHO_MODEL_PY } from '../../test/support/oip-exchanges.ts';
import { portOnAll, startAgentReplica, type AgentReplica } from '../../test/support/oip-replicas.ts';
import { startTriton } from '../../test/support/oip-servers.ts';
import { servedVersions } from '../../test/support/triton-echo.ts';
import { GVR, benchClient, createServedModel, deleteServedModelAndWait, newNamespace } from '../lib/kube.ts';
import * as realnet from '../lib/realnet.ts';
import { progress, sleep, stat, until, type Row } from '../lib/report.ts';

const BUCKET = 'bench14';
const REPLICAS = 4;
const TOKEN = 'bench14-agent-token-0123456789abcdef';
/** The replica version 4 fails to load on, and the file that makes it refuse. */
const REFUSING = 1;
const MARKER = 'refuse-4';
const REFUSING_MODEL_PY = ECHO_MODEL_PY.replace(
  '    def initialize(self, args):\n',
  `    def initialize(self, args):\n        if os.path.exists(os.path.join(args["model_repository"], "${MARKER}")):\n            raise ValueError("this node cannot run version 4")\n`,
);

export interface S14Options {
  reps: number;
  /** Each version's data file (the model.py never reads it): what makes the placements take their time. */
  sizeBytes: number;
}

interface Run {
  rep: number;
  /** Rolling 1 → 2: first replica serving 2 → last, ms (pollers). */
  rollingWindowMs: number;
  /** Staged 2 → 3: the same, ms. */
  stagedWindowMs: number;
  /** Staged 2 → 3: status.rollout.switchWindowMs. */
  switchWindowMs: number;
  /** Staged 3 → 4 refused on one replica: the switch's start → RolledBack, ms (status.rollout). */
  rollbackMs: number;
  /** What MinIO served from version 4's switch on, bytes. */
  rollbackOriginBytes: number;
  /** Every replica serving 3 alone after the rollback. */
  allBack: boolean;
}

/** A poller per replica: when each first served `version` (a request without one reaches the newest loaded). */
function watchSwitch(replicas: AgentReplica[], model: string, version: string) {
  const firstAt: (number | undefined)[] = replicas.map(() => undefined);
  let stopped = false;
  const loops = replicas.map(async (r, i) => {
    while (!stopped && firstAt[i] === undefined) {
      const served = await servedVersions(r.server, model).catch(() => []);
      if (newest(served) === version) firstAt[i] = Date.now();
      else await sleep(10);
    }
  });
  return {
    /** First replica on `version` → last, once every replica is on it. */
    async window(timeoutMs = 600_000): Promise<number> {
      await until(`every replica serves ${model} ${version}`, timeoutMs, () =>
        firstAt.every((t) => t !== undefined),
      );
      stopped = true;
      await Promise.all(loops);
      const at = firstAt as number[];
      return Math.max(...at) - Math.min(...at);
    },
    async stop() {
      stopped = true;
      await Promise.all(loops);
    },
  };
}

export async function scenario14(cp: ControlPlane, o: S14Options): Promise<{ rows: Row[]; raw: unknown }> {
  const cleanup: realnet.Cleanup = [];
  const work = await mkdtemp(join(tmpdir(), 'peerload-bench14-'));
  cleanup.push(() => rm(work, { recursive: true, force: true }));
  try {
    progress(
      `s14: starting Dragonfly (manager, scheduler, seed peer, ${REPLICAS} node peers), MinIO and ${REPLICAS} Tritons + agents`,
    );
    const net = await realnet.startRealNet(cleanup, BUCKET, REPLICAS);
    const { network, minio, origin } = net;
    const location = { ...minio.location(BUCKET), endpoint: origin.url };
    const dispatcher = new Agent();
    cleanup.push(() => dispatcher.close());
    const agentPort = await portOnAll(network.peers.map((p) => p.ip));
    const replicas: AgentReplica[] = [];
    for (const [i, peer] of network.peers.entries()) {
      const replica = await startAgentReplica({
        peer,
        dir: join(work, `replica-${i}`),
        port: agentPort,
        token: TOKEN,
        credentials: minio,
        dispatcher,
        start: startTriton,
      });
      cleanup.push(() => replica.stop());
      replicas.push(replica);
    }
    const kube = benchClient(cp);
    const kc = kubeConfig(cp.kubeconfigPath);
    const ns = await newNamespace(kube, 'bench14');
    const nodes = await realnet.createNodesAndSecrets(kc, kube, ns, net, { 'agent-token': { token: TOKEN } });
    const svc = new ServiceEndpoints(kc, ns, 'triton');
    for (const [i, r] of replicas.entries()) await svc.add(`triton-${i}`, r.server.url, true, nodes[i]);
    await realnet.startOperator(
      cleanup,
      kc,
      ns,
      net,
      loopbackDispatcher((a) => svc.hostOf(a)),
    );
    const sms = kube.resource<ServedModel>(GVR.servedModels);

    const runs: Run[] = [];
    for (let rep = 0; rep < o.reps; rep++) {
      const model = `echo${rep}`;
      const name = `staged-${rep}`;
      const prefixOf = (v: string) => `${model}/${v}/`;
      for (const v of ['1', '2', '3', '4']) {
        await minio.putObject(
          BUCKET,
          `${prefixOf(v)}model.py`,
          Buffer.from(v === '4' ? REFUSING_MODEL_PY : ECHO_MODEL_PY),
        );
        await minio.putObject(
          BUCKET,
          `${prefixOf(v)}offset.json`,
          Buffer.from(JSON.stringify({ offset: Number(v) })),
        );
        await minio.putObject(BUCKET, `${prefixOf(v)}weights.bin`, randomBytes(o.sizeBytes));
      }
      for (const r of replicas) {
        await mkdir(join(r.root, model), { recursive: true });
        await writeFile(join(r.root, model, 'config.pbtxt'), ECHO_CONFIG_PBTXT);
      }
      await writeFile(join(replicas[REFUSING]!.root, model, MARKER), 'no\n');
      const spec = (v: string, strategy: 'Rolling' | 'Staged') => ({
        modelName: model,
        version: v,
        files: { prefix: prefixOf(v) },
        modelServer: {
          driver: 'triton',
          service: { name: 'triton' },
          agent: { port: agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
        },
        rollout: strategy === 'Staged' ? { strategy, progressDeadlineSeconds: 300 } : { strategy },
        preheat: {
          create: true,
          objectStorage: { ...location, credentialsSecretRef: { name: 's3' } },
          manager: { url: network.managerURL, signInSecretRef: { name: 'manager' } },
        },
      });
      const object = () => sms.get(ns, name) as Promise<ServedModel>;
      const waitFor = async (what: string, ok: (sm: ServedModel) => boolean): Promise<ServedModel> => {
        const deadline = Date.now() + 600_000;
        for (;;) {
          const sm = await object();
          if (sm.status?.observedGeneration === sm.metadata.generation && ok(sm)) return sm;
          if (Date.now() > deadline)
            throw new Error(`${name}: ${what} not reached: ${JSON.stringify(sm.status?.rollout)}`);
          await sleep(250);
        }
      };
      const readyOn = (v: string) => (sm: ServedModel) =>
        sm.status?.ready === `${REPLICAS}/${REPLICAS}` &&
        (sm.status.replicas ?? []).every((r) => r.version === v);

      await createServedModel(kube, ns, name, spec('1', 'Rolling'));
      await waitFor('Ready at 1', readyOn('1'));

      const rolling = watchSwitch(replicas, model, '2');
      await sms.patch(ns, name, { spec: spec('2', 'Rolling') });
      const rollingWindowMs = await rolling.window();
      await waitFor('Ready at 2', readyOn('2'));

      const staged = watchSwitch(replicas, model, '3');
      await sms.patch(ns, name, { spec: spec('3', 'Staged') });
      const stagedWindowMs = await staged.window();
      const done = await waitFor(
        'Staged to 3',
        (sm) => sm.status?.rollout?.phase === 'Complete' && readyOn('3')(sm),
      );
      const switchWindowMs = done.status!.rollout!.switchWindowMs!;

      await sms.patch(ns, name, { spec: spec('4', 'Staged') });
      const back = await waitFor('rolled back from 4', (sm) => sm.status?.rollout?.phase === 'RolledBack');
      const r4 = back.status!.rollout!;
      const since = Date.parse(r4.switchStartTime!);
      const rollbackOriginBytes = origin.requests
        .filter((q) => performance.timeOrigin + (q.startedAt ?? 0) >= since)
        .reduce((n, q) => n + q.bytes, 0);
      const allBack = (await Promise.all(replicas.map((r) => servedVersions(r.server, model)))).every(
        (v) => v.join() === '3',
      );
      const run: Run = {
        rep,
        rollingWindowMs,
        stagedWindowMs,
        switchWindowMs,
        rollbackMs: Date.parse(r4.completionTime!) - since,
        rollbackOriginBytes,
        allBack,
      };
      runs.push(run);
      progress(`s14 ${JSON.stringify(run)}`);
      await deleteServedModelAndWait(kube, ns, name);
    }

    const ms = (f: (r: Run) => number) => stat(runs.map((r) => f(r) / 1000));
    const scenario = `14 Staged rollout on ${REPLICAS} real Tritons (python echo model), real network`;
    const rows: Row[] = [
      {
        id: '14a',
        scenario,
        metric: 'window two versions are served, Staged (first replica on the new version → last; pollers)',
        unit: 's',
        value: ms((r) => r.stagedWindowMs),
        reference: ms((r) => r.rollingWindowMs),
        referenceLabel: '(the same window, Rolling, on the same replicas)',
        ratio: stat(runs.map((r) => r.stagedWindowMs / Math.max(1, r.rollingWindowMs))),
        target: '≤ the Rolling window',
        pass: stat(runs.map((r) => r.stagedWindowMs - r.rollingWindowMs)).median <= 0,
      },
      {
        id: '14b',
        scenario,
        metric:
          "status.rollout.switchWindowMs (the operator's: first load sent → last answered, loads included)",
        unit: 's',
        value: ms((r) => r.switchWindowMs),
        target: '(informational: on Triton the switch is a load)',
      },
      {
        id: '14c',
        scenario,
        metric: 'a version refused on one replica: the switch’s start → RolledBack (status.rollout)',
        unit: 's',
        value: ms((r) => r.rollbackMs),
        target: 'every replica back on the previous version, 0 bytes from the origin',
        pass: runs.every((r) => r.allBack && r.rollbackOriginBytes === 0),
        notes: `origin bytes from the switch on ${runs.map((r) => r.rollbackOriginBytes).join(', ')}; all back ${runs.map((r) => r.allBack).join(', ')}`,
      },
    ];
    return { rows, raw: { runs, replicas: REPLICAS } };
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => undefined);
  }
}
