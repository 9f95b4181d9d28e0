/**
 * The ServedModel reconciler: the model registered, scaled and READY on every replica of a model server, kept so
 * as pods come, go and restart, and unregistered everywhere on delete.
 *
 * `reconcile` is the state machine: phase.ts says, from the object and what the pass has done, which phase the pass
 * is in; the `switch` runs that phase's step. A pass that serves the model goes through the finalizer, the preheat
 * gates, a directory's listing, one step on every replica (at most `rollout.maxConcurrent` at a time, each moved
 * by convergeReplica() through its model server's driver; with `rollout.strategy: Staged`, staged.ts moves them
 * together as rollout.ts decides) and the report (report.ts: one status write, Ready and its Events).
 * Registrations (the plugin downloads the archive first, minutes for a large model) never run inside a reconcile:
 * they run in the background (registrations.ts), the pass starts them and reads their phase, and each change of
 * phase enqueues the ServedModel again.
 */
import {
  GVR,
  RETRY_ROLLOUT_ANNOTATION,
  replicaAccess,
  type RolloutStatus,
  type ModelPreheat,
  type ServedModel,
  type ServedModelSpec,
  type ServedModelStatus,
} from '../../api/index.ts';
import type { ModelServerDrivers, Registered } from '../../servers/driver.ts';
import {
  addFinalizer,
  type ControllerContext,
  type StatusWriter,
  type ReconcileContext,
  type ReconcileResult,
} from '../../runtime/index.ts';
import { defaultStorageHosts } from '../../policy/storage-reach.ts';
import type { OperatorMetrics } from '../metrics.ts';
import { CACHE_BEHIND_RETRY_MS, cacheBehind, invalidSpec, type StatusWrite } from '../status.ts';
import { FINALIZER } from './cleanup.ts';
import type { ModelDirectories } from './files.ts';
import {
  sourceOwner,
  type ModelSources,
  type ResolvedSource,
  type SourceReason,
} from '../../sources/index.ts';
import {
  directoryConditions,
  sourceConditions,
  endpointNotAllowedConditions,
  unknownDriverConditions,
  unsupportedModelConditions,
  invalidSpecConditions,
  withServedModelConditions,
  type ServedModelConditionChange,
} from './conditions.ts';
import type { ReplicaGates, ReplicaGating } from './gates.ts';
import { goalOf, registrationId, registrationVersion, type ListedDirectory } from './goal.ts';
import { servedModelPhase, type PhaseInput } from './phase.ts';
import { pool } from './pool.ts';
import { needsSeed } from './policy.ts';
import type { RegistrationRunner } from './registrations.ts';
import { ServedModelReport, type PassFindings } from './report.ts';
import {
  convergeReplica,
  placeStaged,
  registerAndStart,
  waiting,
  type ReplicaEvent,
  type ReplicaOutcome,
} from './replica.ts';
import { attemptOf, canaryOf, progressDeadlineMs } from './rollout.ts';
import { convergeStaged } from './staged.ts';
import { previousReplicas } from './replica-status.ts';
import { discoverReplicas, type Discovery, type EndpointSlice, type Replica } from './replicas.ts';

/** How soon a directory whose listing failed is listed again. */
const DIRECTORY_RETRY_MS = 30_000;

type Obj = ServedModel;

/** Without the sources dependency no source is refused; a ServedModel with one then fails its resolving step. */
const NO_SOURCES: Pick<ModelSources, 'reach'> = { reach: () => ({ allowed: true }) };
type Status = ServedModelStatus;

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
  /** The sources of spec.source (src/sources): where their credentials may go, and their files; required for
   *  ServedModels with a source. */
  sources?: Pick<ModelSources, 'reach' | 'files' | 'forget'> | undefined;
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

/** What a pass knows so far: the object (as its finalizer patch left it) and what its steps found. */
interface Pass {
  key: string;
  object: Obj | undefined;
  behind: boolean;
  finalized?: boolean;
  discovery?: Discovery & { serviceFound: boolean };
  gating?: ReplicaGating;
  dir?: ListedDirectory;
  source?: ResolvedSource<SourceReason>;
  outcomes?: ReplicaOutcome[];
  /** A Staged rollout's status and Events (spec.rollout.strategy Staged). */
  rollout?: { status: RolloutStatus | undefined; events: ReplicaEvent[] };
}

