/**
 * convergeStaged: one pass of a Staged rollout against fake model servers behind the driver interface that keep
 * their models in memory and record every call: staging never touches a default, the switch sends every
 * set-default at once (whatever rollout.maxConcurrent), a rollback makes the previous version the default before it
 * unregisters anything, and a failure of an earlier try is forgotten so a retry registers again. A server that loads
 * at the switch (`ReplicaServer.staging`, as Triton): staged is placed, the switch is every load at once, and a load
 * that fails on one replica puts every replica back in the same pass, the placed files removed.
 */
import { describe, expect, it } from 'vitest';
import type { RolloutStatus } from '../../src/api/index.ts';
import type { RegistrationState } from '../../src/controllers/servedmodel/registrations.ts';
import type { ReplicaGoal, ReplicaOutcome } from '../../src/controllers/servedmodel/replica.ts';
import { attemptOf } from '../../src/controllers/servedmodel/rollout.ts';
import { convergeStaged, type StagedReplica } from '../../src/controllers/servedmodel/staged.ts';
import type { Failure, ModelVersion, Registered, ReplicaServer, Staging } from '../../src/servers/driver.ts';

const goal: ReplicaGoal & { version: string } = {
  modelName: 'm',
  version: '2',
  fileName: 'models/m-v2.mar',
  minWorkers: 1,
  maxWorkers: 1,
  options: {},
};
const attempt = attemptOf(2, undefined);
const T0 = Date.parse('2026-11-29T10:00:00.000Z');

class Rejected extends Error {}
const failure = (err: unknown): Failure | undefined =>
  err instanceof Rejected ? { kind: 'terminal', retryable: false, message: err.message } : undefined;

/** One in-memory replica: its versions (READY with one worker), its default, and a shared log of calls. */
class FakeReplica implements ReplicaServer {
  readonly versionsHeld: string[];
  default: string | undefined;
  private readonly log: string[];
  private readonly name: string;
  private readonly flight: { now: number; max: number };

  constructor(
    name: string,
    versions: string[],
    def: string | undefined,
    log: string[],
    flight = { now: 0, max: 0 },
  ) {
    this.name = name;
    this.versionsHeld = versions;
    this.default = def;
    this.log = log;
    this.flight = flight;
  }

  private of(version: string): ModelVersion {
    return { version, minWorkers: 1, maxWorkers: 1, readyWorkers: 1 };
  }
  describe(_m: string, version: string | undefined): Promise<ModelVersion | undefined> {
    const v = version ?? this.default;
    return Promise.resolve(v !== undefined && this.versionsHeld.includes(v) ? this.of(v) : undefined);
  }
  versions(): Promise<ModelVersion[]> {
    return Promise.resolve(this.versionsHeld.map((v) => this.of(v)));
  }
  register(): Promise<Registered> {
    throw new Error('registrations go through the runner in these tests');
  }
  scale(): Promise<void> {
    this.log.push(`${this.name} scale`);
    return Promise.resolve();
  }
  async setDefault(_m: string, version: string): Promise<void> {
    this.flight.now++;
    this.flight.max = Math.max(this.flight.max, this.flight.now);
    await new Promise((r) => setTimeout(r, 5));
    this.flight.now--;
    this.default = version;
    this.log.push(`${this.name} default ${version}`);
  }
  unregister(_m: string, version: string): Promise<void> {
    if (version === this.default && this.versionsHeld.length > 1)
      return Promise.reject(new Rejected(`cannot remove the default ${version}`));
    this.versionsHeld.splice(this.versionsHeld.indexOf(version), 1);
    this.log.push(`${this.name} unregister ${version}`);
    return Promise.resolve();
  }
  unregisterAll(): Promise<void> {
    return Promise.resolve();
  }
}

/**
 * An in-memory server that serves the newest loaded version (as Triton): versions are placed, then loaded; no
 * default to set; unregistering a version reloads without it and removes its files.
 */
