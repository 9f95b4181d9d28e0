import { describe, expect, it } from 'vitest';
import { type ModelPreheat } from '../../src/api/index.ts';
import { targetedS3Preheat } from '../fixtures/preheats.ts';
import { contentKey } from '../../src/controllers/modelpreheat/targets.ts';
import { jobRunningOn, replicaGate, type Gate } from '../../src/controllers/servedmodel/preheat.ts';
import {
  assignBatches,
  batchIndexOf,
  batchPreheatName,
  combineGates,
  nodePreheatSummary,
} from '../../src/controllers/servedmodel/preheat-batches.ts';
import { closedGate as closed } from '../fixtures/gates.ts';

const ips = (n: number, from = 0) =>
  Array.from({ length: n }, (_, i) => `10.0.${Math.floor((from + i) / 250)}.${((from + i) % 250) + 1}`);

const preheat = (
  name: string,
  targets: string[],
  status: Partial<NonNullable<ModelPreheat['status']>>,
  generation = 2,
): ModelPreheat => {
  const spec = targetedS3Preheat(targets);
  return {
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ModelPreheat',
    metadata: { name, namespace: 'ns', generation },
    spec,
    status: { contentKey: contentKey(spec), ...status },
  } as ModelPreheat;
};

describe('node targeting in batches of at most 100 IPs', () => {
  const sm = { metadata: { name: 'llm' } };

  it('names batch 0 as the single owned preheat, the next ones with a suffix, and reads the index back', () => {
    expect(batchPreheatName(sm, 0)).toBe('llm-preheat');
    expect(batchPreheatName(sm, 3)).toBe('llm-preheat-3');
    expect(batchIndexOf(sm, 'llm-preheat')).toBe(0);
    expect(batchIndexOf(sm, 'llm-preheat-12')).toBe(12);
    expect(batchIndexOf(sm, 'other-preheat-1')).toBeUndefined();
    expect(batchIndexOf(sm, 'llm-preheat-0')).toBeUndefined();
    const long = { metadata: { name: 'x'.repeat(253) } };
    expect(batchPreheatName(long, 7)).toHaveLength(253);
    expect(batchPreheatName(long, 7).endsWith('-7')).toBe(true);
  });

  it('splits 1,000 nodes into 10 batches of 100, every node in exactly one', () => {
    const all = ips(1000);
    const batches = assignBatches([undefined], all);
    expect(batches).toHaveLength(10);
    expect(batches.every((b) => b!.length === 100)).toBe(true);
    expect(new Set(batches.flatMap((b) => b!)).size).toBe(1000);
    // 101 nodes: the 101st opens a second batch.
    expect(assignBatches([undefined], ips(101)).map((b) => b!.length)).toEqual([100, 1]);
  });

  it('a node keeps its batch; new nodes fill the batches with room, then a new one; a removal alone changes nothing', () => {
    const first = ips(100);
    const second = ips(50, 100);
    const current = [first, second];
    // Nothing new: every batch is left as it is (the same array), departed nodes included.
    const shrunk = assignBatches(current, [...first.slice(0, 90), ...second]);
    expect(shrunk[0]).toBe(first);
    expect(shrunk[1]).toBe(second);
    // 60 new nodes: the first batch has room only for what left it (10), the second takes 50, none is created.
    const fresh = ips(60, 150);
    const grown = assignBatches(current, [...first.slice(0, 90), ...second, ...fresh]);
    expect(grown).toHaveLength(2);
    expect(grown[0]).toHaveLength(100);
    expect(grown[0]).toEqual(expect.arrayContaining(first.slice(0, 90)));
    expect(grown[0]).not.toContain(first[95]);
    expect(grown[1]).toHaveLength(100);
    expect(grown[1]).toEqual(expect.arrayContaining(second));
    // One more: a third batch, holding it alone.
    const more = assignBatches(grown, [...grown[0]!, ...grown[1]!, '10.9.9.9']);
    expect(more[0]).toBe(grown[0]);
    expect(more[1]).toBe(grown[1]);
    expect(more[2]).toEqual(['10.9.9.9']);
  });

  it('the gate as a whole: open when every batch succeeded, else a failure first, else the first closed one', () => {
    const open: Gate = { state: 'open', preheatName: 'a', message: 'ok' };
    const waiting: Gate = {
      state: 'closed',
      preheatName: 'b',
      reason: 'PreheatInProgress',
      message: 'w',
      final: false,
    };
    const failed: Gate = {
      state: 'closed',
      preheatName: 'c',
      reason: 'PreheatFailed',
      message: 'f',
      final: true,
    };
    expect(combineGates([open], 'a')).toBe(open);
    expect(combineGates([open, open], 'a')).toMatchObject({
      state: 'open',
      message: 'all 2 node batches preheated',
    });
    expect(combineGates([open, waiting, failed], 'a')).toBe(failed);
    expect(combineGates([open, waiting], 'a')).toBe(waiting);
  });

  it('status in counts over the batches, with the first failures only, whatever the number of nodes', () => {
    const batches = Array.from({ length: 10 }, (_, b) => {
      const mine = ips(100, b * 100);
      return preheat(b === 0 ? 'llm-preheat' : `llm-preheat-${b}`, mine, {
        peers: mine
          .slice(0, 80)
          .map((ip, i) =>
            i < 70
              ? { ip, state: 'Preheated' as const }
              : { ip, state: 'Failed' as const, message: 'disk full' },
          ),
        // Batch 9 has a job of its generation running: on its 20 new nodes and on its 10 failed ones again.
        ...(b === 9 ? { jobID: 42, jobGeneration: 2, state: 'PENDING' as const } : {}),
      });
    });
    const s = nodePreheatSummary(batches);
    expect(s).toMatchObject({ batches: 10, nodes: 1000, preheated: 700, failed: 90, fetching: 30 });
    expect(s.failures).toHaveLength(10);
    expect(s.failures![0]).toEqual({ ip: ips(1, 70)[0], preheat: 'llm-preheat', message: 'disk full' });
    expect(JSON.stringify(s).length).toBeLessThan(2048);
    // Peers remembered for another content (the model changed, no job yet) count as nothing.
    const stale = preheat('llm-preheat', ips(2), {
      contentKey: 'other',
      peers: [{ ip: ips(1)[0]!, state: 'Preheated' }],
    });
    expect(nodePreheatSummary([stale])).toEqual({
      batches: 1,
      nodes: 2,
      preheated: 0,
      fetching: 0,
      failed: 0,
    });
  });
});

