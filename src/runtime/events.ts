/**
 * An events.k8s.io/v1 recorder. Reasons are CamelCase. Recording the same (object, type, reason, note)
 * again within the de-dup window does not create another Event: the first occurrence creates it, repeats
 * are counted locally and folded into the Event's `series` (count, lastObservedTime) with at most one patch
 * per `seriesIntervalMs`, so a retry loop cannot flood the apiserver. Failures to record are logged, never
 * thrown: events are best effort.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { GVR, type KubeClient, type KubeObject } from './kube.ts';
import { redact } from '../redact.ts';

export type EventType = 'Normal' | 'Warning';

export interface EventRecorderOptions {
  /** `reportingController`, e.g. `example.io/operator`. */
  controller: string;
  /** `reportingInstance`, e.g. the pod name. */
  instance: string;
  windowMs?: number;
  seriesIntervalMs?: number;
  maxEntries?: number;
  logger?: Logger;
  now?: () => number;
}

interface Entry {
  name: string;
  namespace: string;
  count: number;
  firstSeen: number;
  lastSeen: number;
  lastWrite: number;
  created: Promise<boolean>;
}

const REASON = /^[A-Z][A-Za-z0-9]*$/;

export class EventRecorder {
  private readonly kube: KubeClient;
  private readonly opts: Required<Omit<EventRecorderOptions, 'logger'>> & { logger?: Logger };
  private readonly entries = new Map<string, Entry>();
  private readonly pending = new Set<Promise<unknown>>();

  constructor(kube: KubeClient, opts: EventRecorderOptions) {
    this.kube = kube;
    this.opts = {
      windowMs: 10 * 60_000,
      seriesIntervalMs: 30_000,
      maxEntries: 4096,
      now: Date.now,
      ...opts,
    };
  }

  /** Records an event about `obj`. `action` says what the controller did or failed to do (e.g. `CreateJob`). */
  record(obj: KubeObject, type: EventType, reason: string, text: string, action = reason): void {
    if (!REASON.test(reason)) throw new Error(`event reason "${reason}" must be CamelCase`);
    const note = redact(text); // the redaction boundary for Events
    const m = obj.metadata;
    const namespace = m.namespace || 'default';
    const key = `${m.uid ?? `${m.namespace}/${m.name}`}\u0000${type}\u0000${reason}\u0000${note}`;
    const now = this.opts.now();
    const e = this.entries.get(key);
    if (e && now - e.firstSeen < this.opts.windowMs) {
      e.count++;
      e.lastSeen = now;
      // LRU order: most recently used last.
      this.entries.delete(key);
      this.entries.set(key, e);
      if (now - e.lastWrite >= this.opts.seriesIntervalMs) {
        e.lastWrite = now;
        this.track(e.created.then((ok) => (ok ? this.patchSeries(e) : undefined)));
      }
      return;
    }
    const name = `${m.name}.${now.toString(16)}${randomBytes(3).toString('hex')}`.slice(0, 253);
    const body = {
      apiVersion: 'events.k8s.io/v1',
      kind: 'Event',
      metadata: { name, namespace },
      eventTime: microTime(now),
      reportingController: this.opts.controller,
      reportingInstance: this.opts.instance,
      action,
      reason,
      type,
      note: note.slice(0, 1024),
      regarding: {
        apiVersion: obj.apiVersion,
        kind: obj.kind,
        namespace: m.namespace,
        name: m.name,
        uid: m.uid,
        resourceVersion: m.resourceVersion,
      },
    };
    const created = this.kube
      .resource(GVR.events)
      .create(body as unknown as KubeObject)
      .then(
        () => true,
        (err: Error) => {
          this.opts.logger?.warn({ err: err.message, reason }, 'could not record event');
          return false;
        },
      );
    this.track(created);
    this.entries.set(key, {
      name,
      namespace,
      count: 1,
      firstSeen: now,
      lastSeen: now,
      lastWrite: now,
      created,
    });
    while (this.entries.size > this.opts.maxEntries) this.entries.delete(this.entries.keys().next().value!);
  }

  private async patchSeries(e: Entry): Promise<void> {
    try {
      await this.kube
        .resource(GVR.events)
        .patch(e.namespace, e.name, { series: { count: e.count, lastObservedTime: microTime(e.lastSeen) } });
    } catch (err) {
      this.opts.logger?.warn({ err: (err as Error).message }, 'could not update event series');
    }
  }

  private track(p: Promise<unknown>): void {
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  /** Waits for the writes in flight (for shutdown and tests). */
  async flush(): Promise<void> {
    while (this.pending.size) await Promise.allSettled([...this.pending]);
  }
}

/** metav1.MicroTime: RFC 3339 with microseconds. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
