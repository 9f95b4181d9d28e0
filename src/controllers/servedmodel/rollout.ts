/**
 * The decisions of a Staged rollout (`spec.rollout.strategy: Staged`), as pure functions: from the spec's wanted
 * version, the recorded `status.rollout` and what every replica reports this pass, which phase the rollout is in
 * and what each replica may do now. The reconciler observes, asks {@link decideRollout}, and carries the actions out
 * (staged.ts); every case is unit-tested (test/unit/servedmodel-rollout.test.ts).
 *
 * Level-triggered: the replicas are the truth and status.rollout only adds what they cannot say (when the try
 * started, its last progress, which version was there before, whether it was rolled back). So an operator killed
 * at any point resumes from what it observes:
 * - no replica serves the new version yet: still staging (or rolling back), whatever status says;
 * - some replicas serve it, others not: a switch was under way: it is finished (or, on a failure, undone), never
 *   left half done;
 * - every replica serves it: retiring the old version, then complete.
 * A replica is never left without a version: a rollback makes the previous version the default before it
 * unregisters anything, and a replica that no longer holds the previous version keeps the new one.
 */
import {
  CANARY_PROBE_PERIOD_SECONDS,
  DEFAULT_CANARY_HOLD_SECONDS,
  DEFAULT_PROGRESS_DEADLINE_SECONDS,
  RETRY_ROLLOUT_ANNOTATION,
  type CanaryStatus,
  type RolloutPhase,
  type RolloutStatus,
  type ServedModelSpec,
} from '../../api/index.ts';
import type { ReplicaEvent } from './replica.ts';

/** One replica as the pass observed it. */
export interface ObservedReplica {
  /** Pod name or endpoint, for messages. */
  label: string;
  /** False when it could not be described this pass: its state is unknown, so no switch starts. */
  known: boolean;
  /** The version a request without one reaches; undefined when the replica does not hold the model. */
  default?: string | undefined;
  /** Every version of the model it holds (the default included): registered, or (a server that loads at the
   *  switch) with its files placed. */
  versions: readonly string[];
  /** The wanted version is staged, ready for the switch: registered with its workers READY, or (a server that
   *  loads at the switch) its files placed. */
  wantedReady: boolean;
  /** Why the wanted version could not be staged there, when retrying cannot fix it (the driver's terminal
   *  failure); undefined otherwise. */
  loadFailed?: string | undefined;
  /** Why the switch to the wanted version failed there this pass, when retrying cannot fix it (a server that loads
   *  at the switch: the load); undefined otherwise. */
  switchFailed?: string | undefined;
}

export interface RolloutInput {
  /** spec.version. */
  wanted: string;
  /** This try: the generation and the retry annotation's value ({@link attemptOf}). */
  attempt: string;
  /** status.rollout as last written. */
  prior: RolloutStatus | undefined;
  paused: boolean;
  deadlineMs: number;
  now: number;
  replicas: readonly ObservedReplica[];
  /** spec.rollout.canary: how many switch first ({@link canaryOf}), and how long they are probed. */
  canary?: CanaryInput | undefined;
}

export interface CanaryInput {
  replicas?: number | undefined;
  percent?: number | undefined;
  holdMs: number;
}

/** spec.rollout.canary as the decisions read it; undefined without one. */
export const canaryOf = (spec: Pick<ServedModelSpec, 'rollout'>): CanaryInput | undefined => {
  const c = spec.rollout.canary;
  if (!c) return undefined;
  return {
    replicas: c.replicas,
    percent: c.percent,
    holdMs: (c.holdSeconds ?? DEFAULT_CANARY_HOLD_SECONDS) * 1000,
  };
};

/** How often a canary is probed during its hold, in ms. */
export const CANARY_PROBE_PERIOD_MS = CANARY_PROBE_PERIOD_SECONDS * 1000;

/** How many of `serving` replicas are canaries: at least one, at most all. */
export function canaryCount(c: CanaryInput, serving: number): number {
  const n = c.replicas ?? Math.ceil((serving * (c.percent ?? 0)) / 100);
  return Math.max(1, Math.min(serving, n));
}

