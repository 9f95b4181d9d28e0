/**
 * In-client retries of retryable failures (off unless a client is configured for them: the controllers requeue
 * with back-off instead). Which failures are retried is {@link HttpError.retryable} plus {@link safeToRepeat}; the
 * wait is the server's `Retry-After` when it gave one, else a jittered exponential back-off.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { safeToRepeat } from './classify.ts';
import { isHttpError } from './errors.ts';
import { clampDelay, timerDelay } from '../runtime/timers.ts';

export interface RetryOptions {
  /** Extra attempts after the first. */
  attempts: number;
  /** First back-off delay (doubled each attempt, jittered) when the server gives no Retry-After. Default 500. */
  minDelayMs?: number;
  /** Longest wait; a larger Retry-After is not waited for: the error is thrown for the caller to requeue. */
  maxDelayMs?: number;
}

export const NO_RETRIES: Required<RetryOptions> = { attempts: 0, minDelayMs: 500, maxDelayMs: 30_000 };

/** Runs `f` and repeats it on a retryable failure that is safe to repeat, up to `retry.attempts` more times. */
export async function withRetries<T>(
  method: string,
  retry: Required<RetryOptions>,
  f: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await f();
    } catch (e) {
      if (!isHttpError(e) || !e.retryable || attempt >= retry.attempts || !safeToRepeat(method, e)) throw e;
      const backoff = Math.min(retry.maxDelayMs, retry.minDelayMs * 2 ** attempt);
      const delay = e.retryAfterMs ?? backoff * (0.5 + Math.random() / 2);
      if (delay > retry.maxDelayMs) throw e;
      // An abort ends the wait with the caller's own reason, not the AbortError that wraps it.
      await sleep(timerDelay(delay), undefined, { signal }).catch((err: unknown) => {
        throw signal?.aborted ? signal.reason : err;
      });
    }
  }
}

/**
/**
 * How long a controller waits before it asks again after a server's `Retry-After` of `ms`: within
 * [`pollBackoffStart`, `pollBackoffMax`]. `Retry-After: 0` would otherwise poll in a loop, and a value of days or an
 * HTTP date years ahead (or past a timer's range) would leave the object unobserved.
 */
export function retryAfterDelay(
  ms: number,
  poll: { pollBackoffStart: number; pollBackoffMax: number },
): number {
  return clampDelay(ms, poll.pollBackoffStart, Math.max(poll.pollBackoffStart, poll.pollBackoffMax))!;
}

/**
 * `Retry-After` as milliseconds: delta-seconds or an HTTP date (RFC 9110 10.2.3). Undefined when absent or
 * malformed; never negative.
 */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}
