/**
 * The Staged rollout's decisions (src/controllers/servedmodel/rollout.ts), case by case: every phase and its
 * transitions, the rollback triggers (a load failure, the progress deadline), paused, a retry, and an operator
 * restarted at any point resuming from what the replicas report (with or without the status it last wrote).
 */
import { describe, expect, it } from 'vitest';
import {
  afterSwitch,
  attemptOf,
  rolloutWakeMs,
  decideRollout,
} from '../../src/controllers/servedmodel/rollout.ts';
import {
  T0,
  done,
  kinds,
  onV1,
  recorded,
  rep,
  rolloutInput,
  staged,
  switched,
} from '../support/rollout-cases.ts';

const DEADLINE = 60_000;
const input = rolloutInput;
const prior = recorded;

describe('a Staged rollout', () => {
  it('has nothing to do when no replica serves another version (a first registration): every replica converges', () => {
    const d = decideRollout(input([rep('a', undefined, []), rep('b', undefined, [])]));
    expect(d.status).toBeUndefined();
    expect(kinds(d)).toEqual(['converge', 'converge']);
    expect(d.events).toEqual([]);
  });

  it('starts by staging the new version on every serving replica; a replica without the model waits for the switch', () => {
    const d = decideRollout(input([onV1('a'), onV1('b'), rep('c', undefined, [])]));
    expect(d.status).toMatchObject({
      phase: 'Staging',
      version: '2',
      previousVersion: '1',
      replicas: 2,
      staged: 0,
    });
    expect(d.status?.startTime).toBe(new Date(T0).toISOString());
    expect(kinds(d)).toEqual(['stage', 'stage', 'hold']);
    expect(d.events).toEqual([expect.objectContaining({ type: 'Normal', reason: 'RolloutStaging' })]);
  });

  it('holds a staged replica while the others stage: no replica serves v2 before every replica has it ready', () => {
    const d = decideRollout(input([staged('a'), onV1('b'), staged('c')], { prior: prior('Staging') }));
    expect(d.status).toMatchObject({ phase: 'Staging', staged: 2, switched: 0 });
    expect(kinds(d)).toEqual(['hold', 'stage', 'hold']);
    expect(d.actions).not.toContainEqual({ kind: 'switch' });
    // Progress (a replica staged since the last pass) moves the deadline's clock.
    expect(d.status?.lastProgressTime).toBe(new Date(T0).toISOString());
    expect(d.events).toEqual([]);
  });

  it('switches every replica at once when every one has v2 ready', () => {
    const d = decideRollout(
      input([staged('a'), staged('b'), staged('c')], { prior: prior('Staging', { staged: 2 }) }),
    );
    expect(d.status).toMatchObject({
      phase: 'Switching',
      staged: 3,
      switchStartTime: new Date(T0).toISOString(),
    });
    expect(kinds(d)).toEqual(['switch', 'switch', 'switch']);
  });

  it('does not start the switch while a replica cannot be described', () => {
    const d = decideRollout(
      input([staged('a'), staged('b'), { ...onV1('c'), known: false, default: undefined, versions: [] }], {
        prior: prior('Staging', { staged: 2 }),
      }),
    );
    expect(d.status?.phase).toBe('Staging');
    expect(kinds(d)).not.toContain('switch');
  });

  it('records the window from the switch calls themselves, then retires the old version', () => {
    const switching = decideRollout(
      input([staged('a'), staged('b')], { prior: prior('Staging', { replicas: 2 }) }),
    );
    const after = afterSwitch(switching.status!, 2, { start: T0 + 5, end: T0 + 42 });
    expect(after).toMatchObject({ phase: 'Retiring', switched: 2, switchWindowMs: 37 });
    expect(after.switchEndTime).toBe(new Date(T0 + 42).toISOString());
    // One switch failed: still Switching, the next pass finishes it.
    expect(afterSwitch(switching.status!, 1, { start: T0 + 5, end: T0 + 42 }).phase).toBe('Switching');
    const retiring = decideRollout(input([switched('a'), switched('b')], { prior: after, now: T0 + 100 }));
    expect(retiring.status?.phase).toBe('Retiring');
    expect(retiring.status?.switchWindowMs).toBe(37);
    expect(kinds(retiring)).toEqual(['retire', 'retire']);
    const complete = decideRollout(input([done('a'), done('b')], { prior: retiring.status, now: T0 + 200 }));
    expect(complete.status).toMatchObject({ phase: 'Complete', switchWindowMs: 37 });
    expect(complete.status?.completionTime).toBe(new Date(T0 + 200).toISOString());
    expect(kinds(complete)).toEqual(['converge', 'converge']);
    expect(complete.events).toEqual([expect.objectContaining({ reason: 'RolloutComplete' })]);
    // Complete stays as it is.
    const again = decideRollout(input([done('a'), done('b')], { prior: complete.status, now: T0 + 900 }));
    expect(again.status).toBe(complete.status);
    expect(again.events).toEqual([]);
  });

  it('lets a replica that lost the model join after the switch, with the ordinary step', () => {
    const d = decideRollout(input([switched('a'), rep('b', undefined, [])], { prior: prior('Switching') }));
    expect(d.status?.phase).toBe('Retiring');
    expect(kinds(d)).toEqual(['retire', 'converge']);
  });
});