export class ServedModelReconciler {
  private readonly deps: ServedModelDeps;
  private readonly reporting: ServedModelReport;
  /** The uid of each object seen, so that one gone without our finalizer's pass is forgotten all the same. */
  private readonly uids = new Map<string, string>();

  constructor(deps: ServedModelDeps) {
    this.deps = deps;
    this.reporting = new ServedModelReport({
      ...deps,
      now: deps.now ?? Date.now,
      random: deps.random ?? Math.random,
    });
  }

  async reconcile(key: string, rc: ReconcileContext): Promise<ReconcileResult | void> {
    const object = this.deps.model(key);
    // The cache holds a version our last write replaced: a pass would build on the status that write replaced
    // and, writes being conditional, lose its own write to a conflict after describing every replica. The
    // write's watch event is moments away, so the pass waits for it (controllers/status.ts).
    const pass: Pass = { key, object, behind: object !== undefined && cacheBehind(this.deps.writes, object) };
    if (object?.metadata.uid && !pass.behind) this.uids.set(key, object.metadata.uid);
    for (;;) {
      const phase = servedModelPhase({
        ...pass,
        policy: this.policy(),
        sources: this.deps.sources ?? NO_SOURCES,
        drivers: this.deps.drivers,
        done: done(pass),
      });
      const sm = pass.object!;
      switch (phase.kind) {
        case 'gone':
          return this.gone(key);
        case 'cacheBehind':
          return { requeueAfter: CACHE_BEHIND_RETRY_MS };
        case 'invalid':
          return this.stalled(sm, phase.message, invalidSpecConditions(phase.message), rc);
        case 'refused':
          return this.stalled(
            sm,
            phase.message,
            endpointNotAllowedConditions(phase.message, phase.reason),
            rc,
          );
        case 'unknownDriver':
          return this.stalled(sm, phase.message, unknownDriverConditions(phase.message), rc);
        case 'unsupportedLayout':
          return this.stalled(sm, phase.message, unsupportedModelConditions(phase.message), rc);
        case 'deleting':
          return this.deps.cleanUp(sm, phase.spec, this.discover(pass, phase.spec).replicas, rc);
        case 'finalizing':
          pass.object = await this.addFinalizer(sm, rc);
          pass.finalized = true;
          break;
        case 'resolving': {
          const resolved = await this.source(sm, phase.spec, rc);
          if (!resolved.ok) return resolved.result;
          pass.source = resolved;
          break;
        }
        case 'gating':
          pass.gating = await this.gate(pass, phase.spec, rc);
          break;
        case 'listing': {
          const listed = await this.directory(key, sm, phase.spec, pass.gating!.preheat, rc);
          if (!listed.ok) return listed.result;
          pass.dir = listed;
          break;
        }
        case 'converging':
          pass.outcomes = await this.converge(pass, phase.spec, rc);
          break;
        case 'reporting':
          return this.reporting.report(findings(pass, phase.spec), rc);
      }
    }
  }

