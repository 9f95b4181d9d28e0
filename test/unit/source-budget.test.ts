/**
 * One resolution's budget (src/http/budget.ts): each answer within its cap and every answer within the total,
 * the answers counted, entries bounded in number, in length and in their text together, one deadline over the whole
 * resolution; the first bound hit aborts the resolution's signal with the error the source kind makes of it.
 */
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import {
  BoundHit,
  DEFAULT_SOURCE_BOUNDS,
  SourceBudget,
  sourceBounds,
  type SourceBounds,
} from '../../src/http/budget.ts';

const budget = (b: Partial<SourceBounds>) => new SourceBudget(sourceBounds(b));

/** A body of `n` chunks of `size` bytes; `read` counts what was pulled from it. */
function body(size: number, n: number) {
  let pulled = 0;
  let i = 0;
  const stream = new Readable({
    read() {
      if (i++ >= n) return this.push(null);
      pulled += size;
      this.push(Buffer.alloc(size, 97));
    },
  });
  return { stream, pulled: () => pulled };
}

async function thrown(p: Promise<unknown> | (() => unknown)): Promise<unknown> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (e) {
    return e;
  }
  throw new Error('nothing was thrown');
}

describe('a source budget', () => {
  it('reads an answer within its cap, and counts it in the total', async () => {
    const b = budget({ maxAnswerBytes: 1000, maxTotalBytes: 2500 });
    const one = await b.read(body(100, 5).stream);
    expect(one.length).toBe(500);
    expect(b.bytesRead).toBe(500);
    b.close();
  });

  it('stops an answer over its cap without reading it whole, and aborts the resolution', async () => {
    const b = budget({ maxAnswerBytes: 1000 });
    const big = body(256, 1_000_000);
    const e = await thrown(b.read(big.stream));
    expect(e).toBeInstanceOf(BoundHit);
    expect(e).toMatchObject({ failure: 'tooLarge', bound: 'maxAnswerBytes', reason: 'SourceTooLarge' });
    expect((e as Error).message).toBe('an answer was larger than 1000 bytes');
    // Only what the stream had buffered ahead was pulled, never the 256 MB it would send.
    expect(big.pulled()).toBeLessThan(100_000);
    expect(b.signal.aborted).toBe(true);
    expect(b.signal.reason).toBe(e);
    // Every later use throws the same error.
    expect(await thrown(b.read(body(1, 1).stream))).toBe(e);
    expect(await thrown(() => b.answer())).toBe(e);
    b.close();
  });

  it('bounds the answers together: many answers each under its cap pass the total', async () => {
    const b = budget({ maxAnswerBytes: 1000, maxTotalBytes: 2500 });
    await b.read(body(1000, 1).stream);
    await b.read(body(1000, 1).stream);
    const e = await thrown(b.read(body(1000, 1).stream));
    expect(e).toMatchObject({ bound: 'maxTotalBytes', failure: 'tooLarge' });
    expect((e as Error).message).toContain('passed 2500 bytes together');
    b.close();
  });

  it("takes an answer's own cap, and its name in the message", async () => {
    const b = budget({ maxAnswerBytes: 1000 });
    const e = await thrown(b.read(body(100, 10).stream, { maxBytes: 300, what: 'the token answer' }));
    expect((e as Error).message).toBe('the token answer was larger than 300 bytes');
    b.close();
  });

  it("reads only an error answer's first bytes, whatever it sends", async () => {
    const b = budget({});
    const huge = body(64 * 1024, 1000);
    const text = await b.read(huge.stream, { error: true });
    expect(text.length).toBe(64 * 1024);
    expect(huge.pulled()).toBeLessThan(1024 * 1024);
    b.close();
  });

  it('counts the answers', () => {
    const b = budget({ maxAnswers: 3 });
    b.answer();
    b.answer();
    b.answer();
    const e = thrown(() => b.answer());
    return e.then((err) => {
      expect(err).toMatchObject({ bound: 'maxAnswers' });
      expect((err as Error).message).toBe('the resolution of the source went on for more than 3 answers');
      b.close();
    });
  });

  it("bounds an entry's length, the entries and their text together", async () => {
    const long = budget({ maxEntryChars: 10 });
    long.entry('0123456789');
    expect(await thrown(() => long.entry('ok', '01234567890'))).toMatchObject({ bound: 'maxEntryChars' });
    long.close();

    const many = budget({ maxEntries: 2 });
    many.entry('a');
    many.entry('b');
    expect(await thrown(() => many.entry('c'))).toMatchObject({ bound: 'maxEntries' });
    many.close();

    const text = budget({ maxEntriesChars: 25 });
    text.entry('0123456789', '0123456789');
    expect(await thrown(() => text.entry('012345'))).toMatchObject({ bound: 'maxEntriesChars' });
    text.close();
  });

  it('has one deadline for the whole resolution: a read in progress ends with it', async () => {
    const b = budget({ timeoutMs: 200 });
    const never = new Readable({ read() {} });
    const started = performance.now();
    const e = await thrown(
      // A body that never ends, read under the budget's signal as a client does.
      (async () => {
        b.signal.addEventListener('abort', () => never.destroy(b.signal.reason as Error));
        return b.read(never);
      })(),
    );
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(e).toMatchObject({ failure: 'timedOut', bound: 'timeoutMs', reason: 'SourceTimeout' });
    expect((e as Error).message).toBe('the resolution of the source did not complete within 200 ms');
  });

  it("gives each request its own time-out under the budget's signal", async () => {
    const b = budget({ requestTimeoutMs: 50 });
    const req = b.request();
    await new Promise((r) => req.signal.addEventListener('abort', r));
    expect(req.timedOut()).toBe(true);
    req.done();
    expect(b.requestTimedOut(req.ms)).toMatchObject({ bound: 'requestTimeoutMs', failure: 'timedOut' });
    expect(b.signal.aborted).toBe(true);
    b.close();
  });

  it("throws the source kind's error, with the caller's signal aborting it too", async () => {
    class KindError extends Error {}
    const caller = new AbortController();
    const b = new SourceBudget(DEFAULT_SOURCE_BOUNDS, {
      signal: caller.signal,
      toError: (hit) => new KindError(`kind: ${hit.message}`),
    });
    const e = await thrown(b.read(body(1024, 5000).stream));
    expect(e).toBeInstanceOf(KindError);
    expect(b.hitBound).toBeInstanceOf(BoundHit);
    b.close();

    const c = new SourceBudget(DEFAULT_SOURCE_BOUNDS, { signal: caller.signal });
    caller.abort(new Error('shutdown'));
    expect(c.signal.aborted).toBe(true);
    expect((c.signal.reason as Error).message).toBe('shutdown');
    c.close();
  });
});
