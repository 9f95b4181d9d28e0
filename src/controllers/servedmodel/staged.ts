/**
 * One pass of a Staged rollout (`spec.rollout.strategy: Staged`): every replica observed (its default, the versions
 * it holds, the wanted version's registration), the phase and each replica's action decided by rollout.ts, and the
 * actions carried out through the driver interface. Staging registers the new version in the background and starts
 * its workers while the old version stays the default; the switch sends every replica's set-default at once and
 * measures the window from the first request to the last answer; a rollback makes the previous version the default
 * again and unregisters the new one a pass later. A replica no rollout concerns takes the ordinary step
 * (convergeReplica).
 *
 * A server that serves a version as soon as it is loaded (`ReplicaServer.staging`, Triton) stages by placing the
 * files only, and its switch is the load (so the window includes the load time); a load that fails there puts every
 * replica back in the same pass (the replicas that loaded it already serve it), and a rollback is unregistering the
 * new version (the previous one is then the newest served), placed files included.
 */
import type { CanaryProbe, RolloutStatus } from '../../api/index.ts';
import type { Failure, ModelVersion, ReplicaServer } from '../../servers/driver.ts';
import { pool } from './pool.ts';
import {
  base,
  failedStep,
  label,
  underWay,
  waiting,
  type EndedRegistration,
  type ReplicaEvent,
  type ReplicaGoal,
  type ReplicaOutcome,
  type ReplicaRegistration,
} from './replica.ts';
import type { ReplicaStatus } from './replica-status.ts';
import type { Replica } from './replicas.ts';
import { probeOnce } from './canary.ts';
import {
  afterProbe,
  afterSwitch,
  decideRollout,
  type CanaryInput,
  type ObservedReplica,
  type ProbeResult,
  type ReplicaAction,
} from './rollout.ts';

/** One replica of the pass, with what the reconciler has for it. */
export interface StagedReplica {
  replica: Replica;
  server: ReplicaServer;
  registration: ReplicaRegistration;
  previous: ReplicaStatus | undefined;
  /** Its preheat gate: a closed one stages nothing. The registration's run stages: with
   *  `server.staging`, it places the files only. */
  gate: { open: boolean; message: string };
  /** Today's step, for a replica no rollout concerns (after the switch, or with nothing to roll out). */
  converge(): Promise<ReplicaOutcome>;
  /** Forgets its ended registration (one of an earlier try: a retry registers again). */
  forget(): void;
}

export interface StagedPass {
  goal: ReplicaGoal & { version: string };
  prior: RolloutStatus | undefined;
  attempt: string;
  paused: boolean;
  deadlineMs: number;
  /** spec.rollout.canary, and its probe (undefined: the canary is checked by the version's readiness only). */
  canary?: CanaryInput | undefined;
  probe?: CanaryProbe | undefined;
  maxConcurrent: number;
  signal: AbortSignal;
  failure: (err: unknown) => Failure | undefined;
  now: () => number;
}

export interface StagedResult {
  outcomes: ReplicaOutcome[];
  /** status.rollout to write; undefined: leave it. */
  rollout: RolloutStatus | undefined;
  events: ReplicaEvent[];
}

interface Seen {
  observed: ObservedReplica;
  /** The versions registered (served). */
  versions: ModelVersion[];
  /** Versions whose files are placed but not loaded (a server with `staging`). */
  placedOnly: string[];
  /** The registration that ended before this pass (settled by the report). */
  ended?: EndedRegistration | undefined;
  /** Set when describing it failed: its outcome. */
  error?: ReplicaOutcome | undefined;
}

