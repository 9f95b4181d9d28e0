/**
 * convergeReplica: one step of one replica, against a fake model server that keeps its models in memory and
 * records every call, so each case says what the step asked for and what it reported.
 */
import { describe, expect, it } from 'vitest';
import type { ReplicaStatus } from '../../src/api/index.ts';
import { convergeReplica, type ReplicaGoal } from '../../src/controllers/servedmodel-replica.ts';
import type { RegistrationState } from '../../src/controllers/registrations.ts';
import type { ModelServerClient, RegisterRequest, RegisterResult } from '../../src/servers/torchserve/client.ts';
import { ModelServerError } from '../../src/servers/torchserve/errors.ts';
import type { ModelDescription } from '../../src/servers/torchserve/wire.ts';

const ENDPOINT = 'http://198.18.0.7:8081';
const replica = { endpoint: ENDPOINT, pod: 'ts-0', podUID: 'u-0', node: 'n1' };
const goal: ReplicaGoal = {
  modelName: 'resnet',
  version: '2.0',
  fileName: 'models/resnet-2.0.mar',
  minWorkers: 2,
  maxWorkers: 2,
  registration: { handler: undefined, batchSize: 4 },
};

const serverError = (kind: ModelServerError['kind'], status: number, serverMessage: string) =>
  new ModelServerError({ kind, status, serverMessage, endpoint: ENDPOINT, operation: 'test' });

/** An in-memory model server: models by version, the default first; every call recorded. */
class FakeModelServer {
  readonly calls: string[] = [];
  models: ModelDescription[] = [];
  /** What register does: add `version` (with workers as given), or throw. */
  onRegister: (req: RegisterRequest) => RegisterResult = () => this.add('2.0', 0);

  add(version: string, ready: number, min = 0, max = 0): RegisterResult {
    this.models.push({
      modelName: 'resnet',
      modelVersion: version,
      minWorkers: min,
      maxWorkers: max,
      workers: Array.from({ length: ready }, () => ({ status: 'READY' })),
    });
    return { httpStatus: 200, status: 'registered', version, workersPending: false };
  }

  readonly client = {
    describeIfPresent: async (name: string, version?: string) => {
      this.calls.push(`describe ${name} ${version ?? 'default'}`);
      const found =
        version === undefined
          ? this.models.slice(0, 1)
          : this.models.filter((m) => m.modelVersion === version);
      return found.length > 0 ? found : null;
    },
    describe: async (name: string, version?: string) => {
      this.calls.push(`describe ${name} ${version}`);
      return version === 'all' ? this.models : this.models.filter((m) => m.modelVersion === version);
    },
    register: async (req: RegisterRequest) => {
      this.calls.push(`register ${req.fileName} workers=${req.initialWorkers} batch=${req.batchSize}`);
      return this.onRegister(req);
    },
    scale: async (name: string, version: string, w: { minWorker: number; maxWorker: number }) => {
      this.calls.push(`scale ${name} ${version} ${w.minWorker}-${w.maxWorker}`);
      const m = this.models.find((d) => d.modelVersion === version)!;
      m.minWorkers = w.minWorker;
      m.maxWorkers = w.maxWorker;
      return { status: 'scaled' };
    },
    setDefault: async (name: string, version: string) => {
      this.calls.push(`set-default ${name} ${version}`);
      const m = this.models.find((d) => d.modelVersion === version)!;
      this.models = [m, ...this.models.filter((d) => d !== m)];
      return { status: 'default' };
    },
    unregister: async (name: string, version?: string) => {
      this.calls.push(`unregister ${name} ${version}`);
      this.models = this.models.filter((d) => d.modelVersion !== version);
      return { status: 'unregistered' };
    },
  } as unknown as ModelServerClient;
}

const step = (
  server: FakeModelServer,
  previous?: ReplicaStatus,
  opts: Partial<Parameters<typeof convergeReplica>[4]> = {},
) => convergeReplica(server.client, replica, goal, previous, { mayRegister: true, ...opts });

