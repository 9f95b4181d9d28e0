/**
 * The vocabulary of the Staged rollout's decision tests (rollout.ts): replicas as a pass observes them, the input
 * of a pass at a fixed time, and a recorded status.rollout of this try.
 */
import type { RolloutStatus } from '../../src/api/index.ts';
import {
  attemptOf,
  type decideRollout,
  type ObservedReplica,
  type RolloutInput,
} from '../../src/controllers/servedmodel/rollout.ts';

/** The pass's clock. */
export const T0 = Date.parse('2026-11-29T10:00:00.000Z');
/** The try every case is of (generation 2, no retry annotation). */
export const attempt = attemptOf(2, undefined);
export const iso = (ms: number): string => new Date(ms).toISOString();

/** A replica serving `def`, holding `versions`; `ready`: v2's workers READY. */
export function rep(
  name: string,
  def: string | undefined,
  versions: string[],
  ready = false,
): ObservedReplica {
  return { label: name, known: true, default: def, versions, wantedReady: ready };
}
export const onV1 = (n: string): ObservedReplica => rep(n, '1', ['1']);
export const staged = (n: string): ObservedReplica => rep(n, '1', ['1', '2'], true);
export const switched = (n: string): ObservedReplica => rep(n, '2', ['1', '2'], true);
export const done = (n: string): ObservedReplica => rep(n, '2', ['2'], true);

/** A pass rolling out version 2 over `replicas` at T0, not paused, with a deadline of 60 s unless `more` says. */
export function rolloutInput(replicas: ObservedReplica[], more: Partial<RolloutInput> = {}): RolloutInput {
  return {
    wanted: '2',
    attempt,
    prior: undefined,
    paused: false,
    deadlineMs: 60_000,
    now: T0,
    replicas,
    ...more,
  };
}

/** status.rollout of this try (2 over 1, 3 replicas, started 10 s before T0) in `phase`. */
export function recorded(phase: RolloutStatus['phase'], more: Partial<RolloutStatus> = {}): RolloutStatus {
  return {
    phase,
    version: '2',
    previousVersion: '1',
    attempt,
    replicas: 3,
    staged: 0,
    switched: 0,
    startTime: iso(T0 - 10_000),
    lastProgressTime: iso(T0 - 10_000),
    ...more,
  };
}

/** The kinds of a decision's actions, in the replicas' order. */
export const kinds = (d: ReturnType<typeof decideRollout>): string[] => d.actions.map((a) => a.kind);
