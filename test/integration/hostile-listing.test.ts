/**
 * One tenant's hostile object storage must not stall or kill the operator for everyone. Tenant A's prefix
 * ModelPreheats name an S3 (and an Azure) look-alike of its own (test/support/hostile-storage.ts) that streams an
 * endless ListObjectsV2 page, sends a 100 MB page, never answers, answers 500 with 1 MB of `a` and `://`, or says
 * "truncated" forever. The operator is `peerload operator` in a process of its own with the Deployment's
 * NODE_OPTIONS (`--max-old-space-size=160`). Tenant B's prefix ModelPreheat (a correct store) must succeed within
 * 2x its time alone while A's objects are worked on, the operator must not restart, its RSS stays bounded, and
 * each of A's objects ends with a condition that names the bound and the field to change.
 */
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { createNamespace, createSecret, kubeConfig, peerloadResources, waitFor } from '../support/kube.ts';
import { soloOperatorFlags } from '../support/runtime-harness.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { startOperatorProcess, watchOperator, type OperatorProcess } from '../support/operator-process.ts';
import { startHostileStorage, type HostileStorage } from '../support/hostile-storage.ts';
import type { Condition, ModelPreheat } from '../../src/api/index.ts';

/** The Deployment's (deploy/base/deployment.yaml). */
const NODE_OPTIONS = '--max-old-space-size=160 --max-semi-space-size=4';
/** The Deployment's memory limit is 512 MiB: the operator must stay well below it. */
const RSS_BOUND = 320 * 1024 * 1024;

let kc: k8s.KubeConfig;
let nsA: string;
let nsB: string;
let opNs: string;
let storage: HostileStorage;
let peer: PeerProxy;
let manager: ManagerEmulator;
let operator: OperatorProcess;
/** The operator's pid and memory through the test. */
let watch: ReturnType<typeof watchOperator> | undefined;

let preheats: ReturnType<typeof peerloadResources<ModelPreheat>>;

const create = (ns: string, name: string, objectStorage: Record<string, unknown>) =>
  preheats.create(ns, name, {
    objectStorage: { credentialsSecretRef: { name: 'store' }, prefix: 'm/', ...objectStorage },
  });
const get = (ns: string, name: string) => preheats.get(ns, name);

function until(
  ns: string,
  name: string,
  type: string,
  reason: string,
  timeoutMs = 60_000,
): Promise<Condition> {
  return waitFor(
    `${ns}/${name} ${type}=True (${reason})`,
    async () => {
      const o = await get(ns, name);
      const c = o.status?.conditions?.find((x) => x.type === type);
      return c?.status === 'True' && c.reason === reason && c.observedGeneration === o.metadata.generation
        ? c
        : undefined;
    },
    { timeoutMs, intervalMs: 50 },
  );
}

const s3 = (bucket: string) => ({ type: 's3', bucket, endpoint: storage.url, pathStyle: true });

/** B's directory preheat on a correct store; ms until it Succeeded. */
async function tenantB(name: string): Promise<number> {
  const started = performance.now();
  await create(nsB, name, s3('good'));
  await until(nsB, name, 'Ready', 'JobSucceeded', 120_000);
  return performance.now() - started;
}

beforeAll(async () => {
  const kubeconfigPath = inject('kubeconfigPath');
  kc = kubeConfig(kubeconfigPath);
  preheats = peerloadResources<ModelPreheat>(kc, 'ModelPreheat', 'modelpreheats');
  nsA = await createNamespace(kc, 'hostile-a');
  nsB = await createNamespace(kc, 'hostile-b');
  opNs = await createNamespace(kc, 'hostile-operator');
  // The same storage Secret in both namespaces: the stores are told apart by their buckets.
  const store = {
    access_key: 'AKIAHOSTILETEST0001',
    secret_key: 'hostile-test-secret-key-0123456789abcdef',
    account_key: Buffer.from('hostile-test-account-key-0123456789').toString('base64'),
  };
  await Promise.all([nsA, nsB].map((namespace) => createSecret(kc, namespace, 'store', store)));
  storage = await startHostileStorage();
  peer = await startPeerProxy();
  manager = await startManagerEmulator({ peer });
  // The operator as the Deployment runs it (its heap bound), polling the manager briskly for the test's pace.
  const flags = [...soloOperatorFlags(), '--leader-election-namespace', opNs, '--manager-url', manager.url];
  // The admin allows the stores on loopback: the bounds under test apply to allowed hosts too.
  const reach = ['--allowed-storage-hosts', 'http://127.0.0.1'];
  operator = await startOperatorProcess(kubeconfigPath, [...flags, ...reach], {
    name: 'hostile-operator',
    env: { NODE_OPTIONS },
  });
  watch = watchOperator(operator);
}, 120_000);

