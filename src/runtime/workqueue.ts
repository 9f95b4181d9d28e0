/**
 * A rate-limited work queue with the semantics of client-go's workqueue (hand-written: no maintained npm
 * package has them):
 * - de-duplication: a key waiting in the queue is there once however many times it is added;
 * - a key is never handed to two workers at once; a key added while in flight (dirty) is queued again when
 *   its worker calls `done`;
 * - `addAfter` keeps ONE min-heap of delayed keys and ONE timer for the earliest (no per-key timers);
 *   a key already waiting keeps the earlier of its two ready times;
 * - `addRateLimited` delays by max(per-key exponential backoff with jitter, overall token bucket);
 *   `forget` resets a key's backoff;
 * - `shutdown` stops accepting keys; `shutdownWithDrain` also waits (up to a deadline) for in-flight keys;
 * - with `fairness`, keys of one tenant (the namespace of a `namespace/name` key) take at most `maxPerTenant`
 *   of the `capacity` workers, and a free worker takes the key of the waiting tenant that holds the fewest
 *   (fair.ts): one namespace's hanging reconciles cannot hold every worker.
 *
 * Delays are bounded (src/runtime/timers.ts): a key asked for later than {@link MAX_TIMER_MS} from now waits that
 * long, and the one timer is never armed beyond it (Node would fire it after 1 ms instead, in a loop).
 */
import { FairQueue, namespaceOf } from './fair.ts';
import { MAX_TIMER_MS, timerDelay } from './timers.ts';

export interface RateLimiterOptions {
  /** First retry delay; doubles per failure. Default 5 ms. */
  baseDelayMs?: number;
  /** Cap of the per-key delay. Default 5 minutes. */
  maxDelayMs?: number;
  /** Overall rate of rate-limited adds (tokens per second). Default 10. */
  qps?: number;
  /** Bucket size. Default 100. */
  burst?: number;
  /** Extra random fraction added to per-key delays, in [0, jitter). Default 0.2. */
  jitter?: number;
}

/** max(per-key exponential backoff with jitter, token bucket), as client-go's DefaultControllerRateLimiter. */
export class RateLimiter {
  private readonly failures = new Map<string, number>();
  private readonly base: number;
  private readonly max: number;
  private readonly qps: number;
  private readonly burst: number;
  private readonly jitter: number;
  private readonly now: () => number;
  private tokens: number;
  private last: number;

  constructor(opts: RateLimiterOptions = {}, now: () => number = Date.now) {
    this.base = opts.baseDelayMs ?? 5;
    this.max = opts.maxDelayMs ?? 5 * 60_000;
    this.qps = opts.qps ?? 10;
    this.burst = opts.burst ?? 100;
    this.jitter = opts.jitter ?? 0.2;
    this.tokens = this.burst;
    this.now = now;
    this.last = now();
  }

  /** How long to wait before the key may be processed again; counts one more failure for the key. */
  when(key: string): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    const exp = Math.min(this.max, this.base * 2 ** n);
    const perKey = Math.min(this.max, exp * (1 + Math.random() * this.jitter));
    return Math.max(perKey, this.reserve());
  }

  /** Token bucket: returns the wait until a token is available, taking it (tokens may go negative). */
  private reserve(): number {
    const now = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.qps);
    this.last = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens / this.qps) * 1000;
  }

  numRequeues(key: string): number {
    return this.failures.get(key) ?? 0;
  }

  forget(key: string): void {
    this.failures.delete(key);
  }
}

export interface QueueMetrics {
  /** Queue depth changed. */
  depth?(n: number): void;
  /** A key was handed to a worker after waiting `ms` in the queue. */
  latency?(ms: number): void;
  /** A worker finished a key after `ms` (get to done). */
  work?(ms: number): void;
  /** A rate-limited (retry) add. */
  retry?(): void;
  add?(): void;
}

interface Delayed {
  at: number;
  key: string;
}

