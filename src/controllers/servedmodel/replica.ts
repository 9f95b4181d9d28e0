/**
 * Converges ONE model-server replica towards a ServedModel, one step per reconcile, reading the replica's actual
 * state every time (level-triggered): describe → register when absent (in the background: the step starts the
 * registration and reads where it is) → scale when the worker counts differ → when the wanted version is ready
 * make it the default → then unregister the other versions. The old version stays default until the new one is
 * ready, so a replica always has a default version. Speaks to the replica through the driver interface only.
 */
import { redactBounded } from '../../redact.ts';
import type { ReplicaStatus } from '../../api/index.ts';
import type {
  Failure,
  FailureKind,
  ModelFiles,
  ModelVersion,
  Registered,
  Registration,
  ReplicaServer,
  RegisterCall,
  Staging,
} from '../../servers/driver.ts';
import type { RegistrationState } from './registrations.ts';
import type { Replica } from './replicas.ts';
import { ReplicaFailureReason } from './conditions.ts';

export interface ReplicaGoal {
  modelName: string;
  /** Wanted version; undefined: whatever version the archive registers. */
  version?: string | undefined;
  /** The archive's key, or the directory's prefix (messages). */
  fileName: string;
  /** A directory's files (spec.files), for drivers that load directories. */
  files?: ModelFiles | undefined;
  /** The digest of the directory's listing: another listing is another registration. */
  filesDigest?: string | undefined;
  minWorkers: number;
  maxWorkers: number;
  /** The server's registration options (spec.registration). */
  options: Readonly<Record<string, string | number | undefined>>;
}

export interface ReplicaEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  note: string;
}

/** A registration that has ended (its result not yet settled). */
export type EndedRegistration = Exclude<RegistrationState<Registered>, { state: 'running' }>;

export interface ReplicaOutcome {
  status: ReplicaStatus;
  /** Set when this step failed; the message is in status.message too. `kind`: of the request error, when a
   *  request to the replica failed (for the error metrics). */
  failure?: {
    reason: ReplicaFailureReason;
    retryable: boolean;
    kind?: FailureKind | 'other' | undefined;
  };
  /** What the step did (restarts seen, default switched, versions removed): recorded once it is done. */
  events: ReplicaEvent[];
  /** The replica's registration that ended before this step, to be settled once status holds its outcome. */
  ended?: EndedRegistration | undefined;
}

/** The replica's background registration, as the step sees it. */
export interface ReplicaRegistration {
  /** Its state; undefined when there is none. */
  peek(): RegistrationState<Registered> | undefined;
  /** Starts it when there is none; its state. */
  start(): RegistrationState<Registered>;
}

export interface StepOptions {
  /** False while waiting for the seed replica: describe only, do not download. */
  mayRegister: boolean;
  signal: AbortSignal;
  registration: ReplicaRegistration;
  /** How the driver's errors read. */
  failure: (err: unknown) => Failure | undefined;
}

export async function convergeReplica(
  server: ReplicaServer,
  replica: Replica,
  goal: ReplicaGoal,
  previous: ReplicaStatus | undefined,
  opts: StepOptions,
): Promise<ReplicaOutcome> {
  const seen = opts.registration.peek();
  // A registration under way says where the replica is: describing it would only cost a request.
  if (seen?.state === 'running') return underWay(replica, seen);
  const ended = seen;
  const events: ReplicaEvent[] = [];
  const call = { signal: opts.signal };
  let registered = false;
  try {
    // 1. What does the replica serve now? (Without a version: the default version.)
    const current = await server.describe(goal.modelName, undefined, call);
    let target =
      current && (goal.version === undefined || current.version === goal.version) ? current : undefined;
    if (!target && current && goal.version !== undefined)
      target = await server.describe(goal.modelName, goal.version, call);
    // 2. Absent: registered in the background (the plugin downloads first, with 0 workers).
    if (!target) {
      const got = await registerStep(server, replica, goal, previous, current, ended, opts, events);
      if ('outcome' in got) return { ...got.outcome, ended };
      target = got.target;
    }
    registered = true;
    return { ...(await rollOut(server, replica, goal, previous, current, target, events, call)), ended };
  } catch (err) {
    return { ...failedStep(replica, registered, err, opts.failure, events), ended };
  }
}

