/**
 * Work queue + controller against the real apiserver, with a recording test controller over ConfigMaps:
 * retries with growing delays, bursts collapsing into few non-concurrent reconciles, terminal errors,
 * requeueAfter, and level-triggered reads from the cache.
 */
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { TerminalError } from '../../src/runtime/index.ts';
import { createNamespace, kubeConfig, waitFor } from '../support/kube.ts';
import { startManager, type RunningManager } from '../support/runtime-harness.ts';
import { overlaps, recordingController, sleep, type ReconcileRecord } from '../support/test-operator.ts';

const kc = kubeConfig(inject('kubeconfigPath'));
const core = kc.makeApiClient(k8s.CoreV1Api);
let ns: string;
let op: RunningManager;
const records: ReconcileRecord[] = [];
const starts = (key: string) => records.filter((r) => r.phase === 'start' && r.key === `${ns}/${key}`);
const failures = new Map<string, number>();
/** Reconciles in mode `gated` wait for this to open (the burst test holds one reconcile in flight). */
let gate: { opened: Promise<void>; open: () => void } | undefined;

beforeAll(async () => {
  ns = await createNamespace(kc, 'rt-ctrl');
  op = await startManager(
    kc,
    ['--namespace', ns, '--no-leader-elect', '--workers', '4'],
    [
      recordingController({
        identity: 'in-process',
        record: (r) => records.push(r),
        rateLimiter: { baseDelayMs: 40, maxDelayMs: 10_000, jitter: 0.1 },
        behavior: async (cm, ctx) => {
          const mode = cm?.data?.mode;
          if (mode === 'fail5') {
            const n = failures.get(ctx.key) ?? 0;
            failures.set(ctx.key, n + 1);
            if (n < 5) throw new Error(`failure ${n + 1}`);
          } else if (mode === 'terminal') {
            throw new TerminalError('spec cannot work');
          } else if (mode === 'poll') {
            const n = failures.get(ctx.key) ?? 0;
            failures.set(ctx.key, n + 1);
            if (n < 3) return { requeueAfter: 150 };
          } else if (mode === 'gated') {
            await gate?.opened;
          }
        },
      }),
    ],
  );
  await waitFor('manager ready', async () => (await fetch(op.url('/readyz'))).status === 200);
});

afterAll(async () => {
  expect(await op?.stop()).toBe(0);
  await core.deleteNamespace({ name: ns }).catch(() => undefined);
});

const create = (name: string, data: Record<string, string>) =>
  core.createNamespacedConfigMap({ namespace: ns, body: { metadata: { name }, data } });

describe('controller runtime: work queue', () => {
  it('retries a key that fails 5 times with growing delays, then it succeeds and stops', async () => {
    await create('fail5', { mode: 'fail5' });
    await waitFor('6 reconciles', () => starts('fail5').length >= 6, { timeoutMs: 20_000 });
    await sleep(1500);
    const s = starts('fail5');
    expect(s).toHaveLength(6); // 5 failures + 1 success, then nothing more
    const ends = records.filter((r) => r.phase === 'end' && r.key === `${ns}/fail5`);
    expect(ends.slice(0, 5).every((e) => e.error)).toBe(true);
    expect(ends[5]!.error).toBeUndefined();
    const gaps = s.slice(1).map((r, i) => r.t - ends[i]!.t);
    // base 40 ms doubling: 40, 80, 160, 320, 640 (+ up to 10% jitter)
    gaps.forEach((g, i) => expect(g).toBeGreaterThanOrEqual(40 * 2 ** i - 2));
    for (let i = 1; i < gaps.length; i++) expect(gaps[i]!).toBeGreaterThan(gaps[i - 1]!);
  });

  it('collapses a burst of 100 updates to one object into far fewer, never concurrent, reconciles', async () => {
    // A reconcile of the key is held in flight while the 100 updates land, so how far they collapse does not depend
    // on how fast this machine patches compared with how long a reconcile takes.
    let open!: () => void;
    gate = { opened: new Promise<void>((r) => (open = r)), open };
    try {
      await create('burst', { mode: 'gated', n: '0' });
      await waitFor('first reconcile', () => starts('burst').length >= 1);
      const before = starts('burst').length;
      for (let i = 1; i <= 100; i++) {
        await core.patchNamespacedConfigMap(
          { name: 'burst', namespace: ns, body: { data: { mode: 'gated', n: String(i) } } },
          k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
        );
      }
      await sleep(300); // the watch delivers the updates to the cache while the reconcile is held
      expect(starts('burst').length).toBe(before); // one key in flight is never started twice
      gate.open();
      await waitFor('reconcile of the last update', () => starts('burst').some((r) => r.data?.n === '100'));
      await sleep(300);
      const burst = starts('burst').length - before;
      expect(burst).toBeGreaterThan(0);
      expect(burst).toBeLessThanOrEqual(3); // 100 updates while one reconcile was in flight: the key is dirty once
      expect(overlaps(records, true)).toEqual([]);
      expect(starts('burst').at(-1)!.data?.n).toBe('100'); // level-triggered: the last one saw the last state
    } finally {
      gate.open();
      gate = undefined;
    }
  });

  it('does not retry a terminal error', async () => {
    await create('terminal', { mode: 'terminal' });
    await waitFor('reconcile', () => starts('terminal').length >= 1);
    await sleep(1000);
    expect(starts('terminal')).toHaveLength(1);
    const metrics = await (await fetch(op.url('/metrics'))).text();
    expect(metrics).toMatch(
      /^controller_runtime_reconcile_total\{controller="test-configmaps",result="terminal"\} 1/m,
    );
  });

  it('honours requeueAfter for polling', async () => {
    await create('poll', { mode: 'poll' });
    await waitFor('4 reconciles', () => starts('poll').length >= 4, { timeoutMs: 10_000 });
    const s = starts('poll');
    for (let i = 1; i < 4; i++) expect(s[i]!.t - s[i - 1]!.t).toBeGreaterThanOrEqual(145);
    await sleep(500);
    expect(starts('poll')).toHaveLength(4);
  });

  it('reconciles deletions with the object gone from the cache', async () => {
    await create('gone', { mode: 'ok' });
    await waitFor('reconcile', () => starts('gone').length >= 1);
    await core.deleteNamespacedConfigMap({ name: 'gone', namespace: ns });
    await waitFor('reconcile of the deletion', () => starts('gone').some((r) => r.data === null));
  });

  it('sends nothing but its watches when idle', async () => {
    await sleep(1500); // let the keys above settle
    const n = op.requests.filter((r) => !r.watch).length;
    await sleep(2500);
    expect(op.requests.filter((r) => !r.watch).length).toBe(n);
  });
});
