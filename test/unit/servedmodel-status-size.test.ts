import { describe, expect, it } from 'vitest';
import { ServedModelStatus } from '../../src/api/index.ts';
import { withServedModelConditions } from '../../src/controllers/servedmodel/conditions.ts';
import { boundedRows, MESSAGES_KEPT } from '../../src/controllers/servedmodel/replica-rows.ts';
import { summarize, withReplicas } from '../../src/controllers/servedmodel/replica-status.ts';
import type { ReplicaOutcome } from '../../src/controllers/servedmodel/replica.ts';

type Row = NonNullable<ServedModelStatus['replicas']>[number];
const now = new Date('2026-11-26T17:00:00.000Z');
const STATUS_LIMIT = 256 * 1024;

/** What the row of a replica serving the model says of it: what a compact row keeps, beside its endpoint. */
const SERVING = {
  registered: true,
  version: '1.0',
  readyWorkers: 1,
  ready: true,
  phase: 'Ready',
  since: now.toISOString(),
} as const;

/** A replica as a cluster names it: pod and node names of a managed cluster's length. */
const row = (i: number, over: Partial<Row> = {}): Row => ({
  endpoint: `http://10.244.${Math.floor(i / 250)}.${i % 250}:8081`,
  pod: `llama-3-8b-torchserve-7d9f8b6c5d-${String(i).padStart(5, 'x')}`,
  podUID: `0f4c2a9e-3b1d-4c8e-9a7f-${String(i).padStart(12, '0')}`,
  ...SERVING,
  node: `ip-10-0-${Math.floor(i / 250)}-${i % 250}.eu-west-1.compute.internal`,
  nodeIP: `10.0.${Math.floor(i / 250)}.${i % 250}`,
  localHit: true,
  lastUpdateTime: now.toISOString(),
  ...over,
});

/** The whole status of a ServedModel whose pass saw `rows`, as the reconciler writes it. */
function statusOf(rows: Row[]): ServedModelStatus {
  const outcomes = rows.map((status) => ({ status, events: [] }) as unknown as ReplicaOutcome);
  const gate = {
    state: 'open' as const,
    preheatName: 'llm-preheat',
    message: 'all 10 node batches preheated',
  };
  const summary = summarize({
    modelName: 'llm',
    serviceName: 'ts',
    serviceFound: true,
    discovery: {
      replicas: rows.map((r) => ({ endpoint: r.endpoint, node: r.node!, pod: r.pod!, ready: true })),
      startingNodes: [],
    } as never,
    outcomes,
    previous: new Map(rows.map((r) => [r.endpoint, r])),
    nodeIPs: new Map(rows.map((r) => [r.node!, r.nodeIP!])),
    gate,
    wasReady: false,
    now,
  });
  const nodePreheat = {
    batches: 10,
    nodes: 1000,
    preheated: 990,
    fetching: 0,
    failed: 10,
    failures: Array.from({ length: 10 }, (_, i) => ({
      ip: `10.0.9.${i}`,
      preheat: 'llm-preheat-9',
      message: 'x'.repeat(200),
    })),
  };
  return withServedModelConditions(
    withReplicas({ observedGeneration: 1 }, summary, gate, undefined, nodePreheat),
    1,
    summary.conditions,
  );
}

const bytes = (o: unknown) => Buffer.byteLength(JSON.stringify(o));

describe('status size of a ServedModel on 1,000 nodes', () => {
  it('full rows would pass 256 KiB: they are compact then, the whole status well under it', () => {
    const rows = Array.from({ length: 1000 }, (_, i) => row(i));
    expect(bytes(rows)).toBeGreaterThan(STATUS_LIMIT);
    const status = statusOf(rows);
    expect(bytes(status)).toBeLessThan(STATUS_LIMIT);
    expect(ServedModelStatus.safeParse(status).success).toBe(true);
    // What the next pass reads back is all there; where it runs is not.
    const first = status.replicas![0]!;
    expect(first).toEqual({ endpoint: 'http://10.244.0.0:8081', ...SERVING, localHit: true });
    expect(status.nodePreheat).toMatchObject({ batches: 10, nodes: 1000, failed: 10 });
  });

  it('1,000 replicas waiting with long messages: the first messages stay, the status stays under the bound', () => {
    const message = `waiting for node 10.0.3.4's peer to be preheated (llm-preheat-3; at most 300s) ${'y'.repeat(900)}`;
    const rows = Array.from({ length: 1000 }, (_, i) =>
      row(i, { ready: false, readyWorkers: 0, registered: false, phase: 'Pending', message }),
    );
    const status = statusOf(rows);
    expect(bytes(status)).toBeLessThan(STATUS_LIMIT);
    expect(status.replicas!.filter((r) => r.message !== undefined)).toHaveLength(MESSAGES_KEPT);
    expect(status.replicas!.every((r) => r.since === now.toISOString() && r.phase === 'Pending')).toBe(true);
  });

  it('rows within the budget are left as they are (the same array)', () => {
    const rows = Array.from({ length: 100 }, (_, i) => row(i));
    expect(boundedRows(rows)).toBe(rows);
  });
});
