/**
 * The gates of a ServedModel with an owned, node-targeted preheat across a spec change: a new version's files are
 * other content, so the ModelPreheat's success and its peers (cached, of the version before) open no gate until
 * the preheat of the new content says so; new nodes alone (the same content) keep the gates of preheated nodes open.
 */
import { describe, expect, it } from 'vitest';
import {
  ModelPreheatSpec,
  ServedModelSpec,
  ownedPreheatSpec,
  type ModelPreheat,
  type ServedModel,
} from '../../src/api/index.ts';
import { contentKey } from '../../src/controllers/modelpreheat/targets.ts';
import { ReplicaGates } from '../../src/controllers/servedmodel/gates.ts';
import type { Discovery } from '../../src/controllers/servedmodel/replicas.ts';

const NODES = new Map([
  ['node-a', '10.0.0.1'],
  ['node-b', '10.0.0.2'],
]);

const servedSpec = (version: string) =>
  ServedModelSpec.parse({
    modelName: 'echo',
    version,
    files: { prefix: `echo/${version}/` },
    modelServer: {
      driver: 'triton',
      service: { name: 'triton' },
      agent: { port: 8095, tokenSecretRef: { name: 't', key: 'token' } },
    },
    preheat: {
      create: true,
      objectStorage: { type: 's3', bucket: 'models', credentialsSecretRef: { name: 's3' } },
    },
  });

const sm = {
  metadata: { name: 'echo', namespace: 'ns', uid: 'uid-1', generation: 2 },
} as unknown as ServedModel;

/** The owned ModelPreheat of `spec` at `generation`, with `status` and the content key of its spec. */
function owned(spec: ServedModelSpec, ips: string[], generation: number, status: object): ModelPreheat {
  const stored = ModelPreheatSpec.parse(ownedPreheatSpec(spec, ips));
  return {
    metadata: {
      name: 'echo-preheat',
      namespace: 'ns',
      generation,
      ownerReferences: [{ controller: true, uid: 'uid-1' }],
    },
    spec: stored,
    status: { contentKey: contentKey(stored), ...status },
  } as unknown as ModelPreheat;
}

/** The owned ModelPreheat of `version` on `ips`, succeeded at its generation, every targeted peer preheated. */
const succeeded = (version: string, ips: string[], generation = 1): ModelPreheat =>
  owned(servedSpec(version), ips, generation, {
    peers: ips.map((ip) => ({ ip, state: 'Preheated' })),
    conditions: [{ type: 'Succeeded', status: 'True', observedGeneration: generation, message: 'ok' }],
  });

function gates(cached: () => ModelPreheat | undefined) {
  const updates: ModelPreheat[] = [];
  const g = new ReplicaGates({
    kube: {
      resource: () => ({
        update: async (o: ModelPreheat) => void updates.push(o),
        create: async () => undefined,
      }),
    } as never,
    // The first batch's owned ModelPreheat (one batch: fewer than 100 nodes).
    preheats: {
      getByName: (_ns: string, name: string) => (name === 'echo-preheat' ? cached() : undefined),
    } as never,
    nodeAddresses: {
      internalIPs: async (nodes: Iterable<string>) =>
        new Map([...nodes].map((n) => [n, NODES.get(n)!] as const)),
    } as never,
    batchWindowMs: 0,
  });
  return { g, updates };
}

const discovery = (nodes: string[]): Discovery => ({
  replicas: nodes.map((node, i) => ({ endpoint: `http://198.18.0.${i + 1}:8000`, node })),
  startingNodes: [],
});
const signal = new AbortController().signal;
const openOf = (r: Awaited<ReturnType<ReplicaGates['of']>>) => [...r.gates.values()].map((x) => x.open);

