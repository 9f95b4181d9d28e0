/**
 * Deletion keeps its word: with replicas that cannot be reached, a ServedModel says at once which ones and until
 * when it waits (condition + Event), and it is released within 10 s of its grace deadline, naming each replica it
 * let go of.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { ServiceEndpoints } from '../support/endpointslices.ts';
import { startServedModelOperator, type RunningManager } from '../support/runtime-harness.ts';
import { archiveServedModel, testNamespace, type PeerloadNamespace } from '../support/resources.ts';

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns = '';
let operator: RunningManager;
let fleet: ModelServerFleet | undefined;

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('smdel'));
  // The operator's default grace is long: the 30 s below comes from the ServedModel's own spec.
  operator = await startServedModelOperator(kc, ns, {
    maxBackoff: '5s',
    flags: ['--cleanup-grace-period', '10m'],
  });
});

afterAll(async () => {
  await operator?.stop();
  await fleet?.close();
});

const get = (name: string) => sms.getServedModel(name);
const gone = (name: string) => sms.servedModelGone(name);

async function notes(name: string, reason: string): Promise<string[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items.filter((e) => e.regarding?.name === name && e.reason === reason).map((e) => e.note ?? '');
}

describe('ServedModel deletion', () => {
  it('10 replicas, 3 unreachable, grace 30 s: says so at once, released in 30-40 s naming each abandoned one', async () => {
    fleet = await startModelServerFleet(10, { workerStartMs: 20 });
    await ServiceEndpoints.of(kc, ns, 'ts', fleet.urls);
    await sms.createServedModel(
      'del',
      archiveServedModel('resnet-18', 'ts', { deletion: { gracePeriod: '30s' } }),
    );
    await waitFor('10/10 ready', async () => (await get('del')).status?.ready === '10/10', {
      timeoutMs: 60_000,
    });
    const down = [2, 5, 9];
    for (const i of down) await fleet.instances[i]!.inject({ mode: 'down' });
    const downPods = down.map((i) => `ts-${i}`);

    const deletedAt = Date.now();
    await sms.deleteServedModel('del');

    // At once: the Ready condition and an Event name the replicas left and the deadline.
    const pending = await waitFor(
      'Deleting condition',
      async () => {
        const o = await get('del');
        const ready = o.status?.conditions?.find((c) => c.type === 'Ready');
        return ready?.reason === 'Deleting' ? { o, ready } : undefined;
      },
      { timeoutMs: 5_000, intervalMs: 100 },
    );
    const deadline = new Date(Date.parse(pending.o.metadata.deletionTimestamp!) + 30_000).toISOString();
    expect(pending.ready.status).toBe('False');
    for (const pod of downPods) expect(pending.ready.message).toContain(pod);
    expect(pending.ready.message).toContain(deadline);
    expect(pending.ready.message).toContain('3 of 10 replica(s)');
    const pendingNotes = await waitFor('CleanupPending Event', async () => {
      const n = await notes('del', 'CleanupPending');
      return n.length > 0 ? n : undefined;
    });
    for (const pod of downPods) expect(pendingNotes[0]).toContain(pod);
    expect(pendingNotes[0]).toContain(deadline);
    for (const [i, inst] of fleet.instances.entries())
      if (!down.includes(i)) expect(inst.modelNames(), `ts-${i} cleaned at once`).toEqual([]);

    await waitFor('released', () => gone('del'), { timeoutMs: 45_000, intervalMs: 100 });
    const took = (Date.now() - deletedAt) / 1000;
    expect(took).toBeGreaterThanOrEqual(29); // deletionTimestamp has whole seconds: up to 1 s before our clock
    expect(took).toBeLessThanOrEqual(40);

    const abandoned = await waitFor('CleanupAbandoned Event', async () => {
      const n = await notes('del', 'CleanupAbandoned');
      return n.length > 0 ? n[0] : undefined;
    });
    for (const pod of downPods) expect(abandoned).toContain(pod);
    expect(abandoned).toContain('3 replica(s)');
    for (const i of down) expect(fleet.instances[i]!.modelNames()).toEqual(['resnet-18']);
  }, 120_000);
});
