/**
 * A Staged rollout's canary (spec.rollout.canary), decision by decision (src/controllers/servedmodel/rollout.ts):
 * which replicas are canaries, the hold and its probes, the promotion, a failed probe rolling back before any other
 * replica switched, an operator restarted during the canary; and the probe's matcher (canary.ts).
 */
import { describe, expect, it } from 'vitest';
import { ServedModelSpec, type RolloutStatus } from '../../src/api/index.ts';
import { mismatch, valueAt } from '../../src/controllers/servedmodel/canary.ts';
import {
  CANARY_PROBE_PERIOD_MS,
  afterProbe,
  afterSwitch,
  canaryCount,
  decideRollout,
  rolloutChanged,
  rolloutWakeMs,
  type CanaryInput,
  type ObservedReplica,
  type RolloutInput,
} from '../../src/controllers/servedmodel/rollout.ts';
import { T0, iso, kinds, recorded, rep, rolloutInput, staged, switched } from '../support/rollout-cases.ts';

const HOLD = 30_000;
const back = (n: string) => rep(n, '1', ['1']);

const one: CanaryInput = { replicas: 1, holdMs: HOLD };

/** A pass with a one-replica canary unless `more` says. */
const input = (replicas: ObservedReplica[], more: Partial<RolloutInput> = {}): RolloutInput =>
  rolloutInput(replicas, { canary: one, ...more });

/** Every replica staged, last progress 1 s before T0, unless `more` says. */
const prior = (phase: RolloutStatus['phase'], more: Partial<RolloutStatus> = {}): RolloutStatus =>
  recorded(phase, { staged: 3, lastProgressTime: iso(T0 - 1_000), ...more });

const ok = (label: string) => ({ label, ok: true, detail: '' });

/** The status of a canary `a` switched and held until `holdUntil`. */
const holding = (holdUntil: number, more: Partial<RolloutStatus> = {}) =>
  prior('Canary', {
    switched: 1,
    canary: { replicas: ['a'], switched: 1, holdUntil: iso(holdUntil), passes: 0, failures: 0 },
    ...more,
  });

