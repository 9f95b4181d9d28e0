import { describe, expect, it } from 'vitest';
import {
  deletingConditions,
  invalidSpecConditions,
  servedModelConditions,
  withServedModelConditions,
  type ReplicaFailure,
  type ServedModelObservation,
} from '../../src/controllers/servedmodel/conditions.ts';
import { applyConditions, getCondition } from '../../src/runtime/conditions.ts';
import type { Condition } from '../../src/api/index.ts';
import { closedGate, gateClosedBy } from '../fixtures/gates.ts';

const base: ServedModelObservation = {
  modelName: 'resnet',
  serviceName: 'torchserve',
  serviceFound: true,
  gate: { state: 'none' },
  ready: 0,
  desired: 3,
  failures: [],
};
const conditions = (o: Partial<ServedModelObservation>, before?: Condition[]) =>
  applyConditions(before, servedModelConditions({ ...base, ...o }), 4, new Date('2026-01-01T00:00:00Z'));
const get = (cs: Condition[], type: string) => getCondition(cs, type);
/** Replica `replica` failing for `reason`; `retryable` when the next pass tries it again. */
const failing = (replica: string, reason: ReplicaFailure['reason'], message: string, retryable: boolean) => ({
  replica,
  reason,
  message,
  retryable,
});
const empty: { observedGeneration?: number; conditions?: Condition[] } = {};
/** Ready/Reconciling/Stalled as one string: the three conditions kstatus and `peerload wait` read. */
const health = (cs: Condition[]) =>
  ['Ready', 'Reconciling', 'Stalled']
    .map((t) => get(cs, t))
    .map((c, i) => `${['Ready', 'Reconciling', 'Stalled'][i]}=${c ? `${c.status}/${c.reason}` : '-'}`)
    .join(' ');

