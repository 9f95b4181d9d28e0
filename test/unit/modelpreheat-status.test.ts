import { describe, expect, it } from 'vitest';
import { describeFailure, RATE_LIMITED_RETRY_MS } from '../../src/controllers/modelpreheat/failures.ts';
import { failureOutcome } from '../../src/controllers/modelpreheat/decide.ts';
import {
  PreheatReason,
  preheatConditions,
  preheatPhase,
  withPreheatConditions,
  type PreheatObservation,
} from '../../src/controllers/modelpreheat/conditions.ts';
import { ManagerError, type ManagerErrorKind } from '../../src/manager/errors.ts';
import { SecretNotFoundError } from '../../src/controllers/secrets.ts';
import { applyConditions, getCondition } from '../../src/runtime/conditions.ts';
import type { Condition } from '../../src/api/index.ts';

const managerError = (kind: ManagerErrorKind, status: number, managerMessage: string) =>
  new ManagerError({ kind, status, managerMessage, operation: 'create preheat job' });
const now = new Date('2026-01-01T00:00:00Z');
const empty: { observedGeneration?: number; conditions?: Condition[] } = {};
const apply = (o: PreheatObservation, before?: Condition[], gen = 2) =>
  applyConditions(before, preheatConditions(o), gen, now);
/** type=status/reason of every condition, sorted, for compact assertions. */
const summary = (cs: Condition[]) => cs.map((c) => `${c.type}=${c.status}/${c.reason}`).sort();

