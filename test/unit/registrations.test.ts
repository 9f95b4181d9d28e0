import { describe, expect, it } from 'vitest';
import { RegistrationRunner, type RegistrationId } from '../../src/controllers/servedmodel/registrations.ts';

/** A registration the test ends by hand. */
function gate() {
  let open!: (v: string) => void;
  let fail!: (e: Error) => void;
  const done = new Promise<string>((res, rej) => {
    open = res;
    fail = rej;
  });
  return { done, open, fail };
}
const tick = () => new Promise((r) => setImmediate(r));
const id = (uid: string, replica: string, version = 'v1'): RegistrationId => ({
  uid,
  owner: `ns/${uid}`,
  replica,
  version,
});

describe('RegistrationRunner', () => {
  it('counts the failures in a row across settles (the back-off of a retry), from 1 again after a success or a prune', async () => {
    const runner = new RegistrationRunner<string>({ global: 10, onChange: () => {} });
    const outcomes = ['fail', 'fail', 'ok', 'fail', 'fail'];
    const run = () => (outcomes.shift() === 'ok' ? Promise.resolve('ok') : Promise.reject(new Error('bad')));
    const attempt = async () => {
      runner.ensure(id('u', 'r'), 1, run);
      await tick();
      const state = runner.peek(id('u', 'r'));
      runner.settle(id('u', 'r'));
      return state?.state === 'failed' ? state.failures : state?.state;
    };
    expect(await attempt()).toBe(1);
    expect(await attempt()).toBe(2);
    expect(await attempt()).toBe('done');
    expect(await attempt()).toBe(1);
    runner.prune('u', new Set(['other']));
    expect(await attempt()).toBe(1);
  });

  it("keeps slots for another namespace while one namespace's long registrations hold the rest", async () => {
    const runner = new RegistrationRunner<string>({ global: 4, onChange: () => {} });
    const started: string[] = [];
    const start = (owner: string, replica: string) =>
      runner.ensure({ uid: owner, owner, replica, version: 'v1' }, 10, () => {
        started.push(`${owner}/${replica}`);
        return gate().done; // never ends: a large download
      });
    for (let i = 0; i < 20; i++) start(`team-a/model-${i}`, 'r');
    await tick();
    expect(runner.inFlight).toBe(3); // all but a quarter of 4
    start('team-b/small', 'r');
    await tick();
    expect(started).toContain('team-b/small/r');
    expect(
      runner.peek({ uid: 'team-b/small', owner: 'team-b/small', replica: 'r', version: 'v1' }),
    ).toMatchObject({ state: 'running', phase: 'Downloading' });
  });

  it('runs at most perOwner of one owner and global over all; the rest wait in Pending, first come first served', async () => {
    const changes: string[] = [];
    const runner = new RegistrationRunner<string>({
      global: 3,
      perNamespace: 3,
      onChange: (o) => changes.push(o),
    });
    const gates = new Map<string, ReturnType<typeof gate>>();
    const start = (i: RegistrationId) =>
      runner.ensure(i, 2, () => {
        const g = gate();
        gates.set(`${i.uid}/${i.replica}`, g);
        return g.done;
      });
    for (const r of ['a', 'b', 'c']) start(id('one', r));
    for (const r of ['a', 'b']) start(id('two', r));
    expect(runner.inFlight).toBe(3);
    expect([...gates.keys()]).toEqual(['one/a', 'one/b', 'two/a']);
    expect(runner.peek(id('one', 'c'))).toMatchObject({ state: 'running', phase: 'Pending' });
    expect(runner.peek(id('two', 'b'))).toMatchObject({ state: 'running', phase: 'Pending' });
    expect(runner.peek(id('one', 'a'))).toMatchObject({ state: 'running', phase: 'Downloading' });

    gates.get('one/a')!.open('registered');
    await tick();
    // one/c was first in line and one has a free slot again.
    expect([...gates.keys()]).toEqual(['one/a', 'one/b', 'two/a', 'one/c']);
    expect(runner.peek(id('one', 'a'))).toMatchObject({ state: 'done', result: 'registered' });
    expect(changes).toContain('ns/one');
  });

  it('starts a registration once however often it is asked, keeps the result until settled, then starts anew', async () => {
    const runner = new RegistrationRunner<string>({ global: 10, onChange: () => {} });
    let runs = 0;
    const g = gate();
    const run = () => {
      runs++;
      return g.done;
    };
    runner.ensure(id('u', 'r'), 1, run);
    runner.ensure(id('u', 'r'), 1, run);
    expect(runs).toBe(1);
    g.fail(new Error('refused'));
    await tick();
    const state = runner.ensure(id('u', 'r'), 1, run);
    expect(state).toMatchObject({ state: 'failed' });
    expect(runs).toBe(1);
    // Reported (its outcome acted on) but kept: still there, marked, and not started again.
    runner.report(id('u', 'r'));
    expect(runner.peek(id('u', 'r'))).toMatchObject({ state: 'failed', reported: true });
    runner.ensure(id('u', 'r'), 1, run);
    expect(runs).toBe(1);
    runner.settle(id('u', 'r'));
    runner.ensure(id('u', 'r'), 1, run);
    expect(runs).toBe(2);
    // A running registration is neither reported nor settled.
    runner.report(id('u', 'r'));
    runner.settle(id('u', 'r'));
    expect(runner.peek(id('u', 'r'))).toMatchObject({ state: 'running' });
    expect(runner.peek(id('u', 'r'))).not.toHaveProperty('reported');
  });

  it('prune aborts the registrations of replicas (or versions) no longer wanted and frees their slots', async () => {
    const runner = new RegistrationRunner<string>({ global: 1, onChange: () => {} });
    let aborted = false;
    runner.ensure(id('u', 'gone'), 1, (signal) => {
      signal.addEventListener('abort', () => (aborted = true));
      return new Promise<string>((_, rej) => signal.addEventListener('abort', () => rej(signal.reason)));
    });
    runner.ensure(id('u', 'kept', 'v2'), 1, () => Promise.resolve('ok'));
    expect(runner.peek(id('u', 'kept', 'v2'))).toMatchObject({ phase: 'Pending' });
    runner.prune('u', new Set(['kept']), 'v2');
    expect(aborted).toBe(true);
    expect(runner.peek(id('u', 'gone'))).toBeUndefined();
    await tick();
    expect(runner.peek(id('u', 'kept', 'v2'))).toMatchObject({ state: 'done', result: 'ok' });
  });

  it('drain (deletion): drops waiting and ended registrations, lets the running one end without aborting it', async () => {
    const changes: string[] = [];
    const runner = new RegistrationRunner<string>({ global: 10, onChange: (o) => changes.push(o) });
    const g = gate();
    let signals: { signal: AbortSignal; stopping: AbortSignal } | undefined;
    runner.ensure(id('a', 'r1'), 1, (signal, _progress, stopping) => {
      signals = { signal, stopping };
      return g.done;
    });
    let queuedRan = false;
    runner.ensure(id('a', 'r2'), 1, async () => {
      queuedRan = true;
      return 'x';
    });
    runner.ensure(id('b', 'r1'), 1, () => new Promise<string>(() => {}));
    await tick();
    expect(runner.peek(id('a', 'r2'))).toMatchObject({ state: 'running', phase: 'Pending' });

    expect(runner.drain('a')).toBe(1);
    expect(signals!.stopping.aborted).toBe(true);
    expect(signals!.signal.aborted).toBe(false); // the POST the model server took goes on
    expect(runner.peek(id('a', 'r2'))).toBeUndefined(); // never sent: dropped
    expect(runner.peek(id('b', 'r1'))?.state).toBe('running'); // other owners untouched

    g.open('registered');
    await tick();
    expect(queuedRan).toBe(false);
    expect(changes).toContain('ns/a'); // its end wakes the deletion
    expect(runner.peek(id('a', 'r1'))).toMatchObject({ state: 'done', result: 'registered' });
    expect(runner.drain('a')).toBe(0);
    expect(runner.peek(id('a', 'r1'))).toBeUndefined();
  });
});
