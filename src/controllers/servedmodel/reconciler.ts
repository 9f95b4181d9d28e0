/**
 * The ServedModel reconciler: the model registered, scaled and READY on every replica of a model server, kept so
 * as pods come, go and restart, and unregistered everywhere on delete.
 *
 * One reconcile = one pass over the replicas (at most `rollout.maxConcurrent` at a time), each replica moved one
 * step by convergeReplica() through its model server's driver, then one status write. Registrations (the plugin
 * downloads the archive first, minutes for a large model) never run inside a reconcile: they run in the background
 * (registrations.ts), the pass starts them and reads their phase, and each change of phase enqueues the ServedModel
 * again. An ended registration's Event is recorded once, when a pass first sees it; the registration is settled
 * only once a status write holds its outcome, so a pass whose write is lost to a conflict (thrown: the whole
 * reconcile runs again on fresh data) or coalesced leaves it for the next. Status writes that
 * only report progress are coalesced to one per STATUS_COALESCE_MS per object.
 */
import {
  GVR,
  ServedModelSpec,
  replicaAccess,
  staticAddresses,
  type ModelPreheat,
  type ServedModel,
  type ServedModelStatus,
} from '../../api/index.ts';
import { layoutRefusal, type ModelServerDrivers } from '../../servers/driver.ts';
import type { Registered } from '../../servers/driver.ts';
import {
  addFinalizer,
  getCondition,
  isBeingDeleted,
  type ControllerContext,
  type StatusWriter,
  type ReconcileContext,
  type ReconcileResult,
} from '../../runtime/index.ts';
import type { ZodError } from 'zod';
import type { OperatorMetrics } from '../metrics.ts';
import { invalidSpec, specProblem, type StatusWrite } from '../status.ts';
import { FINALIZER } from './cleanup.ts';
import { directoryName, type DirectoryFiles, type ModelDirectories } from './files.ts';
import {
  ServedModelCondition,
  directoryConditions,
  endpointNotAllowedConditions,
  unknownDriverConditions,
  unsupportedModelConditions,
  invalidSpecConditions,
  withServedModelConditions,
} from './conditions.ts';
import { endpointsReach } from '../../policy/reach.ts';
import { defaultStorageHosts, storageReach } from '../../policy/storage-reach.ts';
import type { ReplicaGates, ReplicaGating } from './gates.ts';
import { pool } from './pool.ts';
import { coalescedLook, keepRegistration, needsSeed, nextLook, withWake, writeNow } from './policy.ts';
import type { RegistrationId, RegistrationRunner } from './registrations.ts';
import {
  convergeReplica,
  registerAndStart,
  registeredEvent,
  waiting,
  type ReplicaGoal,
  type ReplicaOutcome,
} from './replica.ts';
import {
  previousReplicas,
  summarize,
  withReplicas,
  type PassSummary,
  type ReplicaStatus,
} from './replica-status.ts';
import { discoverReplicas, type Discovery, type EndpointSlice, type Replica } from './replicas.ts';

/** How soon a directory whose listing failed is listed again. */
const DIRECTORY_RETRY_MS = 30_000;

/** How soon a pass that found the cache behind our last status write looks again (the watch is that far behind). */
const CACHE_BEHIND_RETRY_MS = 50;

type Obj = ServedModel;
type Status = ServedModelStatus;
type ListedDirectory = Extract<DirectoryFiles, { ok: true }>;

/** What the reconciler works with (controller-runtime's Reconciler struct): built once by the controller. */
export interface ServedModelDeps {
  kube: ControllerContext['kube'];
  events: Pick<ControllerContext['events'], 'record'>;
  config: Pick<ControllerContext['config'], 'pollBackoffStart' | 'pollBackoffMax'> &
    Partial<
      Pick<
        ControllerContext['config'],
        'allowedManagerHosts' | 'allowedEndpointHosts' | 'allowedStorageHosts'
      >
    >;
  /** The ServedModel of a key, from the cache. */
  model(key: string): Obj | undefined;
  /** The EndpointSlices of a Service, from the cache. */
  slices(namespace: string, service: string): EndpointSlice[];
  gates: Pick<ReplicaGates, 'of' | 'forget'>;
  /** The files of ServedModels that are directories (spec.files); required for those. */
  directories?: Pick<ModelDirectories, 'of' | 'forget'> | undefined;
  drivers: ModelServerDrivers;
  registrations: RegistrationRunner<Registered>;
  /** The status write; a conflict is thrown (StatusConflict). */
  writeStatus: StatusWrite<Obj, Status>;
  /** Whether a cached object is one our last write replaced (the watch has not delivered it), and our writes
   *  other than status (the finalizer), so that it knows of them too. */
  writes: Pick<StatusWriter, 'behind' | 'wrote'>;
  cleanUp(
    sm: Obj,
    spec: ServedModelSpec,
    replicas: Replica[],
    rc: ReconcileContext,
  ): Promise<ReconcileResult | void>;
  metrics: Pick<OperatorMetrics, 'servedModelReplicas' | 'modelServerErrors'>;
  now?: () => number;
  random?: () => number;
}

