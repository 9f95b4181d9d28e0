/**
 * metav1.Condition helpers following the API conventions: one condition per `type`, `lastTransitionTime`
 * moves only when `status` changes, `observedGeneration` records the generation the condition is about.
 * All functions are pure: they return new arrays and never mutate their input (the input usually comes from
 * the informer cache, which must stay untouched).
 */
export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** metav1.Condition. Declared here rather than taken from an API package: the runtime knows no product's types
 *  (a product's schema of it, e.g. zod's, is structurally the same type). */
export interface Condition {
  type: string;
  status: ConditionStatus;
  observedGeneration?: number | undefined;
  lastTransitionTime: string;
  reason: string;
  message: string;
}

/**
 * A condition to set. `T` and `R` narrow its type and reason to a kind's own (the product names them: each kind's
 * condition builders take its unions, so a misspelt type or reason does not compile); the runtime takes any.
 */
export interface ConditionInput<T extends string = string, R extends string = string> {
  type: T;
  status: ConditionStatus;
  /** CamelCase, e.g. `JobSucceeded`. */
  reason: R;
  message?: string;
}

const REASON = /^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/;

/**
 * Returns `conditions` with `input` set: added when missing, replaced when present. `lastTransitionTime` is
 * `now` when the condition is new or its status changed, and kept otherwise; `observedGeneration` is
 * `generation`. When nothing changes, the SAME array is returned, so callers can compare by reference.
 */
export function setCondition(
  conditions: readonly Condition[] | undefined,
  input: ConditionInput,
  generation: number | undefined,
  now: Date = new Date(),
): Condition[] {
  if (!REASON.test(input.reason)) throw new Error(`condition reason "${input.reason}" must be CamelCase`);
  const list = conditions ?? [];
  const existing = list.find((c) => c.type === input.type);
  const message = input.message ?? '';
  if (
    existing &&
    existing.status === input.status &&
    existing.reason === input.reason &&
    existing.message === message &&
    existing.observedGeneration === generation
  ) {
    return list as Condition[];
  }
  const next: Condition = {
    type: input.type,
    status: input.status,
    ...(generation !== undefined ? { observedGeneration: generation } : {}),
    lastTransitionTime:
      existing && existing.status === input.status ? existing.lastTransitionTime : formatTime(now),
    reason: input.reason,
    message,
  };
  return existing ? list.map((c) => (c.type === input.type ? next : c)) : [...list, next];
}

export function removeCondition(conditions: readonly Condition[] | undefined, type: string): Condition[] {
  const list = conditions ?? [];
  return list.some((c) => c.type === type) ? list.filter((c) => c.type !== type) : (list as Condition[]);
}

export function getCondition(
  conditions: readonly Condition[] | undefined,
  type: string,
): Condition | undefined {
  return conditions?.find((c) => c.type === type);
}

export function isTrue(conditions: readonly Condition[] | undefined, type: string): boolean {
  return getCondition(conditions, type)?.status === 'True';
}

/** RFC 3339 with second precision, as metav1.Time serialises. */
function formatTime(d: Date): string {
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** A condition to set, or one to remove (`absent`): abnormal-true conditions such as `Stalled` leave when false. */
export type ConditionChange<T extends string = string, R extends string = string> =
  ConditionInput<T, R> | { type: T; absent: true };

/** Applies `changes` in order with {@link setCondition} / {@link removeCondition}; same purity guarantees. */
export function applyConditions(
  conditions: readonly Condition[] | undefined,
  changes: readonly ConditionChange[],
  generation: number | undefined,
  now: Date = new Date(),
): Condition[] {
  let list = (conditions ?? []) as Condition[];
  for (const c of changes)
    list = 'absent' in c ? removeCondition(list, c.type) : setCondition(list, c, generation, now);
  return list;
}
