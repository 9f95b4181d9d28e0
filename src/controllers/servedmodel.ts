/**
 * The ServedModel controller: the model registered, scaled and READY on every replica of a model server,
 * kept so as pods come, go and restart, and unregistered everywhere on delete.
 *
 * One reconcile = one pass over the replicas (at most `rollout.maxConcurrent` at a time), each replica moved one
 * step by convergeReplica(), then one status write. Registrations (the plugin downloads the archive first, which
 * takes minutes for a large model) never run inside a reconcile: they run in the background (registrations.ts),
 * the reconcile starts them and reads their phase, and each change of phase enqueues the ServedModel again. Status
 * writes that only report progress are coalesced to one per STATUS_COALESCE_MS per object. Pods are found through
 * the EndpointSlices of the Service, so a new, removed or restarted pod wakes the ServedModel; worker readiness is
 * polled with requeueAfter.
 */
import {
  ServedModelSpec,
  type ModelPreheat,
  type ServedModel,
  type ServedModelStatus,
  GVR,
} from '../api/index.ts';
import type { Dispatcher } from 'undici';
import type { RegisterResult } from '../modelserver/client.ts';
import {
  Controller,
  addFinalizer,
  applyConditions,
  getCondition,
  hasFinalizer,
  isBeingDeleted,
  specChanged,
  type ControllerContext,
  type ControllerFactory,
  type ReconcileContext,
  type ReconcileResult,
} from '../runtime/index.ts';
import { operatorMetrics } from './metrics.ts';
import { pool } from './pool.ts';
import { RegistrationRunner, type RegistrationId } from './registrations.ts';
import { ReplicaClients } from './replica-clients.ts';
import { discoverReplicas, SERVICE_NAME_LABEL, type EndpointSlice, type Replica } from './replicas.ts';
import { SecretReader } from './secrets.ts';
import { FINALIZER, servedModelCleanup } from './servedmodel-cleanup.ts';
import { preheatNameOf } from './servedmodel-preheat.ts';
import { ReplicaGates } from './servedmodel-nodes.ts';
import { NodeAddresses } from './node-addresses.ts';
import {
  convergeReplica,
  registerUntilDone,
  registeredEvent,
  stamp,
  underWay,
  waiting,
  type ReplicaGoal,
  type ReplicaOutcome,
} from './servedmodel-replica.ts';
import { endpointsReach } from '../policy/reach.ts';
import {
  ServedModelCondition,
  endpointNotAllowedConditions,
  invalidSpecConditions,
  servedModelConditions,
  withServedModelConditions,
} from './servedmodel-status.ts';
import { invalidSpec, specProblem, statusWriter } from './status.ts';

export { FINALIZER } from './servedmodel-cleanup.ts';
/** Static endpoints send no events: look at them this often once everything is ready (jittered ±20 %, so 1,000
 *  ServedModels do not all check at once). A 60 s period cost an idle operator 2.3 % of a core (bench row 5). */
const STATIC_RECHECK_MS = 300_000;
/** How often a ServedModel whose every failure needs a change (Stalled) looks again by itself. */
const STALLED_RECHECK_MS = 300_000;
/** At most one status write per object this often when only progress changed (conditions' status or reason did
 *  not): a rollout over many replicas would otherwise write once per replica phase. */
const STATUS_COALESCE_MS = 2_000;
/** Nodes scheduled within this window share one node-targeted preheat job. */
const TARGET_BATCH_WINDOW_MS = 2_000;

type Obj = ServedModel;
type Status = ServedModelStatus;

export interface ServedModelControllerOptions {
  /** Connection pool toward the model servers (default: the model-server client's shared pool). Tests use it to
   *  reach emulated replicas whose EndpointSlice addresses are not on this machine. */
  dispatcher?: Dispatcher;
  /** How long a deletion keeps trying unreachable replicas before it lets go, when the spec does not say.
   *  Default: the operator's --cleanup-grace-period. */
  cleanupGraceMs?: number;
  /** How long new nodes wait to share one node-targeted preheat job (default 2 s). */
  targetBatchWindowMs?: number;
}

export const servedModelController: ControllerFactory = (ctx) => createServedModelController(ctx, {});

