/**
 * A scale-out is progress, not failure (real kube-apiserver, 270 emulated model servers): a ServedModel Ready on 250
 * replicas gets 20 more. Ready stays True (reason ScalingOut, Reconciling True) while they are added, the Events are
 * Normal ScalingOut then ScaledOut, and no Warning is recorded; a replica that then loses the model turns Ready
 * False with a Warning NotReady.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import {
  archiveServedModel,
  conditionOf as condition,
  type PeerloadNamespace,
  testNamespace,
} from '../support/resources.ts';
import { ServiceEndpoints } from '../support/endpointslices.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { startServedModelOperator, type RunningManager } from '../support/runtime-harness.ts';

const BEFORE = 250;
const AFTER = 270;

let kc: k8s.KubeConfig;
let ns: string;
let peerload: PeerloadNamespace;
let fleet: ModelServerFleet;
let svc: ServiceEndpoints;
let operator: RunningManager;

beforeAll(async () => {
  ({ kc, ns, peerload } = await testNamespace('smscale'));
  fleet = await startModelServerFleet(AFTER, { registrationLatencyMs: 20, workerStartMs: 20 });
  svc = await ServiceEndpoints.of(kc, ns, 'fleet', fleet.urls.slice(0, BEFORE), 'pod');
  operator = await startServedModelOperator(kc, ns);
}, 180_000);

afterAll(async () => {
  await operator?.stop();
  await fleet?.close();
});

const get = () => peerload.getServedModel('fleet');

async function events(): Promise<string[]> {
  const list = await kc.makeApiClient(k8s.EventsV1Api).listNamespacedEvent({ namespace: ns });
  return list.items
    .filter((e) => e.reason !== 'ModelRegistered')
    .map((e) => `${e.type}/${e.reason}: ${e.note}`);
}

const untilReady = (replicas: number) =>
  peerload.untilReady('fleet', replicas, { reason: 'AllReplicasReady' });

describe('scale-out of a ServedModel on 250 replicas', () => {
  it('250 → 270 replicas: Ready stays True, Reconciling says ScalingOut, no Warning Event', async () => {
    await peerload.createServedModel(
      'fleet',
      archiveServedModel('fleet', 'fleet', { rollout: { maxConcurrent: 50 } }),
    );
    await untilReady(BEFORE);
    expect((await events()).filter((e) => e.startsWith('Normal/Ready'))).toHaveLength(1);

    // Ready as the apiserver holds it, sampled while the 20 replicas are added.
    const seen: string[] = [];
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        const sm = await get();
        const [ready, reconciling] = [condition(sm, 'Ready'), condition(sm, 'Reconciling')];
        seen.push(`${ready?.status}/${ready?.reason} ${reconciling?.reason ?? '-'} ${sm.status?.ready}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    for (let i = BEFORE; i < AFTER; i++) await svc.add(`pod-${i}`, fleet.urls[i]!);
    const done = await untilReady(AFTER);
    sampling = false;
    await sampler;

    expect(done.status!.ready).toBe(`${AFTER}/${AFTER}`);
    expect(
      seen.filter((s) => !s.startsWith('True/')),
      seen.join('\n'),
    ).toEqual([]);
    const recorded = await events();
    expect(recorded.filter((e) => e.startsWith('Warning/'))).toEqual([]);
    const scaling = recorded.filter((e) => e.startsWith('Normal/ScalingOut'));
    expect(scaling.length).toBeGreaterThanOrEqual(1);
    expect(scaling[0]).toMatch(
      /^Normal\/ScalingOut: fleet is ready on 25\d\/2[5-7]\d replica\(s\); \d+ replica\(s\) being added$/,
    );
    expect(recorded).toContain(`Normal/ScaledOut: fleet is ready on ${AFTER}/${AFTER} replica(s)`);
    for (const inst of fleet.instances) expect(inst.modelNames()).toEqual(['fleet']);
  }, 240_000);

  it('a replica that loses the model (its pod restarted, the server empty) turns Ready False with a Warning', async () => {
    fleet.instances[7]!.wipe();
    await svc.recreate('pod-7');
    const notReady = await peerload.untilServedModel(
      'fleet',
      'Ready False',
      (sm) => condition(sm, 'Ready')?.status === 'False',
      { timeoutMs: 30_000, intervalMs: 100 },
    );
    expect(condition(notReady, 'Reconciling')).toMatchObject({ status: 'True' });
    await waitFor('Warning NotReady', async () =>
      (await events()).some((e) => e.startsWith('Warning/NotReady')) ? true : undefined,
    );
    // The replica gets the model again.
    await untilReady(AFTER);
  }, 120_000);
});
