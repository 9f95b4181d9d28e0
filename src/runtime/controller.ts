/**
 * A controller: a primary informer, optional secondary watches that map their events to primary keys, a
 * rate-limited work queue and N workers calling `reconcile(key)`.
 *
 * Contract for `reconcile`: read the object from the cache (`informer.get(key)`; undefined = deleted), look at
 * the world, converge, and return `{ requeueAfter }` to be called again later (polling), nothing when done,
 * or throw: a {@link TerminalError} is logged and not retried; any other error is retried with per-key
 * exponential backoff. Reconcile never learns which event woke it (level-triggered), and the queue guarantees
 * one key is never reconciled by two workers at once.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { Informer } from './informer.ts';
import { objectKey, splitKey, type KubeObject } from './kube.ts';
import type { Metrics } from './metrics.ts';
import { WorkQueue, type RateLimiterOptions } from './workqueue.ts';

/** An error retrying cannot fix (invalid spec, permanent rejection): logged, counted, not requeued. */
export class TerminalError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TerminalError';
  }
}

export interface ReconcileResult {
  /**
   * Reconcile this key again after so many milliseconds (e.g. to poll an external system), at most 2^31-1 ms.
   * Not positive (0, negative, NaN): again through the rate limiter, as after a failure, never at once.
   */
  requeueAfter?: number;
}

export interface ReconcileContext {
  key: string;
  namespace: string | undefined;
  name: string;
  /** Unique per call; in every log line of the call. */
  reconcileID: string;
  log: Logger;
  /** Aborted when the controller stops and the shutdown deadline passed: give up what you are doing. */
  signal: AbortSignal;
  /** How many times in a row this key failed before this call. */
  retries: number;
}

export type Reconciler = (key: string, ctx: ReconcileContext) => Promise<ReconcileResult | void>;

export type EventKind = 'add' | 'update' | 'delete';

/** Decides whether an event of the primary informer enqueues its key. `old` is set for updates only. */
export type Predicate<T> = (kind: EventKind, obj: T, old?: T) => boolean;

/** A secondary source: events of `informer` are mapped to keys of the primary resource. */
export interface WatchSource<S extends KubeObject = KubeObject> {
  informer: Informer<S>;
  map: (obj: S) => string[];
  predicate?: Predicate<S>;
}

export interface ControllerOptions<T extends KubeObject> {
  name: string;
  for: Informer<T>;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  watches?: WatchSource<any>[];
  reconcile: Reconciler;
  /** Concurrent reconciles (of different keys). Default 1. */
  workers?: number;
  /** Reconciles of one namespace at once: the rest of the workers stay free for other namespaces.
   *  Default: all but a quarter of `workers` (at least one kept back). */
  maxWorkersPerNamespace?: number;
  rateLimiter?: RateLimiterOptions;
  predicate?: Predicate<T>;
  /** Called once when the controller stops taking work: ends the background work it started. */
  onStop?: () => void;
}

/** Ignores updates that change neither generation, labels, annotations, finalizers nor deletionTimestamp
 *  (in particular status-only writes, such as our own). Resyncs (old === obj) pass. */
export const specChanged: Predicate<KubeObject> = (kind, obj, old) => {
  if (kind !== 'update' || !old || old === obj) return true;
  const a = old.metadata;
  const b = obj.metadata;
  return (
    a.generation !== b.generation ||
    a.deletionTimestamp !== b.deletionTimestamp ||
    JSON.stringify(a.labels) !== JSON.stringify(b.labels) ||
    JSON.stringify(a.annotations) !== JSON.stringify(b.annotations) ||
    JSON.stringify(a.finalizers) !== JSON.stringify(b.finalizers)
  );
};

export interface ControllerDeps {
  logger: Logger;
  metrics?: Metrics;
}

export class Controller<T extends KubeObject = KubeObject> {
  readonly name: string;
  readonly queue: WorkQueue;
  readonly primary: Informer<T>;
  private readonly opts: ControllerOptions<T>;
  private readonly log: Logger;
  private readonly metrics: Metrics | undefined;
  private running = false;
  private started = false;
  private workers: Promise<void>[] = [];
  private abort = new AbortController();
  private readonly unsubscribe: (() => void)[] = [];