/** What one replica may do this pass. */
export type ReplicaAction =
  /** Nothing of a rollout concerns it: the ordinary step (convergeReplica). */
  | { kind: 'converge' }
  /** Register the wanted version and start its workers, leaving the default as it is. */
  | { kind: 'stage' }
  /** Make the wanted version the default. */
  | { kind: 'switch' }
  /** A canary serving the wanted version: check it is ready and send the probe (spec.rollout.canary.probe). */
  | { kind: 'probe' }
  /** Unregister every version but the wanted one (it is the default). */
  | { kind: 'retire' }
  /** Make `to` the default (when it is not), then unregister every other version. */
  | { kind: 'rollback'; to: string }
  /** Nothing this pass, and why (for its status message). */
  | { kind: 'hold'; why: string };

export interface RolloutDecision {
  /** status.rollout to write; undefined: leave it as it is (no rollout concerns this pass). */
  status: RolloutStatus | undefined;
  /** One per replica, in the input's order. */
  actions: ReplicaAction[];
  /** The Event of a change of phase. */
  events: ReplicaEvent[];
}

/** spec.rollout.progressDeadlineSeconds, or its default, in ms. */
export const progressDeadlineMs = (spec: Pick<ServedModelSpec, 'rollout'>): number =>
  (spec.rollout.progressDeadlineSeconds ?? DEFAULT_PROGRESS_DEADLINE_SECONDS) * 1000;

/** Which try a rollout is: a new generation or a new value of the retry annotation is a new one. */
export const attemptOf = (generation: number | undefined, retry: string | undefined): string =>
  `${generation ?? 0}/${retry ?? ''}`;

export const RolloutReason = {
  LoadFailed: 'LoadFailed',
  ProgressDeadlineExceeded: 'ProgressDeadlineExceeded',
  CanaryFailed: 'CanaryFailed',
} as const;

/** A rollback's status message: what happened, where the replicas go, and how to try again. */
const rollbackMessage = (message: string, to: string | undefined): string =>
  `${message}; every replica goes back to ${to ?? 'the previous version'}: fix it and change the spec, or set the ${RETRY_ROLLOUT_ANNOTATION} annotation to a new value, to try again`.slice(
    0,
    1024,
  );

const iso = (ms: number) => new Date(ms).toISOString();

/** The most frequent value (the first seen on a tie), or undefined. */
function mostCommon(values: readonly string[]): string | undefined {
  const counts = new Map<string, number>();
  for (const v of values) counts.set(v, (counts.get(v) ?? 0) + 1);
  let best: string | undefined;
  for (const [v, n] of counts) if (best === undefined || n > counts.get(best)!) best = v;
  return best;
}

export function decideRollout(i: RolloutInput): RolloutDecision {
  return new RolloutPass(i).decide();
}

/** One pass's decision: what every phase shares (this try's recorded status, the counts) is worked out once. */
class RolloutPass {
  private readonly i: RolloutInput;
  /** status.rollout when it is of this try (same attempt, same version). */
  private readonly same: RolloutStatus | undefined;
  /** The replicas that hold the model (a replica without it joins after the switch). */
  private readonly serving: readonly ObservedReplica[];
  private readonly switched: number;
  private readonly staged: number;
  private readonly previousVersion: string | undefined;

  constructor(i: RolloutInput) {
    const { wanted } = i;
    this.i = i;
    this.same = i.prior && i.prior.attempt === i.attempt && i.prior.version === wanted ? i.prior : undefined;
    this.serving = i.replicas.filter((r) => r.default !== undefined);
    this.switched = this.serving.filter((r) => r.default === wanted).length;
    this.staged = this.serving.filter((r) => r.wantedReady).length;
    this.previousVersion =
      this.same?.previousVersion ??
      mostCommon(this.serving.map((r) => r.default!).filter((v) => v !== wanted)) ??
      mostCommon(this.serving.flatMap((r) => r.versions).filter((v) => v !== wanted));
  }