export class ServedModelReconciler {
  private readonly deps: ServedModelDeps;
  private readonly now: () => number;
  private readonly random: () => number;
  /** When each object's status was last written (for coalescing). */
  private readonly lastWrite = new Map<string, number>();
  /** The uid of each object seen, so that one gone without our finalizer's pass is forgotten all the same. */
  private readonly uids = new Map<string, string>();

  constructor(deps: ServedModelDeps) {
    this.deps = deps;
    this.now = deps.now ?? Date.now;
    this.random = deps.random ?? Math.random;
  }

  async reconcile(key: string, rc: ReconcileContext): Promise<ReconcileResult | void> {
    const { deps } = this;
    const cached = deps.model(key);
    if (!cached) return this.gone(key);
    // The cache holds a version our last write replaced (the watch is behind our own write): a pass would build on
    // the status that write replaced and, writes being conditional, only lose its own write to a conflict after
    // describing every replica. Not overlaid with what we wrote: the write's watch event is moments away, so the
    // pass waits for it. Without this guard test/unit/servedmodel-reconciler.test.ts "a cache behind our last
    // write" fails (and every pass that outruns the watch ends in a conflict).
    if (deps.writes.behind(cached)) return { requeueAfter: CACHE_BEHIND_RETRY_MS };
    if (cached.metadata.uid) this.uids.set(key, cached.metadata.uid);
    const parsed = ServedModelSpec.safeParse(cached.spec);
    if (!parsed.success) return this.invalid(cached, parsed.error, rc);
    const spec = parsed.data;
    const reach = this.reach(spec);
    // Deleting needs no storage credentials: a store outside the list still lets the model be unregistered.
    const storeOnly =
      !reach.allowed && reach.reason === 'StorageEndpointNotAllowed' && isBeingDeleted(cached);
    if (!reach.allowed && !storeOnly) return this.endpointsRefused(cached, spec, rc);
    const service = spec.modelServer.service?.name;
    const found = service ? deps.slices(cached.metadata.namespace!, service) : [];
    const discovery = discoverReplicas(spec, found);
    // A driver the operator does not have: nothing can be asked of the replicas, deletion included.
    const driver = deps.drivers.find(spec.modelServer.driver);
    if (!driver) return this.unknownDriver(cached, spec, rc);
    if (isBeingDeleted(cached)) return deps.cleanUp(cached, spec, discovery.replicas, rc);
    // A model the server's driver cannot load (a directory for TorchServe): said before any replica is asked.
    const refused = layoutRefusal(driver, spec.files ? 'directory' : 'archive');
    if (refused) return this.stalled(cached, refused, unsupportedModelConditions(refused), rc);
    // Status is written on the object as the finalizer patch left it (on the older one it would be a conflict),
    // and the guard above knows of the patch (the same test fails without it: the first pass adds the finalizer).
    const sm = await addFinalizer(deps.kube, GVR.servedModels, cached, FINALIZER, rc.signal);
    if (sm !== cached) deps.writes.wrote(cached, sm);

    // 1. The preheat gate of each replica (creating the owned ModelPreheat when asked to, targeting the peers of
    //    the replicas' nodes when node targeting is on).
    const previous = previousReplicas(sm.status);
    const gating = await deps.gates.of(key, sm, spec, discovery, previous, rc.signal);
    // 1b. A directory's files (spec.files), listed once per generation; none, too many or unlistable: Stalled.
    let dir: ListedDirectory | undefined;
    if (spec.files) {
      const listed = await this.directory(key, sm, spec, gating.preheat, rc);
      if (!listed.ok) return listed.result;
      dir = listed;
    }
    const goal = goalOf(spec, dir);
    // 2. Every replica one step closer (the seed first, alone, when the network does not hold the model yet).
    const outcomes = await this.converge(key, sm, spec, goal, discovery, gating, previous, rc);
    const newLocalHits = outcomes.filter(
      (o) => o.ended?.state === 'done' && !o.ended.reported && o.ended.result.localHit !== undefined,
    ).length;
    this.record(key, sm, goal, discovery, outcomes);
    // 3. Status from the object and what the pass saw.
    const summary = summarize({
      modelName: spec.modelName,
      serviceName: service,
      serviceFound: found.length > 0,
      discovery,
      outcomes,
      previous,
      nodeIPs: gating.nodeIPs,
      gate: gating.conditionGate,
      now: new Date(this.now()),
    });
    this.observe(sm, summary);
    const before = getCondition(sm.status?.conditions, ServedModelCondition.Ready);
    const look = (readySince: string | undefined) => this.nextLook(spec, summary, gating, readySince);
    const sinceWriteMs = this.now() - (this.lastWrite.get(key) ?? 0);
    const next = withServedModelConditions(sm.status ?? {}, sm.metadata.generation, summary.conditions);
    const now = writeNow({
      generation: sm.metadata.generation,
      observedGeneration: sm.status?.observedGeneration,
      conditionsBefore: sm.status?.conditions ?? [],
      conditionsAfter: next.conditions ?? [],
      newLocalHits,
      sinceWriteMs,
    });
    if (!now) return coalescedLook(look(before?.lastTransitionTime), sinceWriteMs, gating.wakeInMs);
    // 4. The write (a conflict throws: the reconcile runs again on fresh data, registrations not yet settled).
    const written = await deps.writeStatus(
      sm,
      (s) =>
        withServedModelConditions(
          {
            ...withReplicas(s, summary, gating.gate, gating.preheat?.status?.cache, gating.nodePreheat),
            files: dir && { count: dir.count, bytes: dir.bytes, digest: dir.digest },
          },
          sm.metadata.generation,
          summary.conditions,
        ),
      rc.signal,
    );
    if (written.written) this.lastWrite.set(key, this.now());
    this.settle(key, sm, goal, discovery, outcomes);
    const after = getCondition(written.object.status?.conditions, ServedModelCondition.Ready);
    if (after?.status === 'True' && before?.status !== 'True')
      deps.events.record(sm, 'Normal', 'Ready', after.message);
    if (after?.status !== 'True' && before?.status === 'True')
      deps.events.record(sm, 'Warning', 'NotReady', after?.message ?? '');
    return withWake(look(after?.lastTransitionTime), gating.wakeInMs);
  }

