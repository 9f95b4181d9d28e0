/**
 * What both controllers do with status in the same way: the one answer to "the cache is behind our own write"
 * (the pass waits for the watch), the write (a function of the current status; after a conflict the runtime's
 * StatusWriter calls it again on a fresh copy, or throws when the controller asks it to so that the whole reconcile
 * runs again), conditions applied with the generation they are about (typed per kind), and an invalid spec
 * (reported, or let go of when the object is being deleted).
 */
import type { ZodError } from 'zod';
import type { Condition } from '../api/index.ts';
import {
  applyConditions,
  hasFinalizer,
  isBeingDeleted,
  removeFinalizer,
  type ConditionChange,
  type ControllerContext,
  type Gvr,
  type KubeObject,
  type StatusResult,
  type StatusUpdateOptions,
  type StatusWriter,
} from '../runtime/index.ts';

/** How soon a pass that found the cache behind our last write looks again (the watch is about that far behind). */
export const CACHE_BEHIND_RETRY_MS = 50;

/**
 * Whether `cached` is a version our last write of it (status or finalizer) replaced: the watch has not delivered that
 * write yet. A pass acting on it would build on what the write replaced (a ModelPreheat would create a second job;
 * a ServedModel would describe every replica only to lose its write to a conflict), so both controllers return
 * `{ requeueAfter: CACHE_BEHIND_RETRY_MS }` instead: status is read from the object, never from what we remember
 * having written.
 */
export function cacheBehind(writes: Pick<StatusWriter, 'behind'>, cached: KubeObject): boolean {
  return writes.behind(cached);
}

/** Writes `change(current status)` as the status of `obj`. */
export type StatusWrite<O, S> = (
  obj: O,
  change: (s: S) => S,
  signal: AbortSignal,
) => Promise<StatusResult<O>>;

export function statusWriter<O extends KubeObject & { status?: S | undefined }, S extends object>(
  ctx: Pick<ControllerContext, 'status'>,
  gvr: Gvr,
  opts: StatusUpdateOptions = {},
): StatusWrite<O, S> {
  return (obj, change, signal) =>
    ctx.status.update<O, S>(gvr, obj, (o) => change({ ...(o.status ?? {}) } as S), signal, opts);
}

interface ConditionedStatus {
  observedGeneration?: number | undefined;
  conditions?: Condition[] | undefined;
}

/** Applies condition changes of one kind to a status (`s` with them, both recording the generation they are about). */
export type WithConditions<T extends string, R extends string> = <S extends ConditionedStatus>(
  s: S,
  gen: number | undefined,
  changes: readonly ConditionChange<T, R>[],
) => S;

/**
 * The {@link WithConditions} of one kind, whose changes may name only the kind's condition types `T` and reasons
 * `R` (each `*-status.ts` makes its kind's: there is no untyped way to set a condition).
 */
export function withConditionsOf<T extends string, R extends string>(): WithConditions<T, R> {
  return (s, gen, changes) => ({
    ...s,
    observedGeneration: gen,
    conditions: applyConditions(s.conditions, changes, gen),
  });
}

/** What an invalid spec is told: its first problem, naming the field. */
export function specProblem(error: ZodError): string {
  const issue = error.issues[0]!;
  return `spec.${issue.path.join('.')}: ${issue.message}`;
}

/**
 * An invalid spec. Being deleted with our finalizer: a spec the apiserver took before a validation rule existed
 * leaves nothing safe to act on, and a finalizer that can never be removed would keep the object forever, so it
 * is removed with a `CleanupSkipped` Event saying what was not done. Otherwise `report` writes the status.
 */
export async function invalidSpec<O extends KubeObject>(
  ctx: Pick<ControllerContext, 'kube'> & { events: Pick<ControllerContext['events'], 'record'> },
  gvr: Gvr,
  obj: O,
  problem: { finalizer: string; message: string; skipped: string },
  report: () => Promise<unknown>,
  signal: AbortSignal,
): Promise<void> {
  if (isBeingDeleted(obj) && hasFinalizer(obj, problem.finalizer)) {
    ctx.events.record(
      obj,
      'Warning',
      'CleanupSkipped',
      `${problem.skipped}: invalid spec (${problem.message})`,
    );
    await removeFinalizer(ctx.kube, gvr, obj, problem.finalizer, signal);
    return;
  }
  await report();
}