export async function convergeStaged(
  p: StagedPass,
  replicas: readonly StagedReplica[],
): Promise<StagedResult> {
  const seen = await pool([...replicas], p.maxConcurrent, (r) => observe(p, r));
  const decide = (prior: RolloutStatus | undefined, observed: readonly Seen[]) =>
    decideRollout({
      wanted: p.goal.version,
      attempt: p.attempt,
      prior,
      paused: p.paused,
      deadlineMs: p.deadlineMs,
      now: p.now(),
      replicas: observed.map((s) => s.observed),
      canary: p.canary,
    });
  const decision = decide(p.prior, seen);
  const outcomes: (ReplicaOutcome | undefined)[] = replicas.map(() => undefined);
  const switching: number[] = [];
  const probes: ProbeResult[] = [];
  await pool([...replicas.keys()], p.maxConcurrent, async (i) => {
    const action = decision.actions[i]!;
    if (action.kind === 'switch') return switching.push(i);
    if (action.kind === 'probe') {
      const result = await probeCanary(p, replicas[i]!, seen[i]!);
      probes.push(result);
      outcomes[i] = held(
        p,
        replicas[i]!,
        seen[i]!,
        `canary: ${result.ok ? 'probe passed' : result.detail}`,
        [],
      );
      return;
    }
    outcomes[i] = await act(p, replicas[i]!, seen[i]!, action);
  });
  let rollout = decision.status;
  const events = [...decision.events];
  if (rollout && probes.length > 0) {
    const probed = afterProbe(rollout, probes, p.now(), p.paused);
    rollout = probed.status;
    events.push(...probed.events);
  }
  const failedSwitches = new Map<number, string>();
  if (switching.length > 0) {
    // Every switch at once: the window two versions are served is as long as the slowest answer.
    const start = p.now();
    const switched = await Promise.all(switching.map((i) => switchOne(p, replicas[i]!, seen[i]!)));
    const end = p.now();
    for (const [k, i] of switching.entries()) {
      outcomes[i] = switched[k]!.outcome;
      if (switched[k]!.failed !== undefined) failedSwitches.set(i, switched[k]!.failed!);
    }
    const ok = switched.filter((s) => s.ok).length;
    if (rollout) rollout = afterSwitch(rollout, rollout.switched + ok, { start, end });
  }
  if (failedSwitches.size > 0 && rollout) {
    // A switch that cannot succeed (a load that fails): the replicas are observed again (some serve the new version
    // now) and put back in this pass, rather than left serving two versions until the next.
    const again = await pool([...replicas], p.maxConcurrent, (r) => observe(p, r));
    for (const [i, why] of failedSwitches) again[i]!.observed = { ...again[i]!.observed, switchFailed: why };
    const undo = decide(rollout, again);
    await pool([...replicas.keys()], p.maxConcurrent, async (i) => {
      const action = undo.actions[i]!;
      if (action.kind === 'rollback' || (action.kind === 'hold' && failedSwitches.has(i)))
        outcomes[i] = await act(p, replicas[i]!, again[i]!, action);
    });
    rollout = undo.status;
    events.push(...undo.events);
  }
  if (rollout?.phase === 'Retiring' && decision.status?.phase === 'Switching')
    events.push({
      type: 'Normal',
      reason: 'RolloutRetiring',
      note: `every replica serves ${rollout.version} (switch window ${rollout.switchWindowMs} ms); unregistering ${rollout.previousVersion ?? 'the previous version'}`,
    });
  // Every replica has its outcome by now: its action's, or its switch's.
  return { outcomes: outcomes.map((o) => o!), rollout, events };
}

/** What one replica holds and where the wanted version's registration is. */
async function observe(p: StagedPass, r: StagedReplica): Promise<Seen> {
  const { goal } = p;
  const lbl = label(r.replica);
  let reg = r.registration.peek();
  // A failure from an earlier try: this try registers again.
  const tryStart =
    p.prior && p.prior.attempt === p.attempt && p.prior.version === goal.version
      ? Date.parse(p.prior.startTime)
      : Infinity;
  if (reg?.state === 'failed' && reg.since < tryStart) {
    r.forget();
    reg = undefined;
  }
  const ended = reg && reg.state !== 'running' ? reg : undefined;
  let loadFailed: string | undefined;
  const staging = r.server.staging;
  if (reg?.state === 'failed') {
    const f = p.failure(reg.error);
    // Refused credentials and a lost answer (conflict) are not the version's failure; retryable ones are retried.
    if (f && !f.retryable && f.kind !== 'auth' && f.kind !== 'conflict') loadFailed = f.message;
  } else if (reg?.state === 'done' && reg.result.version !== undefined && reg.result.version !== goal.version)
    loadFailed = `${goal.fileName} registers version ${reg.result.version}, but spec.version is ${goal.version}`;
  try {
    const call = { signal: p.signal };
    const versions = await r.server.versions(goal.modelName, call);
    const current =
      versions.length > 0 ? await r.server.describe(goal.modelName, undefined, call) : undefined;
    const wanted = versions.find((v) => v.version === goal.version);
    const loaded = versions.map((v) => v.version);
    const placedOnly = staging
      ? (await staging.placed(goal.modelName, call)).filter((v) => !loaded.includes(v))
      : [];
    return {
      observed: {
        label: lbl,
        known: true,
        default: current?.version,
        versions: [...loaded, ...placedOnly],
        // Staged: registered with its workers READY, or placed for a server that loads at the switch.
        wantedReady: wanted ? workersReady(wanted, goal) : placedOnly.includes(goal.version),
        loadFailed,
      },
      versions,
      placedOnly,
      ended,
    };
  } catch (err) {
    return {
      observed: { label: lbl, known: false, versions: [], wantedReady: false, loadFailed },
      versions: [],
      placedOnly: [],
      ended,
      error: failedStep(r.replica, r.previous?.registered ?? false, err, p.failure),
    };
  }
}

