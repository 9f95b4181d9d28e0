/**
 * `peerload preheat`, `peerload wait` and `peerload check --from-cluster` as real processes against the real
 * apiserver. The statuses are written by the test (the operator's own transitions are covered by the controller
 * tests and the status modules' unit tests): what is checked here is how the CLI reads them.
 */
import * as k8s from '@kubernetes/client-node';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createNamespace, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { peerloadNamespace, type PeerloadNamespace } from '../support/resources.ts';

const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const custom = kc.makeApiClient(k8s.CustomObjectsApi);
const NODE = join(REPO_ROOT, 'node_modules/.bin/node');
const BIN = join(REPO_ROOT, 'bin/peerload.js');
const FIXTURES = join(REPO_ROOT, 'test/fixtures/check');
let ns: string;
let resources: PeerloadNamespace;

beforeAll(async () => {
  ns = await createNamespace(kc, 'cli-wait');
  resources = peerloadNamespace(kc, ns);
});
afterAll(async () => {
  await kc
    .makeApiClient(k8s.CoreV1Api)
    .deleteNamespace({ name: ns })
    .catch(() => undefined);
});

interface Run {
  code: Promise<number>;
  stdout: () => string;
  stderr: () => string;
}
function peerload(args: string[], input?: string): Run {
  const child = spawn(NODE, [BIN, ...args], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => (out += d));
  child.stderr.on('data', (d) => (err += d));
  child.stdin.end(input ?? '');
  return {
    code: new Promise((resolve) => child.on('exit', (c) => resolve(c ?? -1))),
    stdout: () => out,
    stderr: () => err,
  };
}
const kube = ['--kubeconfig', kubeconfigPath, '-n'];

const cond = (type: string, status: string, reason: string, message: string) => ({
  type,
  status,
  reason,
  message,
  observedGeneration: 1,
  lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
});
async function setStatus(name: string, status: object) {
  await resources.patchModelPreheatStatus(name, status);
}
const progress = (r: Run) => r.stderr().trim().split('\n').filter(Boolean);