  constructor(opts: ControllerOptions<T>, deps: ControllerDeps) {
    this.name = opts.name;
    this.opts = opts;
    this.primary = opts.for;
    this.log = deps.logger.child({ controller: opts.name });
    this.metrics = deps.metrics;
    this.queue = new WorkQueue({
      rateLimiter: opts.rateLimiter,
      fairness: {
        capacity: Math.max(1, opts.workers ?? 1),
        ...(opts.maxWorkersPerNamespace !== undefined ? { maxPerTenant: opts.maxWorkersPerNamespace } : {}),
      },
      metrics: deps.metrics?.queue(opts.name, { inFlightSince: () => this.queue.inFlightSince() }),
    });

    const primaryPred = opts.predicate;
    const onPrimary = (kind: EventKind, o: T, old?: T) => {
      if (!primaryPred || primaryPred(kind, o, old)) this.enqueue(objectKey(o));
    };
    this.unsubscribe.push(
      opts.for.addEventHandler({
        onAdd: (o) => onPrimary('add', o),
        onUpdate: (old, o) => onPrimary('update', o, old),
        onDelete: (o) => onPrimary('delete', o),
      }),
    );
    for (const w of opts.watches ?? []) {
      const p = w.predicate;
      const fire = (kind: EventKind, o: KubeObject, old?: KubeObject) => {
        if (!this.running || (p && !p(kind, o, old))) return;
        const keys = new Set(w.map(o));
        // Map the old state too: an object that stopped referring to a primary must wake that primary.
        if (old && old !== o) for (const k of w.map(old)) keys.add(k);
        for (const k of keys) this.queue.add(k);
      };
      this.unsubscribe.push(
        w.informer.addEventHandler({
          onAdd: (o) => fire('add', o),
          onUpdate: (old, o) => fire('update', o, old),
          onDelete: (o) => fire('delete', o),
        }),
      );
    }
  }

  get isRunning(): boolean {
    return this.running;
  }

  /** Adds a key (`namespace/name`); ignored while the controller is not running. */
  enqueue(key: string): void {
    if (this.running) this.queue.add(key);
  }

  /** Starts the workers and enqueues every cached primary object (informers must have synced). */
  start(): void {
    if (this.started) throw new Error(`controller ${this.name} was already started`);
    this.started = true;
    this.running = true;
    for (const key of this.primary.keys()) this.queue.add(key);
    const n = Math.max(1, this.opts.workers ?? 1);
    this.metrics?.maxConcurrentReconciles.labels(this.name).set(n);
    for (let i = 0; i < n; i++) this.workers.push(this.worker());
    this.log.info({ workers: n, keys: this.primary.size }, 'controller started');
  }

  /**
   * Stops taking work and waits up to `deadlineMs` for in-flight reconciles; then aborts their signal and
   * abandons them. Resolves true when everything finished in time.
   */
  async stop(deadlineMs: number): Promise<boolean> {
    this.running = false;
    for (const u of this.unsubscribe.splice(0)) u();
    this.opts.onStop?.();
    const drained = await this.queue.shutdownWithDrain(deadlineMs);
    if (!drained) {
      this.log.warn({ inFlight: this.queue.inFlight, deadlineMs }, 'abandoning in-flight reconciles');
      this.abort.abort(new Error('controller stopped'));
    } else {
      await Promise.all(this.workers);
    }
    this.log.info({ drained }, 'controller stopped');
    return drained;
  }

  private async worker(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      try {
        await this.process(key);
      } finally {
        this.queue.done(key);
      }
    }
  }

  private async process(key: string): Promise<void> {
    const reconcileID = randomBytes(6).toString('hex');
    const { namespace, name } = splitKey(key);
    const log = this.log.child({ key, reconcileID });
    const retries = this.queue.numRequeues(key);
    const started = performance.now();
    const m = this.metrics;
    m?.activeWorkers.labels(this.name).inc();
    let result: 'success' | 'requeue_after' | 'error' | 'terminal' = 'success';
    try {
      const r = await this.opts.reconcile(key, {
        key,
        namespace,
        name,
        reconcileID,
        log,
        signal: this.abort.signal,
        retries,
      });
      if (r && r.requeueAfter !== undefined && !(r.requeueAfter > 0)) {
        // 0, a negative delay or NaN (a server's `Retry-After: 0`, arithmetic gone wrong) would come straight
        // back at once, in a loop that skips every bound: it goes through the rate limiter like a failure, and
        // the key's backoff is kept, so a key that keeps asking for "now" waits longer each time.
        result = 'requeue_after';
        this.queue.addRateLimited(key);
      } else {
        this.queue.forget(key);
        if (r && r.requeueAfter !== undefined) {
          result = 'requeue_after';
          this.queue.addAfter(key, r.requeueAfter);
        }
      }
      const durationMs = round(performance.now() - started);
      log.debug({ durationMs, requeueAfter: r?.requeueAfter }, 'reconciled');
    } catch (err) {
      const durationMs = round(performance.now() - started);
      m?.reconcileErrors.labels(this.name).inc();
      if (err instanceof TerminalError) {
        result = 'terminal';
        this.queue.forget(key);
        log.error({ durationMs, err: err.message }, 'reconcile failed (terminal, not retried)');
      } else {
        result = 'error';
        this.queue.addRateLimited(key);
        log.warn(
          { durationMs, err: (err as Error)?.message ?? String(err), retries: retries + 1 },
          'reconcile failed; will retry',
        );
      }
    } finally {
      m?.activeWorkers.labels(this.name).dec();
      m?.reconcileTotal.labels(this.name, result).inc();
      m?.reconcileDuration.labels(this.name).observe((performance.now() - started) / 1000);
    }
  }
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