describe('paused', () => {
  it('holds every replica before the switch, and does not count the deadline', () => {
    const late = T0 + 10 * DEADLINE;
    const d = decideRollout(
      input([staged('a'), onV1('b')], { paused: true, now: late, prior: prior('Staging', { staged: 1 }) }),
    );
    expect(d.status?.phase).toBe('Paused');
    expect(kinds(d)).toEqual(['hold', 'hold']);
    expect(d.actions[1]).toMatchObject({ why: expect.stringMatching(/spec\.rollout\.paused/) });
    expect(d.status?.lastProgressTime).toBe(new Date(late).toISOString());
    // Every replica staged: still no switch while paused.
    expect(
      decideRollout(input([staged('a'), staged('b')], { paused: true, prior: d.status })).status?.phase,
    ).toBe('Paused');
    // Unpaused: goes on where it was.
    const resumed = decideRollout(input([staged('a'), onV1('b')], { prior: d.status, now: late + 1_000 }));
    expect(resumed.status?.phase).toBe('Staging');
    expect(kinds(resumed)).toEqual(['hold', 'stage']);
  });

  it('does not hold a switch under way: two versions served at once is what Staged avoids', () => {
    const d = decideRollout(input([switched('a'), staged('b')], { paused: true, prior: prior('Switching') }));
    expect(d.status?.phase).toBe('Switching');
    expect(kinds(d)).toEqual(['hold', 'switch']);
  });
});

