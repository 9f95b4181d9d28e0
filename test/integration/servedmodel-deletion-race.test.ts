/**
 * A ServedModel deleted while its registrations are under way (one POSTed and downloading on a replica, others
 * waiting for a slot) ends unregistered everywhere with its finalizer removed: no registration started or finished
 * by the operator lands after the deletion's unregister pass (the race of commit 8901d2c).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { waitFor } from '../support/kube.ts';
import { startModelServerFleet, type ModelServerFleet } from '../support/modelserver-emulator.ts';
import { ServiceEndpoints } from '../support/endpointslices.ts';
import { startServedModelOperator, type RunningManager } from '../support/runtime-harness.ts';
import { archiveServedModel, testNamespace, type PeerloadNamespace } from '../support/resources.ts';

/** How long the emulated plugin takes for one download + registration. */
const REGISTRATION_MS = 2_000;

let kc: k8s.KubeConfig;
let sms: PeerloadNamespace;
let ns = '';
let operator: RunningManager;
let fleet: ModelServerFleet | undefined;

beforeAll(async () => {
  ({ kc, ns, peerload: sms } = await testNamespace('smrace'));
  operator = await startServedModelOperator(kc, ns, { maxBackoff: '2s' });
});

afterAll(async () => {
  await operator?.stop();
  await fleet?.close();
});

const gone = (name: string) => sms.servedModelGone(name);

describe('ServedModel deleted mid-registration', () => {
  it('ends with the model registered on no replica and the finalizer removed', async () => {
    fleet = await startModelServerFleet(3, { registrationLatencyMs: REGISTRATION_MS, workerStartMs: 20 });
    await ServiceEndpoints.of(kc, ns, 'ts', fleet.urls);
    await sms.createServedModel(
      'race',
      archiveServedModel('resnet-18', 'ts', {
        // One at a time, the seed first: when the deletion comes, one registration runs, the others wait.
        rollout: { maxConcurrent: 1, seedFirst: true },
        deletion: { gracePeriod: '30s' },
      }),
    );
    const posted = () => fleet!.stats().registrationAttempts + fleet!.stats().pluginRegistrationsStarted;
    await waitFor('a registration POSTed', async () => posted() > 0, { timeoutMs: 20_000, intervalMs: 20 });
    const sm = await sms.getServedModel('race');
    expect(sm.metadata.finalizers).toContain('peerload.io/unregister-model');
    expect(fleet.instances.flatMap((e) => e.modelNames())).toEqual([]); // still downloading

    await sms.deleteServedModel('race');
    await waitFor('finalizer removed, object gone', () => gone('race'), {
      timeoutMs: 30_000,
      intervalMs: 100,
    });
    // Anything the operator had started would have landed by now: the running one within REGISTRATION_MS, a queued
    // one released by the deletion within another.
    await new Promise((r) => setTimeout(r, 2 * REGISTRATION_MS + 1_000));
    for (const [i, e] of fleet.instances.entries()) expect(e.modelNames(), `ts-${i}`).toEqual([]);
    expect(fleet.stats().registrations, 'registrations completed on the model servers').toBe(
      fleet.stats().unregistrations,
    );
  }, 60_000);
});