  /** Drops what is kept for an object that is gone: its coalescing clock, gates, registrations and clients. */
  forget(key: string, uid = this.uids.get(key)): void {
    this.reporting.forget(key);
    this.deps.gates.forget(key);
    this.deps.directories?.forget(key);
    this.deps.sources?.forget(key);
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

  private policy(): PhaseInput['policy'] {
    const { config } = this.deps;
    return {
      managerHosts: config.allowedManagerHosts ?? [],
      endpointHosts: config.allowedEndpointHosts ?? [],
      storageHosts: config.allowedStorageHosts ?? defaultStorageHosts(),
    };
  }

  /** The replicas behind the Service's EndpointSlices or the static endpoints, found once per pass. */
  private discover(pass: Pass, spec: ServedModelSpec): Discovery & { serviceFound: boolean } {
    if (pass.discovery) return pass.discovery;
    const service = spec.modelServer.service?.name;
    const found = service ? this.deps.slices(pass.object!.metadata.namespace!, service) : [];
    pass.discovery = { ...discoverReplicas(spec, found), serviceFound: found.length > 0 };
    return pass.discovery;
  }

  /**
   * Status is written on the object as the finalizer patch left it (on the older one it would be a conflict), and
   * the status writer knows of the patch, so that the cache holding the older object counts as behind.
   */
  private async addFinalizer(sm: Obj, rc: ReconcileContext): Promise<Obj> {
    const patched = await addFinalizer(this.deps.kube, GVR.servedModels, sm, FINALIZER, rc.signal);
    if (patched !== sm) this.deps.writes.wrote(sm, patched);
    return patched;
  }

  /** The preheat gate of each replica (creating the owned ModelPreheat when asked to, targeting the peers of the
   *  replicas' nodes when node targeting is on); a source's preheat is of the digest it resolved to. */
  private gate(pass: Pass, spec: ServedModelSpec, rc: ReconcileContext): Promise<ReplicaGating> {
    const sm = pass.object!;
    const previous = previousReplicas(sm.status);
    const discovery = this.discover(pass, spec);
    return this.deps.gates.of(pass.key, sm, spec, discovery, previous, rc.signal, pass.source?.preheat);
  }

  /** A spec the operator will not act on: its conditions written, or, being deleted, the finalizer let go. */
  private stalled(
    sm: Obj,
    message: string,
    conditions: ServedModelConditionChange[],
    rc: ReconcileContext,
  ): Promise<void> {
    const problem = { finalizer: FINALIZER, message, skipped: 'model not unregistered' };
    const gen = sm.metadata.generation;
    // status.files and status.source are of status.observedGeneration: a new generation's conditions leave the
    // old one's.
    const same = (s: Status) => s.observedGeneration === gen;
    const report = () =>
      this.deps.writeStatus(
        sm,
        (s) =>
          withServedModelConditions(
            { ...s, files: same(s) ? s.files : undefined, source: same(s) ? s.source : undefined },
            gen,
            conditions,
          ),
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

  /**
   * A source's files for this generation, or the pass's result when it did not resolve: Stalled with the
   * registry's or the Hub's reason, and tried again later unless only a change of the spec, the source or the
   * annotation can help.
   */
  private async source(
    sm: Obj,
    spec: ServedModelSpec,
    rc: ReconcileContext,
  ): Promise<ResolvedSource<SourceReason> | { ok: false; result: ReconcileResult | void }> {
    if (!this.deps.sources) throw new Error('a ServedModel with spec.source needs the sources dependency');
    const found = await this.deps.sources.files(sourceOwner(sm), spec.source!, rc.signal);
    if (found.ok && spec.preheat?.create && !found.preheat) {
      const { reason, message } = found.unpreheatable!;
      const text = `spec.preheat.create: ${message}: remove preheat (each replica downloads through its node's peer)`;
      await this.stalled(sm, text, sourceConditions(reason, text), rc);
      return { ok: false, result: undefined };
    }
    if (found.ok) return found;
    await this.stalled(sm, found.message, sourceConditions(found.reason, found.message), rc);
    return { ok: false, result: found.final ? undefined : { requeueAfter: DIRECTORY_RETRY_MS } };
  }

  /** One step on every replica the gate lets through; the seed first, alone, when the rollout needs one. */
  private async converge(pass: Pass, spec: ServedModelSpec, rc: ReconcileContext): Promise<ReplicaOutcome[]> {
    const { registrations, drivers } = this.deps;
    const { key, gating } = pass;
    const sm = pass.object!;
    const goal = goalOf(spec, pass.dir ?? pass.source);
    const driver = drivers.get(spec.modelServer.driver);
    const uid = sm.metadata.uid ?? key;
    const replicas = this.discover(pass, spec).replicas;
    const endpoints = new Set(replicas.map((r) => r.endpoint));
    registrations.prune(uid, endpoints, registrationVersion(goal));
    driver.prune(uid, endpoints);
    const { gate, gates, closed } = gating!;
    const previous = previousReplicas(sm.status);
    if (gate.state === 'closed' && closed.length === replicas.length)
      return replicas.map((r) => waiting(r, previous.get(r.endpoint), gates.get(r.endpoint)!.message));
    const owner = { uid, namespace: sm.metadata.namespace! };
    const access = replicaAccess(spec);
    /** `staged`: a Staged rollout's staging, which on a server that loads at the switch only places the files. */
    const registrationOf = (r: Replica, staged = false) => {
      const server = driver.replica(owner, access, r);
      const id = registrationId(key, uid, goal, r);
      return {
        peek: () => registrations.peek(id),
        start: () =>
          registrations.ensure(id, spec.rollout.maxConcurrent, (signal, progress, stopping) =>
            staged && server.staging
              ? placeStaged(server.staging, goal, { signal, progress, stopping })
              : registerAndStart(server, goal, { signal, progress, stopping }),
          ),
      };
    };
    const step = (r: Replica, mayRegister: boolean): Promise<ReplicaOutcome> => {
      const g = gates.get(r.endpoint)!;
      if (!g.open) return Promise.resolve(waiting(r, previous.get(r.endpoint), g.message));
      const server = driver.replica(owner, access, r);
      const registration = registrationOf(r);
      const failure = (err: unknown) => driver.failure(err);
      return convergeReplica(server, r, goal, previous.get(r.endpoint), {
        mayRegister,
        signal: rc.signal,
        registration,
        failure,
      });
    };
    if (spec.rollout.strategy === 'Staged' && goal.version !== undefined) {
      const staged = await convergeStaged(
        {
          goal: { ...goal, version: goal.version },
          prior: sm.status?.rollout,
          attempt: attemptOf(sm.metadata.generation, sm.metadata.annotations?.[RETRY_ROLLOUT_ANNOTATION]),
          paused: spec.rollout.paused === true,
          deadlineMs: progressDeadlineMs(spec),
          canary: canaryOf(spec),
          probe: spec.rollout.canary?.probe,
          maxConcurrent: spec.rollout.maxConcurrent,
          signal: rc.signal,
          failure: (err) => driver.failure(err),
          now: this.deps.now ?? Date.now,
        },
        replicas.map((r) => ({
          replica: r,
          server: driver.replica(owner, access, r),
          registration: registrationOf(r, true),
          previous: previous.get(r.endpoint),
          gate: gates.get(r.endpoint)!,
          converge: () => step(r, true),
          forget: () => registrations.settle(registrationId(key, uid, goal, r)),
        })),
      );
      pass.rollout = { status: staged.rollout, events: staged.events };
      return staged.outcomes;
    }
    const [seed, ...rest] = replicas;
    if (seed && needsSeed(spec, gate, gating!.nodeTargeting, previous)) {
      const first = await step(seed, true);
      const others = await pool(rest, spec.rollout.maxConcurrent, (r) => step(r, first.status.registered));
      return [first, ...others];
    }
    return pool(replicas, spec.rollout.maxConcurrent, (r) => step(r, true));
  }
}

/** Which steps of the serving phases the pass has done. */
const done = (pass: Pass) => ({
  finalizing: pass.finalized === true,
  resolving: pass.source !== undefined,
  gating: pass.gating !== undefined,
  listing: pass.dir !== undefined,
  converging: pass.outcomes !== undefined,
});

/** What the pass found, for the report (every serving step has run by then). */
function findings(pass: Pass, spec: ServedModelSpec): PassFindings {
  const sm = pass.object!;
  return {
    key: pass.key,
    sm,
    spec,
    goal: goalOf(spec, pass.dir ?? pass.source),
    discovery: pass.discovery!,
    serviceFound: pass.discovery!.serviceFound,
    gating: pass.gating!,
    dir: pass.dir,
    source: pass.source?.status,
    previous: previousReplicas(sm.status),
    outcomes: pass.outcomes!,
    rollout: pass.rollout,
  };
}