export interface QueueFairness {
  /** The workers that take keys from this queue. */
  capacity: number;
  /** Workers one tenant may hold at once. Default: all but a quarter (fair.ts). */
  maxPerTenant?: number;
  /** The tenant of a key. Default: its namespace. */
  tenantOf?: (key: string) => string;
}

export class WorkQueue {
  /** Waiting keys by tenant; its slots are the keys in flight. Without fairness, one unbounded pool. */
  private readonly waiting: FairQueue<string>;
  private readonly tenantOf: (key: string) => string;
  private readonly dirty = new Set<string>();
  /** Keys being processed, with when a worker took them. */
  private readonly processing = new Map<string, number>();
  private readonly enqueuedAt = new Map<string, number>();
  private readonly waiters: ((key: string | undefined) => void)[] = [];
  private readonly heap: Delayed[] = [];
  private readonly delayedAt = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private timerAt = Infinity;
  private shuttingDown = false;
  private readonly drainWaiters: (() => void)[] = [];
  readonly rateLimiter: RateLimiter;
  private readonly metrics: QueueMetrics;

  constructor(
    opts: {
      rateLimiter?: RateLimiter | RateLimiterOptions;
      metrics?: QueueMetrics;
      fairness?: QueueFairness;
    } = {},
  ) {
    const unbounded = Number.MAX_SAFE_INTEGER;
    this.waiting = new FairQueue<string>(
      opts.fairness
        ? { capacity: opts.fairness.capacity, maxPerTenant: opts.fairness.maxPerTenant }
        : { capacity: unbounded, maxPerTenant: unbounded },
    );
    this.tenantOf = opts.fairness?.tenantOf ?? namespaceOf;
    this.rateLimiter =
      opts.rateLimiter instanceof RateLimiter ? opts.rateLimiter : new RateLimiter(opts.rateLimiter ?? {});
    this.metrics = opts.metrics ?? {};
  }

