/**
 * Converges ONE model-server replica towards a ServedModel, one step per reconcile, reading the replica's
 * actual state every time (level-triggered): describe → register when absent → scale when the worker counts
 * differ → when the wanted version is ready make it the default → then unregister the other versions.
 * The old version stays default until the new one is ready, so a replica always has a default version.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ReplicaStatus } from '../api/index.ts';
import {
  readyWorkers,
  type ModelDescription,
  type ModelServerClient,
  type RegisterRequest,
  type RegisterResult,
} from '../servers/torchserve/client.ts';
import { ModelServerError, type ModelServerErrorKind } from '../servers/torchserve/errors.ts';
import type { Progress, RegistrationState } from './registrations.ts';
import type { Replica } from './replicas.ts';
import { ReplicaFailureReason } from './servedmodel-status.ts';

export interface ReplicaGoal {
  modelName: string;
  /** Wanted version; undefined: whatever version the archive registers. */
  version?: string | undefined;
  fileName: string;
  minWorkers: number;
  maxWorkers: number;
  registration: {
    handler?: string | undefined;
    runtime?: string | undefined;
    batchSize?: number | undefined;
    maxBatchDelay?: number | undefined;
    responseTimeout?: number | undefined;
    startupTimeout?: number | undefined;
  };
}

export interface ReplicaEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  note: string;
}

export interface ReplicaOutcome {
  status: ReplicaStatus;
  /** Set when this step failed; the message is in status.message too. */
  /** `kind`: of the request error, when a request to the replica failed (for the error metrics). */
  failure?: {
    reason: ReplicaFailureReason;
    retryable: boolean;
    kind?: ModelServerErrorKind | 'other' | undefined;
  };
  events: ReplicaEvent[];
}

export interface StepOptions {
  /** False while waiting for the seed replica: describe only, do not download. */
  mayRegister: boolean;
  signal?: AbortSignal;
  /** Runs the registration in the background and says where it is (the controller's way, so no reconcile waits
   *  for a download). Without it the registration is awaited here. */
  register?: (req: RegisterRequest) => RegistrationState<RegisterResult>;
}

