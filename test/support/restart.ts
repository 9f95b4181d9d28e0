/**
 * An operator restart as one replica sees it: the ServedModel controller's replica step (convergeReplica, with its
 * background registrations) run through a driver until the replica is Ready, then one step through a NEW driver
 * (what a restarted operator builds: no map, no pool, no token source of the old one) with the status the object
 * holds. A driver that keeps facts only in memory shows here as a replica that is not Ready, an Event, or a
 * registration started again.
 */
import { expect } from 'vitest';
import type { ReplicaStatus } from '../../src/api/index.ts';
import { RegistrationRunner, type RegistrationId } from '../../src/controllers/servedmodel/registrations.ts';
import {
  convergeReplica,
  registerAndStart,
  type ReplicaGoal,
  type ReplicaOutcome,
} from '../../src/controllers/servedmodel/replica.ts';
import type {
  ModelServerDriver,
  Registered,
  ReplicaAccess,
  ReplicaOwner,
  ReplicaRef,
} from '../../src/servers/driver.ts';

export interface RestartCase {
  owner: ReplicaOwner;
  access: ReplicaAccess;
  replica: ReplicaRef;
  goal: ReplicaGoal;
}

/** Steps of one operator's life: its own driver and registration runner. */
function operator(driver: ModelServerDriver, c: RestartCase) {
  const runner = new RegistrationRunner<Registered>({ global: 4, onChange: () => undefined });
  const server = driver.replica(c.owner, c.access, c.replica);
  const id: RegistrationId = {
    uid: c.owner.uid,
    owner: `${c.owner.namespace}/sm`,
    replica: c.replica.endpoint,
    version: `${c.goal.version ?? ''}|${c.goal.fileName}`,
  };
  let started = 0;
  const registration = {
    peek: () => runner.peek(id),
    start: () => {
      started++;
      return runner.ensure(id, 1, (signal, progress, stopping) =>
        registerAndStart(server, c.goal, { signal, progress, stopping }),
      );
    },
  };
  const step = (previous: ReplicaStatus | undefined) =>
    convergeReplica(server, c.replica, c.goal, previous, {
      mayRegister: true,
      signal: AbortSignal.timeout(30_000),
      registration,
      failure: (err) => driver.failure(err),
    });
  return { step, started: () => started, settle: () => runner.settle(id) };
}

/**
 * Steps the replica through `before` until it is Ready (settling each ended registration as the reconciler does
 * once status holds it), then once through `after`; returns that step's outcome and whether it started a
 * registration.
 */
export async function acrossRestart(
  before: ModelServerDriver,
  after: ModelServerDriver,
  c: RestartCase,
): Promise<{ ready: ReplicaStatus; outcome: ReplicaOutcome; registered: boolean }> {
  const first = operator(before, c);
  let status: ReplicaStatus | undefined;
  for (let i = 0; i < 200 && !status?.ready; i++) {
    const o = await first.step(status);
    expect(o.failure, o.status.message).toBeUndefined();
    status = o.status;
    if (o.ended) first.settle();
    if (!status.ready) await new Promise((r) => setTimeout(r, 25));
  }
  expect(status?.ready, status?.message).toBe(true);
  const second = operator(after, c);
  const outcome = await second.step(status);
  return { ready: status!, outcome, registered: second.started() > 0 };
}

/** What a restart must not change: still Ready, same version and phase, no Event, no registration again. */
export function expectNoFlip(r: Awaited<ReturnType<typeof acrossRestart>>): void {
  expect(r.outcome.failure).toBeUndefined();
  expect(r.outcome.events).toEqual([]);
  expect(r.registered).toBe(false);
  expect(r.outcome.status).toMatchObject({
    ready: true,
    phase: 'Ready',
    registered: true,
    version: r.ready.version,
    readyWorkers: r.ready.readyWorkers,
  });
}