  /** Drops what is kept for an object that is gone: its coalescing clock, gates, registrations and clients. */
  forget(key: string, uid = this.uids.get(key)): void {
    this.lastWrite.delete(key);
    this.deps.gates.forget(key);
    this.deps.directories?.forget(key);
    this.uids.delete(key);
    if (!uid) return;
    this.deps.registrations.prune(uid);
    for (const d of this.deps.drivers.all()) d.prune(uid);
  }

  private gone(key: string): void {
    this.forget(key);
    const [ns, name] = key.split('/');
    this.deps.metrics.servedModelReplicas(ns!, name!);
  }

  private invalid(sm: Obj, error: ZodError, rc: ReconcileContext): Promise<void> {
    const message = specProblem(error);
    return this.stalled(sm, message, invalidSpecConditions(message), rc);
  }

  /** Static endpoints outside the admin's --allowed-endpoint-hosts (policy/reach.ts) get no request at all. */
  private unknownDriver(sm: Obj, spec: ServedModelSpec, rc: ReconcileContext): Promise<void> {
    const message =
      `spec.modelServer.driver: the operator has no model-server driver named ${spec.modelServer.driver}; ` +
      `use one of ${this.deps.drivers.names().join(', ')}`;
    return this.stalled(sm, message, unknownDriverConditions(message), rc);
  }