describe('ServedModel conditions', () => {
  it('all replicas ready: Ready True; Reconciling and Stalled removed', () => {
    const progressing = conditions({ ready: 1 });
    const cs = conditions({ ready: 3 }, progressing);
    expect(health(cs)).toBe('Ready=True/AllReplicasReady Reconciling=- Stalled=-');
    expect(get(cs, 'Ready')!.message).toBe('resnet is ready on 3/3 replica(s)');
    expect(get(cs, 'Degraded')).toMatchObject({ status: 'False', reason: 'NoFailures' });
    expect(cs.every((c) => c.observedGeneration === 4)).toBe(true);
  });

  describe('a scale-out (Ready was True for the generation, replicas added)', () => {
    it('Ready stays True and Reconciling says ScalingOut while every replica that had the model has it', () => {
      const cs = conditions({ ready: 250, desired: 270, wasReady: true });
      expect(health(cs)).toBe('Ready=True/ScalingOut Reconciling=True/ScalingOut Stalled=-');
      expect(get(cs, 'Ready')!.message).toBe(
        'resnet is ready on 250/270 replica(s); 20 replica(s) being added',
      );
      expect(get(cs, 'Degraded')).toMatchObject({ status: 'False', reason: 'NoFailures' });
    });

    it("new replicas waiting for their node's preheat are on their way too", () => {
      const gate = gateClosedBy(
        'resnet-preheat',
        'PreheatInProgress',
        "20 of 270 replica(s) waiting for their node's preheat",
        false,
      );
      const cs = conditions({ ready: 250, desired: 270, wasReady: true, gate });
      expect(health(cs)).toBe('Ready=True/ScalingOut Reconciling=True/ScalingOut Stalled=-');
      expect(get(cs, 'Preheated')).toMatchObject({ status: 'Unknown', reason: 'PreheatInProgress' });
    });

    it('a replica that lost the model turns Ready False', () => {
      const cs = conditions({ ready: 249, desired: 270, wasReady: true, lost: 1 });
      expect(health(cs)).toBe('Ready=False/Progressing Reconciling=True/Progressing Stalled=-');
    });

    it('a failing replica (a new one included) turns Ready False, naming it', () => {
      const failures = [failing('ts-270', 'ModelServerUnavailable', 'refused', true)] as const;
      const cs = conditions({ ready: 250, desired: 270, wasReady: true, failures: [...failures] });
      expect(health(cs)).toBe(
        'Ready=False/ModelServerUnavailable Reconciling=True/ModelServerUnavailable Stalled=-',
      );
    });

    it('not a scale-out: the first rollout, none ready, or a preheat that failed for good', () => {
      expect(health(conditions({ ready: 250, desired: 270 }))).toBe(
        'Ready=False/Progressing Reconciling=True/Progressing Stalled=-',
      );
      expect(health(conditions({ ready: 0, desired: 3, wasReady: true }))).toBe(
        'Ready=False/Progressing Reconciling=True/Progressing Stalled=-',
      );
      const failed = gateClosedBy('p', 'PreheatFailed', 'ModelPreheat p failed', true);
      expect(health(conditions({ ready: 2, desired: 3, wasReady: true, gate: failed }))).toBe(
        'Ready=False/PreheatFailed Reconciling=- Stalled=True/PreheatFailed',
      );
    });
  });

  it('rolling out without failures: Reconciling/Progressing', () => {
    expect(health(conditions({ ready: 1 }))).toBe(
      'Ready=False/Progressing Reconciling=True/Progressing Stalled=-',
    );
  });

  it('a dead replica is named as such (not "Progressing") and is retried: Reconciling, Degraded', () => {
    const cs = conditions({
      ready: 2,
      failures: [failing('ts-2', 'ModelServerUnavailable', 'connect ECONNREFUSED', true)],
    });
    expect(health(cs)).toBe(
      'Ready=False/ModelServerUnavailable Reconciling=True/ModelServerUnavailable Stalled=-',
    );
    expect(get(cs, 'Ready')!.message).toBe(
      'resnet is ready on 2/3 replica(s); 1 of 3 replica(s) failing: ts-2: connect ECONNREFUSED',
    );
    expect(get(cs, 'Degraded')).toMatchObject({ status: 'True', reason: 'ModelServerUnavailable' });
  });

  it('auth refused on every failing replica: Stalled (a key must change)', () => {
    const cs = conditions({
      ready: 1,
      failures: [
        failing('ts-1', 'ModelServerAuthFailed', 'HTTP 401', false),
        failing('ts-2', 'ModelServerAuthFailed', 'HTTP 401', false),
      ],
    });
    expect(health(cs)).toBe(
      'Ready=False/ModelServerAuthFailed Reconciling=- Stalled=True/ModelServerAuthFailed',
    );
  });

  it('mixed failures, one retryable: not Stalled, reason ReplicaFailures', () => {
    const cs = conditions({
      ready: 1,
      failures: [
        failing('ts-1', 'ModelServerAuthFailed', 'HTTP 401', false),
        failing('ts-2', 'ModelServerUnavailable', 'timeout', true),
      ],
    });
    expect(health(cs)).toBe('Ready=False/ReplicaFailures Reconciling=True/ReplicaFailures Stalled=-');
  });

  it('preheat failed after its retries: Stalled/PreheatFailed, not WaitingForPreheat', () => {
    const cs = conditions({
      gate: gateClosedBy(
        'resnet-preheat',
        'PreheatFailed',
        'ModelPreheat resnet-preheat failed: preheat failed after 4 attempt(s)',
        true,
      ),
    });
    expect(health(cs)).toBe('Ready=False/PreheatFailed Reconciling=- Stalled=True/PreheatFailed');
    expect(get(cs, 'Preheated')).toMatchObject({ status: 'False', reason: 'PreheatFailed' });
  });

  it('a stalled (not yet final) preheat stalls the ServedModel too', () => {
    const cs = conditions({
      gate: gateClosedBy(
        'p',
        'PreheatStalled',
        'ModelPreheat p is stalled: manager refused the token',
        false,
      ),
    });
    expect(health(cs)).toBe('Ready=False/PreheatStalled Reconciling=- Stalled=True/PreheatStalled');
    expect(get(cs, 'Preheated')?.status).toBe('Unknown');
  });

  it('preheat running: Reconciling/WaitingForPreheat', () => {
    const cs = conditions({
      gate: closedGate,
    });
    expect(health(cs)).toBe('Ready=False/WaitingForPreheat Reconciling=True/WaitingForPreheat Stalled=-');
  });

  it('Service missing: Stalled/ServiceNotFound naming the Service and the fix', () => {
    const cs = conditions({ desired: 0, serviceFound: false });
    expect(health(cs)).toBe('Ready=False/ServiceNotFound Reconciling=- Stalled=True/ServiceNotFound');
    expect(get(cs, 'Stalled')!.message).toContain('Service torchserve not found');
    expect(get(cs, 'Stalled')!.message).toContain('spec.modelServer.service.name');
  });

  it('Service without the port: Stalled/ServicePortNotFound', () => {
    const cs = conditions({
      desired: 0,
      discoveryProblem: 'the Service has no port "mgmt" (its ports: http=8080)',
    });
    expect(health(cs)).toBe('Ready=False/ServicePortNotFound Reconciling=- Stalled=True/ServicePortNotFound');
  });

  it('Service with no ready pod yet: Reconciling/NoReadyReplicas (pods may come)', () => {
    const cs = conditions({ desired: 0 });
    expect(health(cs)).toBe('Ready=False/NoReadyReplicas Reconciling=True/NoReadyReplicas Stalled=-');
    expect(get(cs, 'Ready')!.message).toBe('no ready endpoint behind Service torchserve');
  });

  it('invalid spec: Stalled/InvalidSpec', () => {
    const cs = applyConditions(
      conditions({ ready: 1 }),
      invalidSpecConditions('spec.workers.max: must be >= min'),
      5,
    );
    expect(health(cs)).toBe('Ready=False/InvalidSpec Reconciling=- Stalled=True/InvalidSpec');
    expect(get(cs, 'Stalled')).toMatchObject({
      observedGeneration: 5,
      message: 'spec.workers.max: must be >= min',
    });
  });

  it('never leaves Ready False without Reconciling or Stalled (kstatus would read it as Current)', () => {
    const gates: ServedModelObservation['gate'][] = [
      { state: 'none' },
      { state: 'open', preheatName: 'p', message: 'ok' },
      gateClosedBy('p', 'PreheatNotFound', 'm', false),
      gateClosedBy('p', 'PreheatConflict', 'm', true),
    ];
    for (const gate of gates)
      for (const desired of [0, 2])
        for (const ready of [0, 2].filter((r) => r <= desired))
          for (const serviceFound of [true, false])
            for (const retryable of [undefined, true, false]) {
              const failures =
                retryable === undefined
                  ? []
                  : [{ replica: 'a', reason: 'ModelNotFound' as const, message: 'm', retryable }];
              const cs = conditions({ gate, desired, ready, serviceFound, failures });
              const ready_ = get(cs, 'Ready')!;
              const open = get(cs, 'Reconciling')?.status === 'True' || get(cs, 'Stalled')?.status === 'True';
              expect(ready_.status === 'True' || open, JSON.stringify({ gate, desired, ready })).toBe(true);
              expect(ready_.status === 'True' && open).toBe(false);
            }
  });

  it('deleting: Ready False and Reconciling True, both saying why', () => {
    const cs = applyConditions([], deletingConditions('deleting: waiting for 2 registration(s)'), 4);
    expect(health(cs)).toBe('Ready=False/Deleting Reconciling=True/Deleting Stalled=-');
    expect(get(cs, 'Ready')!.message).toBe('deleting: waiting for 2 registration(s)');
  });

  it("sets only the kind's own condition types and reasons (others do not compile)", () => {
    const s = withServedModelConditions(empty, 3, [
      { type: 'Ready', status: 'False', reason: 'PreheatStalled', message: 'm' },
      { type: 'Degraded', status: 'True', reason: 'VersionMismatch', message: 'm' },
    ]);
    expect(s.observedGeneration).toBe(3);
    expect(s.conditions!.map((c) => `${c.type}/${c.reason}/${c.observedGeneration}`)).toEqual([
      'Ready/PreheatStalled/3',
      'Degraded/VersionMismatch/3',
    ]);
    // Checked by tsc (npm run typecheck), not run: each line must stay a type error.
    const misspelt = () => [
      // @ts-expect-error -- Succeeded is a ModelPreheat condition, not a ServedModel one
      withServedModelConditions({}, 1, [{ type: 'Succeeded', status: 'True', reason: 'AllReplicasReady' }]),
      // @ts-expect-error -- JobSucceeded is a ModelPreheat reason
      withServedModelConditions({}, 1, [{ type: 'Ready', status: 'True', reason: 'JobSucceeded' }]),
      // @ts-expect-error -- a bare string is no reason
      withServedModelConditions({}, 1, [{ type: 'Ready', status: 'True', reason: 'Whatever' as string }]),
    ];
    expect(typeof misspelt).toBe('function');
  });
});