  /** The phases in the order they are checked: the first that applies decides the pass. */
  decide(): RolloutDecision {
    const { i, same, serving, switched, staged } = this;
    const { wanted, replicas } = i;
    // A try that is rolling back, or rolled back, stays so until a new try: the replicas are put back and held.
    if (same && (same.phase === 'RollingBack' || same.phase === 'RolledBack'))
      return this.rollingBack(same.reason ?? '', same.message ?? '', true);
    // Nothing to roll out: no replica serves or holds another version (a first registration, or a finished try).
    if (!serving.some((r) => r.default !== wanted || this.holdsOther(r))) {
      const converge = replicas.map((): ReplicaAction => ({ kind: 'converge' }));
      return this.decided(!same || same.phase === 'Complete' ? same : this.status('Complete'), converge);
    }
    const inCanary = this.inCanary();
    // Every replica serves the new version: the switch is over; the old versions go.
    if (switched === serving.length && !inCanary) return this.retiring();
    const failed = this.failed();
    if (failed) return failed;
    const begun = switched > 0;
    const allStaged = staged === serving.length && replicas.every((r) => r.known);
    if (i.canary && (inCanary || (!begun && allStaged && !i.paused && same?.canary?.promoted !== true)))
      return this.canary(i.canary);
    // A switch under way is finished, paused or not: two versions served at once is what Staged avoids.
    if (begun || (allStaged && !i.paused)) return this.switching();
    if (i.paused)
      return this.decided(
        this.status('Paused'),
        replicas.map(() => ({
          kind: 'hold',
          why: 'spec.rollout.paused holds the rollout: set it to false to go on',
        })),
      );
    return this.decided(
      this.status('Staging'),
      replicas.map((r): ReplicaAction => {
        if (r.default === undefined)
          return { kind: 'hold', why: `joins with ${wanted} once the switch is over` };
        if (!r.wantedReady) return { kind: 'stage' };
        return { kind: 'hold', why: `${wanted} staged; ${staged}/${serving.length} replica(s) staged` };
      }),
    );
  }

  private holdsOther(r: ObservedReplica): boolean {
    return r.versions.some((v) => v !== this.i.wanted);
  }

  /**
   * The canary (spec.rollout.canary) is under way until it is promoted: begun when every replica is staged, or
   * found begun by a restarted operator (a few replicas switched, no more than the canaries, none promoted).
   */
  private inCanary(): boolean {
    const { i, same, switched } = this;
    const canaryN = i.canary ? canaryCount(i.canary, this.serving.length) : 0;
    return (
      i.canary !== undefined &&
      same?.canary?.promoted !== true &&
      same?.phase !== 'Switching' &&
      same?.phase !== 'Retiring' &&
      (same?.phase === 'Canary' || (switched > 0 && switched <= canaryN))
    );
  }

  /** Before the old version goes, a failure to load, or no progress for the deadline, puts every replica back. */
  private failed(): RolloutDecision | undefined {
    const { i, same, serving, switched, staged } = this;
    const failed = serving.find(
      (r) => (r.loadFailed !== undefined && !r.wantedReady) || r.switchFailed !== undefined,
    );
    if (failed)
      return this.rollingBack(
        RolloutReason.LoadFailed,
        `${failed.label} could not load ${i.wanted}: ${failed.switchFailed ?? failed.loadFailed}`,
      );
    const progressed = !same || staged > same.staged || switched > same.switched;
    const lastProgress = progressed ? i.now : Date.parse(same.lastProgressTime);
    // Paused before the switch, the deadline is not counted (each paused pass is progress).
    if (!(i.paused && switched === 0) && i.now - lastProgress > i.deadlineMs)
      return this.rollingBack(
        RolloutReason.ProgressDeadlineExceeded,
        `no replica was staged or switched for ${Math.round(i.deadlineMs / 1000)}s (spec.rollout.progressDeadlineSeconds); ${staged}/${serving.length} staged, ${switched} switched`,
      );
    return undefined;
  }