describe('ModelPreheat conditions and phase', () => {
  it('job created: Ready and Succeeded Unknown, Reconciling True, phase = job state', () => {
    const o: PreheatObservation = {
      outcome: 'Progressing',
      reason: PreheatReason.JobCreated,
      message: 'preheat job 7 created',
      jobState: 'PENDING',
    };
    expect(summary(apply(o))).toEqual([
      'Ready=Unknown/JobCreated',
      'Reconciling=True/JobCreated',
      'Succeeded=Unknown/JobCreated',
    ]);
    expect(preheatPhase(o)).toBe('PENDING');
    expect(preheatPhase({ ...o, reason: PreheatReason.JobRunning, jobState: 'STARTED' })).toBe('STARTED');
  });

  it('succeeded: Ready and Succeeded True, Reconciling and Stalled removed', () => {
    const running = apply({
      outcome: 'Progressing',
      reason: 'JobRunning',
      message: 'm',
      jobState: 'STARTED',
    });
    const done = apply(
      { outcome: 'Succeeded', reason: PreheatReason.JobSucceeded, message: 'ok on 2 peer(s)' },
      running,
    );
    expect(summary(done)).toEqual(['Ready=True/JobSucceeded', 'Succeeded=True/JobSucceeded']);
    expect(done.every((c) => c.observedGeneration === 2)).toBe(true);
    expect(preheatPhase({ outcome: 'Succeeded', reason: 'JobSucceeded', message: '' })).toBe('SUCCESS');
  });

  it('a failed attempt that will be retried is Reconciling, phase RETRYING (not FAILURE)', () => {
    const o: PreheatObservation = {
      outcome: 'Progressing',
      reason: PreheatReason.JobFailedWillRetry,
      message: 'attempt 1 of 4 failed: job 3 ended in FAILURE; retrying in 30s',
      jobState: 'FAILURE',
    };
    expect(preheatPhase(o)).toBe('RETRYING');
    expect(getCondition(apply(o), 'Reconciling')).toMatchObject({ status: 'True', message: o.message });
    expect(getCondition(apply(o), 'Stalled')).toBeUndefined();
  });

  it('retries exhausted: Stalled True, Ready and Succeeded False, phase FAILURE', () => {
    const o: PreheatObservation = {
      outcome: 'Failed',
      reason: PreheatReason.JobFailed,
      message: 'preheat failed after 4 attempt(s): job 9 ended in FAILURE: origin 404',
      jobState: 'FAILURE',
    };
    const running = apply({
      outcome: 'Progressing',
      reason: 'JobRunning',
      message: 'm',
      jobState: 'STARTED',
    });
    expect(summary(apply(o, running))).toEqual([
      'Ready=False/JobFailed',
      'Stalled=True/JobFailed',
      'Succeeded=False/JobFailed',
    ]);
    expect(preheatPhase(o)).toBe('FAILURE');
  });

  it('manager unreachable: Reconciling with the cause, phase UNREACHABLE (the STATE column is not empty)', () => {
    const view = describeFailure(
      managerError('retryable', 503, 'service unavailable'),
      'create the preheat job',
    );
    const o: PreheatObservation = { outcome: 'Progressing', reason: view.reason, message: view.message };
    expect(view.blocked).toBeUndefined();
    expect(preheatPhase(o)).toBe('UNREACHABLE');
    expect(getCondition(apply(o), 'Reconciling')).toMatchObject({
      status: 'True',
      reason: 'ManagerUnavailable',
      message: 'create the preheat job: manager create preheat job failed (HTTP 503): service unavailable',
    });
  });

  it('auth refused or a Secret missing: Stalled (needs a fix) but Succeeded stays open, phase BLOCKED', () => {
    for (const err of [
      managerError('auth', 401, 'unauthorized'),
      new SecretNotFoundError('Secret ns/manager-token not found'),
    ]) {
      const view = describeFailure(err, 'create the preheat job');
      expect(view.blocked).toBe(true);
      const o: PreheatObservation = { outcome: 'Blocked', reason: view.reason, message: view.message };
      const cs = apply(o);
      expect(getCondition(cs, 'Stalled')).toMatchObject({ status: 'True', reason: view.reason });
      expect(getCondition(cs, 'Ready')?.status).toBe('False');
      // Succeeded=False would make the controller stop for this generation; a fixed Secret must still work.
      expect(getCondition(cs, 'Succeeded')?.status).toBe('Unknown');
      expect(getCondition(cs, 'Reconciling')).toBeUndefined();
      expect(preheatPhase(o)).toBe('BLOCKED');
    }
  });

  it('invalid spec: Stalled with reason InvalidSpec, phase BLOCKED', () => {
    const o: PreheatObservation = {
      outcome: 'Failed',
      reason: 'InvalidSpec',
      message: 'spec.url: Invalid URL',
    };
    expect(getCondition(apply(o), 'Stalled')).toMatchObject({ status: 'True', reason: 'InvalidSpec' });
    expect(preheatPhase(o)).toBe('BLOCKED');
    // Refused before a job ran is not a job FAILURE either.
    expect(
      preheatPhase({ outcome: 'Failed', reason: 'ManagerNotConfigured', message: 'no --manager-url' }),
    ).toBe('BLOCKED');
  });

  it("the manager's job rate limit (429 without Retry-After, as the real one answers) is its pace, not a failure", () => {
    const view = describeFailure(
      managerError('retryable', 429, 'rate limit exceeded'),
      'create the preheat job',
    );
    expect(view).toMatchObject({
      reason: 'ManagerRateLimited',
      quiet: true,
      final: false,
      retry: { kind: 'after', ms: RATE_LIMITED_RETRY_MS },
    });
    expect(view.message).toMatch(
      /rate limit exceeded \(the manager's job rate limit: waiting for its turn\)/,
    );
    const o: PreheatObservation = {
      outcome: failureOutcome(view),
      reason: view.reason,
      message: view.message,
    };
    // The STATE column says the job waits (PENDING), not that the manager is gone (UNREACHABLE).
    expect(preheatPhase(o)).toBe('PENDING');
    expect(getCondition(apply(o), 'Stalled')).toBeUndefined();
    // Other retryable answers stay loud.
    expect(describeFailure(managerError('retryable', 503, 'x'), 'a').quiet).toBeUndefined();
  });

  it('every reason the failure table can produce is distinct per cause and CamelCase', () => {
    const reasons = new Set(
      [
        managerError('auth', 401, 'x'),
        managerError('terminal', 422, 'x'),
        managerError('retryable', 429, 'x'),
        managerError('retryable', 502, 'x'),
        managerError('notFound', 404, 'scheduler cluster 9 not found'),
      ].map((e) => describeFailure(e, 'a').reason),
    );
    expect(reasons.size).toBe(5);
  });

  it("sets only the kind's own condition types and reasons (others do not compile)", () => {
    const s = withPreheatConditions(empty, 5, [
      { type: 'Succeeded', status: 'False', reason: 'InvalidJobArgs', message: 'm' },
      { type: 'Stalled', absent: true },
    ]);
    expect(s.observedGeneration).toBe(5);
    expect(summary(s.conditions!)).toEqual(['Succeeded=False/InvalidJobArgs']);
    // Checked by tsc (npm run typecheck), not run: each line must stay a type error.
    const misspelt = () => [
      // @ts-expect-error -- Degraded is a ServedModel condition, not a ModelPreheat one
      withPreheatConditions({}, 1, [{ type: 'Degraded', status: 'True', reason: 'JobFailed' }]),
      // @ts-expect-error -- AllReplicasReady is a ServedModel reason
      withPreheatConditions({}, 1, [{ type: 'Ready', status: 'True', reason: 'AllReplicasReady' }]),
    ];
    expect(typeof misspelt).toBe('function');
  });
});
