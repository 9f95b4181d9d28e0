import { describe, expect, it } from 'vitest';
import { FairQueue, defaultMaxPerTenant, namespaceOf } from '../../src/runtime/fair.ts';

describe('FairQueue', () => {
  it('keeps slots back from a tenant that has every other one, however much it queues', () => {
    const q = new FairQueue<string>({ capacity: 4 });
    for (let i = 0; i < 10; i++) q.push('a', `a${i}`);
    const taken = [q.next(), q.next(), q.next(), q.next()];
    expect(taken.map((t) => t?.item)).toEqual(['a0', 'a1', 'a2', undefined]);
    expect(q.heldOf('a')).toBe(3);
    // Another tenant's item runs at once on the slot kept back.
    q.push('b', 'b0');
    expect(q.next()).toEqual({ tenant: 'b', item: 'b0' });
    expect(q.next()).toBeUndefined();
  });

  it('gives a free slot to the waiting tenant holding the fewest', () => {
    const q = new FairQueue<string>({ capacity: 2, maxPerTenant: 2 });
    for (let i = 0; i < 5; i++) q.push('a', `a${i}`);
    expect(q.next()?.item).toBe('a0');
    expect(q.next()?.item).toBe('a1');
    q.push('b', 'b0');
    q.push('b', 'b1');
    q.release('a');
    // a holds 1, b holds 0: b's turn although a queued first.
    expect(q.next()?.item).toBe('b0');
    q.release('a');
    // a holds 0, b holds 1: a's turn.
    expect(q.next()?.item).toBe('a2');
  });

  it('alternates between tenants holding the same number of slots', () => {
    const q = new FairQueue<string>({ capacity: 1 });
    for (const i of [0, 1, 2]) q.push('a', `a${i}`);
    for (const i of [0, 1, 2]) q.push('b', `b${i}`);
    const order: string[] = [];
    for (let n = 0; n < 6; n++) {
      const t = q.next()!;
      order.push(t.item);
      q.release(t.tenant);
    }
    expect(order).toEqual(['a0', 'b0', 'a1', 'b1', 'a2', 'b2']);
    expect(q.length).toBe(0);
  });

  it('lets one tenant alone use all but the kept-back slots, and one slot when there is one', () => {
    expect(defaultMaxPerTenant(1)).toBe(1);
    expect(defaultMaxPerTenant(2)).toBe(1);
    expect(defaultMaxPerTenant(4)).toBe(3);
    expect(defaultMaxPerTenant(32)).toBe(24);
    const single = new FairQueue<string>({ capacity: 1 });
    single.push('a', 'x');
    expect(single.next()?.item).toBe('x');
  });

  it("skips items the caller holds back, and other tenants' turn comes all the same", () => {
    const q = new FairQueue<string>({ capacity: 4, maxPerTenant: 4 });
    q.push('a', 'a-busy');
    q.push('a', 'a-free');
    q.push('b', 'b-busy');
    const eligible = (item: string) => !item.endsWith('busy');
    expect(q.next(eligible)?.item).toBe('a-free');
    expect(q.next(eligible)).toBeUndefined();
    expect(q.length).toBe(2);
  });

  it('removes waiting items and drains', () => {
    const q = new FairQueue<string>({ capacity: 1 });
    q.push('a', 'x');
    q.push('a', 'y');
    expect(q.remove('a', 'x')).toBe(true);
    expect(q.remove('a', 'x')).toBe(false);
    expect(q.length).toBe(1);
    expect(q.drain()).toEqual(['y']);
    expect(q.next()).toBeUndefined();
  });

  it('names the tenant of a key', () => {
    expect(namespaceOf('team-a/model')).toBe('team-a');
    expect(namespaceOf('cluster-scoped')).toBe('');
  });
});
