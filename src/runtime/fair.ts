/**
 * Fair sharing of a few slots (workers, registrations) between tenants (namespaces), so that one tenant's slow or
 * hanging work cannot hold every slot while another tenant's work waits.
 *
 * Two rules, as the Kubernetes API server's priority and fairness shares seats, in the small:
 * - a tenant may hold at most `maxPerTenant` slots (default: all but a quarter of them, at least one kept back),
 *   so some slots are always free for the other tenants however long one tenant's work takes;
 * - a free slot goes to the waiting tenant holding the fewest slots (ties in turn), so a tenant with a thousand
 *   waiting items and a tenant with one alternate instead of queueing behind each other.
 * One tenant alone may still use all but the kept-back slots. Hand-written: no maintained package has a fair
 * queue keyed by tenant with a per-tenant cap.
 */

/** All but a quarter of `capacity` (at least one slot kept back for other tenants); all of one slot. */
export function defaultMaxPerTenant(capacity: number): number {
  return capacity <= 1 ? capacity : capacity - Math.max(1, Math.floor(capacity / 4));
}

/** The namespace of a `namespace/name` key; cluster-scoped keys (no slash) share the tenant ''. */
export function namespaceOf(key: string): string {
  const i = key.indexOf('/');
  return i < 0 ? '' : key.slice(0, i);
}

export interface FairQueueOptions {
  /** Slots shared by every tenant. */
  capacity: number;
  /** Slots one tenant may hold at once. Default `defaultMaxPerTenant(capacity)`. */
  maxPerTenant?: number;
}

/**
 * Per-tenant FIFO queues of waiting items and the slots held. `next()` hands out the item that may run now (a
 * slot is free and its tenant is under its cap), taking a slot for it; `release(tenant)` gives the slot back.
 */
export class FairQueue<T> {
  readonly capacity: number;
  readonly maxPerTenant: number;
  private readonly waiting = new Map<string, T[]>();
  private readonly heldBy = new Map<string, number>();
  private heldTotal = 0;
  private waitingTotal = 0;
  /** Tenants in the order they take turns; a tenant goes to the back when it is served. */
  private readonly turns: string[] = [];

  constructor(opts: FairQueueOptions) {
    if (!Number.isInteger(opts.capacity) || opts.capacity < 1)
      throw new RangeError(`capacity must be a positive integer: ${opts.capacity}`);
    this.capacity = opts.capacity;
    const cap = opts.maxPerTenant ?? defaultMaxPerTenant(opts.capacity);
    if (!Number.isInteger(cap) || cap < 1)
      throw new RangeError(`maxPerTenant must be a positive integer: ${cap}`);
    this.maxPerTenant = Math.min(cap, opts.capacity);
  }

  /** Items waiting, over all tenants. */
  get length(): number {
    return this.waitingTotal;
  }
  /** Slots held, over all tenants. */
  get held(): number {
    return this.heldTotal;
  }
  heldOf(tenant: string): number {
    return this.heldBy.get(tenant) ?? 0;
  }

  push(tenant: string, item: T): void {
    let q = this.waiting.get(tenant);
    if (!q) {
      q = [];
      this.waiting.set(tenant, q);
      if (!this.turns.includes(tenant)) this.turns.push(tenant);
    }
    q.push(item);
    this.waitingTotal++;
  }

  /** Removes a waiting item (it is no longer wanted). Returns whether it was waiting. */
  remove(tenant: string, item: T): boolean {
    const q = this.waiting.get(tenant);
    const i = q ? q.indexOf(item) : -1;
    if (!q || i < 0) return false;
    q.splice(i, 1);
    this.waitingTotal--;
    if (q.length === 0) this.dropTenant(tenant);
    return true;
  }

  /** Whether `tenant` could take a slot now. */
  mayTake(tenant: string): boolean {
    return this.heldTotal < this.capacity && this.heldOf(tenant) < this.maxPerTenant;
  }

  /** Takes a slot for an item that never waited (the caller checked `mayTake`). */
  take(tenant: string): void {
    this.heldBy.set(tenant, this.heldOf(tenant) + 1);
    this.heldTotal++;
  }

  release(tenant: string): void {
    const n = this.heldOf(tenant);
    if (n <= 0) return;
    if (n === 1) this.heldBy.delete(tenant);
    else this.heldBy.set(tenant, n - 1);
    this.heldTotal--;
  }

  /**
   * The next item that may run, its slot taken; undefined when none may. `eligible` skips items held back by a
   * bound of the caller's own (e.g. per object): the tenant's first eligible item is its candidate.
   */
  next(eligible?: (item: T) => boolean): { tenant: string; item: T } | undefined {
    if (this.heldTotal >= this.capacity) return undefined;
    let best: string | undefined;
    let bestIndex = -1;
    for (const tenant of this.turns) {
      const q = this.waiting.get(tenant);
      if (!q?.length || this.heldOf(tenant) >= this.maxPerTenant) continue;
      if (best !== undefined && this.heldOf(tenant) >= this.heldOf(best)) continue;
      const i = eligible ? q.findIndex(eligible) : 0;
      if (i < 0) continue;
      best = tenant;
      bestIndex = i;
    }
    if (best === undefined) return undefined;
    const q = this.waiting.get(best)!;
    const item = q.splice(bestIndex, 1)[0]!;
    this.waitingTotal--;
    this.take(best);
    // Served: to the back of the turns (ties among equally served tenants go round).
    this.turns.splice(this.turns.indexOf(best), 1);
    if (q.length === 0) this.waiting.delete(best);
    else this.turns.push(best);
    return { tenant: best, item };
  }

  /** Every waiting item, tenant by tenant (shutdown). */
  drain(): T[] {
    const all = [...this.waiting.values()].flat();
    this.waiting.clear();
    this.turns.length = 0;
    this.waitingTotal = 0;
    return all;
  }

  private dropTenant(tenant: string): void {
    this.waiting.delete(tenant);
    const i = this.turns.indexOf(tenant);
    if (i >= 0) this.turns.splice(i, 1);
  }
}