describe('the canary of a Staged rollout', () => {
  it('counts canaries from replicas or percent, at least one and at most all', () => {
    expect(canaryCount({ replicas: 2, holdMs: 0 }, 10)).toBe(2);
    expect(canaryCount({ replicas: 5, holdMs: 0 }, 3)).toBe(3);
    expect(canaryCount({ percent: 25, holdMs: 0 }, 10)).toBe(3);
    expect(canaryCount({ percent: 1, holdMs: 0 }, 10)).toBe(1);
  });

  it('switches only the canaries once every replica is staged; the others hold', () => {
    const d = decideRollout(input([staged('a'), staged('b'), staged('c')], { prior: prior('Staging') }));
    expect(d.status).toMatchObject({ phase: 'Canary', canary: { replicas: ['a'], switched: 0 } });
    expect(d.status?.canary?.holdUntil).toBeUndefined();
    expect(d.status?.switchStartTime).toBeUndefined();
    expect(kinds(d)).toEqual(['switch', 'hold', 'hold']);
    expect(d.events).toEqual([expect.objectContaining({ reason: 'RolloutCanary' })]);
    // The canaries' switch is counted on the canary, not as the switch of every replica.
    const after = afterSwitch(d.status!, 1, { start: T0, end: T0 + 5 });
    expect(after).toMatchObject({ phase: 'Canary', switched: 1, canary: { switched: 1 } });
    expect(after.switchWindowMs).toBeUndefined();
  });

  it('takes percent of the serving replicas, and does not start while one is still staging', () => {
    const half = { percent: 50, holdMs: HOLD };
    const staging = decideRollout(
      input([staged('a'), staged('b'), back('c')], { canary: half, prior: prior('Staging') }),
    );
    expect(staging.status?.phase).toBe('Staging');
    const d = decideRollout(
      input([staged('a'), staged('b'), staged('c'), staged('d')], { canary: half, prior: prior('Staging') }),
    );
    expect(d.status?.canary?.replicas).toEqual(['a', 'b']);
    expect(kinds(d)).toEqual(['switch', 'switch', 'hold', 'hold']);
  });

  it('starts the hold once every canary serves the new version, and probes the canaries only', () => {
    const p = prior('Canary', {
      switched: 1,
      canary: { replicas: ['a'], switched: 1, passes: 0, failures: 0 },
    });
    const d = decideRollout(input([switched('a'), staged('b'), staged('c')], { prior: p }));
    expect(d.status).toMatchObject({ phase: 'Canary', canary: { holdUntil: iso(T0 + HOLD) } });
    expect(kinds(d)).toEqual(['probe', 'hold', 'hold']);
    expect(d.events).toEqual([]);
  });

  it('keeps the canary while its probes pass during the hold, and counts them as progress', () => {
    const d = decideRollout(input([switched('a'), staged('b'), staged('c')], { prior: holding(T0 + HOLD) }));
    const after = afterProbe(d.status!, [ok('a')], T0 + 1_000, false);
    expect(after.status).toMatchObject({
      phase: 'Canary',
      canary: { passes: 1, failures: 0, lastProbeTime: iso(T0 + 1_000) },
      lastProgressTime: iso(T0 + 1_000),
    });
    expect(after.status.canary?.promoted).toBeUndefined();
    expect(after.events).toEqual([]);
  });

  it('promotes once the hold is over and every probe passes: the others switch at once, the window is theirs', () => {
    const d = decideRollout(
      input([switched('a'), staged('b'), staged('c')], { prior: holding(T0 - 1), now: T0 }),
    );
    const promoted = afterProbe(d.status!, [ok('a')], T0, false);
    expect(promoted.status).toMatchObject({ phase: 'Switching', canary: { promoted: true, passes: 1 } });
    expect(promoted.events).toEqual([
      expect.objectContaining({ type: 'Normal', reason: 'RolloutSwitching' }),
    ]);
    const next = decideRollout(
      input([switched('a'), staged('b'), staged('c')], { prior: promoted.status, now: T0 + 100 }),
    );
    expect(next.status?.phase).toBe('Switching');
    expect(kinds(next)).toEqual(['hold', 'switch', 'switch']);
    const after = afterSwitch(next.status!, 3, { start: T0 + 100, end: T0 + 130 });
    expect(after).toMatchObject({ phase: 'Retiring', switchWindowMs: 30 });
  });

  it('does not promote while paused: the probes go on', () => {
    const d = decideRollout(
      input([switched('a'), staged('b')], { prior: holding(T0 - 1, { replicas: 2 }), paused: true }),
    );
    expect(d.status?.phase).toBe('Canary');
    expect(kinds(d)).toEqual(['probe', 'hold']);
    expect(afterProbe(d.status!, [ok('a')], T0, true).status.phase).toBe('Canary');
  });

  it('rolls back on a failed probe before any other replica switched, saying what it got', () => {
    const d = decideRollout(input([switched('a'), staged('b'), staged('c')], { prior: holding(T0 + HOLD) }));
    const failed = afterProbe(
      d.status!,
      [{ label: 'a', ok: false, detail: 'got outputs.0.data.0 = "7", expected "3"' }],
      T0,
      false,
    );
    expect(failed.status).toMatchObject({
      phase: 'RollingBack',
      reason: 'CanaryFailed',
      canary: { failures: 1, passes: 0 },
    });
    expect(failed.status.message).toContain(
      'canary a failed its probe: got outputs.0.data.0 = "7", expected "3"',
    );
    expect(failed.status.message).toContain('every replica goes back to 1');
    expect(failed.events).toEqual([
      expect.objectContaining({ type: 'Warning', reason: 'RolloutRollingBack' }),
    ]);
    // The next pass: the canary goes back to 1, the others drop the staged 2; nobody switches to 2.
    const next = decideRollout(input([switched('a'), staged('b'), staged('c')], { prior: failed.status }));
    expect(next.actions).toEqual([
      { kind: 'rollback', to: '1' },
      { kind: 'rollback', to: '1' },
      { kind: 'rollback', to: '1' },
    ]);
    // Once put back, rolled back, and held there.
    const done = decideRollout(input([back('a'), back('b'), back('c')], { prior: next.status }));
    expect(done.status).toMatchObject({ phase: 'RolledBack', reason: 'CanaryFailed' });
    expect(kinds(done)).not.toContain('switch');
  });

  it('resumes a canary after a restart: the recorded canaries and hold are kept', () => {
    const p = holding(T0 + 10_000, {
      canary: { replicas: ['b'], switched: 1, holdUntil: iso(T0 + 10_000), passes: 4, failures: 0 },
    });
    const d = decideRollout(input([staged('a'), switched('b'), staged('c')], { prior: p }));
    expect(d.status?.canary).toMatchObject({ replicas: ['b'], holdUntil: iso(T0 + 10_000), passes: 4 });
    expect(kinds(d)).toEqual(['hold', 'probe', 'hold']);
  });

  it('replaces a canary that is gone, and starts the hold again once the new one serves v2', () => {
    // Canary a left (its pod went away); b, c and d remain, none switched.
    const d = decideRollout(
      input([staged('b'), staged('c'), staged('d')], { prior: holding(T0 + 1_000, { switched: 0 }) }),
    );
    expect(d.status?.canary).toMatchObject({ replicas: ['b'], switched: 0 });
    expect(d.status?.canary?.holdUntil).toBeUndefined();
    expect(kinds(d)).toEqual(['switch', 'hold', 'hold']);
    const next = decideRollout(
      input([switched('b'), staged('c'), staged('d')], {
        prior: afterSwitch(d.status!, 1, { start: T0, end: T0 }),
        now: T0 + 500,
      }),
    );
    expect(next.status?.canary?.holdUntil).toBe(iso(T0 + 500 + HOLD));
    expect(kinds(next)).toEqual(['probe', 'hold', 'hold']);
  });

  it('resumes a canary whose switch was not recorded: the switched replica is the canary, the others wait', () => {
    // Stopped after the canary's set-default, before status said Canary.
    const d = decideRollout(input([staged('a'), staged('b'), switched('c')], { prior: prior('Staging') }));
    expect(d.status).toMatchObject({ phase: 'Canary', canary: { replicas: ['c'], switched: 1 } });
    expect(kinds(d)).toEqual(['hold', 'hold', 'probe']);
    // And without any status at all.
    const lost = decideRollout(input([staged('a'), switched('b'), staged('c')]));
    expect(lost.status?.phase).toBe('Canary');
    expect(kinds(lost)).not.toContain('switch');
  });

  it('after a promotion a restart finishes the switch; more switched than canaries is a switch under way', () => {
    const d = decideRollout(input([switched('a'), switched('b'), staged('c')], { prior: prior('Staging') }));
    expect(d.status?.phase).toBe('Switching');
    expect(kinds(d)).toEqual(['hold', 'hold', 'switch']);
  });

  it('probes a single replica that is the only canary before it retires the old version', () => {
    const p = prior('Canary', {
      replicas: 1,
      switched: 1,
      canary: { replicas: ['a'], switched: 1, passes: 0, failures: 0 },
    });
    const d = decideRollout(input([switched('a')], { prior: p }));
    expect(d.status?.phase).toBe('Canary');
    expect(kinds(d)).toEqual(['probe']);
    const promoted = afterProbe(d.status!, [ok('a')], T0 + HOLD, false);
    const next = decideRollout(input([switched('a')], { prior: promoted.status, now: T0 + HOLD + 1 }));
    expect(next.status?.phase).toBe('Retiring');
    expect(kinds(next)).toEqual(['retire']);
  });

  it('looks again soon until the canaries switched, then every probe period and as the hold ends', () => {
    const switching = prior('Canary', { canary: { replicas: ['a'], switched: 0, passes: 0, failures: 0 } });
    expect(rolloutWakeMs(switching, 60_000, T0, 500)).toBe(500);
    expect(rolloutWakeMs(holding(T0 + HOLD), 60_000, T0, 500)).toBe(CANARY_PROBE_PERIOD_MS + 1);
    expect(rolloutWakeMs(holding(T0 + 1_000), 60_000, T0, 500)).toBe(1_001);
  });

  it("writes status now on a new phase or a change of the canary's record, not for counts the replicas say", () => {
    const h = holding(T0 + HOLD);
    expect(rolloutChanged(undefined, h)).toBe(true);
    expect(rolloutChanged(h, { ...h, staged: 2, lastProgressTime: iso(T0) })).toBe(false);
    expect(rolloutChanged(h, { ...h, canary: { ...h.canary!, passes: 1 } })).toBe(true);
    const started = prior('Canary', { canary: { replicas: ['a'], switched: 1, passes: 0, failures: 0 } });
    expect(rolloutChanged(started, h)).toBe(true);
    expect(rolloutChanged(h, { ...h, phase: 'Switching' })).toBe(true);
  });

  it('has no canary without spec.rollout.canary: every replica switches at once', () => {
    const d = decideRollout(
      input([staged('a'), staged('b')], { canary: undefined, prior: prior('Staging') }),
    );
    expect(kinds(d)).toEqual(['switch', 'switch']);
  });
});