  /** Keys waiting to be processed (not in flight, not delayed). */
  get length(): number {
    return this.waiting.length;
  }
  /** Keys waiting in the delay heap. */
  get delayedCount(): number {
    return this.delayedAt.size;
  }
  get inFlight(): number {
    return this.processing.size;
  }
  /** When each in-flight key was taken (ms since epoch): the unfinished-work metrics read it at scrape time. */
  inFlightSince(): Iterable<number> {
    return this.processing.values();
  }
  get isShuttingDown(): boolean {
    return this.shuttingDown;
  }

  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.metrics.add?.();
    this.dirty.add(key);
    if (this.processing.has(key)) return;
    this.push(key);
  }

  private push(key: string): void {
    this.enqueuedAt.set(key, Date.now());
    this.waiting.push(this.tenantOf(key), key);
    this.dispatch();
    this.metrics.depth?.(this.length);
  }

  /** Hands waiting keys to idle workers while a key may run (its tenant under its share). */
  private dispatch(): void {
    while (this.waiters.length > 0) {
      const next = this.waiting.next();
      if (!next) return;
      this.take(next.item);
      this.waiters.shift()!(next.item);
    }
  }

  private take(key: string): void {
    this.dirty.delete(key);
    this.processing.set(key, Date.now());
    const at = this.enqueuedAt.get(key);
    this.enqueuedAt.delete(key);
    if (at !== undefined) this.metrics.latency?.(Date.now() - at);
  }

  /** Next key to process; `undefined` once the queue is shut down and empty. Call `done(key)` afterwards. */
  get(): Promise<string | undefined> {
    const next = this.waiting.next();
    if (next) {
      this.metrics.depth?.(this.length);
      this.take(next.item);
      return Promise.resolve(next.item);
    }
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  /** Marks a key as processed; if it was added meanwhile it is queued again. */
  done(key: string): void {
    const since = this.processing.get(key);
    if (since !== undefined) this.metrics.work?.(Date.now() - since);
    if (this.processing.delete(key)) this.waiting.release(this.tenantOf(key));
    if (this.dirty.has(key)) {
      if (this.shuttingDown) this.dirty.delete(key);
      else this.push(key);
    } else this.dispatch();
    if (this.processing.size === 0) for (const w of this.drainWaiters.splice(0)) w();
  }

  /**
   * Adds the key after `ms` (one heap, one timer), at most {@link MAX_TIMER_MS}. A key already waiting keeps its
   * earlier time. `ms` <= 0 adds at once; NaN is treated as 0 (a caller's arithmetic gone wrong must not lose the
   * key).
   */
  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    if (!(ms > 0)) return this.add(key);
    const at = Date.now() + Math.min(ms, MAX_TIMER_MS);
    const existing = this.delayedAt.get(key);
    if (existing !== undefined && existing <= at) return;
    this.delayedAt.set(key, at);
    // A stale heap entry for the key stays; it is skipped when popped (its time no longer matches).
    heapPush(this.heap, { at, key });
    this.arm();
  }

  addRateLimited(key: string): void {
    this.metrics.retry?.();
    this.addAfter(key, this.rateLimiter.when(key));
  }

  forget(key: string): void {
    this.rateLimiter.forget(key);
  }

  numRequeues(key: string): number {
    return this.rateLimiter.numRequeues(key);
  }

  private arm(): void {
    const next = this.heap[0];
    if (!next) {
      if (this.timer) clearTimeout(this.timer);
      this.timer = undefined;
      this.timerAt = Infinity;
      return;
    }
    if (this.timer && this.timerAt <= next.at) return;
    if (this.timer) clearTimeout(this.timer);
    this.timerAt = next.at;
    this.timer = setTimeout(() => this.fire(), timerDelay(next.at - Date.now()));
  }

  private fire(): void {
    this.timer = undefined;
    this.timerAt = Infinity;
    const now = Date.now();
    while (this.heap.length && this.heap[0]!.at <= now) {
      const { at, key } = heapPop(this.heap)!;
      if (this.delayedAt.get(key) !== at) continue; // superseded by an earlier add
      this.delayedAt.delete(key);
      this.add(key);
    }
    this.arm();
  }

  /** Stops accepting keys; workers blocked in `get` receive `undefined`; delayed keys are dropped. */
  shutdown(): void {
    this.shuttingDown = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.heap.length = 0;
    this.delayedAt.clear();
    for (const w of this.waiters.splice(0)) w(undefined);
    // Queued but not started keys are abandoned: workers stop taking work.
    for (const key of this.waiting.drain()) this.dirty.delete(key);
    this.metrics.depth?.(0);
  }

  /** `shutdown`, then waits until in-flight keys are done or `deadlineMs` passed. Resolves true if drained. */
  async shutdownWithDrain(deadlineMs: number): Promise<boolean> {
    this.shutdown();
    if (this.processing.size === 0) return true;
    let timer: NodeJS.Timeout | undefined;
    const drained = await Promise.race([
      new Promise<boolean>((resolve) => this.drainWaiters.push(() => resolve(true))),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timerDelay(deadlineMs)))),
    ]);
    clearTimeout(timer);
    return drained;
  }
}

// A binary min-heap on `at`.
function heapPush(h: Delayed[], item: Delayed): void {
  h.push(item);
  let i = h.length - 1;
  while (i > 0) {
    const p = (i - 1) >> 1;
    if (h[p]!.at <= h[i]!.at) break;
    [h[p], h[i]] = [h[i]!, h[p]!];
    i = p;
  }
}

function heapPop(h: Delayed[]): Delayed | undefined {
  const top = h[0];
  const last = h.pop();
  if (h.length && last) {
    h[0] = last;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let m = i;
      if (l < h.length && h[l]!.at < h[m]!.at) m = l;
      if (r < h.length && h[r]!.at < h[m]!.at) m = r;
      if (m === i) break;
      [h[m], h[i]] = [h[i]!, h[m]!];
      i = m;
    }
  }
  return top;
}
