import { describe, expect, it } from 'vitest';
import { getCondition, isTrue, removeCondition, setCondition } from '../../src/runtime/conditions.ts';
import { mergePatch } from '../../src/runtime/status.ts';

const t0 = new Date('2025-01-01T00:00:00.123Z');
const t1 = new Date('2025-01-01T00:05:00Z');
const t2 = new Date('2025-01-01T00:10:00Z');

describe('conditions', () => {
  it('adds a condition with lastTransitionTime and observedGeneration', () => {
    const c = setCondition(
      undefined,
      { type: 'Ready', status: 'False', reason: 'Waiting', message: 'm' },
      3,
      t0,
    );
    expect(c).toEqual([
      {
        type: 'Ready',
        status: 'False',
        observedGeneration: 3,
        lastTransitionTime: '2025-01-01T00:00:00Z',
        reason: 'Waiting',
        message: 'm',
      },
    ]);
  });

  it('moves lastTransitionTime only when status changes', () => {
    const a = setCondition([], { type: 'Ready', status: 'False', reason: 'Waiting' }, 1, t0);
    const b = setCondition(
      a,
      { type: 'Ready', status: 'False', reason: 'StillWaiting', message: 'x' },
      2,
      t1,
    );
    expect(b[0]!.lastTransitionTime).toBe('2025-01-01T00:00:00Z');
    expect(b[0]!.reason).toBe('StillWaiting');
    expect(b[0]!.observedGeneration).toBe(2);
    const c = setCondition(b, { type: 'Ready', status: 'True', reason: 'Ready' }, 2, t2);
    expect(c[0]!.lastTransitionTime).toBe('2025-01-01T00:10:00Z');
    expect(isTrue(c, 'Ready')).toBe(true);
  });

  it('returns the same array when nothing changes and never mutates its input', () => {
    const a = setCondition([], { type: 'Ready', status: 'True', reason: 'Ok', message: '' }, 1, t0);
    const frozen = Object.freeze(a.map((c) => Object.freeze({ ...c })));
    expect(setCondition(frozen, { type: 'Ready', status: 'True', reason: 'Ok' }, 1, t2)).toBe(frozen);
    const other = setCondition(frozen, { type: 'Degraded', status: 'False', reason: 'Fine' }, 1, t2);
    expect(other).toHaveLength(2);
    expect(frozen).toHaveLength(1);
    expect(getCondition(other, 'Degraded')?.status).toBe('False');
    expect(removeCondition(other, 'Degraded')).toHaveLength(1);
  });

  it('rejects reasons that are not CamelCase', () => {
    expect(() => setCondition([], { type: 'Ready', status: 'True', reason: 'not ok' }, 1)).toThrow(
      /CamelCase/,
    );
  });
});

describe('mergePatch', () => {
  it('emits changed members, nulls for removed ones, whole arrays', () => {
    expect(mergePatch({ a: 1, b: { c: 2, d: 3 }, e: [1] }, { a: 1, b: { c: 5 }, e: [1, 2] })).toEqual({
      b: { c: 5, d: null },
      e: [1, 2],
    });
    expect(mergePatch({ a: 1 }, { a: 1, x: undefined })).toBeUndefined();
    expect(mergePatch(undefined, { a: 1 })).toEqual({ a: 1 });
  });
});
