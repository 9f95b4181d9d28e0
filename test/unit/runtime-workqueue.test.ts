import { afterEach, describe, expect, it, vi } from 'vitest';
import { RateLimiter, WorkQueue } from '../../src/runtime/workqueue.ts';

afterEach(() => {
  vi.useRealTimers();
});

describe('WorkQueue', () => {
  it('de-duplicates keys waiting in the queue', async () => {
    const q = new WorkQueue();
    q.add('a');
    q.add('a');
    q.add('b');
    q.add('a');
    expect(q.length).toBe(2);
    expect(await q.get()).toBe('a');
    expect(await q.get()).toBe('b');
    expect(q.length).toBe(0);
  });

  it('never hands out a key in flight; a key added meanwhile comes back after done', async () => {
    const q = new WorkQueue();
    q.add('a');
    const k = await q.get();
    expect(k).toBe('a');
    q.add('a');
    q.add('a');
    expect(q.length).toBe(0); // in flight: parked in the dirty set, not queued
    let second: string | undefined;
    void q.get().then((x) => (second = x));
    await Promise.resolve();
    expect(second).toBeUndefined();
    q.done('a');
    await Promise.resolve();
    expect(second).toBe('a');
    q.done('a');
    expect(q.length).toBe(0);
  });

  it('with many workers and random adds, one key is never processed twice at once', async () => {
    const q = new WorkQueue();
    const active = new Set<string>();
    let violations = 0;
    let processed = 0;
    const worker = async () => {
      for (;;) {
        const key = await q.get();
        if (key === undefined) return;
        if (active.has(key)) violations++;
        active.add(key);
        await new Promise((r) => setTimeout(r, Math.random() * 3));
        active.delete(key);
        processed++;
        q.done(key);
      }
    };
    const workers = Array.from({ length: 8 }, worker);
    for (let i = 0; i < 2000; i++) {
      q.add(`k${i % 5}`);
      if (i % 50 === 0) await new Promise((r) => setTimeout(r, 1));
    }
    await new Promise((r) => setTimeout(r, 50));
    await q.shutdownWithDrain(1000);
    await Promise.all(workers);
    expect(violations).toBe(0);
    expect(processed).toBeGreaterThan(5);
    expect(processed).toBeLessThan(2000); // de-duplicated
  });

  it('addAfter delivers later, keeps the earlier of two times, and uses a single timer', async () => {
    vi.useFakeTimers();
    const q = new WorkQueue();
    for (let i = 0; i < 1000; i++) q.addAfter(`k${i}`, 1000 + i);
    expect(vi.getTimerCount()).toBe(1);
    q.addAfter('x', 500);
    q.addAfter('x', 5000); // later: ignored
    expect(vi.getTimerCount()).toBe(1);
    expect(q.delayedCount).toBe(1001);
    vi.advanceTimersByTime(499);
    expect(q.length).toBe(0);
    vi.advanceTimersByTime(1);
    expect(q.length).toBe(1);
    expect(await q.get()).toBe('x');
    vi.advanceTimersByTime(2000);
    expect(q.length).toBe(1000);
    vi.advanceTimersByTime(10_000);
    expect(q.length).toBe(1000); // x's superseded 5 s entry did not fire
  });

  it('addRateLimited backs off per key; forget resets it', () => {
    vi.useFakeTimers();
    const q = new WorkQueue({ rateLimiter: { baseDelayMs: 100, maxDelayMs: 1000, jitter: 0 } });
    q.addRateLimited('a');
    vi.advanceTimersByTime(99);
    expect(q.length).toBe(0);
    vi.advanceTimersByTime(1);
    expect(q.length).toBe(1);
    expect(q.numRequeues('a')).toBe(1);
    q.forget('a');
    expect(q.numRequeues('a')).toBe(0);
  });

  it('shutdown wakes idle workers with undefined and drops delayed keys; drain waits for in-flight keys', async () => {
    const q = new WorkQueue();
    const idle = q.get();
    q.shutdown();
    expect(await idle).toBeUndefined();
    q.add('late');
    expect(q.length).toBe(0);

    const q2 = new WorkQueue();
    q2.add('a');
    q2.addAfter('b', 10_000);
    const key = (await q2.get())!;
    const drained = q2.shutdownWithDrain(5000);
    setTimeout(() => q2.done(key), 30);
    expect(await drained).toBe(true);
    expect(q2.delayedCount).toBe(0);

    const q3 = new WorkQueue();
    q3.add('stuck');
    await q3.get();
    const t0 = Date.now();
    expect(await q3.shutdownWithDrain(100)).toBe(false);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(90);
  });
});