  private retiring(): RolloutDecision {
    const { i, same } = this;
    const s = this.status('Retiring', same?.switchEndTime ? {} : switchEnded(same, i.now));
    return this.decided(
      s,
      i.replicas.map((r) =>
        r.default === i.wanted && this.holdsOther(r) ? { kind: 'retire' } : { kind: 'converge' },
      ),
    );
  }

  private switching(): RolloutDecision {
    const { i, same } = this;
    const { wanted } = i;
    const s = this.status('Switching', same?.switchStartTime ? {} : { switchStartTime: iso(i.now) });
    return this.decided(
      s,
      i.replicas.map((r): ReplicaAction => {
        if (r.default === undefined)
          return { kind: 'hold', why: `joins with ${wanted} once the switch is over` };
        if (r.default === wanted) return { kind: 'hold', why: `serves ${wanted}; the others are switching` };
        return r.wantedReady ? { kind: 'switch' } : { kind: 'stage' };
      }),
    );
  }

  private status(phase: RolloutPhase, extra: Partial<RolloutStatus> = {}): RolloutStatus {
    const { i, same, staged, switched, previousVersion } = this;
    const progressed =
      !same || same.phase !== phase || staged > same.staged || switched > same.switched || phase === 'Paused';
    const s: RolloutStatus = {
      ...(same ?? {}),
      phase,
      version: i.wanted,
      ...(previousVersion !== undefined ? { previousVersion } : {}),
      attempt: i.attempt,
      replicas: this.serving.length,
      staged,
      switched,
      startTime: same?.startTime ?? iso(i.now),
      lastProgressTime: progressed ? iso(i.now) : (same?.lastProgressTime ?? iso(i.now)),
      ...extra,
    };
    if ((phase === 'Complete' || phase === 'RolledBack') && !s.completionTime) s.completionTime = iso(i.now);
    return s;
  }

  /** The decision, with the Event of a change of phase. */
  private decided(s: RolloutStatus | undefined, actions: ReplicaAction[]): RolloutDecision {
    if (!s || this.same?.phase === s.phase) return { status: s, actions, events: [] };
    const warning = s.phase === 'RollingBack' || s.phase === 'RolledBack';
    const event: ReplicaEvent = {
      type: warning ? 'Warning' : 'Normal',
      reason: `Rollout${s.phase}`,
      note: noteOf(s),
    };
    return { status: s, actions, events: [event] };
  }

  /**
   * The canaries switch first and are probed each pass (the probe actions; staged.ts sends them and
   * {@link afterProbe} promotes or rolls back); the others hold. The canaries are the recorded ones still serving,
   * topped up with replicas already switched (a restart before status was written), then in the input's order.
   */
  private canary(c: CanaryInput): RolloutDecision {
    const { i, same, serving } = this;
    const { wanted, now, replicas } = i;
    const n = canaryCount(c, serving.length);
    const labels = new Set(serving.map((r) => r.label));
    const chosen = (same?.canary?.replicas ?? []).filter((l) => labels.has(l)).slice(0, n);
    for (const r of [...serving.filter((r) => r.default === wanted), ...serving])
      if (chosen.length < n && !chosen.includes(r.label)) chosen.push(r.label);
    const isCanary = (r: ObservedReplica) => chosen.includes(r.label);
    const canariesSwitched = serving.filter((r) => isCanary(r) && r.default === wanted).length;
    const prev = same?.canary;
    // The hold starts once every canary serves the new version, and again after a canary was replaced (gone from
    // the replicas) and the new one switched: each canary is probed for the whole hold.
    const holdUntil =
      canariesSwitched === chosen.length ? (prev?.holdUntil ?? iso(now + c.holdMs)) : undefined;
    const cs: CanaryStatus = {
      replicas: chosen,
      switched: canariesSwitched,
      ...(holdUntil !== undefined ? { holdUntil } : {}),
      passes: prev?.passes ?? 0,
      failures: prev?.failures ?? 0,
      ...(prev?.lastProbeTime !== undefined ? { lastProbeTime: prev.lastProbeTime } : {}),
    };
    const wait = `waits for the canary (${chosen.join(', ')})${holdUntil ? ` until ${holdUntil} at the earliest` : ''}`;
    return this.decided(
      this.status('Canary', { canary: cs }),
      replicas.map((r): ReplicaAction => {
        if (r.default === undefined)
          return { kind: 'hold', why: `joins with ${wanted} once the switch is over` };
        if (!isCanary(r)) return { kind: 'hold', why: wait };
        if (r.default !== wanted) return r.wantedReady ? { kind: 'switch' } : { kind: 'stage' };
        // Probed from the pass after the last canary switched: the hold starts then.
        return holdUntil !== undefined
          ? { kind: 'probe' }
          : { kind: 'hold', why: `canary: serves ${wanted}` };
      }),
    );
  }