export async function convergeReplica(
  client: ModelServerClient,
  replica: Replica,
  goal: ReplicaGoal,
  previous: ReplicaStatus | undefined,
  opts: StepOptions,
): Promise<ReplicaOutcome> {
  const events: ReplicaEvent[] = [];
  const call = { signal: opts.signal };
  const base = {
    endpoint: replica.endpoint,
    ...(replica.pod ? { pod: replica.pod } : {}),
    ...(replica.podUID ? { podUID: replica.podUID } : {}),
  };
  let registered = false;
  try {
    // 1. What does the replica serve now? (`describe` without a version answers for the default version.)
    const current = (await client.describeIfPresent(goal.modelName, undefined, call))?.[0];
    let target: ModelDescription | undefined =
      current && (goal.version === undefined || current.modelVersion === goal.version) ? current : undefined;
    if (!target && current && goal.version !== undefined) {
      target = (await client.describeIfPresent(goal.modelName, goal.version, call))?.[0];
    }

    // 2. Absent: download through the plugin and register (0 workers, seed 2.4).
    if (!target) {
      if (!opts.mayRegister) {
        return {
          status: {
            ...base,
            registered: false,
            readyWorkers: 0,
            ready: false,
            phase: 'Pending',
            message: 'waiting for the seed replica',
          },
          events,
        };
      }
      if (previous?.registered) {
        events.push({
          type: 'Normal',
          reason: 'ReplicaRestarted',
          note: `${label(replica)} lost the model (restarted?); registering it again`,
        });
      }
      let version = goal.version;
      try {
        const req: RegisterRequest = {
          fileName: goal.fileName,
          modelName: goal.modelName,
          initialWorkers: 0,
          ...defined(goal.registration),
        };
        let result: RegisterResult;
        if (opts.register) {
          const state = opts.register(req);
          if (state.state === 'running') {
            return {
              status: {
                ...base,
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
          if (state.state === 'failed') throw state.error;
          result = state.result;
        } else {
          result = await client.register(req, call);
        }
        if (result.inProgress) {
          return {
            status: {
              ...base,
              registered: false,
              readyWorkers: 0,
              ready: false,
              phase: 'Downloading',
              message: `the model server is downloading ${goal.fileName} for an earlier request`,
            },
            events,
          };
        }
        version = result.version ?? version;
        events.push(registeredEvent(goal, replica, result));
      } catch (err) {
        // 409: someone (a previous attempt whose answer was lost) registered it already: fine, describe it.
        if (!(err instanceof ModelServerError && err.kind === 'conflict')) throw err;
      }
      if (goal.version !== undefined && version !== undefined && version !== goal.version) {
        return fail(
          base,
          false,
          ReplicaFailureReason.VersionMismatch,
          `${goal.fileName} registers version ${version}, but spec.version is ${goal.version}`,
          false,
          events,
        );
      }
      target = (await client.describeIfPresent(goal.modelName, version, call))?.[0];
      if (!target && goal.version !== undefined && current && current.modelVersion !== goal.version) {
        // 409 (the archive's version is registered) yet the wanted one is absent: the archive registers another
        // version. Retrying cannot help until the spec or the archive changes.
        return fail(
          base,
          false,
          ReplicaFailureReason.VersionMismatch,
          `${goal.fileName} does not register version ${goal.version} (spec.version); the model server has ` +
            `${goal.modelName} ${current.modelVersion}`,
          false,
          events,
        );
      }
      if (!target) {
        return {
          status: {
            ...base,
            registered: true,
            readyWorkers: 0,
            ready: false,
            phase: 'Registering',
            message: `${goal.modelName} ${version ?? ''} is registered but not described yet`,
          },
          events,
        };
      }
    }
    registered = true;

    // 3. Worker counts.
    if (target.minWorkers !== goal.minWorkers || target.maxWorkers !== goal.maxWorkers) {
      await client.scale(
        goal.modelName,
        target.modelVersion,
        { minWorker: goal.minWorkers, maxWorker: goal.maxWorkers },
        call,
      );
    }
    const readyCount = readyWorkers(target);
    const workersReady = readyCount >= goal.minWorkers && target.minWorkers === goal.minWorkers;

    // 4. Version rollout: default switches only once the new version is ready, then the others go.
    let servedVersion = current?.modelVersion ?? target.modelVersion;
    if (workersReady && current && current.modelVersion !== target.modelVersion) {
      await client.setDefault(goal.modelName, target.modelVersion, call);
      events.push({
        type: 'Normal',
        reason: 'VersionDefault',
        note: `${goal.modelName} ${target.modelVersion} is the default on ${label(replica)}`,
      });
      servedVersion = target.modelVersion;
    }
    if (workersReady && servedVersion === target.modelVersion && previous?.version !== target.modelVersion) {
      const all = await client.describe(goal.modelName, 'all', call);
      for (const old of all.filter((d) => d.modelVersion !== target.modelVersion)) {
        await client.unregister(goal.modelName, old.modelVersion, call);
        events.push({
          type: 'Normal',
          reason: 'VersionRemoved',
          note: `unregistered ${goal.modelName} ${old.modelVersion} from ${label(replica)}`,
        });
      }
    }

    const ready = workersReady && servedVersion === target.modelVersion;
    return {
      status: {
        ...base,
        registered: true,
        // Recorded once the rollout on this replica is complete, so an interrupted clean-up is resumed.
        version: ready ? target.modelVersion : (previous?.version ?? servedVersion),
        readyWorkers: readyCount,
        ready,
        phase: ready ? 'Ready' : 'Scaling',
        ...(ready ? {} : { message: `${readyCount}/${goal.minWorkers} workers READY` }),
      },
      events,
    };
  } catch (err) {
    if (err instanceof ModelServerError) {
      const reason = {
        auth: ReplicaFailureReason.ModelServerAuthFailed,
        notFound: ReplicaFailureReason.ModelNotFound,
        conflict: ReplicaFailureReason.Conflict,
        terminal: ReplicaFailureReason.RegistrationRejected,
        retryable: ReplicaFailureReason.ModelServerUnavailable,
      }[err.kind];
      return fail(base, registered, reason, err.message, err.retryable, events, err.kind);
    }
    return fail(
      base,
      registered,
      ReplicaFailureReason.ReplicaError,
      (err as Error).message ?? String(err),
      true,
      events,
      'other',
    );
  }
}

function fail(
  base: Pick<ReplicaStatus, 'endpoint' | 'pod' | 'podUID'>,
  registered: boolean,
  reason: ReplicaFailureReason,
  message: string,
  retryable: boolean,
  events: ReplicaEvent[],
  kind?: ModelServerErrorKind | 'other',
): ReplicaOutcome {
  return {
    status: {
      ...base,
      registered,
      readyWorkers: 0,
      ready: false,
      phase: 'Failed',
      message: message.slice(0, 1024),
    },
    failure: { reason, retryable, kind },
    events,
  };
}

/** The Event of one replica's registration (one per replica and registration: their notes differ). */
export function registeredEvent(goal: ReplicaGoal, replica: Replica, result: RegisterResult): ReplicaEvent {
  const via =
    result.cacheHit === undefined
      ? ''
      : result.cacheHit
        ? ' (peer cache hit)'
        : ' (downloaded through the peer)';
  const version = result.version ?? goal.version ?? '';
  return {
    type: 'Normal',
    reason: 'ModelRegistered',
    note: `registered ${goal.modelName} ${version} on ${label(replica)}${via}`,
  };
}

const label = (r: Replica) => (r.pod ? `pod ${r.pod} (${r.endpoint})` : r.endpoint);

function defined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** How often a registration asks again while the model server downloads the archive for an earlier request. */
const IN_PROGRESS_POLL_MS = 2_000;

/**
 * One registration: the plugin's POST. While the model server downloads the same archive for an earlier request
 * (an operator that restarted mid-download) it waits for that one: it looks whether the wanted version got
 * registered, and asks again only when not (the earlier download failed), so no second download starts.
 * `stopping` (the ServedModel is being deleted): the request in flight ends, nothing follows it.
 */
export async function registerUntilDone(
  client: ModelServerClient,
  req: RegisterRequest,
  version: string | undefined,
  goal: ReplicaGoal,
  signal: AbortSignal,
  progress: Progress,
  stopping?: AbortSignal,
): Promise<RegisterResult> {
  for (;;) {
    const result = await client.register(req, { signal });
    if (!result.inProgress) {
      // Start the workers at once rather than on the next pass (they take longest); the pass checks the counts
      // and scales again should this fail. A version other than the wanted one is the pass's to report.
      const registered = result.version ?? version;
      if (
        !stopping?.aborted &&
        req.modelName !== undefined &&
        (version === undefined || registered === version)
      )
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
    // Being deleted: the earlier request's download is not ours to wait for.
    if (stopping?.aborted)
      throw new Error(`registration of ${req.fileName} stopped: the ServedModel is being deleted`);
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

/** A replica the preheat gate holds back. */
export function waiting(r: Replica, previous: ReplicaStatus | undefined, why: string): ReplicaOutcome {
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

/** A replica whose registration runs in the background. */
export function underWay(
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
export function stamp(status: ReplicaStatus, previous: ReplicaStatus | undefined): ReplicaStatus {
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