class FakeLoadingReplica implements ReplicaServer {
  readonly loaded: string[];
  readonly placedVersions: string[];
  private readonly log: string[];
  private readonly name: string;
  private readonly flight: { now: number; max: number };
  /** A load of this version fails (terminal). */
  failLoad: string | undefined;
  readonly staging: Staging;

  constructor(name: string, loaded: string[], placed: string[], log: string[], flight = { now: 0, max: 0 }) {
    this.name = name;
    this.loaded = loaded;
    this.placedVersions = placed;
    this.log = log;
    this.flight = flight;
    this.staging = {
      place: () => Promise.reject(new Error('placements go through the runner in these tests')),
      placed: () => Promise.resolve([...this.placedVersions]),
      load: async (_m, version) => {
        this.flight.now++;
        this.flight.max = Math.max(this.flight.max, this.flight.now);
        await new Promise((r) => setTimeout(r, 5));
        this.flight.now--;
        if (version === this.failLoad) {
          this.log.push(`${this.name} load ${version} failed`);
          throw new Rejected(`load failed for model 'm': version ${version} is at UNAVAILABLE state`);
        }
        this.loaded.push(version);
        this.log.push(`${this.name} load ${version}`);
      },
    };
  }

  private of(version: string): ModelVersion {
    return { version, minWorkers: 1, maxWorkers: 1, readyWorkers: 1 };
  }
  describe(_m: string, version: string | undefined): Promise<ModelVersion | undefined> {
    const v = version ?? [...this.loaded].sort().at(-1);
    return Promise.resolve(v !== undefined && this.loaded.includes(v) ? this.of(v) : undefined);
  }
  versions(): Promise<ModelVersion[]> {
    return Promise.resolve(this.loaded.map((v) => this.of(v)));
  }
  register(): Promise<Registered> {
    throw new Error('registrations go through the runner in these tests');
  }
  scale(): Promise<void> {
    return Promise.resolve();
  }
  unregister(_m: string, version: string): Promise<void> {
    if (this.loaded.includes(version)) this.loaded.splice(this.loaded.indexOf(version), 1);
    this.placedVersions.splice(this.placedVersions.indexOf(version), 1);
    this.log.push(`${this.name} unregister ${version}`);
    return Promise.resolve();
  }
  unregisterAll(): Promise<void> {
    return Promise.resolve();
  }
}

interface Setup {
  servers: ReplicaServer[];
  /** Each replica's registration state (undefined: none). */
  registrations?: (RegistrationState<Registered> | undefined)[];
}

async function pass(s: Setup, prior?: RolloutStatus, maxConcurrent = 10) {
  const started: string[] = [];
  const forgotten: string[] = [];
  const replicas: StagedReplica[] = s.servers.map((server, i) => ({
    replica: { endpoint: `http://198.18.0.${i + 1}:8081`, pod: `ts-${i}` },
    server,
    previous: undefined,
    gate: { open: true, message: '' },
    registration: {
      peek: () => s.registrations?.[i],
      start: () => {
        started.push(`ts-${i}`);
        return { state: 'running', phase: 'Downloading', since: T0, message: 'downloading' };
      },
    },
    converge: (): Promise<ReplicaOutcome> =>
      Promise.reject(new Error(`ts-${i} is not converged in this test`)),
    forget: () => forgotten.push(`ts-${i}`),
  }));
  let now = T0;
  const result = await convergeStaged(
    {
      goal,
      prior,
      attempt,
      paused: false,
      deadlineMs: 600_000,
      maxConcurrent,
      signal: new AbortController().signal,
      failure,
      now: () => (now += 1),
    },
    replicas,
  );
  return { ...result, started, forgotten };
}