/** The outcome of a step whose request to the replica threw: the driver's reading of the error, or ReplicaError. */
export function failedStep(
  replica: Replica,
  registered: boolean,
  err: unknown,
  failure: (err: unknown) => Failure | undefined,
  events: ReplicaEvent[] = [],
): ReplicaOutcome {
  const f = failure(err);
  if (f) {
    // A failure of the bytes is not the server's: its own reason, and no model-server error kind.
    const reason = f.integrity ? ReplicaFailureReason[f.integrity] : REASONS[f.kind];
    const kind = f.integrity ? undefined : f.kind;
    return fail(replica, registered, reason, f.message, f.retryable, events, kind);
  }
  const message = (err as Error).message ?? String(err);
  return fail(replica, registered, ReplicaFailureReason.ReplicaError, message, true, events, 'other');
}

const REASONS: Record<FailureKind, ReplicaFailureReason> = {
  auth: ReplicaFailureReason.ModelServerAuthFailed,
  notFound: ReplicaFailureReason.ModelNotFound,
  conflict: ReplicaFailureReason.Conflict,
  terminal: ReplicaFailureReason.RegistrationRejected,
  retryable: ReplicaFailureReason.ModelServerUnavailable,
};

/** The model is absent: start its registration, or take the one that ended, and describe what it registered. */
async function registerStep(
  server: ReplicaServer,
  replica: Replica,
  goal: ReplicaGoal,
  previous: ReplicaStatus | undefined,
  current: ModelVersion | undefined,
  ended: EndedRegistration | undefined,
  opts: StepOptions,
  events: ReplicaEvent[],
): Promise<{ outcome: ReplicaOutcome } | { target: ModelVersion }> {
  if (!opts.mayRegister) {
    const message = 'waiting for the seed replica';
    const status = { ...base(replica), registered: false, readyWorkers: 0, ready: false, message };
    return { outcome: { status: { ...status, phase: 'Pending' }, events } };
  }
  if (previous?.registered)
    events.push({
      type: 'Normal',
      reason: 'ReplicaRestarted',
      note: `${label(replica)} lost the model (restarted?); registering it again`,
    });
  const state = ended ?? opts.registration.start();
  if (state.state === 'running') return { outcome: underWay(replica, state, events) };
  let version = goal.version;
  if (state.state === 'done') version = state.result.version ?? version;
  // A conflict: someone (an attempt whose answer was lost) registered it already: fine, describe it.
  else if (opts.failure(state.error)?.kind !== 'conflict') throw state.error;
  const mismatch = (message: string) => ({
    outcome: fail(replica, false, ReplicaFailureReason.VersionMismatch, message, false, events),
  });
  if (goal.version !== undefined && version !== undefined && version !== goal.version)
    return mismatch(`${goal.fileName} registers version ${version}, but spec.version is ${goal.version}`);
  const target = await server.describe(goal.modelName, version, { signal: opts.signal });
  if (target) return { target };
  if (goal.version !== undefined && current && current.version !== goal.version)
    // The conflict said the archive's version is registered, yet the wanted one is absent: the archive registers
    // another version. Retrying cannot help until the spec or the archive changes.
    return mismatch(
      `${goal.fileName} does not register version ${goal.version} (spec.version); the model server has ` +
        `${goal.modelName} ${current.version}`,
    );
  return {
    outcome: {
      status: {
        ...base(replica),
        registered: true,
        readyWorkers: 0,
        ready: false,
        phase: 'Registering',
        message: `${goal.modelName} ${version ?? ''} is registered but not described yet`,
      },
      events,
    },
  };
}

/** The model is there: worker counts, then the version rollout (default switched once ready, then the others go). */
async function rollOut(
  server: ReplicaServer,
  replica: Replica,
  goal: ReplicaGoal,
  previous: ReplicaStatus | undefined,
  current: ModelVersion | undefined,
  target: ModelVersion,
  events: ReplicaEvent[],
  call: { signal: AbortSignal },
): Promise<ReplicaOutcome> {
  if (target.minWorkers !== goal.minWorkers || target.maxWorkers !== goal.maxWorkers)
    await server.scale(goal.modelName, target.version, { min: goal.minWorkers, max: goal.maxWorkers }, call);
  const workersReady = target.readyWorkers >= goal.minWorkers && target.minWorkers === goal.minWorkers;
  let servedVersion = current?.version ?? target.version;
  if (workersReady && current && current.version !== target.version) {
    await server.setDefault?.(goal.modelName, target.version, call);
    events.push({
      type: 'Normal',
      reason: 'VersionDefault',
      note: `${goal.modelName} ${target.version} is the default on ${label(replica)}`,
    });
    servedVersion = target.version;
  }
  if (workersReady && servedVersion === target.version && previous?.version !== target.version) {
    for (const old of await server.versions(goal.modelName, call)) {
      if (old.version === target.version) continue;
      await server.unregister(goal.modelName, old.version, call);
      events.push({
        type: 'Normal',
        reason: 'VersionRemoved',
        note: `unregistered ${goal.modelName} ${old.version} from ${label(replica)}`,
      });
    }
  }
  const ready = workersReady && servedVersion === target.version;
  return {
    status: {
      ...base(replica),
      registered: true,
      // Recorded once the rollout on this replica is complete, so an interrupted clean-up is resumed.
      version: ready ? target.version : (previous?.version ?? servedVersion),
      readyWorkers: target.readyWorkers,
      ready,
      ...(target.localHit !== undefined ? { localHit: target.localHit } : {}),
      phase: ready ? 'Ready' : 'Scaling',
      ...(ready ? {} : { message: `${target.readyWorkers}/${goal.minWorkers} workers READY` }),
    },
    events,
  };
}