  /** `recorded`: the message is status.rollout's, already saying what to do. */
  private rollingBack(reason: string, message: string, recorded = false): RolloutDecision {
    const { replicas, wanted } = this.i;
    const to = this.previousVersion;
    const actions = replicas.map((r): ReplicaAction => {
      const back = `rolled back to ${to ?? 'the previous version'} (status.rollout)`;
      if (!r.versions.includes(wanted) && (to === undefined || r.versions.every((v) => v === to)))
        return { kind: 'hold', why: back };
      // Without the previous version the replica keeps the new one rather than none.
      if (to === undefined || (r.default === wanted && !r.versions.includes(to)))
        return {
          kind: 'hold',
          why: `cannot roll back: ${to ?? 'the previous version'} is not registered here`,
        };
      return { kind: 'rollback', to };
    });
    // Done once nothing is left to put back (a replica without the previous version keeps the new one: its
    // status message says so).
    const done = actions.every((a) => a.kind === 'hold') && replicas.every((r) => r.known);
    const s = this.status(done ? 'RolledBack' : 'RollingBack', {
      reason,
      message: recorded ? message : rollbackMessage(message, to),
    });
    return this.decided(s, actions);
  }
}

function switchEnded(same: RolloutStatus | undefined, now: number): Partial<RolloutStatus> {
  const start = same?.switchStartTime ? Date.parse(same.switchStartTime) : now;
  return { switchStartTime: iso(start), switchEndTime: iso(now), switchWindowMs: Math.max(0, now - start) };
}

/**
 * The status once a pass's switch calls have answered: when every serving replica now serves the wanted version,
 * the window is the calls' own (the first sent to the last answered), not the passes'.
 */
export function afterSwitch(
  s: RolloutStatus,
  switchedNow: number,
  window: { start: number; end: number },
): RolloutStatus {
  if (s.phase === 'Canary' && s.canary) {
    const now = switchedNow - s.switched;
    return {
      ...s,
      switched: switchedNow,
      canary: { ...s.canary, switched: s.canary.switched + now },
      lastProgressTime: iso(window.end),
    };
  }
  if (s.phase !== 'Switching') return s;
  // Switched by an earlier pass (or a process before a restart): the window started with that pass.
  const start = s.switched > 0 && s.switchStartTime ? Date.parse(s.switchStartTime) : window.start;
  const next = {
    ...s,
    switched: switchedNow,
    switchStartTime: iso(start),
    lastProgressTime: iso(window.end),
  };
  if (switchedNow < s.replicas) return next;
  return {
    ...next,
    phase: 'Retiring',
    switchEndTime: iso(window.end),
    switchWindowMs: Math.max(0, window.end - start),
  };
}

/** One canary's probe this pass: whether it passed, and what it got (against what was expected) when not. */
export interface ProbeResult {
  label: string;
  ok: boolean;
  /** Bounded and without credentials (canary.ts). */
  detail: string;
}

/**
 * The status once a pass's probes have answered: one failure rolls back (reason CanaryFailed, the next pass puts
 * every replica back: none but the canaries switched); every probe passing once the hold is over promotes (the
 * others switch next pass), unless paused. A pass of probes is progress (the deadline does not run out during the
 * hold).
 */