/**
 * One canary's check: the server says the wanted version is its default and ready (the observation of this pass),
 * then, with a probe, the inference request answered as expected.
 */
async function probeCanary(p: StagedPass, r: StagedReplica, s: Seen): Promise<ProbeResult> {
  const { goal } = p;
  const lbl = label(r.replica);
  if (s.error) return { label: lbl, ok: false, detail: 'could not be described this pass' };
  const v = s.versions.find((x) => x.version === goal.version);
  if (s.observed.default !== goal.version || !s.observed.wantedReady)
    return {
      label: lbl,
      ok: false,
      detail: `got ${goal.version} ${s.observed.default === goal.version ? 'default' : 'not the default'} with ${v?.readyWorkers ?? 0}/${goal.minWorkers} workers READY, expected it the default and ready`,
    };
  if (!p.probe) return { label: lbl, ok: true, detail: '' };
  const detail = await probeOnce(
    { server: r.server, model: goal.modelName, version: goal.version, signal: p.signal, failure: p.failure },
    p.probe,
  );
  return detail === undefined ? { label: lbl, ok: true, detail: '' } : { label: lbl, ok: false, detail };
}

const workersReady = (v: ModelVersion, goal: ReplicaGoal) =>
  v.readyWorkers >= goal.minWorkers && v.minWorkers === goal.minWorkers;

async function act(p: StagedPass, r: StagedReplica, s: Seen, action: ReplicaAction): Promise<ReplicaOutcome> {
  if (action.kind === 'converge') return r.converge();
  if (s.error) return { ...s.error, ended: s.ended };
  const call = { signal: p.signal };
  const { goal } = p;
  const events: ReplicaEvent[] = [];
  try {
    switch (action.kind) {
      case 'hold':
        return held(p, r, s, action.why, events);
      case 'stage':
        return await stage(p, r, s);
      case 'retire':
        for (const v of heldVersions(s)) {
          if (v === goal.version) continue;
          await r.server.unregister(goal.modelName, v, call);
          events.push(removed(goal, r, v));
        }
        return {
          status: { ...servingStatus(p, r, s, goal.version), phase: 'Ready' },
          events,
          ended: s.ended,
        };
      case 'rollback': {
        // A server with a default: the new version goes a pass after the default is back, as a retirement waits a
        // pass after the switch, so requests it accepted before the default moved are answered, not dropped. A
        // server that loads at the switch has no default to set: the newest served answers, which the previous
        // version is again once the new one is unregistered below.
        const setDefault = r.server.setDefault?.bind(r.server);
        const setBack = s.observed.default !== action.to && setDefault !== undefined;
        if (setBack) {
          await setDefault(goal.modelName, action.to, call);
          events.push({
            type: 'Normal',
            reason: 'VersionDefault',
            note: `${goal.modelName} ${action.to} is the default on ${label(r.replica)} again (rollback)`,
          });
        }
        for (const v of setBack ? [] : heldVersions(s)) {
          if (v === action.to) continue;
          await r.server.unregister(goal.modelName, v, call);
          events.push(removed(goal, r, v));
        }
        const back = s.versions.find((v) => v.version === action.to);
        return {
          status: {
            ...base(r.replica),
            registered: true,
            version: action.to,
            readyWorkers: back?.readyWorkers ?? 0,
            ready: false,
            phase: 'Pending',
            message: `rolled back to ${action.to} (status.rollout)`,
          },
          events,
          ended: s.ended,
        };
      }
    }
  } catch (err) {
    return { ...failedStep(r.replica, true, err, p.failure, events), ended: s.ended };
  }
  return r.converge();
}