describe("a replica's gate opens once its node's job was created (the download joins the running task)", () => {
  const node = '10.0.0.1';

  it('a job of the current generation, not ended, naming the node: open, with the job named', () => {
    const running = preheat('p', [node], { jobID: 9, jobGeneration: 2, state: 'PENDING' });
    expect(jobRunningOn(running, node)).toBe(9);
    expect(replicaGate(closed, running, node, 0, 60_000, 1)).toEqual({
      open: true,
      message: "node 10.0.0.1's peer is fetching the model (preheat job 9): the download joins it",
    });
  });

  it('not for another node, a job of an older generation, an ended job, or before any job', () => {
    const running = preheat('p', [node], { jobID: 9, jobGeneration: 2, state: 'STARTED' });
    expect(jobRunningOn(running, '10.0.0.2')).toBeUndefined();
    expect(replicaGate(closed, running, '10.0.0.2', 0, 60_000, 1).open).toBe(false);
    // The spec gained the node (generation 3): the running job is the one of generation 2, without it.
    expect(
      jobRunningOn({ ...running, metadata: { ...running.metadata, generation: 3 } }, node),
    ).toBeUndefined();
    expect(
      jobRunningOn(preheat('p', [node], { jobID: 9, jobGeneration: 2, state: 'FAILURE' }), node),
    ).toBeUndefined();
    expect(
      jobRunningOn(preheat('p', [node], { jobID: 9, jobGeneration: 2, state: 'SUCCESS' }), node),
    ).toBeUndefined();
    expect(jobRunningOn(preheat('p', [node], {}), node)).toBeUndefined();
  });
});
