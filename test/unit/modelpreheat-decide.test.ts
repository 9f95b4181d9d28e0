/** The ModelPreheat reconciler's decisions (src/controllers/modelpreheat/decide.ts), case by case. */
import { describe, expect, it } from 'vitest';
import { ModelPreheatSpec, type ModelPreheat, type ModelPreheatStatus } from '../../src/api/index.ts';
import { preheatJob } from '../fixtures/preheats.ts';
import {
  MAX_RETRY_DELAY_MS,
  alreadyPreheatedStatus,
  emptySuccess,
  failedStatus,
  failureOutcome,
  failureRequeue,
  finalizerChange,
  jobCreatedStatus,
  nextStep,
  pollDelay,
  retryDelay,
  startedStatus,
  succeededStatus,
} from '../../src/controllers/modelpreheat/decide.ts';
import { contentKey } from '../../src/controllers/modelpreheat/targets.ts';

const NOW = Date.parse('2026-01-02T03:04:05Z');
const spec = ModelPreheatSpec.parse({ url: 'http://origin/m.mar', retry: { limit: 2, backoff: '10s' } });
const targeted = ModelPreheatSpec.parse({
  url: 'http://origin/m.mar',
  scope: 'all_peers',
  targets: { ips: ['10.0.0.1', '10.0.0.2'] },
});

const obj = (status?: ModelPreheatStatus, generation = 3): ModelPreheat =>
  ({
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ModelPreheat',
    metadata: { name: 'p', namespace: 'ns', generation },
    spec: {},
    ...(status ? { status } : {}),
  }) as ModelPreheat;

const job = preheatJob;
const peerOK = { success_tasks: [{ url: 'http://origin/m.mar', ip: '10.0.0.1', hostname: 'n1' }] };

describe('nextStep: the state machine of one generation', () => {
  it('creates attempt 1 when no job of this generation exists', () => {
    expect(nextStep(obj(), spec, NOW)).toEqual({ kind: 'create', attempt: 1 });
    // A job of an older generation does not count: a spec edit starts over.
    expect(nextStep(obj({ jobGeneration: 2, state: 'SUCCESS' }), spec, NOW)).toEqual({
      kind: 'create',
      attempt: 1,
    });
  });

  it('follows a running job and hands a succeeded one to the cache step', () => {
    const running = { jobGeneration: 3, state: 'STARTED' as const, jobID: 7 };
    expect(nextStep(obj(running), spec, NOW)).toEqual({ kind: 'poll', job: running });
    expect(nextStep(obj({ jobGeneration: 3, state: 'SUCCESS' }), spec, NOW)).toEqual({ kind: 'cache' });
  });

  it('waits for a retry that is not due, retries one that is, stops once the retries are used up', () => {
    const failed = (attempts: number, nextRetryAt?: string) =>
      obj({ jobGeneration: 3, state: 'FAILURE', attempts, ...(nextRetryAt ? { nextRetryAt } : {}) });
    expect(nextStep(failed(1, new Date(NOW + 5_000).toISOString()), spec, NOW)).toEqual({
      kind: 'wait',
      ms: 5_000,
    });
    expect(nextStep(failed(1, new Date(NOW - 1).toISOString()), spec, NOW)).toEqual({
      kind: 'create',
      attempt: 2,
    });
    expect(nextStep(failed(3), spec, NOW)).toEqual({ kind: 'done' });
  });

  it('keeps a final failure of this generation final, except a manager that was not configured', () => {
    const final = (reason: string, observedGeneration = 3) =>
      obj({
        conditions: [
          {
            type: 'Succeeded',
            status: 'False',
            reason,
            message: 'm',
            observedGeneration,
            lastTransitionTime: '2026-01-01T00:00:00Z',
          },
        ],
      });
    expect(nextStep(final('InvalidJobArgs'), spec, NOW)).toEqual({ kind: 'done' });
    expect(nextStep(final('ManagerNotConfigured'), spec, NOW)).toEqual({ kind: 'create', attempt: 1 });
    expect(nextStep(final('InvalidJobArgs', 2), spec, NOW)).toEqual({ kind: 'create', attempt: 1 });
  });

  it('needs no job when every targeted peer holds the same content', () => {
    const peers = [
      { ip: '10.0.0.1', state: 'Preheated' as const },
      { ip: '10.0.0.2', state: 'Preheated' as const },
    ];
    const held = obj({ contentKey: contentKey(targeted), peers });
    expect(nextStep(held, targeted, NOW)).toEqual({ kind: 'alreadyPreheated' });
    const oneFailed = obj({
      contentKey: contentKey(targeted),
      peers: [peers[0]!, { ip: '10.0.0.2', state: 'Failed' }],
    });
    expect(nextStep(oneFailed, targeted, NOW)).toEqual({ kind: 'create', attempt: 1 });
    expect(nextStep(obj({ contentKey: 'other', peers }), targeted, NOW)).toEqual({
      kind: 'create',
      attempt: 1,
    });
  });
});

