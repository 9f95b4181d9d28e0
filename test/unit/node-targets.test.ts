import { describe, expect, it } from 'vitest';
import {
  ModelPreheatSpec,
  ServedModelSpec,
  ownedPreheatSpec,
  type ModelPreheat,
} from '../../src/api/index.ts';
import type { ManagerJob } from '../../src/manager/types.ts';
import { jobTaskPeers } from '../../src/manager/types.ts';
import {
  carriedPeers,
  contentKey,
  mergePeerOutcomes,
  remainingTargets,
} from '../../src/controllers/modelpreheat/targets.ts';
import { ReplicaGates } from '../../src/controllers/servedmodel/gates.ts';
import {
  batchTargets,
  peersOfSpec,
  preheatsOtherContent,
  replicaGate,
} from '../../src/controllers/servedmodel/preheat.ts';
import { discoverReplicas } from '../../src/controllers/servedmodel/replicas.ts';
import { closedGate as closed } from '../fixtures/gates.ts';
import { preheatJob, targetedS3Preheat } from '../fixtures/preheats.ts';

const spec = targetedS3Preheat(['10.0.0.1', '10.0.0.2']);

const job = (results: object[], state = 'SUCCESS'): ManagerJob => preheatJob(state, results);

describe('node-targeted preheat: which peers still need the content', () => {
  it('the content key ignores where and how, not what', () => {
    const moved = ModelPreheatSpec.parse({ ...spec, targets: { ips: ['10.0.0.9'] }, retry: { limit: 0 } });
    expect(contentKey(moved)).toBe(contentKey(spec));
    const other = ModelPreheatSpec.parse({
      ...spec,
      objectStorage: { ...spec.objectStorage!, keys: ['n.mar'] },
    });
    expect(contentKey(other)).not.toBe(contentKey(spec));
  });

  it('a peer preheated for the same content is not targeted again; a failed one is', () => {
    const key = contentKey(spec);
    const status = {
      contentKey: key,
      peers: [
        { ip: '10.0.0.1', state: 'Preheated' as const },
        { ip: '10.0.0.2', state: 'Failed' as const, message: 'x' },
      ],
    };
    expect(remainingTargets(['10.0.0.1', '10.0.0.2', '10.0.0.3'], carriedPeers(status, key))).toEqual([
      '10.0.0.2',
      '10.0.0.3',
    ]);
    // Other content: nothing carries over.
    expect(carriedPeers(status, 'other')).toEqual([]);
  });

  it('merges a job: success, failure with the peer’s words, and IPs the job does not mention (no peer there)', () => {
    const j = job([
      {
        success_tasks: [{ url: 'u', hostname: 'a', ip: '10.0.0.1' }],
        failure_tasks: [{ url: 'u', hostname: 'b', ip: '10.0.0.2', description: 'disk full' }],
      },
    ]);
    const merged = mergePeerOutcomes(
      [{ ip: '10.0.0.9', state: 'Preheated' }],
      ['10.0.0.1', '10.0.0.2', '10.0.0.3'],
      j,
    );
    expect(merged).toEqual([
      { ip: '10.0.0.1', jobID: 7, hostname: 'a', state: 'Preheated' },
      { ip: '10.0.0.2', jobID: 7, hostname: 'b', state: 'Failed', message: 'disk full' },
      { ip: '10.0.0.3', jobID: 7, state: 'Failed', message: expect.stringMatching(/knows no peer/) },
      { ip: '10.0.0.9', state: 'Preheated' },
    ]);
  });

  it('a job FAILURE marks every targeted IP Failed with the manager’s words', () => {
    const j = job([], 'FAILURE');
    expect(mergePeerOutcomes([], ['10.0.0.1'], j, 'no peer found for ips [10.0.0.1]')).toEqual([
      { ip: '10.0.0.1', jobID: 7, state: 'Failed', message: 'no peer found for ips [10.0.0.1]' },
    ]);
  });

  it('reads a real get_task result (IsFinished, host_type), one entry per IP', () => {
    // As manager v2.5.1 answered (test/e2e/node-preheat.test.ts, recorded 2026-11-24).
    const j = job([
      {
        peers: [
          {
            IsFinished: true,
            host_type: 'normal',
            hostname: 'peer-1',
            id: '127.0.0.185-peer-1',
            ip: '127.0.0.185',
          },
          {
            IsFinished: true,
            host_type: 'super',
            hostname: 'seed',
            id: '127.0.0.184-seed-seed',
            ip: '127.0.0.184',
          },
          {
            IsFinished: false,
            host_type: 'normal',
            hostname: 'peer-1',
            id: '127.0.0.185-peer-1',
            ip: '127.0.0.185',
          },
        ],
        scheduler_cluster_id: 1,
      },
    ]);
    expect(jobTaskPeers(j)).toEqual([
      { id: '127.0.0.184-seed-seed', hostname: 'seed', ip: '127.0.0.184', hostType: 'super', finished: true },
      { id: '127.0.0.185-peer-1', hostname: 'peer-1', ip: '127.0.0.185', hostType: 'normal', finished: true },
    ]);
  });
});