describe('convergeReplica', () => {
  it('absent: registers the archive with 0 workers and the registration options, then scales', async () => {
    const server = new FakeModelServer();
    const o = await step(server);
    expect(server.calls).toEqual([
      'describe resnet default',
      'register models/resnet-2.0.mar workers=0 batch=4',
      'describe resnet 2.0',
      'scale resnet 2.0 2-2',
    ]);
    expect(o.failure).toBeUndefined();
    expect(o.status).toMatchObject({ endpoint: ENDPOINT, pod: 'ts-0', registered: true, ready: false });
    expect(o.status.phase).toBe('Scaling');
    expect(o.events.map((e) => `${e.type}/${e.reason}`)).toEqual(['Normal/ModelRegistered']);
    expect(o.events[0]!.note).toContain('pod ts-0');
  });

  it('absent while waiting for the seed replica: only describes, Pending', async () => {
    const server = new FakeModelServer();
    const o = await step(server, undefined, { mayRegister: false });
    expect(server.calls).toEqual(['describe resnet default']);
    expect(o.status).toMatchObject({
      registered: false,
      phase: 'Pending',
      message: 'waiting for the seed replica',
    });
  });

  it('absent with a background registration running: reports its phase and sends nothing', async () => {
    const server = new FakeModelServer();
    const since = Date.parse('2026-01-01T00:00:00Z');
    const running: RegistrationState<RegisterResult> = {
      state: 'running',
      phase: 'Downloading',
      since,
      message: 'downloading models/resnet-2.0.mar',
    };
    const asked: RegisterRequest[] = [];
    const o = await step(server, undefined, { register: (req) => (asked.push(req), running) });
    expect(asked.map((r) => r.fileName)).toEqual(['models/resnet-2.0.mar']);
    expect(server.calls).toEqual(['describe resnet default']);
    expect(o.status).toMatchObject({
      phase: 'Downloading',
      since: '2026-01-01T00:00:00.000Z',
      registered: false,
    });
  });

  it('409 (registered by an earlier attempt whose answer was lost): describes it and carries on, no Event', async () => {
    const server = new FakeModelServer();
    server.onRegister = () => {
      server.add('2.0', 0);
      throw serverError('conflict', 409, 'Model version 2.0 is already registered');
    };
    const o = await step(server);
    expect(server.calls.slice(1, 4)).toEqual([
      'register models/resnet-2.0.mar workers=0 batch=4',
      'describe resnet 2.0',
      'scale resnet 2.0 2-2',
    ]);
    expect(o.failure).toBeUndefined();
    expect(o.status.registered).toBe(true);
    expect(o.events).toEqual([]);
  });

  it('registered with other worker counts: scales to min/max, Scaling until min workers are READY', async () => {
    const server = new FakeModelServer();
    server.add('2.0', 1, 1, 1);
    const o = await step(server);
    expect(server.calls).toEqual(['describe resnet default', 'scale resnet 2.0 2-2']);
    expect(o.status).toMatchObject({ registered: true, ready: false, readyWorkers: 1, phase: 'Scaling' });
    expect(o.status.message).toBe('1/2 workers READY');
  });

  it('READY workers >= min with the wanted counts: Ready, nothing sent but the describe', async () => {
    const server = new FakeModelServer();
    server.add('2.0', 3, 2, 2);
    const previous: ReplicaStatus = {
      endpoint: ENDPOINT,
      registered: true,
      readyWorkers: 2,
      ready: true,
      version: '2.0',
    };
    const o = await step(server, previous);
    expect(server.calls).toEqual(['describe resnet default']);
    expect(o.status).toMatchObject({ ready: true, readyWorkers: 3, phase: 'Ready', version: '2.0' });
    expect(o.failure).toBeUndefined();
  });

  it('a new version ready: made the default, then the old one unregistered', async () => {
    const server = new FakeModelServer();
    server.add('1.0', 2, 2, 2);
    server.add('2.0', 2, 2, 2);
    const previous: ReplicaStatus = {
      endpoint: ENDPOINT,
      registered: true,
      readyWorkers: 2,
      ready: true,
      version: '1.0',
    };
    const o = await step(server, previous);
    expect(server.calls).toEqual([
      'describe resnet default',
      'describe resnet 2.0',
      'set-default resnet 2.0',
      'describe resnet all',
      'unregister resnet 1.0',
    ]);
    expect(o.status).toMatchObject({ ready: true, version: '2.0' });
    expect(o.events.map((e) => e.reason)).toEqual(['VersionDefault', 'VersionRemoved']);
  });

  it('the archive registers another version than spec.version: a failure that needs a change', async () => {
    const server = new FakeModelServer();
    server.onRegister = () => server.add('3.0', 0);
    const o = await step(server);
    expect(o.failure).toEqual({ reason: 'VersionMismatch', retryable: false, kind: undefined });
    expect(o.status).toMatchObject({ phase: 'Failed', registered: false, ready: false });
    expect(o.status.message).toBe('models/resnet-2.0.mar registers version 3.0, but spec.version is 2.0');
  });

  it('an archive the model server rejects: RegistrationRejected, not retryable, with the server words', async () => {
    const server = new FakeModelServer();
    server.onRegister = () => {
      throw serverError('terminal', 400, 'DownloadArchiveException: not a model archive');
    };
    const o = await step(server);
    expect(o.failure).toEqual({ reason: 'RegistrationRejected', retryable: false, kind: 'terminal' });
    expect(o.status.phase).toBe('Failed');
    expect(o.status.message).toContain('not a model archive');
  });

  it('a model server that does not answer: ModelServerUnavailable, retryable', async () => {
    const server = new FakeModelServer();
    server.client.describeIfPresent = async () => {
      throw serverError('retryable', 0, 'connect ECONNREFUSED');
    };
    const o = await step(server);
    expect(o.failure).toEqual({ reason: 'ModelServerUnavailable', retryable: true, kind: 'retryable' });
    expect(o.status.registered).toBe(false);
  });

  it('a replica that lost the model it had (restarted): says so and registers again', async () => {
    const server = new FakeModelServer();
    const previous: ReplicaStatus = {
      endpoint: ENDPOINT,
      registered: true,
      readyWorkers: 2,
      ready: true,
      version: '2.0',
    };
    const o = await step(server, previous);
    expect(o.events.map((e) => e.reason)).toEqual(['ReplicaRestarted', 'ModelRegistered']);
    expect(server.calls).toContain('register models/resnet-2.0.mar workers=0 batch=4');
  });
});
