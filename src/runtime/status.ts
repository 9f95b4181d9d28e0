/**
 * The status writer: JSON merge patch of the `/status` subresource.
 * - The patch carries only `status` (and `metadata.resourceVersion` as a precondition), so spec, and with it
 *   `metadata.generation`, are never touched.
 * - Nothing is sent when the desired status deep-equals the current one, the object's own.
 * - The cache may be behind our own last write (the watch has not delivered it yet). The writer remembers only
 *   which resourceVersions its writes replaced, never what it wrote: {@link StatusWriter.behind} tells a reconciler
 *   that the object it read is such a version (it then waits for the watch), and a write asked on such a version
 *   re-reads the object from the apiserver first (or, with `{ conflict: 'fail' }`, loses to a conflict).
 * - A 409 (stale resourceVersion): by default the writer re-reads the object from the apiserver and computes the
 *   status again, which is right when `desired` is a function of the object alone. A reconciler whose status
 *   holds what one pass observed asks for `{ conflict: 'fail' }`: the 409 is thrown (a {@link StatusConflict})
 *   and the whole reconcile runs again on fresh data, controller-runtime's way.
 */
import { isDeepStrictEqual } from 'node:util';
import type { Logger } from 'pino';
import { ApiError, objectKey, type KubeClient, type Gvr, type KubeObject } from './kube.ts';
import { redactDeep } from '../redact.ts';

export interface StatusResult<T> {
  /** The object as written (or as it was, when nothing changed). */
  object: T;
  written: boolean;
}

export interface StatusUpdateOptions {
  /** `retry` (default): re-read and compute again; `fail`: throw a {@link StatusConflict}. */
  conflict?: 'retry' | 'fail';
}

/** A status write lost to a newer version of the object: the reconcile runs again on fresh data. */
export class StatusConflict extends Error {
  constructor(key: string, options?: { cause?: unknown }) {
    super(`status of ${key} changed since it was read; reconciling again`, options);
    this.name = 'StatusConflict';
  }
}

const MAX_ATTEMPTS = 5;
const MAX_RECENT = 10_000;
const MAX_SUPERSEDED = 32;

export class StatusWriter {
  private readonly kube: KubeClient;
  private readonly log: Logger | undefined;
  /**
   * uid -> the resourceVersion of our last write and the ones it supersedes: the one it was based on and, when it
   * was based on an earlier write of ours, that write's own and its superseded ones. The watch delivers our writes
   * in order, so while the cache holds any of them it has not caught up with the last.
   */
  private readonly recent = new Map<string, { superseded: string[]; rv: string }>();

  constructor(kube: KubeClient, logger?: Logger) {
    this.kube = kube;
    this.log = logger;
  }

  /**
   * Writes `desired(obj)` as the status of `obj` (normally the cached object). `desired` receives the object
   * and returns the full new status; it is called again with a fresh copy after a conflict, so it must be a
   * function of the object (level-triggered), e.g. `(o) => ({ ...o.status, conditions: setCondition(...) })`.
   */
  async update<T extends KubeObject & { status?: S }, S = unknown>(
    gvr: Gvr,
    obj: T,
    desired: (obj: T) => S,
    signal?: AbortSignal,
    opts: StatusUpdateOptions = {},
  ): Promise<StatusResult<T>> {
    const client = this.kube.resource<T>(gvr);
    const retry = opts.conflict !== 'fail';
    // A version our last write replaced: computing on it would undo that write, so the object is read again
    // (without retries it is taken as it is, and the patch's precondition makes it a conflict).
    let current =
      retry && this.behind(obj) ? await client.get(obj.metadata.namespace, obj.metadata.name, signal) : obj;
    for (let attempt = 1; ; attempt++) {
      const uid = current.metadata.uid ?? objectKey(current);
      const rv = current.metadata.resourceVersion ?? '';
      const mine = this.recent.get(uid);
      let superseded = [rv];
      if (mine && mine.rv === rv) superseded = [...mine.superseded, mine.rv];
      else if (mine && !mine.superseded.includes(rv)) this.recent.delete(uid);
      // The redaction boundary for status and conditions: what controllers copy from outside never leaves unredacted.
      const next = redactDeep(desired(current));
      const base: unknown = current.status;
      if (isDeepStrictEqual(normalize(base), normalize(next))) return { object: current, written: false };
      try {
        const patch = {
          ...(rv ? { metadata: { resourceVersion: rv } } : {}),
          status: mergePatch(base, next) ?? {},
        };
        const written = await client.patchStatus(
          current.metadata.namespace,
          current.metadata.name,
          patch,
          signal,
        );
        this.remember(uid, superseded, written.metadata.resourceVersion ?? '');
        return { object: written, written: true };
      } catch (err) {
        if (!(err instanceof ApiError) || err.code !== 409) throw err;
        if (!retry) throw new StatusConflict(objectKey(current), { cause: err });
        if (attempt >= MAX_ATTEMPTS) throw err;
        this.log?.debug({ key: objectKey(current), attempt }, 'status conflict; re-reading');
        this.recent.delete(uid);
        current = await client.get(current.metadata.namespace, current.metadata.name, signal);
      }
    }
  }

  /**
   * Whether `obj` (from the cache) is a version this writer's last write of it replaced: the watch has not
   * delivered that write yet, so a pass reading `obj` would act on a status that is out of date.
   */
  behind(obj: KubeObject): boolean {
    const mine = this.recent.get(obj.metadata.uid ?? objectKey(obj));
    return mine?.superseded.includes(obj.metadata.resourceVersion ?? '') ?? false;
  }

  /**
   * Records a write of `before` other than its status (a finalizer) that left `after`: until the cache holds it,
   * {@link behind} says so of `before`, and a status write based on `after` keeps `before` in its chain.
   */
  wrote(before: KubeObject, after: KubeObject): void {
    const uid = before.metadata.uid ?? objectKey(before);
    const rv = before.metadata.resourceVersion ?? '';
    const mine = this.recent.get(uid);
    const chain =
      mine && (mine.rv === rv || mine.superseded.includes(rv)) ? [...mine.superseded, mine.rv] : [rv];
    this.remember(uid, chain, after.metadata.resourceVersion ?? '');
  }

  private remember(uid: string, superseded: string[], rv: string): void {
    this.recent.delete(uid);
    // A burst of writes the watch has not delivered yet is short; the bound only keeps a stuck watch from growing it.
    this.recent.set(uid, { superseded: superseded.slice(-MAX_SUPERSEDED), rv });
    if (this.recent.size > MAX_RECENT) this.recent.delete(this.recent.keys().next().value!);
  }
}

/** Drops `undefined` members so `{a: undefined}` equals `{}` (JSON does not carry them). */
function normalize(v: unknown): unknown {
  return v === undefined ? undefined : JSON.parse(JSON.stringify(v));
}

/**
 * RFC 7386 merge patch turning `from` into `to`: changed members, `null` for removed ones. Arrays are
 * replaced whole (which is what merge patch does anyway). Returns undefined when equal.
 */
export function mergePatch(from: unknown, to: unknown): unknown {
  if (isDeepStrictEqual(normalize(from), normalize(to))) return undefined;
  if (!isPlainObject(from) || !isPlainObject(to)) return to === undefined ? null : to;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(from))
    if (from[k] !== undefined && (!(k in to) || to[k] === undefined)) out[k] = null;
  for (const [k, v] of Object.entries(to)) {
    if (v === undefined) continue;
    const d = mergePatch(from[k], v);
    if (d !== undefined) out[k] = d;
  }
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}
