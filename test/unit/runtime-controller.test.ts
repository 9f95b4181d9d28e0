import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import {
  Controller,
  GVR,
  Informer,
  TerminalError,
  type KubeObject,
  type ResourceClient,
  type WatchEvent,
} from '../../src/runtime/index.ts';

/** A resource client serving a fixed list and a watch the test drives. */
function fakeClient(items: KubeObject[]) {
  let push: ((ev: WatchEvent<KubeObject>) => void) | undefined;
  const client = {
    gvr: GVR.configMaps,
    list: async () => ({ metadata: { resourceVersion: '10' }, items: structuredClone(items) }),
    watch: (
      _ns: unknown,
      _q: unknown,
      cb: (ev: WatchEvent<KubeObject>) => void,
      o: { signal?: AbortSignal },
    ) => {
      push = cb;
      return new Promise<void>((resolve) => o.signal?.addEventListener('abort', () => resolve()));
    },
  } as unknown as ResourceClient<KubeObject>;
  return { client, emit: (ev: WatchEvent<KubeObject>) => push?.(ev) };
}

const cm = (name: string, rv: string, extra: Record<string, unknown> = {}): KubeObject => ({
  metadata: { name, namespace: 'n', resourceVersion: rv, ...extra },
});
const logger = pino({ level: 'silent' });
const tick = (ms = 10) => new Promise((r) => setTimeout(r, ms));

describe('Controller', () => {
  it('reconciles cached keys on start, maps secondary events, and does not retry terminal errors', async () => {
    const primary = fakeClient([cm('a', '1'), cm('b', '2')]);
    const secondary = fakeClient([]);
    const inf = new Informer(primary.client, { resyncPeriodMs: 0 });
    const other = new Informer(secondary.client, { resyncPeriodMs: 0 });
    const calls: string[] = [];
    const c = new Controller(
      {
        name: 't',
        for: inf,
        watches: [{ informer: other, map: (o) => [`n/${o.metadata.labels?.owner}`] }],
        workers: 2,
        reconcile: async (key) => {
          calls.push(key);
          if (key === 'n/b') throw new TerminalError('bad spec');
        },
      },
      { logger },
    );
    inf.start();
    other.start();
    await inf.waitForSync();
    await other.waitForSync();
    await tick(); // the watch opens right after the list
    secondary.emit({ type: 'ADDED', object: cm('x', '11', { labels: { owner: 'ignored-before-start' } }) });
    c.start();
    await tick();
    expect(calls.sort()).toEqual(['n/a', 'n/b']);
    secondary.emit({ type: 'MODIFIED', object: cm('x', '12', { labels: { owner: 'a' } }) });
    await tick();
    // The update maps both the new and the old state (which pointed nowhere known).
    expect(calls.filter((k) => k === 'n/a')).toHaveLength(2);
    expect(calls).toContain('n/ignored-before-start');
    await tick(100);
    expect(calls.filter((k) => k === 'n/b')).toHaveLength(1);
    expect(await c.stop(1000)).toBe(true);
    await inf.stop();
    await other.stop();
  });

  it('on stop, waits for in-flight reconciles up to the deadline, then aborts and abandons them', async () => {
    const { client } = fakeClient([cm('slow', '1')]);
    const inf = new Informer(client, { resyncPeriodMs: 0 });
    let aborted = false;
    let started = false;
    const c = new Controller(
      {
        name: 't',
        for: inf,
        reconcile: (_key, ctx) =>
          new Promise<void>(() => {
            started = true;
            ctx.signal.addEventListener('abort', () => (aborted = true));
          }),
      },
      { logger },
    );
    inf.start();
    await inf.waitForSync();
    c.start();
    await tick();
    expect(started).toBe(true);
    const t0 = Date.now();
    expect(await c.stop(150)).toBe(false);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(140);
    expect(Date.now() - t0).toBeLessThan(1000);
    expect(aborted).toBe(true);
    await inf.stop();
  });
});

describe('Controller re-queues', () => {
  /** How often one key is reconciled in `ms` when every reconcile returns `requeueAfter`. */
  async function reconcilesIn(requeueAfter: number, ms: number) {
    const { client } = fakeClient([cm('a', '1')]);
    const inf = new Informer(client, { resyncPeriodMs: 0 });
    let calls = 0;
    const c = new Controller(
      {
        name: 't',
        for: inf,
        reconcile: async () => {
          calls++;
          // Yield to the event loop, so a queue that hands the key straight back spins here, not forever.
          await new Promise((r) => setImmediate(r));
          return { requeueAfter };
        },
      },
      { logger },
    );
    inf.start();
    await inf.waitForSync();
    c.start();
    await tick(ms);
    const requeues = c.queue.numRequeues('n/a');
    await c.stop(1000);
    await inf.stop();
    return { calls, requeues };
  }

  it.each([0, -1, NaN])(
    'requeueAfter %s goes through the rate limiter (backoff grows), never straight back',
    async (requeueAfter) => {
      const { calls, requeues } = await reconcilesIn(requeueAfter, 300);
      // The default limiter waits 5, 10, 20, 40, 80, 160 ms: at most 7 reconciles in 300 ms (an immediate
      // re-queue reconciles thousands of times), and at least 2 (the key is not dropped either).
      expect(calls).toBeGreaterThanOrEqual(2);
      expect(calls).toBeLessThanOrEqual(8);
      expect(requeues).toBeGreaterThanOrEqual(calls - 1);
    },
  );

  it('a positive requeueAfter resets the backoff and waits that long', async () => {
    const { calls, requeues } = await reconcilesIn(100, 250);
    expect(calls).toBe(3);
    expect(requeues).toBe(0);
  });
});

describe('Informer', () => {
  it('lists per namespace from its index and replays the cache on resync', async () => {
    const { client, emit } = fakeClient([
      cm('a', '1'),
      { metadata: { name: 'z', namespace: 'm', resourceVersion: '3' } },
    ]);
    const inf = new Informer(client, { resyncPeriodMs: 0 });
    const seen: string[] = [];
    inf.addEventHandler({ onUpdate: (o, n) => o === n && seen.push(n.metadata.name) });
    inf.start();
    await inf.waitForSync();
    expect(inf.list('n').map((o) => o.metadata.name)).toEqual(['a']);
    expect(inf.list().length).toBe(2);
    await tick();
    emit({ type: 'DELETED', object: cm('a', '20') });
    emit({ type: 'BOOKMARK', object: { metadata: { name: '', resourceVersion: '25' } } });
    expect(inf.list('n')).toEqual([]);
    expect(inf.lastResourceVersion).toBe('25');
    inf.resync();
    expect(seen).toEqual(['z']);
    await inf.stop();
  });
});
