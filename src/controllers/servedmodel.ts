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
  parseDuration,
  type ModelPreheat,
  type ReplicaStatus,
  type ServedModel,
  type ServedModelStatus,
  GVR,
} from '../api/index.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Dispatcher } from 'undici';
import { ModelServerClient, type RegisterRequest, type RegisterResult } from '../modelserver/client.ts';
import { secretToken, type TokenSource } from '../modelserver/auth.ts';
import { ModelServerError } from '../modelserver/errors.ts';
import {
  Controller,
  addFinalizer,
  applyConditions,
  getCondition,
  hasFinalizer,
  isBeingDeleted,
  removeFinalizer,
  specChanged,
  type ConditionChange,
  type ControllerContext,
  type ControllerFactory,
  type ReconcileContext,
  type ReconcileResult,
} from '../runtime/index.ts';
import { discoverReplicas, SERVICE_NAME_LABEL, type EndpointSlice, type Replica } from './replicas.ts';
import { SecretReader } from './secrets.ts';
import {
  convergeReplica,
  registeredEvent,
  type ReplicaGoal,
  type ReplicaOutcome,
} from './servedmodel-replica.ts';
import {
  RegistrationRunner,
  type Progress,
  type RegistrationId,
  type RegistrationState,
} from './registrations.ts';
import { ensureOwnedPreheat, gateOf, preheatNameOf } from './servedmodel-preheat.ts';
import { ServedModelCondition, invalidSpecConditions, servedModelConditions } from './servedmodel-status.ts';
import { operatorMetrics } from './metrics.ts';

export const FINALIZER = 'peerload.io/unregister-model';
/** Static endpoints send no events: look at them this often once everything is ready (jittered ±20 %, so 1,000
 *  ServedModels do not all check at once). A 60 s period cost an idle operator 2.3 % of a core (bench row 5). */
const STATIC_RECHECK_MS = 300_000;
/** How often a ServedModel whose every failure needs a change (Stalled) looks again by itself. */
const STALLED_RECHECK_MS = 300_000;
/** Bounds of one model-server call during deletion: shorter as the grace deadline nears. */
const CLEANUP_CALL_TIMEOUT_MS = 10_000;
const MIN_CLEANUP_CALL_TIMEOUT_MS = 2_000;
/** How long a deletion pass may run past the grace deadline before the replicas it has not reached are let go. */
const CLEANUP_PASS_OVERRUN_MS = 5_000;
/** At most one status write per object this often when only progress changed (conditions' status or reason did
 *  not): a rollout over many replicas would otherwise write once per replica phase. */
const STATUS_COALESCE_MS = 2_000;
/** How often a registration asks again while the model server downloads the archive for an earlier request. */
const IN_PROGRESS_POLL_MS = 2_000;
/** Room for replica names in a condition or Event (an Event note holds 1,024 characters). */
const MAX_LISTED_CHARS = 700;

type Obj = ServedModel;
type Status = ServedModelStatus;

export interface ServedModelControllerOptions {
  /** Connection pool toward the model servers (default: the model-server client's shared pool). Tests use it to
   *  reach emulated replicas whose EndpointSlice addresses are not on this machine. */
  dispatcher?: Dispatcher;
  /** How long a deletion keeps trying unreachable replicas before it lets go, when the spec does not say.
   *  Default: the operator's --cleanup-grace-period. */
  cleanupGraceMs?: number;
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
  const { pollBackoffStart, pollBackoffMax } = ctx.config;
  const cleanupGraceMs = opts.cleanupGraceMs ?? ctx.config.cleanupGracePeriod;

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

  // Token sources live as long as the replica (renewal is single-flight per source); the SecretReader keeps what
  // it read for a few seconds, because every request asks for the token.
  const tokenSources = new Map<string, TokenSource>();
  const cachedSecret = (namespace: string, name: string, key: string): Promise<string> =>
    secrets.value(namespace, { name, key });