describe("a canary probe's answer", () => {
  const answer = { outputs: [{ name: 'OUTPUT0', data: [3, 4] }], model_version: '2', ok: true };

  it('reads keys and indices joined by dots', () => {
    expect(valueAt(answer, 'outputs.0.data.1')).toBe(4);
    expect(valueAt(answer, 'outputs.0.name')).toBe('OUTPUT0');
    expect(valueAt(answer, 'outputs.1.name')).toBeUndefined();
    expect(valueAt(answer, 'outputs.x')).toBeUndefined();
    expect(valueAt(answer, 'constructor')).toBeUndefined();
  });

  it('passes when the status and every field match (strings as they are, other values as JSON)', () => {
    const expect_ = {
      status: 200,
      fields: [
        { path: 'outputs.0.data', equals: '[3,4]' },
        { path: 'model_version', equals: '2' },
        { path: 'ok', equals: 'true' },
      ],
    };
    expect(mismatch({ status: 200, json: answer }, expect_)).toBeUndefined();
  });

  it('says what it got against what was expected, bounded', () => {
    expect(mismatch({ status: 500, json: answer }, { status: 200 })).toBe('got HTTP 500, expected 200');
    expect(
      mismatch(
        { status: 200, json: answer },
        { status: 200, fields: [{ path: 'outputs.0.data.0', equals: '7' }] },
      ),
    ).toBe('got outputs.0.data.0 = "3", expected "7"');
    expect(
      mismatch({ status: 200, json: answer }, { status: 200, fields: [{ path: 'outputs.2', equals: '7' }] }),
    ).toBe('got no outputs.2 in the answer, expected "7"');
    expect(mismatch({ status: 200 }, { status: 200, fields: [{ path: 'a', equals: '7' }] })).toContain(
      'not JSON',
    );
    const long = mismatch(
      { status: 200, json: { a: 'x'.repeat(10_000) } },
      { status: 200, fields: [{ path: 'a', equals: 'y' }] },
    )!;
    expect(long.length).toBeLessThan(120);
  });

  it('checks the spec: the body is JSON text, a field is named by keys and indices', () => {
    const spec = (probe: unknown) =>
      ServedModelSpec.safeParse({
        modelName: 'm',
        fileName: 'm.mar',
        version: '2',
        modelServer: { service: { name: 'ts' } },
        rollout: { strategy: 'Staged', canary: { replicas: 1, probe } },
      });
    const bad = spec({ port: 8080, body: '{not json' });
    expect(bad.error?.issues.map((i) => [i.path.join('.'), i.message])).toEqual([
      ['rollout.canary.probe.body', 'must be JSON text'],
    ]);
    const good = spec({
      port: 8080,
      body: '{"data":[1]}',
      expect: { fields: [{ path: 'a.0', equals: '1' }] },
    });
    expect(good.error?.issues ?? []).toEqual([]);
    expect(good.data?.rollout.canary).toMatchObject({ holdSeconds: 60, probe: { expect: { status: 200 } } });
  });
});
