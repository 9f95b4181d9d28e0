/**
 * Leader election on a coordination.k8s.io/v1 Lease, with client-go's algorithm and controller-runtime's
 * defaults (lease 15 s, renew deadline 10 s, retry period 2 s):
 * - every retry period, GET the lease; a holder other than us is respected until `leaseDuration` has passed
 *   since we last OBSERVED its record change (local clock only, so clock skew between nodes does not matter);
 * - acquire/renew are PUTs carrying the resourceVersion we read: two candidates cannot both win (409);
 * - the leader renews every retry period; if it cannot renew for `renewDeadline` it stops leading (and the
 *   manager stops its controllers) well before anyone else may take over (`leaseDuration` > `renewDeadline`);
 * - `release` (on shutdown) clears holderIdentity so a successor takes over at its next retry, not after
 *   the lease expires.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { isConflict, isNotFound, GVR, type KubeClient, type KubeObject } from './kube.ts';
import { timeoutSignal } from './timers.ts';

export interface LeaseSpec {
  holderIdentity?: string | null;
  leaseDurationSeconds?: number;
  acquireTime?: string | null;
  renewTime?: string | null;
  leaseTransitions?: number;
}
export interface Lease extends KubeObject {
  spec?: LeaseSpec;
}

export interface LeaderElectorOptions {
  kube: KubeClient;
  namespace: string;
  name: string;
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  logger?: Logger;
  onStartedLeading?: () => void;
  onStoppedLeading?: () => void;
  onNewLeader?: (identity: string) => void;
}

export class LeaderElector {
  private readonly opts: Required<
    Omit<LeaderElectorOptions, 'logger' | 'onStartedLeading' | 'onStoppedLeading' | 'onNewLeader'>
  > &
    LeaderElectorOptions;
  private observed: { record: string; at: number; holder: string } | undefined;
  private lease: Lease | undefined;
  private leading = false;
  private lastLeader = '';

  constructor(opts: LeaderElectorOptions) {
    this.opts = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000, ...opts };
    const { leaseDurationMs, renewDeadlineMs, retryPeriodMs } = this.opts;
    if (!(leaseDurationMs > renewDeadlineMs && renewDeadlineMs > retryPeriodMs * 1.2)) {
      throw new Error('leader election needs leaseDuration > renewDeadline > 1.2 * retryPeriod');
    }
  }

  get identity(): string {
    return this.opts.identity;
  }
  isLeader(): boolean {
    return this.leading;
  }

  /**
   * Campaigns until leading, then renews until the signal aborts (resolves 'stopped'; the lease is still
   * held: call {@link release} once the controllers have stopped) or renewal fails for the renew deadline
   * (resolves 'lost', after `onStoppedLeading`).
   */
  async run(signal: AbortSignal): Promise<'stopped' | 'lost'> {
    const { retryPeriodMs, renewDeadlineMs } = this.opts;
    while (!signal.aborted) {
      if (await this.tryAcquireOrRenew(signal, retryPeriodMs * 2)) break;
      // An abort ends the wait; the loop then sees the signal.
      await sleep(retryPeriodMs * (1 + Math.random() * 0.2), undefined, { signal }).catch(() => undefined);
    }
    if (signal.aborted) return 'stopped';
    this.leading = true;
    this.opts.logger?.info({ lease: `${this.opts.namespace}/${this.opts.name}` }, 'became leader');
    this.opts.onStartedLeading?.();
    let lastRenew = Date.now();
    while (!signal.aborted) {
      await sleep(retryPeriodMs, undefined, { signal }).catch(() => undefined);
      if (signal.aborted) break;
      const remaining = renewDeadlineMs - (Date.now() - lastRenew);
      if (remaining > 0 && (await this.tryAcquireOrRenew(signal, remaining))) {
        lastRenew = Date.now();
        continue;
      }
      if (Date.now() - lastRenew >= renewDeadlineMs) {
        this.leading = false;
        this.opts.logger?.error(
          { renewDeadlineMs },
          'leader election lost: could not renew the lease in time',
        );
        this.opts.onStoppedLeading?.();
        return 'lost';
      }
    }
    return 'stopped';
  }

  /** Gives the lease up (clears holderIdentity) if we hold it. Safe to call more than once. */
  async release(): Promise<boolean> {
    if (!this.leading || !this.lease) return false;
    this.leading = false;
    const now = microTime(new Date());
    const released: Lease = {
      ...this.lease,
      spec: {
        ...this.lease.spec,
        holderIdentity: null,
        leaseDurationSeconds: 1,
        acquireTime: now,
        renewTime: now,
      },
    };
    try {
      this.lease = await this.opts.kube
        .resource<Lease>(GVR.leases)
        .update(released, { signal: timeoutSignal(this.opts.renewDeadlineMs) });
      this.opts.logger?.info('released the leader lease');
      return true;
    } catch (err) {
      this.opts.logger?.warn({ err: (err as Error).message }, 'could not release the leader lease');
      return false;
    }
  }

  private async tryAcquireOrRenew(parent: AbortSignal, timeoutMs: number): Promise<boolean> {
    const { kube, namespace, name, identity, leaseDurationMs } = this.opts;
    const leases = kube.resource<Lease>(GVR.leases);
    const signal = AbortSignal.any([parent, timeoutSignal(timeoutMs)]);
    const now = new Date();
    const leaseDurationSeconds = Math.round(leaseDurationMs / 1000);
    try {
      let lease: Lease;
      try {
        lease = await leases.get(namespace, name, signal);
      } catch (err) {
        if (!isNotFound(err)) throw err;
        this.lease = await leases.create(
          {
            apiVersion: 'coordination.k8s.io/v1',
            kind: 'Lease',
            metadata: { name, namespace },
            spec: {
              holderIdentity: identity,
              leaseDurationSeconds,
              acquireTime: microTime(now),
              renewTime: microTime(now),
              leaseTransitions: 0,
            },
          },
          { signal },
        );
        this.noteLeader(identity);
        return true;
      }
      const spec = lease.spec ?? {};
      const holder = spec.holderIdentity ?? '';
      const record = JSON.stringify([holder, spec.renewTime, spec.acquireTime, spec.leaseDurationSeconds]);
      if (!this.observed || this.observed.record !== record) {
        this.observed = { record, at: Date.now(), holder };
        if (holder) this.noteLeader(holder);
      }
      const held = (spec.leaseDurationSeconds ?? leaseDurationSeconds) * 1000;
      if (holder && holder !== identity && this.observed.at + held > Date.now()) return false;
      const mine = holder === identity;
      const updated: Lease = {
        ...lease,
        spec: {
          holderIdentity: identity,
          leaseDurationSeconds,
          acquireTime: mine && spec.acquireTime ? spec.acquireTime : microTime(now),
          renewTime: microTime(now),
          leaseTransitions: mine ? (spec.leaseTransitions ?? 0) : (spec.leaseTransitions ?? 0) + 1,
        },
      };
      this.lease = await leases.update(updated, { signal });
      this.observed = {
        record: JSON.stringify([
          identity,
          updated.spec!.renewTime,
          updated.spec!.acquireTime,
          leaseDurationSeconds,
        ]),
        at: Date.now(),
        holder: identity,
      };
      this.noteLeader(identity);
      return true;
    } catch (err) {
      if (!isConflict(err) && !parent.aborted) {
        this.opts.logger?.warn(
          { err: (err as Error).message },
          'leader election: could not acquire or renew',
        );
      }
      return false;
    }
  }

  private noteLeader(holder: string): void {
    if (holder === this.lastLeader) return;
    this.lastLeader = holder;
    this.opts.logger?.info({ leader: holder }, 'new leader observed');
    this.opts.onNewLeader?.(holder);
  }
}

function microTime(d: Date): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}