afterAll(async () => {
  watch?.stop();
  await operator?.stop();
  await Promise.all([storage?.close(), manager?.close(), peer?.close()]);
});

describe("a tenant's hostile object storage", () => {
  it("neither stalls nor kills the operator: B's directory preheat within 2x its time alone, A's objects end with clear conditions", async () => {
    const alone = await tenantB('alone');
    const rssIdle = await watch!.idleRSS();

    const hostile: [string, Record<string, unknown>][] = [
      ['endless', s3('endless')],
      ['huge', s3('huge')],
      ['silent', s3('silent')],
      ['errorbody', s3('errorbody')],
      ['truncated', s3('truncated')],
      ['abs-huge', { type: 'abs', accountName: 'acct', container: 'huge', endpoint: storage.url }],
    ];
    for (const [name, os] of hostile) await create(nsA, name, os);
    // A's listings are under way: the store got requests for each of its buckets.
    await waitFor(
      "A's listings started",
      async () => {
        // Before bounded listings, the operator died here: "JavaScript heap out of memory".
        await watch!.failIfExited();
        return (
          ['endless', 'huge', 'silent', 'errorbody'].every((b) => (storage.requests.get(b) ?? 0) > 0) ||
          undefined
        );
      },
      { timeoutMs: 30_000, intervalMs: 20 },
    );

    const loaded = await tenantB('loaded');
    console.log(`tenant B alone ${alone.toFixed(0)} ms, with A's hostile listings ${loaded.toFixed(0)} ms`);
    // As in the fairness test: 2x, with 1 s of slack for the apiserver's own latency on a busy 2-core machine.
    expect(loaded).toBeLessThanOrEqual(Math.max(2 * alone, alone + 1_000));

    const tooLarge = await Promise.all(
      ['endless', 'huge', 'truncated', 'abs-huge'].map((n) => until(nsA, n, 'Stalled', 'ListingTooLarge')),
    );
    for (const c of tooLarge) {
      expect(c.message).toMatch(/^spec\.objectStorage\.prefix: cannot list /);
      expect(c.message).toMatch(/larger than \d+ bytes|more than \d+ pages/);
      expect(c.message).toContain(`objectStorage.endpoint ${storage.url}`);
    }
    const failed = await until(nsA, 'errorbody', 'Stalled', 'ListFailed');
    expect(failed.message).toContain('HTTP 500');
    expect(failed.message.length).toBeLessThan(2_048);
    // The request time-out is 30 s by default.
    const timedOut = await until(nsA, 'silent', 'Stalled', 'ListingTimedOut', 90_000);
    expect(timedOut.message).toMatch(/^spec\.objectStorage\.endpoint: .*no complete answer within 30000 ms/);

    // A bound is final for the generation (size) or waits minutes (time): nothing is listed again meanwhile.
    const requests = new Map(storage.requests);
    await new Promise((r) => setTimeout(r, 3_000));
    for (const b of ['endless', 'huge', 'truncated', 'silent'])
      expect(storage.requests.get(b), b).toBe(requests.get(b));

    // Never restarted, never near its memory limit; the 100 MB page was never read whole.
    await watch!.expectUnharmed();
    console.log(
      `operator RSS idle ${(rssIdle / 2 ** 20).toFixed(0)} MiB, peak ${(watch!.peakRSS() / 2 ** 20).toFixed(0)} MiB; ` +
        `store sent ${(storage.bytesSent() / 2 ** 20).toFixed(0)} MiB in all`,
    );
    expect(watch!.peakRSS()).toBeGreaterThan(0);
    expect(watch!.peakRSS()).toBeLessThan(RSS_BOUND);
  }, 300_000);
});