export function afterProbe(
  s: RolloutStatus,
  results: readonly ProbeResult[],
  now: number,
  paused: boolean,
): { status: RolloutStatus; events: ReplicaEvent[] } {
  if (s.phase !== 'Canary' || !s.canary || results.length === 0) return { status: s, events: [] };
  const failed = results.filter((r) => !r.ok);
  const canary: CanaryStatus = {
    ...s.canary,
    passes: s.canary.passes + results.length - failed.length,
    failures: s.canary.failures + failed.length,
    lastProbeTime: iso(now),
  };
  if (failed.length > 0) {
    const f = failed[0]!;
    const next: RolloutStatus = {
      ...s,
      canary,
      phase: 'RollingBack',
      reason: RolloutReason.CanaryFailed,
      message: rollbackMessage(`canary ${f.label} failed its probe: ${f.detail}`, s.previousVersion),
      lastProgressTime: iso(now),
    };
    return { status: next, events: [{ type: 'Warning', reason: 'RolloutRollingBack', note: noteOf(next) }] };
  }
  const over = s.canary.holdUntil !== undefined && now >= Date.parse(s.canary.holdUntil);
  if (!over || paused) return { status: { ...s, canary, lastProgressTime: iso(now) }, events: [] };
  const next: RolloutStatus = {
    ...s,
    canary: { ...canary, promoted: true },
    phase: 'Switching',
    lastProgressTime: iso(now),
  };
  return { status: next, events: [{ type: 'Normal', reason: 'RolloutSwitching', note: noteOf(next) }] };
}

/**
 * Whether status.rollout must be written now rather than coalesced: a new phase, or the canary's record changed
 * (its replicas, its hold's end, a probe's result): the next pass decides from it, so a hold must not restart and a
 * probe must not be forgotten because a write waited.
 */
export function rolloutChanged(before: RolloutStatus | undefined, after: RolloutStatus): boolean {
  if (before?.phase !== after.phase) return true;
  return JSON.stringify(before.canary ?? null) !== JSON.stringify(after.canary ?? null);
}

/**
 * When a pass must look again at the latest: soon (`soonMs`) while a step follows by itself (the old version to
 * retire, a switch or a rollback to finish: replicas that are READY wake nothing), else when the progress deadline
 * would pass while staging.
 */
export function rolloutWakeMs(
  s: RolloutStatus | undefined,
  deadlineMs: number,
  now: number,
  soonMs: number,
): number {
  if (!s) return Infinity;
  if (s.phase === 'Canary') {
    // Canaries still to switch: soon; then a probe every period, and one as the hold ends.
    if (!s.canary?.holdUntil) return soonMs;
    return Math.max(0, Math.min(CANARY_PROBE_PERIOD_MS, Date.parse(s.canary.holdUntil) - now)) + 1;
  }
  if (s.phase === 'Switching' || s.phase === 'Retiring' || s.phase === 'RollingBack') return soonMs;
  if (s.phase !== 'Staging') return Infinity;
  return Math.max(0, Date.parse(s.lastProgressTime) + deadlineMs - now) + 1;
}

function noteOf(s: RolloutStatus): string {
  const from = s.previousVersion ?? 'the previous version';
  switch (s.phase) {
    case 'Staging':
      return `staging ${s.version} on ${s.replicas} replica(s) without serving it (${from} serves)`;
    case 'Paused':
      return `rollout of ${s.version} paused (spec.rollout.paused): ${s.staged}/${s.replicas} staged`;
    case 'Canary':
      return `${s.version} is ready on every replica: switching the canary (${s.canary?.replicas.join(', ') ?? ''}) from ${from} and probing it`;
    case 'Switching':
      return s.canary?.promoted
        ? `the canary passed its probes: switching the other replicas from ${from}`
        : `${s.version} is ready on every replica: switching all of them from ${from}`;
    case 'Retiring':
      return `every replica serves ${s.version}${s.switchWindowMs !== undefined ? ` (switch window ${s.switchWindowMs} ms)` : ''}; unregistering ${from}`;
    case 'Complete':
      return `rollout of ${s.version} complete`;
    case 'RollingBack':
    case 'RolledBack':
      return `${s.phase === 'RollingBack' ? 'rolling back' : 'rolled back'} ${s.version} (${s.reason}): ${s.message ?? ''}`;
  }
}