/** The wanted version registered (in the background) and its workers started; the default left as it is. */
async function stage(p: StagedPass, r: StagedReplica, s: Seen): Promise<ReplicaOutcome> {
  const { goal } = p;
  const target = s.versions.find((v) => v.version === goal.version);
  if (target) {
    if (target.minWorkers !== goal.minWorkers || target.maxWorkers !== goal.maxWorkers)
      await r.server.scale(
        goal.modelName,
        goal.version,
        { min: goal.minWorkers, max: goal.maxWorkers },
        { signal: p.signal },
      );
    return held(
      p,
      r,
      s,
      `staging ${goal.version}: ${target.readyWorkers}/${goal.minWorkers} workers READY`,
      [],
    );
  }
  if (!r.gate.open) return waiting(r.replica, r.previous, r.gate.message);
  const state = s.ended ?? r.registration.start();
  if (state.state === 'running') return underWay(r.replica, state);
  if (state.state === 'failed')
    return { ...failedStep(r.replica, true, state.error, p.failure), ended: s.ended };
  return held(p, r, s, `${goal.version} registered; describing it next pass`, []);
}

/** A replica the pass leaves as it is: what it serves, and why it waits. */
function held(p: StagedPass, r: StagedReplica, s: Seen, why: string, events: ReplicaEvent[]): ReplicaOutcome {
  const serving = s.observed.default;
  const status = serving === undefined ? undefined : servingStatus(p, r, s, serving);
  const ready = serving === p.goal.version && s.observed.wantedReady;
  return {
    status: {
      ...base(r.replica),
      registered: s.versions.length > 0,
      ...(status?.version !== undefined ? { version: status.version } : {}),
      readyWorkers: status?.readyWorkers ?? 0,
      ready,
      phase: ready ? 'Ready' : 'Pending',
      ...(ready ? {} : { message: why }),
    },
    events,
    ended: s.ended,
  };
}

/** A replica serving `version`: its workers, and the version recorded (the wanted one once the others are gone). */
function servingStatus(p: StagedPass, r: StagedReplica, s: Seen, version: string): ReplicaStatus {
  const v = s.versions.find((x) => x.version === version);
  const ready = version === p.goal.version && s.observed.wantedReady;
  return {
    ...base(r.replica),
    registered: true,
    version,
    readyWorkers: v?.readyWorkers ?? 0,
    ready,
  };
}

/** Every version the replica holds, served or placed: what a retirement or a rollback unregisters. */
const heldVersions = (s: Seen): string[] => [...s.versions.map((v) => v.version), ...s.placedOnly];

/** One replica's switch; `failed` says why, when retrying cannot fix it. */
async function switchOne(
  p: StagedPass,
  r: StagedReplica,
  s: Seen,
): Promise<{ ok: boolean; outcome: ReplicaOutcome; failed?: string | undefined }> {
  const { goal } = p;
  try {
    const call = { signal: p.signal };
    if (r.server.staging) await r.server.staging.load(goal.modelName, goal.version, call);
    else await r.server.setDefault!(goal.modelName, goal.version, call);
    const event: ReplicaEvent = {
      type: 'Normal',
      reason: 'VersionDefault',
      note: `${goal.modelName} ${goal.version} is the default on ${label(r.replica)}`,
    };
    const target = s.versions.find((v) => v.version === goal.version);
    return {
      ok: true,
      outcome: {
        status: {
          ...base(r.replica),
          registered: true,
          version: goal.version,
          readyWorkers: target?.readyWorkers ?? 0,
          ready: true,
          phase: 'Ready',
        },
        events: [event],
        ended: s.ended,
      },
    };
  } catch (err) {
    const f = p.failure(err);
    return {
      ok: false,
      outcome: { ...failedStep(r.replica, true, err, p.failure), ended: s.ended },
      failed: f && !f.retryable && f.kind !== 'auth' ? f.message : undefined,
    };
  }
}

const removed = (goal: ReplicaGoal, r: StagedReplica, version: string): ReplicaEvent => ({
  type: 'Normal',
  reason: 'VersionRemoved',
  note: `unregistered ${goal.modelName} ${version} from ${label(r.replica)}`,
});
