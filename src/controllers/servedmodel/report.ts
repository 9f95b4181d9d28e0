/**
 * The reporting step of a ServedModel pass: what the pass did as Events, the status from the object and what the
 * pass saw, the write (or, when only progress changed, none until the coalescing interval is over), the
 * registrations a written status holds settled, the Events of what the write changed (Ready, a scale-out), and when
 * to look again.
 *
 * An ended registration's Event is recorded once, when a pass first sees it; the registration is settled only once
 * a status write holds its outcome, so a pass whose write is lost to a conflict (thrown: the whole reconcile runs
 * again on fresh data) or coalesced leaves it for the next.
 */
import type {
  RolloutStatus,
  ServedModel,
  ServedModelSpec,
  ServedModelStatus,
  SourceStatus,
} from '../../api/index.ts';
import type { Registered } from '../../servers/driver.ts';
import {
  getCondition,
  type ControllerContext,
  type ReconcileContext,
  type ReconcileResult,
} from '../../runtime/index.ts';
import type { OperatorMetrics } from '../metrics.ts';
import type { StatusWrite } from '../status.ts';
import { ServedModelCondition, rolledBackConditions, withServedModelConditions } from './conditions.ts';
import type { ReplicaGating } from './gates.ts';
import { registrationId, type ListedDirectory } from './goal.ts';
import { coalescedLook, keepRegistration, nextLook, statusEvents, withWake, writeNow } from './policy.ts';
import type { RegistrationRunner } from './registrations.ts';
import { registeredEvent, type ReplicaEvent, type ReplicaGoal, type ReplicaOutcome } from './replica.ts';
import { progressDeadlineMs, rolloutChanged, rolloutWakeMs } from './rollout.ts';
import { summarize, withReplicas, type PassSummary, type ReplicaStatus } from './replica-status.ts';
import type { Discovery } from './replicas.ts';

export interface ReportDeps {
  events: Pick<ControllerContext['events'], 'record'>;
  config: Pick<ControllerContext['config'], 'pollBackoffStart' | 'pollBackoffMax'>;
  registrations: Pick<RegistrationRunner<Registered>, 'report' | 'settle'>;
  /** The status write; a conflict is thrown (StatusConflict). */
  writeStatus: StatusWrite<ServedModel, ServedModelStatus>;
  metrics: Pick<OperatorMetrics, 'servedModelReplicas' | 'modelServerErrors'>;
  now: () => number;
  random: () => number;
}

/** What one pass found, for its report. */
export interface PassFindings {
  key: string;
  sm: ServedModel;
  spec: ServedModelSpec;
  goal: ReplicaGoal;
  discovery: Discovery;
  /** Whether any EndpointSlice of the Service exists. */
  serviceFound: boolean;
  gating: ReplicaGating;
  dir: ListedDirectory | undefined;
  /** What spec.source resolved to in this pass. */
  source?: SourceStatus | undefined;
  previous: ReadonlyMap<string, ReplicaStatus>;
  outcomes: readonly ReplicaOutcome[];
  /** A Staged rollout's status (undefined: left as it is) and the Events of its change of phase. */
  rollout?: { status: RolloutStatus | undefined; events: readonly ReplicaEvent[] } | undefined;
}

export class ServedModelReport {
  private readonly deps: ReportDeps;
  /** When each object's status was last written (for coalescing). */
  private readonly lastWrite = new Map<string, number>();

  constructor(deps: ReportDeps) {
    this.deps = deps;
  }

  async report(p: PassFindings, rc: ReconcileContext): Promise<ReconcileResult | undefined> {
    const { sm, gating } = p;
    const newLocalHits = p.outcomes.filter(
      (o) => o.ended?.state === 'done' && !o.ended.reported && o.ended.result.localHit !== undefined,
    ).length;
    this.record(p);
    const summary = this.summary(p);
    const before = sm.status?.conditions ?? [];
    const sinceWriteMs = this.deps.now() - (this.lastWrite.get(p.key) ?? 0);
    const next = withServedModelConditions(sm.status ?? {}, sm.metadata.generation, summary.conditions);
    const rollout = p.rollout?.status;
    const now =
      (rollout !== undefined && rolloutChanged(sm.status?.rollout, rollout)) ||
      writeNow({
        generation: sm.metadata.generation,
        observedGeneration: sm.status?.observedGeneration,
        conditionsBefore: before,
        conditionsAfter: next.conditions ?? [],
        newLocalHits,
        sinceWriteMs,
      });
    const wakeInMs = Math.min(
      gating.wakeInMs,
      rolloutWakeMs(rollout, progressDeadlineMs(p.spec), this.deps.now(), this.deps.config.pollBackoffStart),
    );
    if (!now) return coalescedLook(this.look(p, summary, before), sinceWriteMs, wakeInMs);
    // A conflict throws: the reconcile runs again on fresh data, registrations not yet settled.
    const written = await this.deps.writeStatus(sm, (s) => statusOf(s, p, summary), rc.signal);
    if (written.written) this.lastWrite.set(p.key, this.deps.now());
    this.settle(p);
    const after = written.object.status?.conditions ?? [];
    for (const e of statusEvents(before, after)) this.deps.events.record(sm, e.type, e.reason, e.note);
    return withWake(this.look(p, summary, after), wakeInMs);
  }