describe('finalizer, polling and retry policy', () => {
  it('adds the finalizer only for a clean-up to do, and removes it when none is left', () => {
    expect(finalizerChange(spec, false)).toBeUndefined();
    expect(finalizerChange(spec, true)).toBe('remove');
    expect(finalizerChange({ ...spec, deleteJobOnCleanup: true }, false)).toBe('add');
    expect(finalizerChange({ ...spec, evictOnDelete: true }, false)).toBe('add');
    expect(finalizerChange({ ...spec, evictOnDelete: true }, true)).toBeUndefined();
  });

  it('polls a job at half its age, within [start, max], from status.startedAt', () => {
    const started = (agoMs: number) => new Date(NOW - agoMs).toISOString();
    expect(pollDelay(started(1_000), NOW, 2_000, 60_000)).toBe(2_000);
    expect(pollDelay(started(40_000), NOW, 2_000, 60_000)).toBe(20_000);
    expect(pollDelay(started(600_000), NOW, 2_000, 60_000)).toBe(60_000);
    expect(pollDelay(undefined, NOW, 2_000, 60_000)).toBe(2_000);
  });

  it('doubles the backoff per attempt, bounded by an hour', () => {
    expect([1, 2, 3].map((a) => retryDelay('10s', a))).toEqual([10_000, 20_000, 40_000]);
    expect(retryDelay('30m', 5)).toBe(MAX_RETRY_DELAY_MS);
  });

  it('maps a failed step to its outcome and what the queue does next', () => {
    const view = { reason: 'ManagerUnavailable' as const, message: 'm', final: false };
    expect(failureOutcome({ ...view, retry: { kind: 'backoff' } })).toBe('Progressing');
    expect(failureOutcome({ ...view, retry: { kind: 'backoff' }, blocked: true })).toBe('Blocked');
    expect(failureOutcome({ ...view, retry: { kind: 'none' }, final: true })).toBe('Failed');
    expect(failureRequeue({ ...view, retry: { kind: 'none' } })).toBeUndefined();
    expect(failureRequeue({ ...view, retry: { kind: 'after', ms: 7_000 } })).toEqual({ requeueAfter: 7_000 });
    expect(failureRequeue({ ...view, retry: { kind: 'backoff' } })).toBe('throw');
    // The manager's Retry-After is bounded to the poll range: 0 does not poll at once, a year is not a year.
    const poll = { pollBackoffStart: 500, pollBackoffMax: 30_000 };
    const server = (ms: number) => ({ ...view, retry: { kind: 'after' as const, ms, fromServer: true } });
    expect(failureRequeue(server(0), poll)).toEqual({ requeueAfter: 500 });
    expect(failureRequeue(server(365 * 86_400_000), poll)).toEqual({ requeueAfter: 30_000 });
    expect(failureRequeue(server(Number.NaN), poll)).toEqual({ requeueAfter: 500 });
    expect(failureRequeue(server(5_000), poll)).toEqual({ requeueAfter: 5_000 });
  });
});