export function createServedModelController(
  ctx: ControllerContext,
  opts: ServedModelControllerOptions,
): Controller<Obj> {
  const models = ctx.informers.get<Obj>(GVR.servedModels);
  const slices = ctx.informers.get<EndpointSlice>(GVR.endpointSlices, { labelSelector: SERVICE_NAME_LABEL });
  slices.addIndexer('service', (s) => [`${s.metadata.namespace}/${s.metadata.labels?.[SERVICE_NAME_LABEL]}`]);
  const preheats = ctx.informers.get<ModelPreheat>(GVR.modelPreheats);
  const secrets = new SecretReader(ctx.kube);
  const metrics = operatorMetrics(ctx.metrics);
  const replicaGates = new ReplicaGates({
    kube: ctx.kube,
    preheats,
    nodeAddresses: new NodeAddresses(ctx.kube),
    batchWindowMs: opts.targetBatchWindowMs ?? TARGET_BATCH_WINDOW_MS,
  });
  const { pollBackoffStart, pollBackoffMax } = ctx.config;

  // Which ServedModels a Service (EndpointSlice) or a ModelPreheat event concerns.
  models.addIndexer('service', (sm) => {
    const svc = (sm.spec as ServedModelSpec | undefined)?.modelServer?.service?.name;
    return svc ? [`${sm.metadata.namespace}/${svc}`] : [];
  });
  models.addIndexer('preheat', (sm) => {
    const parsed = ServedModelSpec.safeParse(sm.spec);
    const name = parsed.success ? preheatNameOf(sm, parsed.data) : undefined;
    return name ? [`${sm.metadata.namespace}/${name}`] : [];
  });
  const keysOf = (index: string, value: string) =>
    models.byIndex(index, value).map((sm) => `${sm.metadata.namespace}/${sm.metadata.name}`);

  const clients = new ReplicaClients((namespace, ref) => secrets.value(namespace, ref), opts.dispatcher);
  const clientFor = (sm: Obj, spec: ServedModelSpec, r: Replica) => clients.get(sm, spec, r);

  const registrations = new RegistrationRunner<RegisterResult>({
    global: ctx.config.maxConcurrentRegistrations,
    // Registrations start in reconciles, so the controller exists by the time one reports.
    onChange: (owner) => controller.enqueue(owner),
  });
  /** When each object's status was last written (for coalescing). */
  const lastWrite = new Map<string, number>();
  /**
   * Per object, per replica: whether the registration of `version` was a local hit. A registration's outcome is
   * known in one pass only; status alone would lose it to any pass that reads an older status (a cache behind
   * our writes) and writes it back, so the controller keeps it until the replica or the version goes.
   */
  const knownLocalHits = new Map<string, Map<string, { version: string; localHit: boolean }>>();

  const writeStatus = statusWriter<Obj, Status>(ctx, GVR.servedModels);
  const cleanUp = servedModelCleanup({
    ctx,
    registrations,
    clientFor,
    writeStatus,
    graceMs: opts.cleanupGraceMs ?? ctx.config.cleanupGracePeriod,
    forget,
  });
  /** The uid of each object seen, so that one gone without our finalizer's pass is forgotten all the same. */
  const uids = new Map<string, string>();

  async function reconcile(key: string, rc: ReconcileContext): Promise<ReconcileResult | void> {
    // Through the status writer: a requeue may come before the watch has delivered our last status write.
    const sm = ctx.status.latest(models.get(key));
    if (!sm) {
      forget(key);
      const [ns, name] = key.split('/');
      metrics.servedModelReplicas(ns!, name!);
      return;
    }
    const namespace = sm.metadata.namespace!;
    const gen = sm.metadata.generation;
    if (sm.metadata.uid) uids.set(key, sm.metadata.uid);
    const parsed = ServedModelSpec.safeParse(sm.spec);
    if (!parsed.success) {
      const message = specProblem(parsed.error);
      const problem = { finalizer: FINALIZER, message, skipped: 'model not unregistered' };
      return invalidSpec(
        ctx,
        GVR.servedModels,
        sm,
        problem,
        () =>
          writeStatus(
            sm,
            (s) => withServedModelConditions(s, gen, invalidSpecConditions(message)),
            rc.signal,
          ),
        rc.signal,
      );
    }
    const spec = parsed.data;
    // Reach-policy hook (src/policy/reach.ts): static endpoints outside the admin's --allowed-endpoint-hosts get no
    // request at all (no management key, no registration, no unregistration on delete: the finalizer goes with a
    // CleanupSkipped Event); the object is Stalled, reason EndpointNotAllowed.
    const reach = endpointsReach(spec.modelServer.endpoints, 'spec.modelServer.endpoints', {
      managerHosts: ctx.config.allowedManagerHosts,
      endpointHosts: ctx.config.allowedEndpointHosts,
    });
    if (!reach.allowed) {
      const problem = { finalizer: FINALIZER, message: reach.message, skipped: 'model not unregistered' };
      const report = () =>
        writeStatus(
          sm,
          (s) => withServedModelConditions(s, gen, endpointNotAllowedConditions(reach.message)),
          rc.signal,
        );
      return invalidSpec(ctx, GVR.servedModels, sm, problem, report, rc.signal);
    }
    const found = serviceSlices(namespace, spec);
    const discovery = discoverReplicas(spec, found);

    if (isBeingDeleted(sm)) return cleanUp(sm, spec, discovery.replicas, rc);
    if (!hasFinalizer(sm, FINALIZER))
      await addFinalizer(ctx.kube, GVR.servedModels, sm, FINALIZER, rc.signal);

    // 1. The preheat gate of each replica (creating the owned ModelPreheat when asked to, targeting the peers of
    //    the replicas' nodes when node targeting is on).
    const previous = new Map((sm.status?.replicas ?? []).map((r) => [r.endpoint, r]));
    const { gate, preheat, nodeTargeting, nodeIPs, gates, closed, conditionGate, wakeInMs } =
      await replicaGates.of(key, sm, spec, discovery, previous, rc.signal);

    // 2. Every replica one step closer (the seed first, alone, when the network does not hold the model yet).
    const goal = goalOf(spec);
    const uid = sm.metadata.uid ?? key;
    const wanted = `${spec.version ?? ''}|${spec.fileName}`;
    const endpoints = new Set(discovery.replicas.map((r) => r.endpoint));
    registrations.prune(uid, endpoints, wanted);
    clients.prune(uid, endpoints);
    const idOf = (endpoint: string): RegistrationId => ({
      uid,
      owner: key,
      replica: endpoint,
      version: wanted,
    });
    /** Registrations whose result this pass acted on (by endpoint): forgotten once their Events are recorded. */
    const consumed = new Set<string>();
    let outcomes: ReplicaOutcome[];
    if (gate.state === 'closed' && closed.length === discovery.replicas.length) {
      outcomes = discovery.replicas.map((r) =>
        waiting(r, previous.get(r.endpoint), gates.get(r.endpoint)!.message),
      );
    } else {
      const step = async (r: Replica, mayRegister: boolean): Promise<ReplicaOutcome> => {
        const g = gates.get(r.endpoint)!;
        if (!g.open) return waiting(r, previous.get(r.endpoint), g.message);
        const client = clientFor(sm, spec, r);
        const id = idOf(r.endpoint);
        // A registration under way says where the replica is: describing it would only cost a request.
        const running = registrations.peek(id);
        if (running?.state === 'running') return underWay(r, running);
        return convergeReplica(client, r, goal, previous.get(r.endpoint), {
          mayRegister,
          signal: rc.signal,
          register: (req) => {
            const state = registrations.ensure(id, spec.rollout.maxConcurrent, (signal, progress, stopping) =>
              registerUntilDone(client, req, spec.version, goal, signal, progress, stopping),
            );
            if (state.state !== 'running') consumed.add(r.endpoint);
            return state;
          },
        });
      };
      // A preheat that put the model in the network (or on the replicas' nodes) makes a seed replica pointless.
      const seeded =
        !spec.rollout.seedFirst ||
        gate.state === 'open' ||
        nodeTargeting ||
        [...previous.values()].some((r) => r.registered);
      const [seed, ...rest] = discovery.replicas;
      if (!seeded && seed) {
        const first = await step(seed, true);
        const others = await pool(rest, spec.rollout.maxConcurrent, (r) => step(r, first.status.registered));
        outcomes = [first, ...others];
      } else {
        outcomes = await pool(discovery.replicas, spec.rollout.maxConcurrent, (r) => step(r, true));
      }
    }

    // 3. Status, conditions and Events from what the pass saw.
    // A registration that ended before this pass described its replica: the pass found the model there, so it
    // never asked for the result; its Event is due all the same (one per replica registration).
    for (const [i, o] of outcomes.entries()) {
      if (!o.status.registered || consumed.has(o.status.endpoint)) continue;
      const state = registrations.peek(idOf(o.status.endpoint));
      if (!state || state.state === 'running') continue;
      if (state.state === 'done') o.events.push(registeredEvent(goal, discovery.replicas[i]!, state.result));
      consumed.add(o.status.endpoint);
    }
    for (const o of outcomes) for (const e of o.events) ctx.events.record(sm, e.type, e.reason, e.note);
    // A registration whose outcome needs a change (a version mismatch, a rejected archive) stays as it ended, so
    // passes do not register again at poll rate; a new spec (another registration key) or the slow re-check
    // after STALLED_RECHECK_MS tries again.
    /** Whether each registration that ended in this pass was a hit on its node's peer cache (the plugin says). */
    const localHits = new Map<string, boolean>();
    /** Registrations that ended in this pass without a local hit (the plugin says only when there was one). */
    const notLocal = new Set<string>();
    for (const o of outcomes) {
      if (!consumed.has(o.status.endpoint)) continue;
      const id = idOf(o.status.endpoint);
      const ended = registrations.peek(id);
      if (ended?.state === 'done') {
        if (ended.result.cacheHit !== undefined) localHits.set(o.status.endpoint, ended.result.cacheHit);
        else notLocal.add(o.status.endpoint);
      }
      const keep = o.failure && needsChange(o) && ended && Date.now() - ended.since < STALLED_RECHECK_MS;
      if (!keep) registrations.settle(id);
    }
    const known = knownLocalHits.get(key) ?? new Map<string, { version: string; localHit: boolean }>();
    for (const endpoint of known.keys()) if (!endpoints.has(endpoint)) known.delete(endpoint);
    for (const [endpoint, localHit] of localHits) known.set(endpoint, { version: wanted, localHit });
    for (const endpoint of notLocal) known.delete(endpoint);
    knownLocalHits.set(key, known);
    const replicas = outcomes.map((o, i) => {
      const r = discovery.replicas[i]!;
      const prev = previous.get(o.status.endpoint);
      // localHit: from the registration of this version (this pass or an earlier one), else as last reported.
      const kept = known.get(o.status.endpoint);
      const localHit =
        o.status.registered && !notLocal.has(o.status.endpoint)
          ? kept?.version === wanted
            ? kept.localHit
            : prev?.localHit
          : undefined;
      const nodeIP = r.node ? nodeIPs.get(r.node) : undefined;
      return stamp(
        {
          ...o.status,
          ...(r.node ? { node: r.node } : {}),
          ...(nodeIP ? { nodeIP } : {}),
          ...(localHit !== undefined ? { localHit } : {}),
        },
        prev,
      );
    });
    const failed = outcomes.filter((o) => o.failure);
    const readyCount = replicas.filter((r) => r.ready).length;
    const desired = replicas.length;
    metrics.servedModelReplicas(namespace, sm.metadata.name, readyCount, desired);
    for (const o of failed) if (o.failure!.kind) metrics.modelServerErrors.labels(o.failure!.kind).inc();
    const allReady = desired > 0 && readyCount === desired;
    const versions = new Set(replicas.map((r) => r.version));
    const conditions = servedModelConditions({
      modelName: spec.modelName,
      serviceName: spec.modelServer.service?.name,
      serviceFound: found.length > 0,
      discoveryProblem: discovery.problem,
      gate: conditionGate,
      ready: readyCount,
      desired,
      failures: failed.map((o) => ({
        replica: o.status.pod ?? o.status.endpoint,
        message: o.status.message ?? '',
        ...o.failure!,
      })),
    });
    const before = getCondition(sm.status?.conditions, ServedModelCondition.Ready);
    // Progress alone (phases, counts) waits for the coalescing interval; a change of what the conditions say
    // (status or reason) or of the generation is written at once.
    const sinceWrite = Date.now() - (lastWrite.get(key) ?? 0);
    const nextConditions = applyConditions(sm.status?.conditions, conditions, gen);
    // A registration's outcome (localHit) is known in one pass only: it is written at once, not coalesced away.
    const urgent =
      localHits.size > 0 ||
      sm.status?.observedGeneration !== gen ||
      conditionsDigest(nextConditions) !== conditionsDigest(sm.status?.conditions ?? []);
    // 4. When to look again: soon while converging (less often the longer it takes), rarely when done.
    const nextLook = (readySince: string | undefined): ReconcileResult | undefined => {
      const registering = replicas.some((r) => r.phase === 'Pending' || r.phase === 'Downloading');
      if (allReady && failed.length === 0)
        return spec.modelServer.endpoints
          ? { requeueAfter: STATIC_RECHECK_MS * (0.8 + Math.random() * 0.4) }
          : undefined;
      if (conditionGate.state === 'closed' && conditionGate.final) return;
      // Every failure needs a change of the spec, the archive or the model server (a rejected archive, a version
      // mismatch): asking again at poll rate cannot help; a spec or endpoint change wakes the object, and a slow
      // re-check notices a fixed model server. Refused credentials stay on the poll: the Secret, which nothing
      // watches, is republished by the key sidecar on rotation.
      if (failed.length > 0 && failed.every(needsChange) && !registering)
        return { requeueAfter: STALLED_RECHECK_MS * (0.8 + Math.random() * 0.4) };
      // While registrations run, each one's end enqueues the object, and those passes see the workers that start
      // meanwhile: polling then would only add passes (each describes every replica). Otherwise the replicas whose
      // workers are starting are polled soon after they entered that phase, less often the longer it takes.
      if (registering) return { requeueAfter: pollBackoffMax };
      const polled = replicas.filter((r) => !r.ready && r.since !== undefined);
      const since =
        polled.length > 0
          ? Math.max(...polled.map((r) => Date.parse(r.since!)))
          : Date.parse(readySince ?? new Date().toISOString());
      return { requeueAfter: Math.min(pollBackoffMax, Math.max(pollBackoffStart, (Date.now() - since) / 4)) };
    };
    if (!urgent && sinceWrite < STATUS_COALESCE_MS) {
      // The write waits; the poll does not (workers starting on the last replicas are seen as soon as they are).
      const look = nextLook(before?.lastTransitionTime)?.requeueAfter ?? Infinity;
      return { requeueAfter: Math.min(look, STATUS_COALESCE_MS - sinceWrite, wakeInMs) };
    }
    const written = await writeStatus(
      sm,
      (s) =>
        withServedModelConditions(
          {
            ...s,
            replicas,
            readyReplicas: readyCount,
            desiredReplicas: desired,
            ready: `${readyCount}/${desired}`,
            servedVersion: allReady && versions.size === 1 ? [...versions][0] : s.servedVersion,
            preheatName: gate.state === 'none' ? undefined : gate.preheatName,
            cache: preheat?.status?.cache,
          },
          gen,
          conditions,
        ),
      rc.signal,
    );
    if (written.written) lastWrite.set(key, Date.now());
    const after = getCondition(written.object.status?.conditions, ServedModelCondition.Ready);
    if (after?.status === 'True' && before?.status !== 'True')
      ctx.events.record(sm, 'Normal', 'Ready', after.message);
    if (after?.status !== 'True' && before?.status === 'True')
      ctx.events.record(sm, 'Warning', 'NotReady', after?.message ?? '');

    const look = nextLook(after?.lastTransitionTime);
    // A pass with a wake-up of its own (a batch window, a replica's wait bound) looks again by then at the latest.
    return Number.isFinite(wakeInMs)
      ? { requeueAfter: Math.min(look?.requeueAfter ?? Infinity, wakeInMs) }
      : look;
  }

  /** The EndpointSlices of the ServedModel's Service, from the cache. */
  function serviceSlices(namespace: string, spec: ServedModelSpec): EndpointSlice[] {
    const svc = spec.modelServer.service?.name;
    if (!svc) return [];
    return slices.byIndex('service', `${namespace}/${svc}`);
  }

  /** Drops what is kept for an object that is gone: its coalescing clock, registrations and token sources. */
  function forget(key: string, uid = uids.get(key)): void {
    lastWrite.delete(key);
    knownLocalHits.delete(key);
    replicaGates.forget(key);
    uids.delete(key);
    if (!uid) return;
    registrations.prune(uid);
    clients.prune(uid);
  }

  const controller = new Controller<Obj>(
    {
      name: 'servedmodel',
      for: models,
      reconcile,
      workers: ctx.config.workers,
      predicate: specChanged,
      onStop: () => registrations.stop(),
      watches: [
        {
          informer: slices,
          map: (s: EndpointSlice) =>
            keysOf('service', `${s.metadata.namespace}/${s.metadata.labels?.[SERVICE_NAME_LABEL]}`),
        },
        {
          informer: preheats,
          map: (p: ModelPreheat) => keysOf('preheat', `${p.metadata.namespace}/${p.metadata.name}`),
        },
      ],
    },
    { logger: ctx.logger, metrics: ctx.metrics },
  );
  return controller;
}

/** What the conditions say, without messages and times (which change with progress). */
function conditionsDigest(conditions: readonly { type: string; status: string; reason?: string }[]): string {
  return conditions
    .map((c) => `${c.type}=${c.status}/${c.reason ?? ''}`)
    .sort()
    .join(',');
}

/** A failure that retrying cannot fix until the spec, the archive or the model server changes. Refused credentials
 *  are not one: the key sidecar republishes the Secret on rotation. */
const needsChange = (o: ReplicaOutcome) =>
  o.failure !== undefined && !o.failure.retryable && o.failure.kind !== 'auth';

function goalOf(spec: ServedModelSpec): ReplicaGoal {
  return {
    modelName: spec.modelName,
    version: spec.version,
    fileName: spec.fileName,
    minWorkers: spec.workers.min,
    maxWorkers: spec.workers.max ?? spec.workers.min,
    registration: { ...spec.registration },
  };
}