describe('WorkQueue fairness between namespaces', () => {
  it("keeps a worker for another namespace while one namespace's reconciles hang", async () => {
    // 4 workers; namespace a has 4 keys whose reconciles never end.
    const q = new WorkQueue({ fairness: { capacity: 4 } });
    for (let i = 0; i < 4; i++) q.add(`a/hang-${i}`);
    const taken = await Promise.all([q.get(), q.get(), q.get()]);
    expect(taken).toEqual(['a/hang-0', 'a/hang-1', 'a/hang-2']);
    // The fourth worker does not take a's fourth key: it waits, and takes b's key the moment it comes.
    const fourth = q.get();
    let got: string | undefined;
    void fourth.then((k) => (got = k));
    await Promise.resolve();
    expect(got).toBeUndefined();
    q.add('b/small');
    expect(await fourth).toBe('b/small');
    // When one of a's reconciles ends, a's waiting key runs.
    q.done('b/small');
    const next = q.get();
    q.done('a/hang-0');
    expect(await next).toBe('a/hang-3');
  });

  it('a free worker takes the key of the namespace holding the fewest workers', async () => {
    const q = new WorkQueue({ fairness: { capacity: 2, maxPerTenant: 2 } });
    for (let i = 0; i < 5; i++) q.add(`a/${i}`);
    expect([await q.get(), await q.get()]).toEqual(['a/0', 'a/1']);
    q.add('b/0');
    q.done('a/0');
    expect(await q.get()).toBe('b/0');
  });

  it('without fairness one namespace may use every worker', async () => {
    const q = new WorkQueue();
    for (let i = 0; i < 4; i++) q.add(`a/${i}`);
    expect(await Promise.all([q.get(), q.get(), q.get(), q.get()])).toEqual(['a/0', 'a/1', 'a/2', 'a/3']);
  });
});

describe('RateLimiter', () => {
  it('doubles from 5 ms to a 5 minute cap with bounded jitter', () => {
    const rl = new RateLimiter({ burst: 1e9, qps: 1e9 });
    const delays = Array.from({ length: 30 }, () => rl.when('k'));
    for (let i = 0; i < 10; i++) {
      const base = 5 * 2 ** i;
      expect(delays[i]).toBeGreaterThanOrEqual(base);
      expect(delays[i]).toBeLessThan(base * 1.2 + 1e-9);
    }
    for (let i = 1; i < 16; i++) expect(delays[i]!).toBeGreaterThan(delays[i - 1]!);
    expect(Math.max(...delays)).toBeLessThanOrEqual(300_000);
    expect(delays[29]).toBe(300_000);
    expect(rl.when('other')).toBeLessThan(6); // per key
  });

  it('applies an overall token bucket across keys', () => {
    let t = 0;
    const rl = new RateLimiter({ baseDelayMs: 1, qps: 10, burst: 2, jitter: 0 }, () => t);
    expect(rl.when('a')).toBe(1);
    expect(rl.when('b')).toBe(1);
    expect(rl.when('c')).toBeCloseTo(100); // bucket empty: 1 token / 100 ms
    expect(rl.when('d')).toBeCloseTo(200);
    t += 1000;
    expect(rl.when('e')).toBe(1);
  });
});
