/**
 * Every timer the runtime and the HTTP layer arm stays within what a Node timer keeps (2^31-1 ms, whole
 * milliseconds): past it Node fires after 1 ms, and `AbortSignal.timeout` throws on a fraction.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { MAX_TIMER_MS, clampDelay, timeoutSignal, timerDelay } from '../../src/runtime/timers.ts';
import { WorkQueue } from '../../src/runtime/workqueue.ts';
import { retryAfterDelay } from '../../src/http/retry.ts';
import { sendRequest } from '../../src/http/request.ts';
import { HttpError, type HttpErrorInit } from '../../src/http/errors.ts';

afterEach(() => vi.restoreAllMocks());

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The delays of the timers armed while `f` runs and `ms` real milliseconds after it. */
async function timersArmed(f: () => void, ms: number): Promise<number[]> {
  const delays: number[] = [];
  const real = globalThis.setTimeout;
  const spy = vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: () => void, delay?: number) => {
    delays.push(delay ?? 0);
    return real(fn, delay);
  }) as typeof setTimeout);
  f();
  await new Promise((r) => real(r, ms));
  spy.mockRestore();
  return delays;
}

describe('timerDelay / timeoutSignal / clampDelay', () => {
  it('makes any number a delay a Node timer keeps: whole, within [0, 2^31-1]', () => {
    expect(MAX_TIMER_MS).toBe(2_147_483_647);
    expect(timerDelay(2 ** 40)).toBe(MAX_TIMER_MS);
    expect(timerDelay(Infinity)).toBe(MAX_TIMER_MS);
    expect(timerDelay(NaN)).toBe(0);
    expect(timerDelay(-5)).toBe(0);
    expect(timerDelay(120_000.5)).toBe(120_001);
    expect(timerDelay(30_000)).toBe(30_000);
  });

  it('a time-out signal of 2m0.5ms or 2^40 ms neither throws nor fires early', async () => {
    expect(() => AbortSignal.timeout(120_000.5)).toThrow(); // what the runtime used to call
    const signals = [timeoutSignal(120_000.5), timeoutSignal(2 ** 40), timeoutSignal(Infinity)];
    await wait(30);
    expect(signals.map((s) => s.aborted)).toEqual([false, false, false]);
  });

  it('clampDelay bounds a wait to [min, max]; NaN is min; undefined stays undefined', () => {
    expect(clampDelay(0, 2_000, 60_000)).toBe(2_000);
    expect(clampDelay(-1, 2_000, 60_000)).toBe(2_000);
    expect(clampDelay(NaN, 2_000, 60_000)).toBe(2_000);
    expect(clampDelay(9e15, 2_000, 60_000)).toBe(60_000);
    expect(clampDelay(5_000, 2_000, 60_000)).toBe(5_000);
    expect(clampDelay(undefined, 2_000, 60_000)).toBeUndefined();
  });
});

describe('Retry-After of a server', () => {
  it('is waited for within [poll start, poll max]', () => {
    const poll = { pollBackoffStart: 2_000, pollBackoffMax: 60_000 };
    expect(retryAfterDelay(0, poll)).toBe(2_000);
    expect(retryAfterDelay(10_000, poll)).toBe(10_000);
    expect(retryAfterDelay(3_600_000 * 24 * 400, poll)).toBe(60_000);
    expect(retryAfterDelay(NaN, poll)).toBe(2_000);
  });
});

describe('WorkQueue timers', () => {
  it('a delay beyond 2^31-1 ms arms one timer within range, not a 1 ms re-arm loop', async () => {
    for (const far of [2 ** 32, Number.MAX_SAFE_INTEGER, Infinity]) {
      const q = new WorkQueue();
      const delays = await timersArmed(() => q.addAfter('far', far), 50);
      expect(delays.length, `addAfter(${far})`).toBe(1);
      expect(delays[0]).toBeLessThanOrEqual(MAX_TIMER_MS);
      expect(delays[0]).toBeGreaterThan(MAX_TIMER_MS - 1_000);
      expect(q.length).toBe(0);
      expect(q.delayedCount).toBe(1);
      q.shutdown();
    }
  });

  it('a far key waits at most 2^31-1 ms, after the near one, and is not lost', async () => {
    vi.useFakeTimers();
    try {
      const q = new WorkQueue();
      q.addAfter('far', 2 ** 33);
      q.addAfter('near', 100);
      vi.advanceTimersByTime(100);
      expect(await q.get()).toBe('near');
      q.done('near');
      // The next timer is the far key's, about 2^31-1 ms ahead (not a 1 ms re-arm), and it delivers the key.
      const before = Date.now();
      vi.advanceTimersToNextTimer();
      expect(Date.now() - before).toBeGreaterThan(MAX_TIMER_MS - 1_000);
      expect(q.length).toBe(1);
      expect(q.delayedCount).toBe(0);
      q.shutdown();
    } finally {
      vi.useRealTimers();
    }
  });

  it('addAfter with NaN adds the key at once instead of losing it in the heap', () => {
    const q = new WorkQueue();
    q.addAfter('nan', NaN);
    expect(q.length).toBe(1);
    expect(q.delayedCount).toBe(0);
    q.shutdown();
  });
});

/** A loopback server that answers `ok`, and a GET to it through sendRequest with a time-out of `timeoutMs`. */
async function okServer() {
  const server: Server = createServer((_q, s) => s.end('ok'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const dispatcher = new Pool(origin);
  const toError = (init: HttpErrorInit) => new HttpError('test', init);
  return {
    get: async (timeoutMs: number) =>
      (
        await sendRequest(
          { dispatcher, origin, path: '/', method: 'GET', headers: {}, timeoutMs, operation: 'get' },
          toError,
        )
      ).text,
    close: async () => {
      await dispatcher.close();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

describe('HTTP layer timers', () => {
  it("an exchange's time-out timer ends with the exchange: nothing of a 30 min time-out outlives the answer", async () => {
    const server = await okServer();
    const armed = new Set<unknown>();
    const cleared = new Set<unknown>();
    const realSet = globalThis.setTimeout;
    const realClear = globalThis.clearTimeout;
    vi.spyOn(globalThis, 'setTimeout').mockImplementation(((fn: () => void, delay?: number) => {
      const t = realSet(fn, delay);
      if (delay === 30 * 60_000) armed.add(t);
      return t;
    }) as typeof setTimeout);
    vi.spyOn(globalThis, 'clearTimeout').mockImplementation(((t: NodeJS.Timeout) => {
      cleared.add(t);
      realClear(t);
    }) as typeof clearTimeout);
    try {
      for (let i = 0; i < 100; i++) expect(await server.get(30 * 60_000)).toBe('ok');
      expect(armed.size).toBe(100);
      expect([...armed].filter((t) => !cleared.has(t))).toEqual([]);
    } finally {
      vi.restoreAllMocks();
      await server.close();
    }
  });

  it('a request time-out of 2m0.5ms or 2^40 ms is valid: the exchange completes', async () => {
    const server = await okServer();
    try {
      for (const timeoutMs of [120_000.5, 2 ** 40]) expect(await server.get(timeoutMs)).toBe('ok');
    } finally {
      await server.close();
    }
  });
});