describe('a Staged pass', () => {
  it('stages v2 on every replica in the background, leaving every default on v1', async () => {
    const log: string[] = [];
    const servers = [0, 1, 2].map((i) => new FakeReplica(`ts-${i}`, ['1'], '1', log));
    const r = await pass({ servers });
    expect(r.rollout?.phase).toBe('Staging');
    expect(r.started).toEqual(['ts-0', 'ts-1', 'ts-2']);
    expect(log).toEqual([]);
    expect(r.outcomes.map((o) => o.status.phase)).toEqual(['Downloading', 'Downloading', 'Downloading']);
  });

  it('switches every replica at once, even one at a time otherwise, and measures the window', async () => {
    const log: string[] = [];
    const flight = { now: 0, max: 0 };
    const servers = [0, 1, 2].map((i) => new FakeReplica(`ts-${i}`, ['1', '2'], '1', log, flight));
    const r = await pass({ servers }, undefined, 1);
    expect(flight.max).toBe(3);
    expect(servers.map((s) => s.default)).toEqual(['2', '2', '2']);
    expect(r.rollout).toMatchObject({ phase: 'Retiring', switched: 3 });
    // The fake clock ticks once per read: the switch's start and end, nothing of the staging before.
    expect(r.rollout?.switchWindowMs).toBe(1);
    expect(r.events.map((e) => e.reason)).toEqual(['RolloutSwitching', 'RolloutRetiring']);
    expect(r.outcomes.every((o) => o.status.ready && o.events[0]?.reason === 'VersionDefault')).toBe(true);
    // The next pass retires v1.
    const next = await pass({ servers }, r.rollout);
    expect(log.filter((l) => l.includes('unregister'))).toEqual([
      'ts-0 unregister 1',
      'ts-1 unregister 1',
      'ts-2 unregister 1',
    ]);
    expect(next.rollout?.phase).toBe('Retiring');
  });

  it('rolls back a switched replica by making v1 the default, then unregistering v2 the pass after', async () => {
    const log: string[] = [];
    const servers = [new FakeReplica('ts-0', ['1', '2'], '2', log), new FakeReplica('ts-1', ['1'], '1', log)];
    const failed: RegistrationState<Registered> = {
      state: 'failed',
      since: T0 + 5,
      error: new Rejected('InvalidModelException: handler failed'),
    };
    const prior: RolloutStatus = {
      phase: 'Switching',
      version: '2',
      previousVersion: '1',
      attempt,
      replicas: 2,
      staged: 1,
      switched: 1,
      startTime: new Date(T0).toISOString(),
      lastProgressTime: new Date(T0).toISOString(),
    };
    const r = await pass({ servers, registrations: [undefined, failed] }, prior);
    expect(r.rollout).toMatchObject({ phase: 'RollingBack', reason: 'LoadFailed' });
    expect(r.rollout?.message).toMatch(/ts-1 .*could not load 2: InvalidModelException: handler failed/);
    // v2 stays registered (no longer the default) for a pass: what it accepted before the default moved is answered.
    expect(log).toEqual(['ts-0 default 1']);
    expect(servers.map((s) => [s.default, s.versionsHeld])).toEqual([
      ['1', ['1', '2']],
      ['1', ['1']],
    ]);
    const next = await pass({ servers }, r.rollout);
    expect(log).toEqual(['ts-0 default 1', 'ts-0 unregister 2']);
    expect(next.rollout?.phase).toBe('RollingBack');
    expect(servers.map((s) => [s.default, s.versionsHeld])).toEqual([
      ['1', ['1']],
      ['1', ['1']],
    ]);
    const after = await pass({ servers }, next.rollout);
    expect(after.rollout?.phase).toBe('RolledBack');
    expect(after.started).toEqual([]);
  });

  it('forgets a failure of an earlier try: a retry registers again', async () => {
    const log: string[] = [];
    const servers = [new FakeReplica('ts-0', ['1'], '1', log)];
    const old: RegistrationState<Registered> = {
      state: 'failed',
      since: T0 - 60_000,
      error: new Rejected('x'),
    };
    const r = await pass({ servers, registrations: [old] });
    expect(r.forgotten).toEqual(['ts-0']);
    expect(r.started).toEqual(['ts-0']);
    expect(r.rollout?.phase).toBe('Staging');
  });

  it('a server that loads at the switch: staging places, nothing loads; the switch is every load at once', async () => {
    const log: string[] = [];
    const flight = { now: 0, max: 0 };
    const servers = [0, 1, 2].map((i) => new FakeLoadingReplica(`t-${i}`, ['1'], ['1'], log, flight));
    const staging = await pass({ servers });
    expect(staging.rollout?.phase).toBe('Staging');
    expect(staging.started).toEqual(['ts-0', 'ts-1', 'ts-2']);
    expect(log).toEqual([]);
    // Placed on two: still staging, nothing loaded, every request still reaches v1.
    servers[0]!.placedVersions.push('2');
    servers[1]!.placedVersions.push('2');
    const placed: RegistrationState<Registered> = { state: 'done', since: T0, result: { version: '2' } };
    const two = await pass({ servers, registrations: [placed, placed, undefined] }, staging.rollout);
    expect(two.rollout).toMatchObject({ phase: 'Staging', staged: 2, switched: 0 });
    expect(log).toEqual([]);
    servers[2]!.placedVersions.push('2');
    const r = await pass({ servers }, two.rollout, 1);
    expect(flight.max).toBe(3);
    expect(log.sort()).toEqual(['t-0 load 2', 't-1 load 2', 't-2 load 2']);
    expect(r.rollout).toMatchObject({ phase: 'Retiring', switched: 3, switchWindowMs: 1 });
    expect(r.events.map((e) => e.reason)).toEqual(['RolloutSwitching', 'RolloutRetiring']);
    expect(r.outcomes.every((o) => o.status.ready && o.status.version === '2')).toBe(true);
    log.length = 0;
    const next = await pass({ servers }, r.rollout);
    expect(log).toEqual(['t-0 unregister 1', 't-1 unregister 1', 't-2 unregister 1']);
    expect(servers.map((s) => [s.loaded, s.placedVersions])).toEqual([0, 1, 2].map(() => [['2'], ['2']]));
    expect(next.rollout?.phase).toBe('Retiring');
  });

  it('a load that fails on one replica puts every replica back in the same pass, the placed files removed', async () => {
    const log: string[] = [];
    const servers = [0, 1, 2].map((i) => new FakeLoadingReplica(`t-${i}`, ['1'], ['1', '2'], log));
    servers[1]!.failLoad = '2';
    const r = await pass({ servers });
    expect(r.rollout).toMatchObject({ phase: 'RollingBack', reason: 'LoadFailed', switched: 2 });
    expect(r.rollout?.message).toMatch(
      /ts-1 .*could not load 2: load failed for model 'm': version 2 is at UNAVAILABLE/,
    );
    expect(r.events.map((e) => e.reason)).toEqual(['RolloutSwitching', 'RolloutRollingBack']);
    // Two loaded v2 (and served it) until their rollback; the third never served it.
    expect(log.filter((l) => l.includes('load')).sort()).toEqual([
      't-0 load 2',
      't-1 load 2 failed',
      't-2 load 2',
    ]);
    expect(log.filter((l) => l.includes('unregister')).sort()).toEqual([
      't-0 unregister 2',
      't-1 unregister 2',
      't-2 unregister 2',
    ]);
    expect(servers.map((s) => [s.loaded, s.placedVersions])).toEqual([0, 1, 2].map(() => [['1'], ['1']]));
    expect(r.outcomes.map((o) => o.status.version)).toEqual(['1', '1', '1']);
    const after = await pass({ servers }, r.rollout);
    expect(after.rollout?.phase).toBe('RolledBack');
    expect(after.events.map((e) => e.reason)).toEqual(['RolloutRolledBack']);
    expect(after.started).toEqual([]);
  });
});