/**
 * What a background registration runs: the driver's register, then the workers started at once rather than on
 * the next pass (they take longest); the pass checks the counts and scales again should this fail. A version other
 * than the wanted one is the pass's to report. `stopping` (being deleted): nothing follows the registration.
 */
/** What the driver is asked to register for `goal`. */
const registrationFor = (goal: ReplicaGoal): Registration => ({
  fileName: goal.fileName,
  ...(goal.files ? { files: goal.files } : {}),
  modelName: goal.modelName,
  version: goal.version,
  options: goal.options,
});

/** A Staged rollout's staging on a server that loads at the switch (`ReplicaServer.staging`): the files placed only. */
export function placeStaged(staging: Staging, goal: ReplicaGoal, call: RegisterCall): Promise<Registered> {
  return staging.place(registrationFor(goal), call);
}

export async function registerAndStart(
  server: ReplicaServer,
  goal: ReplicaGoal,
  call: RegisterCall & { signal: AbortSignal },
): Promise<Registered> {
  const result = await server.register(registrationFor(goal), call);
  const registered = result.version ?? goal.version;
  if (
    !call.stopping?.aborted &&
    registered !== undefined &&
    (goal.version === undefined || registered === goal.version)
  )
    await server
      .scale(
        goal.modelName,
        registered,
        { min: goal.minWorkers, max: goal.maxWorkers },
        { signal: call.signal },
      )
      .catch(() => undefined);
  return result;
}

export function base(r: Replica): Pick<ReplicaStatus, 'endpoint' | 'pod' | 'podUID'> {
  return {
    endpoint: r.endpoint,
    ...(r.pod ? { pod: r.pod } : {}),
    ...(r.podUID ? { podUID: r.podUID } : {}),
  };
}

function fail(
  replica: Replica,
  registered: boolean,
  reason: ReplicaFailureReason,
  message: string,
  retryable: boolean,
  events: ReplicaEvent[],
  kind?: FailureKind | 'other',
): ReplicaOutcome {
  return {
    status: {
      ...base(replica),
      registered,
      readyWorkers: 0,
      ready: false,
      phase: 'Failed',
      message: redactBounded(message, 1024),
    },
    failure: { reason, retryable, kind },
    events,
  };
}

/** The Event of one replica's registration (one per replica and registration: their notes differ). */
export function registeredEvent(goal: ReplicaGoal, replica: Replica, result: Registered): ReplicaEvent {
  const via =
    result.localHit === undefined
      ? ''
      : result.localHit
        ? ' (peer cache hit)'
        : ' (downloaded through the peer)';
  const version = result.version ?? goal.version ?? '';
  return {
    type: 'Normal',
    reason: 'ModelRegistered',
    note: `registered ${goal.modelName} ${version} on ${label(replica)}${via}`,
  };
}

export const label = (r: Replica): string => (r.pod ? `pod ${r.pod} (${r.endpoint})` : r.endpoint);

/** A replica the preheat gate holds back. */
export function waiting(r: Replica, previous: ReplicaStatus | undefined, why: string): ReplicaOutcome {
  return {
    status: {
      ...base(r),
      registered: previous?.registered ?? false,
      readyWorkers: previous?.readyWorkers ?? 0,
      ready: false,
      phase: 'Pending',
      message: why,
    },
    events: [],
  };
}

/** A replica whose registration runs in the background. */
export function underWay(
  r: Replica,
  state: Extract<RegistrationState<unknown>, { state: 'running' }>,
  events: ReplicaEvent[] = [],
): ReplicaOutcome {
  return {
    status: {
      ...base(r),
      registered: false,
      readyWorkers: 0,
      ready: false,
      phase: state.phase,
      since: new Date(state.since).toISOString(),
      message: state.message,
    },
    events,
  };
}