describe('ServedModel gates across a spec change of the owned preheat', () => {
  it('a new version: the pass that updates the preheat and the next ones keep every replica waiting', async () => {
    let cached = succeeded('1', ['10.0.0.1', '10.0.0.2']);
    const { g, updates } = gates(() => cached);
    const v2 = servedSpec('2');
    // The cache still holds version 1's preheat, succeeded at its generation: the pass replaces the spec.
    const first = await g.of('ns/echo', sm, v2, discovery(['node-a', 'node-b']), new Map(), signal);
    expect(updates).toHaveLength(1);
    expect(first.gate).toMatchObject({ state: 'closed', reason: 'PreheatInProgress' });
    expect(openOf(first)).toEqual([false, false]);

    // The cache sees the new spec (generation 2); the status is still version 1's job.
    cached = { ...updates[0]!, metadata: { ...updates[0]!.metadata, generation: 2 }, status: cached.status };
    const second = await g.of('ns/echo', sm, v2, discovery(['node-a', 'node-b']), new Map(), signal);
    expect(openOf(second)).toEqual([false, false]);

    // Version 2's job preheated the nodes.
    cached = succeeded('2', ['10.0.0.1', '10.0.0.2'], 2);
    const third = await g.of('ns/echo', sm, v2, discovery(['node-a', 'node-b']), new Map(), signal);
    expect(openOf(third)).toEqual([true, true]);
  });

  it('a new node alone (the same content): the preheated node’s replica stays open', async () => {
    const cached = succeeded('1', ['10.0.0.1']);
    const { g, updates } = gates(() => cached);
    const r = await g.of('ns/echo', sm, servedSpec('1'), discovery(['node-a', 'node-b']), new Map(), signal);
    expect(updates.map((u) => u.spec.targets?.ips)).toEqual([['10.0.0.1', '10.0.0.2']]);
    expect(openOf(r)).toEqual([true, true]);
  });
});

describe('ServedModel gates without node targeting: open once the preheat’s job is underway', () => {
  const seedSpec = (version: string) =>
    ServedModelSpec.parse({
      ...servedSpec(version),
      preheat: { ...servedSpec(version).preheat, scope: 'single_seed_peer' },
    });
  /** The owned seed-peer preheat of `version` whose job for generation `jobGeneration` is in `state`. */
  const running = (version: string, state: string, jobGeneration = 1, generation = 1): ModelPreheat =>
    owned(seedSpec(version), [], generation, {
      jobID: 7,
      jobGeneration,
      state,
      conditions: [{ type: 'Succeeded', status: 'Unknown', observedGeneration: generation, message: '' }],
    });
  const staticReplicas: Discovery = {
    replicas: [{ endpoint: 'http://198.18.0.1:8000' }, { endpoint: 'http://198.18.0.2:8000' }],
    startingNodes: [],
  };
  const pass = (cached: ModelPreheat | undefined, version = '1') =>
    gates(() => cached).g.of('ns/echo', sm, seedSpec(version), staticReplicas, new Map(), signal);

  it('a job the manager accepted and has not ended opens every replica, before its SUCCESS', async () => {
    for (const state of ['PENDING', 'RECEIVED', 'STARTED']) {
      const r = await pass(running('1', state));
      expect(r.nodeTargeting).toBe(false);
      expect(r.gate).toMatchObject({ state: 'open', message: expect.stringMatching(/job 7 is fetching/) });
      expect(openOf(r)).toEqual([true, true]);
      expect(r.closed).toEqual([]);
    }
  });

  it('no job yet, a failed job, or a job of an earlier generation keeps them waiting', async () => {
    const noJob = running('1', 'PENDING');
    delete (noJob.status as Record<string, unknown>)['jobID'];
    for (const cached of [noJob, running('1', 'FAILURE'), running('1', 'PENDING', 1, 2)]) {
      const r = await pass(cached);
      expect(r.gate).toMatchObject({ state: 'closed', reason: 'PreheatInProgress' });
      expect(openOf(r)).toEqual([false, false]);
    }
    // Not created yet: the pass creates it.
    expect(openOf(await pass(undefined))).toEqual([false, false]);
  });

  it('a job of the previous version’s content opens nothing for the new version', async () => {
    const r = await pass(running('1', 'STARTED'), '2');
    expect(r.gate).toMatchObject({ state: 'closed', reason: 'PreheatInProgress' });
    expect(openOf(r)).toEqual([false, false]);
  });
});