  private reach(spec: ServedModelSpec) {
    const { config } = this.deps;
    const storage = spec.preheat?.objectStorage;
    const endpoints = endpointsReach(staticAddresses(spec), 'spec.modelServer.endpoints', {
      managerHosts: config.allowedManagerHosts ?? [],
      endpointHosts: config.allowedEndpointHosts ?? [],
    });
    if (!endpoints.allowed || !storage) return endpoints;
    const storageHosts = config.allowedStorageHosts ?? defaultStorageHosts();
    return storageReach(storage, 'spec.preheat.objectStorage', { storageHosts });
  }

  /** No management key, no registration, no unregistration on delete (the finalizer goes with a CleanupSkipped
   *  Event); the object is Stalled, reason EndpointNotAllowed (or StorageEndpointNotAllowed: no listing, and no
   *  location handed to an agent). */
  private endpointsRefused(sm: Obj, spec: ServedModelSpec, rc: ReconcileContext): Promise<void> {
    const reach = this.reach(spec);
    if (reach.allowed) return Promise.resolve();
    const reason = reach.reason === 'StorageEndpointNotAllowed' ? reach.reason : 'EndpointNotAllowed';
    return this.stalled(sm, reach.message, endpointNotAllowedConditions(reach.message, reason), rc);
  }

  /** A spec the operator will not act on: its conditions written, or, being deleted, the finalizer let go. */
  private stalled(
    sm: Obj,
    message: string,
    conditions: ReturnType<typeof invalidSpecConditions>,
    rc: ReconcileContext,
  ): Promise<void> {
    const problem = { finalizer: FINALIZER, message, skipped: 'model not unregistered' };
    const report = () =>
      this.deps.writeStatus(
        sm,
        (s) => withServedModelConditions(s, sm.metadata.generation, conditions),
        rc.signal,
      );
    return invalidSpec(this.deps, GVR.servedModels, sm, problem, report, rc.signal);
  }

  /**
   * The directory's files, or the pass's result when there are none: Stalled (nothing under the prefix, over a
   * cap: only a spec edit helps) or, when the list API failed, Stalled and looked at again later.
   */
  private async directory(
    key: string,
    sm: Obj,
    spec: ServedModelSpec,
    preheat: ModelPreheat | undefined,
    rc: ReconcileContext,
  ): Promise<ListedDirectory | { ok: false; result: ReconcileResult | void }> {
    if (!this.deps.directories)
      throw new Error('a ServedModel with spec.files needs the directories dependency');
    const listed = await this.deps.directories.of(key, sm, spec, preheat, rc.signal);
    if (listed.ok) return listed;
    await this.stalled(sm, listed.message, directoryConditions(listed.message), rc);
    return { ok: false, result: listed.final ? undefined : { requeueAfter: DIRECTORY_RETRY_MS } };
  }

  /** One step on every replica the gate lets through; the seed first, alone, when the rollout needs one. */
  private async converge(
    key: string,
    sm: Obj,
    spec: ServedModelSpec,
    goal: ReplicaGoal,
    discovery: Discovery,
    gating: ReplicaGating,
    previous: ReadonlyMap<string, ReplicaStatus>,
    rc: ReconcileContext,
  ): Promise<ReplicaOutcome[]> {
    const { registrations, drivers } = this.deps;
    const driver = drivers.get(spec.modelServer.driver);
    const uid = sm.metadata.uid ?? key;
    const endpoints = new Set(discovery.replicas.map((r) => r.endpoint));
    registrations.prune(uid, endpoints, registrationVersion(goal));
    driver.prune(uid, endpoints);
    const { gate, gates, closed } = gating;
    const replicas = discovery.replicas;
    if (gate.state === 'closed' && closed.length === replicas.length)
      return replicas.map((r) => waiting(r, previous.get(r.endpoint), gates.get(r.endpoint)!.message));
    const owner = { uid, namespace: sm.metadata.namespace! };
    const access = replicaAccess(spec);
    const step = (r: Replica, mayRegister: boolean): Promise<ReplicaOutcome> => {
      const g = gates.get(r.endpoint)!;
      if (!g.open) return Promise.resolve(waiting(r, previous.get(r.endpoint), g.message));
      const server = driver.replica(owner, access, r);
      const id = registrationId(key, uid, goal, r);
      const registration = {
        peek: () => registrations.peek(id),
        start: () =>
          registrations.ensure(id, spec.rollout.maxConcurrent, (signal, progress, stopping) =>
            registerAndStart(server, goal, { signal, progress, stopping }),
          ),
      };
      const failure = (err: unknown) => driver.failure(err);
      return convergeReplica(server, r, goal, previous.get(r.endpoint), {
        mayRegister,
        signal: rc.signal,
        registration,
        failure,
      });
    };
    const [seed, ...rest] = replicas;
    if (seed && needsSeed(spec, gate, gating.nodeTargeting, previous)) {
      const first = await step(seed, true);
      const others = await pool(rest, spec.rollout.maxConcurrent, (r) => step(r, first.status.registered));
      return [first, ...others];
    }
    return pool(replicas, spec.rollout.maxConcurrent, (r) => step(r, true));
  }