describe('rollback', () => {
  it('a replica that cannot load v2 puts every replica back on v1 and unregisters v2', () => {
    const d = decideRollout(
      input([staged('a'), { ...onV1('b'), loadFailed: 'InvalidModelException: bad handler' }, onV1('c')], {
        prior: prior('Staging', { staged: 1 }),
      }),
    );
    expect(d.status).toMatchObject({ phase: 'RollingBack', reason: 'LoadFailed', previousVersion: '1' });
    expect(d.status?.message).toMatch(/^b could not load 2: InvalidModelException: bad handler/);
    expect(d.status?.message).toMatch(/peerload\.io\/retry-rollout/);
    expect(d.actions).toEqual([
      { kind: 'rollback', to: '1' },
      { kind: 'hold', why: expect.stringMatching(/rolled back to 1/) },
      { kind: 'hold', why: expect.stringMatching(/rolled back to 1/) },
    ]);
    expect(d.events).toEqual([expect.objectContaining({ type: 'Warning', reason: 'RolloutRollingBack' })]);
  });

  it('is RolledBack once no replica holds v2, and stays so: nothing is staged again for this try', () => {
    const rolling = prior('RollingBack', { reason: 'LoadFailed', message: 'b could not load 2' });
    const d = decideRollout(input([onV1('a'), onV1('b')], { prior: rolling }));
    expect(d.status).toMatchObject({ phase: 'RolledBack', reason: 'LoadFailed' });
    expect(d.status?.completionTime).toBe(new Date(T0).toISOString());
    expect(kinds(d)).toEqual(['hold', 'hold']);
    expect(d.events).toEqual([expect.objectContaining({ type: 'Warning', reason: 'RolloutRolledBack' })]);
    const later = decideRollout(input([onV1('a'), onV1('b')], { prior: d.status, now: T0 + 10 * DEADLINE }));
    expect(later.status?.phase).toBe('RolledBack');
    // The recorded message is kept as it is, pass after pass.
    expect(later.status?.message).toBe('b could not load 2');
    expect(kinds(later)).toEqual(['hold', 'hold']);
    expect(later.events).toEqual([]);
  });

  it('a new generation or a new retry annotation value tries again', () => {
    const rolledBack = prior('RolledBack', { reason: 'LoadFailed' });
    for (const next of [attemptOf(3, undefined), attemptOf(2, 'again')]) {
      const d = decideRollout(input([onV1('a'), onV1('b')], { prior: rolledBack, attempt: next }));
      expect(d.status).toMatchObject({ phase: 'Staging', attempt: next, staged: 0 });
      expect(d.status?.reason).toBeUndefined();
      expect(kinds(d)).toEqual(['stage', 'stage']);
    }
  });

  it('no progress within the deadline rolls back', () => {
    const p = prior('Staging', { staged: 1, lastProgressTime: new Date(T0 - DEADLINE - 1).toISOString() });
    const d = decideRollout(input([staged('a'), onV1('b')], { prior: p }));
    expect(d.status).toMatchObject({ phase: 'RollingBack', reason: 'ProgressDeadlineExceeded' });
    expect(d.status?.message).toMatch(/spec\.rollout\.progressDeadlineSeconds/);
    expect(kinds(d)).toEqual(['rollback', 'hold']);
    // Just within it: still staging.
    const within = { ...p, lastProgressTime: new Date(T0 - DEADLINE + 1).toISOString() };
    expect(decideRollout(input([staged('a'), onV1('b')], { prior: within })).status?.phase).toBe('Staging');
  });

  it('undoes a switch under way: a switched replica gets v1 back as its default', () => {
    const d = decideRollout(
      input([switched('a'), { ...onV1('b'), loadFailed: 'rejected' }], { prior: prior('Switching') }),
    );
    expect(d.status?.phase).toBe('RollingBack');
    expect(d.actions).toEqual([{ kind: 'rollback', to: '1' }, expect.objectContaining({ kind: 'hold' })]);
  });

  it('a switch that failed (a server that loads at the switch): every replica back, the placed files too', () => {
    // v2 placed everywhere (staged), loaded on a, its load failed on b: b still serves v1 with v2 placed.
    const d = decideRollout(
      input(
        [switched('a'), { ...staged('b'), switchFailed: 'version 2 is at UNAVAILABLE state' }, staged('c')],
        {
          prior: prior('Switching', { staged: 3, switched: 1 }),
        },
      ),
    );
    expect(d.status).toMatchObject({ phase: 'RollingBack', reason: 'LoadFailed' });
    expect(d.status?.message).toMatch(
      /^b could not load 2: version 2 is at UNAVAILABLE state; every replica goes/,
    );
    // a: v2 goes (v1 serves again); b and c: the placed v2 goes.
    expect(d.actions).toEqual([0, 1, 2].map(() => ({ kind: 'rollback', to: '1' })));
    expect(d.events).toEqual([expect.objectContaining({ type: 'Warning', reason: 'RolloutRollingBack' })]);
    // A staged replica with a stale registration failure and v2 ready is no failure: only a switch's is.
    const notFailed = decideRollout(
      input([staged('a'), { ...staged('b'), loadFailed: 'stale' }], { prior: prior('Staging') }),
    );
    expect(notFailed.status?.phase).toBe('Switching');
  });

  it('never leaves a replica without a version: one that no longer holds v1 keeps v2', () => {
    const d = decideRollout(
      input([rep('a', '2', ['2'], true), { ...onV1('b'), loadFailed: 'rejected' }], {
        prior: prior('Switching'),
      }),
    );
    expect(d.actions[0]).toEqual({
      kind: 'hold',
      why: expect.stringMatching(/cannot roll back: 1 is not registered/),
    });
    // Nothing else to put back.
    expect(d.status?.phase).toBe('RolledBack');
  });

  it('is too late once the old version is being retired: every replica serves v2', () => {
    const d = decideRollout(
      input([switched('a'), { ...switched('b'), loadFailed: 'stale' }], { prior: prior('Retiring') }),
    );
    expect(d.status?.phase).toBe('Retiring');
  });
});