  /** Drops the coalescing clock of an object that is gone. */
  forget(key: string): void {
    this.lastWrite.delete(key);
  }

  /** The replicas' statuses, counts and conditions, with the replica metrics. */
  private summary(p: PassFindings): PassSummary {
    const { sm, spec, gating } = p;
    const ready = getCondition(sm.status?.conditions, ServedModelCondition.Ready);
    const summarized = summarize({
      modelName: spec.modelName,
      serviceName: spec.modelServer.service?.name,
      serviceFound: p.serviceFound,
      discovery: p.discovery,
      outcomes: p.outcomes,
      previous: p.previous,
      nodeIPs: gating.nodeIPs,
      gate: gating.conditionGate,
      wasReady: ready?.status === 'True' && ready.observedGeneration === sm.metadata.generation,
      now: new Date(this.deps.now()),
    });
    const summary = withRollout(summarized, p);
    const { metrics } = this.deps;
    metrics.servedModelReplicas(sm.metadata.namespace!, sm.metadata.name, summary.ready, summary.desired);
    for (const o of summary.failed)
      if (o.failure!.kind) metrics.modelServerErrors.labels(o.failure!.kind).inc();
    return summary;
  }

  /**
   * What the pass did, as Events: each step's, and once per registration the one of a registration that ended
   * (marked reported, so a pass run again after a conflict does not repeat it).
   */
  private record(p: PassFindings): void {
    const { registrations, events } = this.deps;
    const uid = p.sm.metadata.uid ?? p.key;
    for (const e of p.rollout?.events ?? []) events.record(p.sm, e.type, e.reason, e.note);
    for (const [i, o] of p.outcomes.entries()) {
      for (const e of o.events) events.record(p.sm, e.type, e.reason, e.note);
      if (o.ended?.state !== 'done' || o.ended.reported) continue;
      const r = p.discovery.replicas[i]!;
      const e = registeredEvent(p.goal, r, o.ended.result);
      events.record(p.sm, e.type, e.reason, e.note);
      registrations.report(registrationId(p.key, uid, p.goal, r));
    }
  }

  /**
   * After a status write held them: each ended registration settled (a later pass may register again), or kept as
   * it ended when its outcome needs a change.
   */
  private settle(p: PassFindings): void {
    const uid = p.sm.metadata.uid ?? p.key;
    for (const [i, o] of p.outcomes.entries()) {
      if (!o.ended || keepRegistration(o, o.ended, this.deps.now(), this.deps.config.pollBackoffStart))
        continue;
      this.deps.registrations.settle(registrationId(p.key, uid, p.goal, p.discovery.replicas[i]!));
    }
  }

  private look(
    p: PassFindings,
    summary: PassSummary,
    conditions: ServedModelStatus['conditions'],
  ): ReconcileResult | undefined {
    return nextLook({
      replicas: summary.replicas,
      allReady: summary.allReady,
      failed: summary.failed,
      staticEndpoints: p.spec.modelServer.endpoints !== undefined,
      gate: p.gating.conditionGate,
      readySince: getCondition(conditions, ServedModelCondition.Ready)?.lastTransitionTime,
      pollBackoffStart: this.deps.config.pollBackoffStart,
      pollBackoffMax: this.deps.config.pollBackoffMax,
      now: this.deps.now(),
      random: this.deps.random(),
      rolloutHeld: ['RolledBack', 'Paused'].includes(p.rollout?.status?.phase ?? ''),
    });
  }
}

/** The status the pass writes: its replicas and counts, the directory's listing, and its conditions. */
function statusOf(s: ServedModelStatus, p: PassFindings, summary: PassSummary): ServedModelStatus {
  const { gating, dir } = p;
  return withServedModelConditions(
    {
      ...withReplicas(s, summary, gating.gate, gating.preheat?.status?.cache, gating.nodePreheat),
      files: dir && { count: dir.count, bytes: dir.bytes, digest: dir.digest },
      // What this pass resolved, else the recorded resolution; none once the spec has no source.
      source: p.spec.source ? (p.source ?? s.source) : undefined,
      rollout: p.rollout?.status ?? s.rollout,
    },
    p.sm.metadata.generation,
    summary.conditions,
  );
}

/** A Staged rollout of this spec that rolls back says so in the conditions, whatever the replicas alone say. */
function withRollout(summary: PassSummary, p: PassFindings): PassSummary {
  const r = p.rollout?.status;
  if (!r || (r.phase !== 'RollingBack' && r.phase !== 'RolledBack')) return summary;
  const message = `${r.version} rolled back to ${r.previousVersion ?? 'the previous version'} (${r.reason}): ${r.message ?? ''}`;
  return {
    ...summary,
    conditions: rolledBackConditions(summary.conditions, message.slice(0, 1024), r.phase === 'RolledBack'),
  };
}
