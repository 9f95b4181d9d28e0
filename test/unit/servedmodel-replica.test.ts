/**
 * convergeReplica: one step of one replica, the production path (registrations run in the background on a real
 * RegistrationRunner; a step starts one and a later step reads its end), against a fake model server behind the
 * driver interface that keeps its models in memory and records every call.
 */
import { describe, expect, it, vi } from 'vitest';
import type { ReplicaStatus } from '../../src/api/index.ts';
import { RegistrationRunner, type RegistrationId } from '../../src/controllers/servedmodel/registrations.ts';
import {
  convergeReplica,
  registerAndStart,
  registeredEvent,
  type ReplicaGoal,
} from '../../src/controllers/servedmodel/replica.ts';
import { localHitOf } from '../../src/controllers/servedmodel/replica-status.ts';
import type {
  Failure,
  FailureKind,
  ModelVersion,
  Registered,
  Registration,
  ReplicaServer,
} from '../../src/servers/driver.ts';

const ENDPOINT = 'http://198.18.0.7:8081';
/** A registration the server answers with an error of `kind`. */
const refuse = (kind: ConstructorParameters<typeof FakeError>[0], message: string) => () => {
  throw new FakeError(kind, message);
};
/** The replica's status after a pass that found version 2.0 ready on 2 workers. */
const readyOn20 = (): ReplicaStatus => ({
  endpoint: ENDPOINT,
  registered: true,
  readyWorkers: 2,
  ready: true,
  version: '2.0',
});
const replica = { endpoint: ENDPOINT, pod: 'ts-0', podUID: 'u-0', node: 'n1' };
const goal: ReplicaGoal = {
  modelName: 'resnet',
  version: '2.0',
  fileName: 'models/resnet-2.0.mar',
  minWorkers: 2,
  maxWorkers: 2,
  options: { handler: undefined, batchSize: 4 },
};

class FakeError extends Error {
  readonly kind: FailureKind;
  constructor(kind: FailureKind, message: string) {
    super(message);
    this.kind = kind;
  }
}
const failure = (err: unknown): Failure | undefined =>
  err instanceof FakeError
    ? { kind: err.kind, retryable: err.kind === 'retryable', message: err.message }
    : undefined;

/** An in-memory model server: versions, the default first; every call recorded. */
class FakeModelServer implements ReplicaServer {
  readonly calls: string[] = [];
  models: ModelVersion[] = [];
  /** What register does: add version 2.0 with no workers (a miss on the node's peer), or throw. */
  onRegister: (reg: Registration) => Registered = () => this.add('2.0', 0, 0, 0, false);

  add(version: string, ready: number, min = 0, max = 0, localHit?: boolean): Registered {
    this.models.push({ version, minWorkers: min, maxWorkers: max, readyWorkers: ready });
    return { version, localHit };
  }

  async describe(model: string, version: string | undefined) {
    this.calls.push(`describe ${model} ${version ?? 'default'}`);
    return version === undefined ? this.models[0] : this.models.find((m) => m.version === version);
  }
  async versions(model: string) {
    this.calls.push(`versions ${model}`);
    return [...this.models];
  }
  async register(reg: Registration) {
    this.calls.push(`register ${reg.fileName} batch=${reg.options.batchSize}`);
    return this.onRegister(reg);
  }
  async scale(model: string, version: string, w: { min: number; max: number }) {
    this.calls.push(`scale ${model} ${version} ${w.min}-${w.max}`);
    const m = this.models.find((d) => d.version === version)!;
    m.minWorkers = w.min;
    m.maxWorkers = w.max;
  }
  async setDefault(model: string, version: string) {
    this.calls.push(`set-default ${model} ${version}`);
    const m = this.models.find((d) => d.version === version)!;
    this.models = [m, ...this.models.filter((d) => d !== m)];
  }
  async unregister(model: string, version: string) {
    this.calls.push(`unregister ${model} ${version}`);
    this.models = this.models.filter((d) => d.version !== version);
  }
  async unregisterAll(model: string) {
    this.calls.push(`unregister-all ${model}`);
    this.models = [];
  }
}