describe('peerload preheat and wait', () => {
  it('preheat creates a ModelPreheat as peerload-cli; wait prints one line per change and exits 0 when Ready', async () => {
    const created = peerload([
      'preheat',
      '--url',
      'http://127.0.0.1:9/model.bin',
      '--name',
      'p1',
      ...kube,
      ns,
    ]);
    expect(await created.code).toBe(0);
    expect(created.stdout()).toBe(`modelpreheat.peerload.io/p1 created in namespace ${ns}\n`);
    const obj = await resources.get<{
      spec: { url: string };
      metadata: { managedFields: { manager: string }[] };
    }>('modelpreheats', 'p1');
    expect(obj.spec.url).toBe('http://127.0.0.1:9/model.bin');
    expect(obj.metadata.managedFields.map((f) => f.manager)).toEqual(['peerload-cli']);

    const wait = peerload(['wait', 'mph/p1', ...kube, ns, '--timeout', '60s', '--interval', '100ms']);
    await waitFor('first progress line', async () => progress(wait).length >= 1 || undefined);
    const created1 = cond('Reconciling', 'True', 'JobCreated', 'preheat job 7 created');
    await setStatus('p1', {
      observedGeneration: 1,
      phase: 'PENDING',
      conditions: [created1],
    });
    await waitFor('JobCreated seen', async () => /JobCreated/.test(wait.stderr()) || undefined);
    await setStatus('p1', {
      phase: 'RETRYING',
      conditions: [
        cond('Reconciling', 'True', 'JobFailedWillRetry', 'attempt 1 of 4 failed; retrying in 30s'),
      ],
    });
    await waitFor('retry seen', async () => /RETRYING/.test(wait.stderr()) || undefined);
    await setStatus('p1', {
      phase: 'SUCCESS',
      conditions: [cond('Ready', 'True', 'JobSucceeded', 'preheat job 8 succeeded on 1 peer(s)')],
    });
    expect(await wait.code).toBe(0);
    expect(wait.stdout()).toBe('ModelPreheat/p1 is Ready\n');
    expect(progress(wait)).toEqual([
      'ModelPreheat/p1: waiting for the operator to report status',
      'ModelPreheat/p1: Reconciling: JobCreated: preheat job 7 created [PENDING]',
      'ModelPreheat/p1: Reconciling: JobFailedWillRetry: attempt 1 of 4 failed; retrying in 30s [RETRYING]',
      'ModelPreheat/p1: Ready: JobSucceeded: preheat job 8 succeeded on 1 peer(s) [SUCCESS]',
    ]);
  });

  it('exits 1 as soon as the resource is Stalled, printing the reason', async () => {
    const created = peerload([
      'preheat',
      '--url',
      'http://127.0.0.1:9/gone.bin',
      '--name',
      'p2',
      ...kube,
      ns,
    ]);
    expect(await created.code).toBe(0);
    const t0 = Date.now();
    const wait = peerload([
      'wait',
      'modelpreheat/p2',
      ...kube,
      ns,
      '--timeout',
      '10m',
      '--interval',
      '100ms',
    ]);
    await waitFor('started', async () => progress(wait).length >= 1 || undefined);
    const why = 'preheat failed after 4 attempt(s): job 9 ended in FAILURE: origin answered 404';
    await setStatus('p2', {
      observedGeneration: 1,
      phase: 'FAILURE',
      conditions: [cond('Ready', 'False', 'JobFailed', why), cond('Stalled', 'True', 'JobFailed', why)],
    });
    expect(await wait.code).toBe(1);
    expect(Date.now() - t0).toBeLessThan(30_000); // not the 10 minutes of --timeout
    expect(wait.stdout()).toBe(`ModelPreheat/p2 is Stalled: JobFailed: ${why} [FAILURE]\n`);
  });

  it('exits 2 on time-out, naming what it saw last', async () => {
    const wait = peerload(['wait', 'sm/nothing-here', ...kube, ns, '--timeout', '1s', '--interval', '200ms']);
    expect(await wait.code).toBe(2);
    expect(progress(wait)).toEqual([
      `ServedModel/nothing-here: not found in namespace ${ns} yet`,
      `ServedModel/nothing-here: timed out after 1s (last: not found in namespace ${ns} yet)`,
    ]);
  });
});

describe('peerload check on live and piped resources', () => {
  beforeAll(async () => {
    const sm = readFileSync(join(FIXTURES, 'servedmodel-s3.yaml'), 'utf8').split('---\n')[1]!;
    const body = (await import('js-yaml')).load(sm) as { metadata: { namespace?: string } };
    body.metadata.namespace = ns;
    await custom.createNamespacedCustomObject({
      group: 'peerload.io',
      version: 'v1alpha1',
      namespace: ns,
      plural: 'servedmodels',
      body,
    });
  });

  it('--from-cluster reads the ModelPreheats and ServedModels of a namespace', async () => {
    const r = peerload([
      'check',
      '--plugin-config',
      join(FIXTURES, 's3-plugin.json'),
      '--from-cluster',
      ...kube,
      ns,
    ]);
    expect(await r.code).toBe(1); // p1 and p2 preheat URLs no plugin download uses: reported, not hidden
    expect(r.stdout()).toMatch(/^OK {3}models\/resnet-18\.mar {2}task [0-9a-f]{64}$/m);
    expect(r.stdout()).toContain('MISS http://127.0.0.1:9/model.bin');
  });

  it('reads a kubectl-style List from stdin (-)', async () => {
    const list = await custom.listNamespacedCustomObject({
      group: 'peerload.io',
      version: 'v1alpha1',
      namespace: ns,
      plural: 'servedmodels',
    });
    const items = (list as { items: object[] }).items.map((o) => ({
      ...o,
      apiVersion: 'peerload.io/v1alpha1',
      kind: 'ServedModel',
    }));
    const yaml = (await import('js-yaml')).dump({ apiVersion: 'v1', kind: 'List', items });
    const r = peerload(['check', '--plugin-config', join(FIXTURES, 's3-plugin.json'), '-'], yaml);
    expect(await r.code).toBe(0);
    expect(r.stdout()).toMatch(/^OK {3}models\/resnet-18\.mar {2}task [0-9a-f]{64}$/m);
  });
});
