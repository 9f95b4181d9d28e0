/**
 * An informer: list + watch of one resource into an in-memory cache, with indexers and event handlers.
 *
 * Hand-written instead of client-node's `makeInformer` because that one stops for good on some watch errors,
 * replays nothing on resync, has no indexers and re-lists on every reconnect. Here:
 * - the first list is paginated; every later (re)connection resumes the watch from the last resourceVersion
 *   seen (events or bookmarks), so an idle informer sends nothing but watch requests;
 * - ANY watch or list failure restarts with exponential backoff and jitter (0.5 s doubling to 30 s);
 * - 410 Gone (our resourceVersion is too old) relists, and the relist is diffed against the cache so objects
 *   deleted meanwhile produce delete events (no event is lost);
 * - resync replays the CACHE to the handlers on a timer (it never re-lists from the apiserver);
 * - `managedFields` are dropped from cached objects (they are large and nothing here reads them).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { timerDelay } from './timers.ts';
import {
  ApiError,
  objectKey,
  type Gvr,
  type KubeObject,
  type ResourceClient,
  type WatchEvent,
} from './kube.ts';

export interface EventHandler<T> {
  onAdd?(obj: T): void;
  /** `old === obj` for resync replays. */
  onUpdate?(old: T, obj: T): void;
  /** For deletes seen only through a relist, `obj` is the last cached state. */
  onDelete?(obj: T): void;
}

export type IndexFunc<T> = (obj: T) => string[];

export interface InformerOptions<T> {
  /** '' or undefined: all namespaces. */
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Replays the cache to the handlers every so often; 0 disables. Default 10 minutes. */
  resyncPeriodMs?: number;
  pageSize?: number;
  /** Applied to every object before it is cached (after managedFields are dropped). */
  transform?: (obj: T) => T;
  logger?: Logger;
  backoff?: { initialMs: number; maxMs: number };
  /** Called on every (re)list and watch (re)start, for metrics. */
  onRestart?: (kind: 'list' | 'watch', err?: unknown) => void;
}

const DEFAULT_RESYNC_MS = 10 * 60_000;

export class Informer<T extends KubeObject = KubeObject> {
  readonly gvr: Gvr;
  readonly namespace: string | undefined;
  private readonly client: ResourceClient<T>;
  private readonly opts: InformerOptions<T>;
  private readonly store = new Map<string, T>();
  /** namespace -> keys: `list(namespace)` without scanning the whole cache. */
  private readonly byNamespace = new Map<string, Set<string>>();
  private readonly handlers = new Set<EventHandler<T>>();
  private readonly indexers = new Map<string, IndexFunc<T>>();
  /** index name -> value -> keys */
  private readonly indices = new Map<string, Map<string, Set<string>>>();
  private resourceVersion = '';
  private synced = false;
  private readonly syncWaiters: (() => void)[] = [];
  private abort: AbortController | undefined;
  private resyncTimer: NodeJS.Timeout | undefined;
  private loop: Promise<void> | undefined;
  private readonly log: Logger | undefined;

  constructor(client: ResourceClient<T>, opts: InformerOptions<T> = {}) {
    this.client = client;
    this.gvr = client.gvr;
    this.opts = opts;
    this.namespace = client.gvr.namespaced && opts.namespace ? opts.namespace : undefined;
    this.log = opts.logger?.child({ informer: client.gvr.resource, namespace: this.namespace ?? '*' });
  }

  // ---- cache ----

  get(key: string): T | undefined {
    return this.store.get(key);
  }
  getByName(namespace: string | undefined, name: string): T | undefined {
    return this.store.get(namespace ? `${namespace}/${name}` : name);
  }
  list(namespace?: string): T[] {
    if (!namespace) return [...this.store.values()];
    const out: T[] = [];
    for (const k of this.byNamespace.get(namespace) ?? []) out.push(this.store.get(k)!);
    return out;
  }
  keys(): string[] {
    return [...this.store.keys()];
  }
  get size(): number {
    return this.store.size;
  }
  /** The last resourceVersion the informer has seen (list, event or bookmark). */
  get lastResourceVersion(): string {
    return this.resourceVersion;
  }

  /** Adds an index; must be called before `start`. */
  addIndexer(name: string, fn: IndexFunc<T>): void {
    if (this.indexers.has(name)) throw new Error(`indexer ${name} already exists`);
    this.indexers.set(name, fn);
    const idx = new Map<string, Set<string>>();
    this.indices.set(name, idx);
    for (const [key, obj] of this.store) for (const v of fn(obj)) addTo(idx, v, key);
  }