  function clientFor(sm: Obj, spec: ServedModelSpec, replica: Replica): ModelServerClient {
    const ref = spec.modelServer.managementTokenSecretRef;
    let token: TokenSource | undefined;
    if (ref) {
      // `{pod}` in the key selects a per-pod key: every TorchServe process draws its own keys.
      const key = ref.key.replaceAll('{pod}', replica.pod ?? '');
      const id = `${sm.metadata.uid}|${replica.endpoint}|${ref.name}|${key}`;
      token = tokenSources.get(id);
      if (!token) {
        token = secretToken(() => cachedSecret(sm.metadata.namespace!, ref.name, key));
        tokenSources.set(id, token);
      }
    }
    return new ModelServerClient({
      baseURL: replica.endpoint,
      pluginPath: spec.modelServer.pluginPath,
      token,
      ...(opts.dispatcher ? { dispatcher: opts.dispatcher } : {}),
    });
  }

  const registrations = new RegistrationRunner<RegisterResult>({
    global: ctx.config.maxConcurrentRegistrations,
    // Registrations start in reconciles, so the controller exists by the time one reports.
    onChange: (owner) => controller.enqueue(owner),
  });
  /** When each object's status was last written (for coalescing). */
  const lastWrite = new Map<string, number>();

  const writeStatus = (obj: Obj, change: (s: Status) => Status, signal: AbortSignal) =>
    ctx.status.update<Obj, Status>(GVR.servedModels, obj, (o) => change({ ...(o.status ?? {}) }), signal);

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
    const parsed = ServedModelSpec.safeParse(sm.spec);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const message = `spec.${issue.path.join('.')}: ${issue.message}`;
      if (isBeingDeleted(sm) && hasFinalizer(sm, FINALIZER)) {
        // A spec the apiserver took before a validation rule existed: there is nothing safe to act on, and a
        // finalizer that can never be removed would keep the object forever.
        ctx.events.record(
          sm,
          'Warning',
          'CleanupSkipped',
          `model not unregistered: invalid spec (${message})`,
        );
        await removeFinalizer(ctx.kube, GVR.servedModels, sm, FINALIZER, rc.signal);
        return;
      }
      await writeStatus(sm, (s) => withConditions(s, gen, invalidSpecConditions(message)), rc.signal);
      return;
    }
    const spec = parsed.data;
    const found = serviceSlices(namespace, spec);
    const discovery = discoverReplicas(spec, found);

    if (isBeingDeleted(sm)) return cleanUp(sm, spec, discovery.replicas, rc);
    if (!hasFinalizer(sm, FINALIZER))
      await addFinalizer(ctx.kube, GVR.servedModels, sm, FINALIZER, rc.signal);

    // 1. The preheat gate (creating the owned ModelPreheat when asked to).
    let gate = gateOf(preheatNameOf(sm, spec), namespace, preheats);
    if (spec.preheat?.create) {
      const existing = preheats.getByName(namespace, gate.state === 'none' ? '' : gate.preheatName);
      const blocked = await ensureOwnedPreheat(ctx.kube, sm, spec, existing, rc.signal);
      if (blocked)
        gate = {
          state: 'closed',
          preheatName: (gate as { preheatName: string }).preheatName,
          reason: 'PreheatConflict',
          message: blocked,
          final: true,
        };
    }

    // 2. Every replica one step closer (the seed first, alone, when the network does not hold the model yet).
    const previous = new Map((sm.status?.replicas ?? []).map((r) => [r.endpoint, r]));
    const goal = goalOf(spec);
    const uid = sm.metadata.uid ?? key;
    const wanted = `${spec.version ?? ''}|${spec.fileName}`;
    const endpoints = new Set(discovery.replicas.map((r) => r.endpoint));
    registrations.prune(uid, endpoints, wanted);
    // Token sources of replicas that went away (pods churn): a returning endpoint gets a fresh one.
    for (const id of tokenSources.keys()) {
      const [owner, endpoint] = id.split('|');
      if (owner === uid && !endpoints.has(endpoint!)) tokenSources.delete(id);
    }
    const idOf = (endpoint: string): RegistrationId => ({
      uid,
      owner: key,
      replica: endpoint,
      version: wanted,
    });
    /** Registrations whose result this pass acted on (by endpoint): forgotten once their Events are recorded. */
    const consumed = new Set<string>();
    let outcomes: ReplicaOutcome[];
    if (gate.state === 'closed') {
      outcomes = discovery.replicas.map((r) => waiting(r, previous.get(r.endpoint), gate.message));
    } else {
      const step = async (r: Replica, mayRegister: boolean): Promise<ReplicaOutcome> => {
        const client = clientFor(sm, spec, r);
        const id = idOf(r.endpoint);
        // A registration under way says where the replica is: describing it would only cost a request.
        const running = registrations.peek(id);
        if (running?.state === 'running') return underWay(r, running);
        return convergeReplica(client, r, goal, previous.get(r.endpoint), {
          mayRegister,
          signal: rc.signal,
          register: (req) => {
            const state = registrations.ensure(id, spec.rollout.maxConcurrent, (signal, progress) =>
              registerUntilDone(client, req, spec.version, goal, signal, progress),
            );
            if (state.state !== 'running') consumed.add(r.endpoint);
            return state;
          },
        });
      };
      const seeded = !spec.rollout.seedFirst || [...previous.values()].some((r) => r.registered);
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
    for (const o of outcomes) {
      if (!consumed.has(o.status.endpoint)) continue;
      const id = idOf(o.status.endpoint);
      const ended = registrations.peek(id);
      const keep = o.failure && needsChange(o) && ended && Date.now() - ended.since < STALLED_RECHECK_MS;
      if (!keep) registrations.settle(id);
    }
    const replicas = outcomes.map((o) => stamp(o.status, previous.get(o.status.endpoint)));
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
      gate,
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
    const urgent =
      sm.status?.observedGeneration !== gen ||
      conditionsDigest(nextConditions) !== conditionsDigest(sm.status?.conditions ?? []);
    // 4. When to look again: soon while converging (less often the longer it takes), rarely when done.
    const nextLook = (readySince: string | undefined): ReconcileResult | undefined => {
      const registering = replicas.some((r) => r.phase === 'Pending' || r.phase === 'Downloading');
      if (allReady && failed.length === 0)
        return spec.modelServer.endpoints
          ? { requeueAfter: STATIC_RECHECK_MS * (0.8 + Math.random() * 0.4) }
          : undefined;
      if (gate.state === 'closed' && gate.final) return;
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
      return { requeueAfter: Math.min(look, STATUS_COALESCE_MS - sinceWrite) };
    }
    const written = await writeStatus(
      sm,
      (s) =>
        withConditions(
          {
            ...s,
            replicas,
            readyReplicas: readyCount,
            desiredReplicas: desired,
            ready: `${readyCount}/${desired}`,
            servedVersion: allReady && versions.size === 1 ? [...versions][0] : s.servedVersion,
            preheatName: gate.state === 'none' ? undefined : gate.preheatName,
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

    return nextLook(after?.lastTransitionTime);
  }

  /** The EndpointSlices of the ServedModel's Service, from the cache. */
  function serviceSlices(namespace: string, spec: ServedModelSpec): EndpointSlice[] {
    const svc = spec.modelServer.service?.name;
    if (!svc) return [];
    return slices.byIndex('service', `${namespace}/${svc}`);
  }

  /**
   * Unregisters the model from every replica it may be on. Replicas that cannot be reached are retried until the
   * grace deadline (deletionTimestamp + grace), then let go of; meanwhile the Ready condition and a
   * `CleanupPending` Event name them and the deadline, and retries are scheduled so the last one falls on the
   * deadline (not on the work queue's growing backoff), so the object is released right after it.
   */
  async function cleanUp(
    sm: Obj,
    spec: ServedModelSpec,
    discovered: Replica[],
    rc: ReconcileContext,
  ): Promise<ReconcileResult | void> {
    if (!hasFinalizer(sm, FINALIZER)) return;
    // Registrations still running would register the model again after it was unregistered: stop them first.
    registrations.prune(sm.metadata.uid!);
    const grace = spec.deletion?.gracePeriod ? parseDuration(spec.deletion.gracePeriod) : cleanupGraceMs;
    const started = Date.parse(sm.metadata.deletionTimestamp!);
    const deadline = started + grace;
    const left = deadline - Date.now();
    // Replicas that do not answer must not hold the pass past the deadline by much: each call is bounded by the time
    // left, and the whole pass (many replicas, `maxConcurrent` at a time) ends soon after the deadline; the replicas
    // it did not get to then count as unreachable.
    const timeoutMs = Math.min(CLEANUP_CALL_TIMEOUT_MS, Math.max(MIN_CLEANUP_CALL_TIMEOUT_MS, left));
    const passSignal = AbortSignal.any([
      rc.signal,
      AbortSignal.timeout(Math.max(left, 0) + CLEANUP_PASS_OVERRUN_MS),
    ]);
    const known = new Map<string, Replica>();
    for (const r of [...(sm.status?.replicas ?? []), ...discovered]) known.set(r.endpoint, r);
    const failures: { replica: Replica; why: string }[] = [];
    await pool([...known.values()], spec.rollout.maxConcurrent, async (r) => {
      try {
        if (passSignal.aborted) throw new Error('not reached before the grace deadline');
        await unregisterEverywhere(clientFor(sm, spec, r), spec.modelName, passSignal, timeoutMs);
      } catch (err) {
        failures.push({ replica: r, why: (err as Error).message });
      }
    });
    const names = failures.map((f) => f.replica.pod ?? f.replica.endpoint).sort();
    if (failures.length > 0 && Date.now() < deadline) {
      const at = new Date(deadline).toISOString();
      const message =
        `deleting: ${spec.modelName} is still registered on ${failures.length} of ${known.size} replica(s) that ` +
        `cannot be reached: ${listed(names)}; retrying until ${at}, then letting go of them`;
      await writeStatus(
        sm,
        (s) =>
          withConditions(s, sm.metadata.generation, [
            { type: ServedModelCondition.Ready, status: 'False', reason: 'Deleting', message },
            { type: ServedModelCondition.Reconciling, status: 'True', reason: 'Deleting', message },
          ]),
        rc.signal,
      );
      ctx.events.record(
        sm,
        'Warning',
        'CleanupPending',
        `unregistering ${spec.modelName} failed on ${listed(names)}; retrying until ${at}: ${failures[0]!.why}`,
      );
      const elapsed = Date.now() - started;
      const interval = Math.min(pollBackoffMax, Math.max(pollBackoffStart, elapsed / 4));
      return { requeueAfter: Math.max(0, Math.min(interval, deadline - Date.now())) };
    }
    if (failures.length > 0) {
      ctx.events.record(
        sm,
        'Warning',
        'CleanupAbandoned',
        `gave up unregistering ${spec.modelName} after ${grace / 1000}s from ${failures.length} replica(s): ` +
          `${listed(names)} (first error: ${failures[0]!.why})`,
      );
    } else {
      ctx.events.record(
        sm,
        'Normal',
        'Unregistered',
        `unregistered ${spec.modelName} from ${known.size} replica(s)`,
      );
    }
    await removeFinalizer(ctx.kube, GVR.servedModels, sm, FINALIZER, rc.signal);
    forget(`${sm.metadata.namespace}/${sm.metadata.name}`, sm.metadata.uid);
  }

  function forget(key: string, uid?: string): void {
    lastWrite.delete(key);
    if (!uid) return;
    registrations.prune(uid);
    for (const id of tokenSources.keys()) if (id.startsWith(`${uid}|`)) tokenSources.delete(id);
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

/**
 * One registration: the plugin's POST. While the model server downloads the same archive for an earlier request
 * (an operator that restarted mid-download) it waits for that one: it looks whether the wanted version got
 * registered, and asks again only when not (the earlier download failed), so no second download starts.
 */
async function registerUntilDone(
  client: ModelServerClient,
  req: RegisterRequest,
  version: string | undefined,
  goal: ReplicaGoal,
  signal: AbortSignal,
  progress: Progress,
): Promise<RegisterResult> {
  for (;;) {
    const result = await client.register(req, { signal });
    if (!result.inProgress) {
      // Start the workers at once rather than on the next pass (they take longest); the pass checks the counts
      // and scales again should this fail. A version other than the wanted one is the pass's to report.
      const registered = result.version ?? version;
      if (req.modelName !== undefined && (version === undefined || registered === version))
        await client
          .scale(
            req.modelName,
            registered,
            { minWorker: goal.minWorkers, maxWorker: goal.maxWorkers },
            { signal },
          )
          .catch(() => undefined);
      return result;
    }
    progress(`the model server is downloading ${req.fileName} for an earlier request; waiting for it`);
    await sleep(IN_PROGRESS_POLL_MS, undefined, { signal });
    // Registered meanwhile? Without a wanted version a registered one may be an old one: only the plugin can tell
    // (409). Not registered: asking again answers "in progress" without starting anything, or starts the
    // download when the earlier one failed.
    if (version === undefined || req.modelName === undefined) continue;
    const found = (await client.describeIfPresent(req.modelName, version, { signal }))?.[0];
    if (found)
      return {
        httpStatus: 200,
        status: 'registered by an earlier request',
        modelName: found.modelName,
        version: found.modelVersion,
        workersPending: false,
      };
  }
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

/** Unregisters every version: the non-default ones first (TorchServe refuses to drop a default that has siblings). */
async function unregisterEverywhere(
  client: ModelServerClient,
  name: string,
  signal: AbortSignal,
  timeoutMs: number,
): Promise<void> {
  const call = { signal, timeoutMs };
  const all = await client.describeIfPresent(name, 'all', call);
  if (!all) return;
  const def = (await client.describeIfPresent(name, undefined, call))?.[0]?.modelVersion;
  const order = [...all.filter((d) => d.modelVersion !== def), ...all.filter((d) => d.modelVersion === def)];
  for (const d of order) {
    try {
      await client.unregister(name, d.modelVersion, call);
    } catch (err) {
      if (!(err instanceof ModelServerError && err.kind === 'notFound')) throw err;
    }
  }
}

/** Names, as many as fit in the room of a note, then how many more. */
function listed(names: readonly string[]): string {
  const shown: string[] = [];
  let room = MAX_LISTED_CHARS;
  for (const n of names) {
    if (n.length + 2 > room) break;
    shown.push(n);
    room -= n.length + 2;
  }
  const more = names.length - shown.length;
  return shown.join(', ') + (more > 0 ? ` and ${more} more` : '');
}

function waiting(r: Replica, previous: ReplicaStatus | undefined, why: string): ReplicaOutcome {
  return {
    status: {
      endpoint: r.endpoint,
      ...(r.pod ? { pod: r.pod } : {}),
      ...(r.podUID ? { podUID: r.podUID } : {}),
      registered: previous?.registered ?? false,
      readyWorkers: previous?.readyWorkers ?? 0,
      ready: false,
      phase: 'Pending',
      message: why,
    },
    events: [],
  };
}

function underWay(
  r: Replica,
  state: Extract<RegistrationState<unknown>, { state: 'running' }>,
): ReplicaOutcome {
  return {
    status: {
      endpoint: r.endpoint,
      ...(r.pod ? { pod: r.pod } : {}),
      ...(r.podUID ? { podUID: r.podUID } : {}),
      registered: false,
      readyWorkers: 0,
      ready: false,
      phase: state.phase,
      since: new Date(state.since).toISOString(),
      message: state.message,
    },
    events: [],
  };
}

/** Keeps a replica's lastUpdateTime unless what a person reads (ready, message) changed, and `since` while the
 *  phase stays. */
function stamp(status: ReplicaStatus, previous: ReplicaStatus | undefined): ReplicaStatus {
  const same =
    previous &&
    previous.ready === status.ready &&
    previous.message === status.message &&
    previous.lastUpdateTime;
  const now = new Date().toISOString();
  const kept = previous?.phase === status.phase ? previous?.since : undefined;
  const since = kept ?? status.since ?? now;
  return { ...status, since, lastUpdateTime: same ? previous.lastUpdateTime : now };
}

function withConditions(s: Status, gen: number | undefined, changes: ConditionChange[]): Status {
  return { ...s, observedGeneration: gen, conditions: applyConditions(s.conditions, changes, gen) };
}

/** Runs `fn` over `items`, at most `limit` at once, keeping the order of the results. */
async function pool<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}