describe('an operator restarted at any point', () => {
  it('mid-switch without the status it wrote: finishes the switch from what the replicas report', () => {
    // Killed after some set-defaults, before any status write of this try: status holds an older try.
    const old = prior('Complete', { version: '1', attempt: attemptOf(1, undefined) });
    const d = decideRollout(input([switched('a'), staged('b'), staged('c')], { prior: old }));
    expect(d.status).toMatchObject({ phase: 'Switching', previousVersion: '1', switched: 1, staged: 3 });
    expect(kinds(d)).toEqual(['hold', 'switch', 'switch']);
    // Never two defaults left: the decision does not stop half way, and no replica is asked to go back.
    expect(kinds(d)).not.toContain('rollback');
  });

  it('mid-switch with a replica that restarted and lost v2: stages it again, then switches it', () => {
    const d = decideRollout(input([switched('a'), onV1('b')], { prior: prior('Switching') }));
    expect(d.status?.phase).toBe('Switching');
    expect(kinds(d)).toEqual(['hold', 'stage']);
  });

  it('mid-rollback: goes on rolling back, from the status, even where a replica already went back', () => {
    const d = decideRollout(
      input([onV1('a'), switched('b')], {
        prior: prior('RollingBack', { reason: 'LoadFailed', message: 'x' }),
      }),
    );
    expect(d.status?.phase).toBe('RollingBack');
    expect(kinds(d)).toEqual(['hold', 'rollback']);
  });

  it('after the switch, before the retirement: retires, with the window from the recorded start', () => {
    const p = prior('Switching', { switchStartTime: new Date(T0 - 500).toISOString() });
    const d = decideRollout(input([switched('a'), switched('b')], { prior: p }));
    expect(d.status).toMatchObject({ phase: 'Retiring', switchWindowMs: 500 });
    expect(kinds(d)).toEqual(['retire', 'retire']);
  });

  it('mid-staging without status: stages on, taking the previous version from the replicas', () => {
    const d = decideRollout(input([staged('a'), onV1('b'), onV1('c')]));
    expect(d.status).toMatchObject({ phase: 'Staging', previousVersion: '1', staged: 1 });
    expect(kinds(d)).toEqual(['hold', 'stage', 'stage']);
  });
});

describe('rolloutWakeMs', () => {
  it('looks again soon while a step follows by itself, at the deadline while staging, never otherwise', () => {
    const s = prior('Staging', { lastProgressTime: new Date(T0).toISOString() });
    expect(rolloutWakeMs(s, DEADLINE, T0 + 10_000, 100)).toBe(50_001);
    for (const phase of ['Switching', 'Retiring', 'RollingBack'] as const)
      expect(rolloutWakeMs(prior(phase), DEADLINE, T0, 100), phase).toBe(100);
    for (const phase of ['Paused', 'Complete', 'RolledBack'] as const)
      expect(rolloutWakeMs(prior(phase), DEADLINE, T0, 100), phase).toBe(Infinity);
    expect(rolloutWakeMs(undefined, DEADLINE, T0, 100)).toBe(Infinity);
  });
});