  byIndex(name: string, value: string): T[] {
    const idx = this.indices.get(name);
    if (!idx) throw new Error(`no indexer ${name}`);
    const keys = idx.get(value);
    if (!keys) return [];
    const out: T[] = [];
    for (const k of keys) {
      const o = this.store.get(k);
      if (o) out.push(o);
    }
    return out;
  }

  /** Registers handlers; returns a function that removes them. Handlers see only events after registration. */
  addEventHandler(h: EventHandler<T>): () => void {
    this.handlers.add(h);
    return () => this.handlers.delete(h);
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /** Resolves once the first list has completed (or when the signal aborts). */
  waitForSync(signal?: AbortSignal): Promise<boolean> {
    if (this.synced) return Promise.resolve(true);
    return new Promise((resolve) => {
      const onAbort = () => resolve(false);
      signal?.addEventListener('abort', onAbort, { once: true });
      this.syncWaiters.push(() => {
        signal?.removeEventListener('abort', onAbort);
        resolve(true);
      });
    });
  }

  // ---- lifecycle ----

  start(): void {
    if (this.loop) return;
    this.abort = new AbortController();
    this.loop = this.run(this.abort.signal);
    const period = this.opts.resyncPeriodMs ?? DEFAULT_RESYNC_MS;
    if (period > 0) {
      this.resyncTimer = setInterval(() => this.resync(), Math.max(1, timerDelay(period)));
      this.resyncTimer.unref();
    }
  }

  async stop(): Promise<void> {
    this.abort?.abort();
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    this.resyncTimer = undefined;
    await this.loop;
    this.loop = undefined;
  }

  /** Replays every cached object to the handlers as an update with old === new. */
  resync(): void {
    if (!this.synced) return;
    for (const obj of this.store.values()) this.emit('update', obj, obj);
  }

  private async run(signal: AbortSignal): Promise<void> {
    const { initialMs, maxMs } = this.opts.backoff ?? { initialMs: 500, maxMs: 30_000 };
    let failures = 0;
    // A restarted informer resumes its watch from the last resourceVersion; the apiserver answers 410 Gone
    // when that is too old, and then we relist.
    let needList = !this.synced || !this.resourceVersion;
    while (!signal.aborted) {
      try {
        if (needList) {
          this.opts.onRestart?.('list');
          await this.relist(signal);
          needList = false;
          failures = 0;
        }
        this.opts.onRestart?.('watch');
        const began = Date.now();
        await this.watchOnce(signal);
        // The server closed the stream (its time-out): resume from the last resourceVersion right away,
        // unless streams keep ending at once (a proxy cutting them): then back off as for errors.
        if (Date.now() - began < 1_000 && !signal.aborted) throw new Error('watch closed immediately');
        failures = 0;
      } catch (err) {
        if (signal.aborted) break;
        if (err instanceof ApiError && err.code === 410) {
          this.log?.info({ rv: this.resourceVersion }, 'watch resourceVersion expired (410 Gone); relisting');
          needList = true;
          continue;
        }
        failures++;
        const delay = jitter(Math.min(maxMs, initialMs * 2 ** (failures - 1)));
        this.opts.onRestart?.(needList ? 'list' : 'watch', err);
        this.log?.warn(
          { err: (err as Error).message, failures, retryInMs: Math.round(delay) },
          needList ? 'list failed; retrying' : 'watch failed; restarting',
        );
        // An abort ends the wait; the loop then sees the signal.
        await sleep(delay, undefined, { signal }).catch(() => undefined);
      }
    }
  }

  private async relist(signal: AbortSignal): Promise<void> {
    const fresh = new Map<string, T>();
    let cont: string | undefined;
    let rv = '';
    do {
      const page = await this.client.list(this.namespace, {
        labelSelector: this.opts.labelSelector,
        fieldSelector: this.opts.fieldSelector,
        limit: this.opts.pageSize ?? 500,
        continue: cont,
        signal,
      });
      for (const item of page.items) {
        // Lists omit apiVersion/kind on items; restore them so cached objects look like watched ones.
        item.apiVersion ??= this.gvr.group ? `${this.gvr.group}/${this.gvr.version}` : this.gvr.version;
        item.kind ??= this.gvr.kind;
        const obj = this.prepare(item);
        fresh.set(objectKey(obj), obj);
      }
      cont = page.metadata.continue || undefined;
      rv = page.metadata.resourceVersion ?? rv;
    } while (cont);
    // Replace the cache, emitting what changed: deletes for objects gone meanwhile, adds and updates.
    for (const [key, old] of [...this.store]) {
      if (!fresh.has(key)) {
        this.remove(key, old);
        this.emit('delete', old);
      }
    }
    for (const [key, obj] of fresh) {
      const old = this.store.get(key);
      if (old && old.metadata.resourceVersion === obj.metadata.resourceVersion) continue;
      this.put(key, obj, old);
      if (old) this.emit('update', old, obj);
      else this.emit('add', obj);
    }
    this.resourceVersion = rv;
    this.log?.debug({ count: fresh.size, rv }, 'listed');
    if (!this.synced) {
      this.synced = true;
      for (const w of this.syncWaiters.splice(0)) w();
    }
  }

  private async watchOnce(signal: AbortSignal): Promise<void> {
    // Server-side time-out between 5 and 10 minutes, as client-go, so reconnects of many clients spread out.
    const timeoutSeconds = 300 + Math.floor(Math.random() * 300);
    await this.client.watch(
      this.namespace,
      {
        resourceVersion: this.resourceVersion,
        allowWatchBookmarks: true,
        timeoutSeconds,
        labelSelector: this.opts.labelSelector,
        fieldSelector: this.opts.fieldSelector,
      },
      (ev) => this.onWatchEvent(ev),
      { signal, idleTimeoutMs: (timeoutSeconds + 60) * 1000 },
    );
  }

  private onWatchEvent(ev: WatchEvent<T>): void {
    if (ev.type === 'ERROR') {
      const s = ev.object as unknown as { code?: number; reason?: string; message?: string };
      throw new ApiError(
        s.code ?? 500,
        s.reason ?? 'WatchError',
        `watch ${this.gvr.resource}: ${s.message ?? ''}`,
      );
    }
    const rv = ev.object?.metadata?.resourceVersion;
    if (ev.type === 'BOOKMARK') {
      if (rv) this.resourceVersion = rv;
      return;
    }
    const obj = this.prepare(ev.object);
    const key = objectKey(obj);
    const old = this.store.get(key);
    if (ev.type === 'DELETED') {
      this.remove(key, old ?? obj);
      if (rv) this.resourceVersion = rv;
      this.emit('delete', obj);
      return;
    }
    this.put(key, obj, old);
    if (rv) this.resourceVersion = rv;
    if (old) this.emit('update', old, obj);
    else this.emit('add', obj);
  }

  private prepare(obj: T): T {
    if (obj.metadata.managedFields !== undefined) delete obj.metadata.managedFields;
    return this.opts.transform ? this.opts.transform(obj) : obj;
  }

  private put(key: string, obj: T, old: T | undefined): void {
    if (old) this.unindex(key, old);
    this.store.set(key, obj);
    if (obj.metadata.namespace) addTo(this.byNamespace, obj.metadata.namespace, key);
    for (const [name, fn] of this.indexers) {
      const idx = this.indices.get(name)!;
      for (const v of fn(obj)) addTo(idx, v, key);
    }
  }

  private remove(key: string, old: T): void {
    this.unindex(key, old);
    this.store.delete(key);
    const ns = old.metadata.namespace;
    const set = ns ? this.byNamespace.get(ns) : undefined;
    if (set) {
      set.delete(key);
      if (set.size === 0) this.byNamespace.delete(ns!);
    }
  }

  private unindex(key: string, old: T): void {
    for (const [name, fn] of this.indexers) {
      const idx = this.indices.get(name)!;
      for (const v of fn(old)) {
        const set = idx.get(v);
        if (!set) continue;
        set.delete(key);
        if (set.size === 0) idx.delete(v);
      }
    }
  }

  private emit(kind: 'add' | 'update' | 'delete', a: T, b?: T): void {
    for (const h of this.handlers) {
      try {
        if (kind === 'add') h.onAdd?.(a);
        else if (kind === 'update') h.onUpdate?.(a, b!);
        else h.onDelete?.(a);
      } catch (err) {
        this.log?.error({ err: (err as Error).message }, 'event handler failed');
      }
    }
  }
}

function addTo(idx: Map<string, Set<string>>, value: string, key: string): void {
  let set = idx.get(value);
  if (!set) idx.set(value, (set = new Set()));
  set.add(key);
}

/** Uniform jitter in [0.8, 1.2) of `ms`. */
function jitter(ms: number): number {
  return ms * (0.8 + Math.random() * 0.4);
}