describe('ServedModel: node targets and per-replica gates', () => {
  const sm = ServedModelSpec.parse({
    modelName: 'm',
    fileName: 'm.mar',
    modelServer: { service: { name: 'ts' } },
    preheat: {
      create: true,
      objectStorage: { type: 's3', bucket: 'b', region: 'us-east-1', credentialsSecretRef: { name: 'c' } },
    },
  });

  it('the owned preheat targets the nodes (all_peers) when their IPs are known, else the seed peers', () => {
    expect(ownedPreheatSpec(sm, ['10.0.0.2', '10.0.0.1', '10.0.0.2'])).toMatchObject({
      scope: 'all_peers',
      targets: { ips: ['10.0.0.1', '10.0.0.2'] },
    });
    const fallback = ownedPreheatSpec(sm, []);
    expect(fallback['targets']).toBeUndefined();
    expect(fallback['scope']).toBeUndefined();
    // An explicit seed scope turns node targeting off.
    const seeds = ServedModelSpec.parse({ ...sm, preheat: { ...sm.preheat, scope: 'all_seed_peers' } });
    expect(ownedPreheatSpec(seeds, ['10.0.0.1'])).toMatchObject({ scope: 'all_seed_peers' });
    expect(ModelPreheatSpec.safeParse(ownedPreheatSpec(sm, ['10.0.0.1'])).success).toBe(true);
  });

  it('targetNodes needs create and a node scope', () => {
    const bad = ServedModelSpec.safeParse({
      ...sm,
      preheat: { ...sm.preheat, scope: 'single_seed_peer', targetNodes: true },
    });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.message).toMatch(/targetNodes preheats node peers/);
  });

  it('targets need a multi-peer scope and one of ips, count, percentage; ips are IPs', () => {
    const base = { objectStorage: spec.objectStorage };
    expect(
      ModelPreheatSpec.safeParse({ ...base, targets: { ips: ['10.0.0.1'] } }).error!.issues[0]!.message,
    ).toMatch(/targets need scope/);
    expect(
      ModelPreheatSpec.safeParse({ ...base, scope: 'all_peers', targets: { ips: ['node-a'] } }).success,
    ).toBe(false);
    expect(
      ModelPreheatSpec.safeParse({ ...base, scope: 'all_peers', targets: { count: 2, percentage: 5 } })
        .success,
    ).toBe(false);
    expect(
      ModelPreheatSpec.safeParse({ ...base, scope: 'all_peers', targets: { ips: ['fd00::1'] } }).success,
    ).toBe(true);
  });

  it('batches new nodes for a window; a removal alone changes nothing', () => {
    expect(batchTargets(undefined, ['b', 'a'], undefined, 2000, 0)).toEqual({ ips: ['a', 'b'] });
    expect(batchTargets(['a', 'b'], ['a'], undefined, 2000, 0)).toEqual({ unchanged: true });
    expect(batchTargets(['a'], ['a', 'c'], undefined, 2000, 0)).toEqual({ waitMs: 2000 });
    expect(batchTargets(['a'], ['a', 'c'], 1000, 2000, 2500)).toEqual({ waitMs: 500 });
    expect(batchTargets(['a'], ['a', 'c', 'd'], 1000, 2000, 3000)).toEqual({ ips: ['a', 'c', 'd'] });
  });

  it('a replica’s gate opens on its own node’s outcome, on the whole preheat, or after the wait bound', () => {
    const preheat = {
      spec,
      status: {
        contentKey: contentKey(spec),
        peers: [
          { ip: '10.0.0.1', state: 'Preheated' },
          { ip: '10.0.0.2', state: 'Failed', message: 'disk full' },
        ],
      },
    } as unknown as ModelPreheat;
    expect(replicaGate(closed, preheat, '10.0.0.1', 0, 60_000, 1000)).toMatchObject({ open: true });
    expect(replicaGate(closed, preheat, '10.0.0.2', 0, 60_000, 1000)).toMatchObject({
      open: true,
      message: expect.stringMatching(/disk full.*downloading anyway/),
    });
    expect(replicaGate(closed, preheat, '10.0.0.3', 0, 60_000, 1000)).toMatchObject({ open: false });
    expect(replicaGate(closed, preheat, '10.0.0.3', 0, 60_000, 60_000)).toMatchObject({ open: true });
    expect(replicaGate({ ...closed, final: true }, preheat, '10.0.0.3', 0, 60_000, 1)).toMatchObject({
      open: true,
    });
    expect(
      replicaGate({ state: 'open', preheatName: 'p', message: 'ok' }, preheat, undefined, 0, 1, 0).open,
    ).toBe(true);
  });

  it('a replica whose node is unknown registers once the preheat’s job is underway', () => {
    const job = (state: string, jobGeneration = 1) =>
      ({
        metadata: { generation: 1 },
        spec,
        status: { contentKey: contentKey(spec), jobID: 3, jobGeneration, state },
      }) as unknown as ModelPreheat;
    expect(replicaGate(closed, job('STARTED'), undefined, 0, 60_000, 1000)).toMatchObject({
      open: true,
      message: expect.stringMatching(/job 3 .*joins its task/),
    });
    expect(replicaGate(closed, job('FAILURE'), undefined, 0, 60_000, 1000)).toMatchObject({ open: false });
    expect(replicaGate(closed, job('STARTED', 0), undefined, 0, 60_000, 1000)).toMatchObject({ open: false });
    expect(replicaGate(closed, undefined, undefined, 0, 60_000, 1000)).toMatchObject({ open: false });
  });

  describe('a version change: the previous content’s preheat opens no gate', () => {
    const v2 = ServedModelSpec.parse({ ...sm, fileName: 'm-2.mar' });
    const ips = ['10.0.0.1'];
    const stored = (s: ServedModelSpec) => ModelPreheatSpec.parse(ownedPreheatSpec(s, ips));
    /** The owned preheat of `sm` as the cache holds it: v1 preheated on the node's peer. */
    const v1Preheated = (over: Partial<ModelPreheat> = {}) =>
      ({
        metadata: {
          name: 'm-preheat',
          namespace: 'ns',
          generation: 1,
          ownerReferences: [{ controller: true, uid: 'u' }],
        },
        spec: stored(sm),
        status: {
          contentKey: contentKey(stored(sm)),
          peers: [{ ip: '10.0.0.1', state: 'Preheated' }],
          conditions: [
            {
              type: 'Succeeded',
              status: 'True',
              reason: 'JobSucceeded',
              message: 'ok',
              observedGeneration: 1,
            },
          ],
        },
        ...over,
      }) as unknown as ModelPreheat;

    it('by its spec (the cache behind the update) or its status (the new job not started yet)', () => {
      expect(preheatsOtherContent(v1Preheated(), ownedPreheatSpec(sm, ips))).toBe(false);
      // Other targets are the same content: a node more is not a new version.
      expect(preheatsOtherContent(v1Preheated(), ownedPreheatSpec(sm, ['10.0.0.9']))).toBe(false);
      expect(preheatsOtherContent(v1Preheated(), ownedPreheatSpec(v2, ips))).toBe(true);
      const updated = v1Preheated({ spec: stored(v2) });
      expect(preheatsOtherContent(updated, ownedPreheatSpec(v2, ips))).toBe(true);
      const started = { ...updated, status: { ...updated.status, contentKey: contentKey(stored(v2)) } };
      expect(preheatsOtherContent(started, ownedPreheatSpec(v2, ips))).toBe(false);
      // A preheat that never started a job says nothing of its content yet: its conditions decide.
      expect(preheatsOtherContent({ ...updated, status: {} }, ownedPreheatSpec(v2, ips))).toBe(false);
    });

    it('the replica waits for its node’s preheat of the new version, while the owned preheat is updated', async () => {
      const updates: ModelPreheat[] = [];
      const cached = v1Preheated();
      const gates = new ReplicaGates({
        kube: {
          resource: () => ({
            update: async (o: ModelPreheat) => (updates.push(o), o),
          }),
        } as never,
        preheats: {
          getByName: (_ns: string, name: string) => (name === 'm-preheat' ? cached : undefined),
        } as never,
        nodeAddresses: { internalIPs: async () => new Map([['n1', '10.0.0.1']]) } as never,
        batchWindowMs: 0,
      });
      const endpoint = 'http://198.18.0.1:8085';
      const discovery = { replicas: [{ endpoint, pod: 'p', node: 'n1' }], startingNodes: [] };
      const of = (s: ServedModelSpec, generation: number) =>
        gates.of(
          'ns/m',
          { metadata: { name: 'm', namespace: 'ns', uid: 'u', generation }, spec: s } as never,
          s,
          discovery,
          new Map(),
          new AbortController().signal,
        );
      const same = await of(sm, 1);
      expect(same.gates.get(endpoint)).toMatchObject({ open: true });
      expect(updates).toEqual([]);
      const changed = await of(v2, 2);
      expect(updates.map((u) => u.spec.objectStorage?.keys)).toEqual([['m-2.mar']]);
      expect(changed.gate).toMatchObject({ state: 'closed', reason: 'PreheatInProgress' });
      expect(changed.gate.state === 'closed' && changed.gate.message).toMatch(/holds the previous one/);
      expect(changed.preheat).toBeUndefined();
      expect(changed.gates.get(endpoint)).toMatchObject({ open: false });
    });
  });

  it('a replica’s gate ignores peers that hold the content before a spec change (an earlier version)', () => {
    const other = ModelPreheatSpec.parse({
      ...spec,
      objectStorage: { ...spec.objectStorage!, keys: ['v2.mar'] },
    });
    // The spec names v2; the status still says what the v1 job did.
    const preheat = {
      spec: other,
      status: { contentKey: contentKey(spec), peers: [{ ip: '10.0.0.1', state: 'Preheated' }] },
    } as unknown as ModelPreheat;
    expect(peersOfSpec(preheat)).toEqual([]);
    expect(replicaGate(closed, preheat, '10.0.0.1', 0, 60_000, 1000)).toMatchObject({ open: false });
    const started = {
      ...preheat,
      status: { ...preheat.status, contentKey: contentKey(other) },
    } as ModelPreheat;
    expect(replicaGate(closed, started, '10.0.0.1', 0, 60_000, 1000)).toMatchObject({ open: true });
  });

  it('discovery: ready pods are replicas with their node; starting pods only name their node', () => {
    const d = discoverReplicas(sm, [
      {
        metadata: { name: 's', labels: {} },
        addressType: 'IPv4',
        ports: [{ name: 'management', port: 8081 }],
        endpoints: [
          { addresses: ['10.1.0.1'], conditions: { ready: true }, nodeName: 'n1' },
          { addresses: ['10.1.0.2'], conditions: { ready: false }, nodeName: 'n2' },
          { addresses: ['10.1.0.3'], conditions: { ready: false, terminating: true }, nodeName: 'n3' },
        ],
      },
    ]);
    expect(d.replicas).toEqual([{ endpoint: 'http://10.1.0.1:8081', node: 'n1' }]);
    expect(d.startingNodes).toEqual(['n2']);
  });
});