  /**
   * What the pass did, as Events: each step's, and once per registration the one of a registration that ended
   * (marked reported, so a pass run again after a conflict does not repeat it).
   */
  private record(
    key: string,
    sm: Obj,
    goal: ReplicaGoal,
    discovery: Discovery,
    outcomes: readonly ReplicaOutcome[],
  ): void {
    const { registrations, events } = this.deps;
    const uid = sm.metadata.uid ?? key;
    for (const [i, o] of outcomes.entries()) {
      for (const e of o.events) events.record(sm, e.type, e.reason, e.note);
      if (o.ended?.state !== 'done' || o.ended.reported) continue;
      const r = discovery.replicas[i]!;
      const e = registeredEvent(goal, r, o.ended.result);
      events.record(sm, e.type, e.reason, e.note);
      registrations.report(registrationId(key, uid, goal, r));
    }
  }

  /**
   * After a status write held them: each ended registration settled (a later pass may register again), or kept as
   * it ended when its outcome needs a change.
   */
  private settle(
    key: string,
    sm: Obj,
    goal: ReplicaGoal,
    discovery: Discovery,
    outcomes: readonly ReplicaOutcome[],
  ): void {
    const uid = sm.metadata.uid ?? key;
    for (const [i, o] of outcomes.entries()) {
      if (!o.ended || keepRegistration(o, o.ended, this.now())) continue;
      this.deps.registrations.settle(registrationId(key, uid, goal, discovery.replicas[i]!));
    }
  }

  private observe(sm: Obj, summary: PassSummary): void {
    const { metrics } = this.deps;
    metrics.servedModelReplicas(sm.metadata.namespace!, sm.metadata.name, summary.ready, summary.desired);
    for (const o of summary.failed)
      if (o.failure!.kind) metrics.modelServerErrors.labels(o.failure!.kind).inc();
  }

  private nextLook(
    spec: ServedModelSpec,
    summary: PassSummary,
    gating: ReplicaGating,
    readySince: string | undefined,
  ): ReconcileResult | undefined {
    return nextLook({
      replicas: summary.replicas,
      allReady: summary.allReady,
      failed: summary.failed,
      staticEndpoints: spec.modelServer.endpoints !== undefined,
      gate: gating.conditionGate,
      readySince,
      pollBackoffStart: this.deps.config.pollBackoffStart,
      pollBackoffMax: this.deps.config.pollBackoffMax,
      now: this.now(),
      random: this.random(),
    });
  }
}

/** What a registration is of: the wanted version and archive or directory listing (a new one starts a new
 *  registration). */
const registrationVersion = (goal: ReplicaGoal) =>
  `${goal.version ?? ''}|${goal.fileName}${goal.files ? `|${goal.filesDigest}` : ''}`;

function registrationId(key: string, uid: string, goal: ReplicaGoal, r: Replica): RegistrationId {
  return { uid, owner: key, replica: r.endpoint, version: registrationVersion(goal) };
}

/** What every replica converges to; `dir`: the directory's files of this generation (spec.files). */
export function goalOf(spec: ServedModelSpec, dir?: ListedDirectory): ReplicaGoal {
  return {
    modelName: spec.modelName,
    version: spec.version,
    fileName: spec.fileName ?? directoryName(spec),
    ...(dir ? { files: dir.files, filesDigest: dir.digest } : {}),
    minWorkers: spec.workers.min,
    maxWorkers: spec.workers.max ?? spec.workers.min,
    options: { ...spec.registration },
  };
}