/** A replica, its server and its background registrations, stepped as the reconciler does. */
function harness(server = new FakeModelServer()) {
  const runner = new RegistrationRunner<Registered>({ global: 4, onChange: () => undefined });
  const id: RegistrationId = {
    uid: 'u',
    owner: 'ns/sm',
    replica: ENDPOINT,
    version: '2.0|models/resnet-2.0.mar',
  };
  const registration = {
    peek: () => runner.peek(id),
    start: () =>
      runner.ensure(id, 1, (signal, progress, stopping) =>
        registerAndStart(server, goal, { signal, progress, stopping }),
      ),
  };
  const step = (previous?: ReplicaStatus, mayRegister = true) =>
    convergeReplica(server, replica, goal, previous, {
      mayRegister,
      signal: new AbortController().signal,
      registration,
      failure,
    });
  /** The background registration's end. */
  const ended = () => vi.waitFor(() => expect(runner.peek(id)?.state).not.toBe('running'));
  return { server, runner, id, step, ended };
}

describe('convergeReplica (background registration)', () => {
  it('absent: starts the registration and reports it; the next step takes its end, the workers already asked for', async () => {
    const h = harness();
    const first = await h.step();
    expect(first.status).toMatchObject({ registered: false, ready: false, phase: 'Downloading' });
    expect(first.ended).toBeUndefined();
    await h.ended();
    // The run: the plugin's registration with 0 workers and the registration options, then the workers at once.
    expect(h.server.calls).toEqual([
      'describe resnet default',
      'register models/resnet-2.0.mar batch=4',
      'scale resnet 2.0 2-2',
    ]);
    h.server.calls.length = 0;
    const second = await h.step();
    expect(h.server.calls).toEqual(['describe resnet default']);
    expect(second.failure).toBeUndefined();
    expect(second.status).toMatchObject({
      registered: true,
      ready: false,
      phase: 'Scaling',
      message: '0/2 workers READY',
    });
    // The ended registration travels with the outcome until status holds it (the reconciler settles it then).
    expect(second.ended).toMatchObject({ state: 'done', result: { version: '2.0', localHit: false } });
    expect(h.runner.peek(h.id)?.state).toBe('done');
  });

  it('a registration under way: reports its phase and sends nothing, not even a describe', async () => {
    const h = harness();
    let release!: () => void;
    h.server.onRegister = () => {
      throw new Error('unused');
    };
    h.server.register = (reg) =>
      new Promise((resolve) => {
        h.server.calls.push(`register ${reg.fileName}`);
        release = () => resolve(h.server.add('2.0', 0));
      });
    await h.step();
    await vi.waitFor(() => expect(h.server.calls).toContain('register models/resnet-2.0.mar'));
    h.server.calls.length = 0;
    const o = await h.step();
    expect(h.server.calls).toEqual([]);
    expect(o.status).toMatchObject({ phase: 'Downloading', registered: false });
    expect(o.status.since).toMatch(/^\d{4}-/);
    release();
    await h.ended();
  });

  it('absent while waiting for the seed replica: only describes, Pending, starts nothing', async () => {
    const h = harness();
    const o = await h.step(undefined, false);
    expect(h.server.calls).toEqual(['describe resnet default']);
    expect(o.status).toMatchObject({
      registered: false,
      phase: 'Pending',
      message: 'waiting for the seed replica',
    });
    expect(h.runner.peek(h.id)).toBeUndefined();
  });

  it('409 (registered by an attempt whose answer was lost): no failure, the model is described again', async () => {
    const h = harness();
    h.server.onRegister = refuse('conflict', 'Model version 2.0 is already registered');
    await h.step();
    await h.ended();
    h.server.calls.length = 0;
    const o = await h.step();
    expect(o.ended?.state).toBe('failed');
    expect(o.failure).toBeUndefined();
    // Not described yet (the server has not shown it): registered, and the next pass describes it.
    expect(h.server.calls).toEqual(['describe resnet default', 'describe resnet 2.0']);
    expect(o.status).toMatchObject({ registered: true, phase: 'Registering' });
  });

  it('registered with other worker counts: scales to min/max, Scaling until min workers are READY', async () => {
    const h = harness();
    h.server.add('2.0', 1, 1, 1);
    const o = await h.step();
    expect(h.server.calls).toEqual(['describe resnet default', 'scale resnet 2.0 2-2']);
    expect(o.status).toMatchObject({ registered: true, ready: false, readyWorkers: 1, phase: 'Scaling' });
    expect(o.status.message).toBe('1/2 workers READY');
  });

  it('READY workers >= min with the wanted counts: Ready, nothing sent but the describe', async () => {
    const h = harness();
    h.server.add('2.0', 3, 2, 2);
    const previous = readyOn20();
    const o = await h.step(previous);
    expect(h.server.calls).toEqual(['describe resnet default']);
    expect(o.status).toMatchObject({ ready: true, readyWorkers: 3, phase: 'Ready', version: '2.0' });
    expect(o.failure).toBeUndefined();
  });

  it('a model no registration placed (a base model fetched before start): status says the fetch was a local hit', async () => {
    const h = harness();
    h.server.models.push({ version: '2.0', minWorkers: 2, maxWorkers: 2, readyWorkers: 2, localHit: true });
    const o = await h.step({
      endpoint: ENDPOINT,
      registered: true,
      readyWorkers: 2,
      ready: true,
      version: '2.0',
    });
    expect(h.server.calls).toEqual(['describe resnet default']);
    expect(o.status).toMatchObject({ ready: true, phase: 'Ready', localHit: true });
    expect(localHitOf(o, undefined)).toBe(true);
  });

  it('a new version ready: made the default, then the old one unregistered', async () => {
    const h = harness();
    h.server.add('1.0', 2, 2, 2);
    h.server.add('2.0', 2, 2, 2);
    const previous: ReplicaStatus = {
      endpoint: ENDPOINT,
      registered: true,
      readyWorkers: 2,
      ready: true,
      version: '1.0',
    };
    const o = await h.step(previous);
    expect(h.server.calls).toEqual([
      'describe resnet default',
      'describe resnet 2.0',
      'set-default resnet 2.0',
      'versions resnet',
      'unregister resnet 1.0',
    ]);
    expect(o.status).toMatchObject({ ready: true, version: '2.0' });
    expect(o.events.map((e) => e.reason)).toEqual(['VersionDefault', 'VersionRemoved']);
  });

  it('the archive registers another version than spec.version: a failure that needs a change, no workers started', async () => {
    const h = harness();
    h.server.onRegister = () => h.server.add('3.0', 0);
    await h.step();
    await h.ended();
    expect(h.server.calls.filter((c) => c.startsWith('scale'))).toEqual([]);
    const o = await h.step();
    expect(o.failure).toEqual({ reason: 'VersionMismatch', retryable: false, kind: undefined });
    expect(o.status).toMatchObject({ phase: 'Failed', registered: false, ready: false });
    expect(o.status.message).toBe('models/resnet-2.0.mar registers version 3.0, but spec.version is 2.0');
  });

  it('an archive the model server rejects: RegistrationRejected, not retryable, with the server words', async () => {
    const h = harness();
    h.server.onRegister = refuse('terminal', 'DownloadArchiveException: not a model archive');
    await h.step();
    await h.ended();
    const o = await h.step();
    expect(o.failure).toEqual({ reason: 'RegistrationRejected', retryable: false, kind: 'terminal' });
    expect(o.status.phase).toBe('Failed');
    expect(o.status.message).toContain('not a model archive');
    expect(o.ended?.state).toBe('failed');
  });

  it('a model server that does not answer: ModelServerUnavailable, retryable', async () => {
    const h = harness();
    h.server.describe = async () => {
      throw new FakeError('retryable', 'connect ECONNREFUSED');
    };
    const o = await h.step();
    expect(o.failure).toEqual({ reason: 'ModelServerUnavailable', retryable: true, kind: 'retryable' });
    expect(o.status.registered).toBe(false);
  });

  it('an error that is not the server one: ReplicaError, retryable', async () => {
    const h = harness();
    h.server.describe = async () => {
      throw new TypeError('boom');
    };
    const o = await h.step();
    expect(o.failure).toEqual({ reason: 'ReplicaError', retryable: true, kind: 'other' });
  });

  it('a replica that lost the model it had (restarted): says so and registers again', async () => {
    const h = harness();
    const previous = readyOn20();
    const o = await h.step(previous);
    expect(o.events.map((e) => e.reason)).toEqual(['ReplicaRestarted']);
    expect(o.status.phase).toBe('Downloading');
    await h.ended();
    expect(h.server.calls).toContain('register models/resnet-2.0.mar batch=4');
  });
});

describe('registeredEvent', () => {
  it('says where the download came from when the plugin says', () => {
    const note = (localHit?: boolean) => registeredEvent(goal, replica, { version: '2.0', localHit }).note;
    expect(note(true)).toBe(`registered resnet 2.0 on pod ts-0 (${ENDPOINT}) (peer cache hit)`);
    expect(note(false)).toBe(`registered resnet 2.0 on pod ts-0 (${ENDPOINT}) (downloaded through the peer)`);
    expect(note(undefined)).toBe(`registered resnet 2.0 on pod ts-0 (${ENDPOINT})`);
  });
});
