/**
 * Timer delays the runtime can arm. Node's timers hold a signed 32-bit millisecond count: a longer delay (or
 * Infinity) is replaced by 1 ms with only a warning, so a far-off re-queue would fire at once and, re-armed, spin;
 * `AbortSignal.timeout` also throws on a fraction or a negative value. Every computed delay goes through
 * {@link timerDelay} before it reaches `setTimeout`, `setInterval` or `AbortSignal.timeout`; a wait longer than
 * the maximum simply wakes early and re-arms for the rest (the work queue does), which is harmless.
 */

/** The longest delay a Node timer keeps: 2^31-1 ms, about 24.8 days. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

/** `ms` as a delay a timer keeps: a whole number in [0, {@link MAX_TIMER_MS}]; NaN and negatives are 0. */
export function timerDelay(ms: number): number {
  if (Number.isNaN(ms) || ms <= 0) return 0;
  return Math.min(MAX_TIMER_MS, Math.ceil(ms));
}

/** `AbortSignal.timeout` with the delay made valid ({@link timerDelay}): it never throws nor fires early. */
export function timeoutSignal(ms: number): AbortSignal {
  return AbortSignal.timeout(timerDelay(ms));
}

/**
 * A server's or a controller's "come back after `ms`" bounded to [`min`, `max`]: 0 (or garbage) would poll in a
 * loop, and a far-off value would leave the object unobserved for weeks. `undefined` in, `undefined` out.
 */
export function clampDelay(ms: number | undefined, min: number, max: number): number | undefined {
  if (ms === undefined) return undefined;
  if (Number.isNaN(ms)) return min;
  return Math.min(max, Math.max(min, ms));
}