describe('the statuses the reconciler writes', () => {
  const now = new Date(NOW);
  const condition = (s: ModelPreheatStatus, type: string) => s.conditions?.find((c) => c.type === type);

  it('a new job clears the last job results and records the attempt; JobCreated is Progressing', () => {
    const old: ModelPreheatStatus = { successCount: 4, completedAt: 'x', nextRetryAt: 'y', jobGeneration: 2 };
    const created = {
      job: job('PENDING'),
      managerURL: 'http://m',
      attempt: 2,
      tasks: [{ url: 'u', taskID: 't' }],
    };
    const s = jobCreatedStatus(startedStatus(old, spec, 3, created, now), spec, 3, created);
    expect(s).toMatchObject({ jobID: 7, state: 'PENDING', attempts: 2, jobGeneration: 3, phase: 'PENDING' });
    expect(s).toMatchObject({ startedAt: now.toISOString(), tasks: [{ url: 'u', taskID: 't' }] });
    expect(s.successCount).toBeUndefined();
    expect(s.completedAt).toBeUndefined();
    expect(condition(s, 'Reconciling')).toMatchObject({ status: 'True', reason: 'JobCreated' });
    expect(condition(s, 'Reconciling')!.message).toContain('attempt 2 of 3');
  });

  it('a success counts the peers; a SUCCESS no peer reported is a failure in its own words', () => {
    const ok = job('SUCCESS', [peerOK]);
    expect(emptySuccess(ok)).toBeUndefined();
    const s = succeededStatus({ jobGeneration: 3, state: 'STARTED' }, spec, 3, ok, now);
    expect(s).toMatchObject({ state: 'SUCCESS', successCount: 1, failureCount: 0, phase: 'SUCCESS' });
    expect(condition(s, 'Ready')).toMatchObject({ status: 'True', reason: 'JobSucceeded' });
    expect(emptySuccess(job('SUCCESS'))).toMatch(/ended SUCCESS but no peer reported the content/);
  });

  it('a failed attempt schedules the retry in status; the last one is final', () => {
    const retry = failedStatus({ jobGeneration: 3 }, spec, 3, { attempt: 1, why: 'boom' }, now);
    expect(retry).toMatchObject({
      state: 'FAILURE',
      phase: 'RETRYING',
      nextRetryAt: new Date(NOW + 10_000).toISOString(),
    });
    expect(condition(retry, 'Reconciling')).toMatchObject({ reason: 'JobFailedWillRetry' });
    expect(condition(retry, 'Reconciling')!.message).toBe('attempt 1 of 3 failed: boom; retrying in 10s');

    const final = failedStatus(
      { jobGeneration: 3 },
      spec,
      3,
      { attempt: 3, why: 'boom', reason: 'NoPeerSucceeded' },
      now,
    );
    expect(final).toMatchObject({ state: 'FAILURE', completedAt: now.toISOString() });
    expect(final.nextRetryAt).toBeUndefined();
    expect(condition(final, 'Stalled')).toMatchObject({ status: 'True', reason: 'NoPeerSucceeded' });
    expect(condition(final, 'Succeeded')).toMatchObject({ status: 'False' });
  });

  it('a failed targeted job marks each targeted peer Failed with the reason', () => {
    const s = failedStatus({ jobGeneration: 3 }, targeted, 3, { attempt: 1, why: 'manager said no' }, now);
    expect(s.peers).toEqual([
      { ip: '10.0.0.1', state: 'Failed', message: 'manager said no' },
      { ip: '10.0.0.2', state: 'Failed', message: 'manager said no' },
    ]);
  });

  it('already preheated is a success without a job, attempts 0', () => {
    const s = alreadyPreheatedStatus({}, targeted, 3, now);
    expect(s).toMatchObject({
      state: 'SUCCESS',
      attempts: 0,
      jobGeneration: 3,
      contentKey: contentKey(targeted),
    });
    expect(condition(s, 'Ready')).toMatchObject({ status: 'True', reason: 'AlreadyPreheated' });
    expect(condition(s, 'Ready')!.message).toBe(
      'all 2 targeted peer(s) hold the content already: no job needed',
    );
  });
});
