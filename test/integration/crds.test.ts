import { beforeAll, describe, expect, inject, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createNamespace, kubeConfig, readManifests, REPO_ROOT } from '../support/kube.ts';
import { INVALID } from '../fixtures/invalid-resources.ts';
import { peerloadNamespace, type PeerloadNamespace } from '../support/resources.ts';

/** The columns `kubectl get servedmodels` shows (Message only with -o wide). */
const SERVED_MODEL_COLUMNS = [
  'Name',
  'Model',
  'Version',
  'Rollout',
  'Switch-ms',
  'Ready',
  'Replicas',
  'Reason',
  'File',
  'Message',
  'Age',
];

let kc: k8s.KubeConfig;
let objects: k8s.KubernetesObjectApi;
let resources: PeerloadNamespace;
let ns: string;

beforeAll(async () => {
  kc = kubeConfig(inject('kubeconfigPath'));
  objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  ns = await createNamespace(kc, 'crds');
  resources = peerloadNamespace(kc, ns);
  console.log(`apiserver under test: ${inject('apiserverVersion')}`);
});

describe('CRDs on the real apiserver', () => {
  it('serves a real kube-apiserver of 1.31 or newer', async () => {
    const version = await kc.makeApiClient(k8s.VersionApi).getCode();
    expect(Number(version.minor.replace(/\D/g, ''))).toBeGreaterThanOrEqual(31);
  });

  const examples = readdirSync(join(REPO_ROOT, 'deploy/examples')).filter((f) => f.endsWith('.yaml'));
  for (const file of examples) {
    it(`accepts example ${file}`, async () => {
      for (const obj of readManifests(join(REPO_ROOT, 'deploy/examples', file))) {
        obj.metadata = { ...obj.metadata, namespace: ns };
        const created = await objects.create(obj);
        expect(created.metadata?.uid).toBeTruthy();
      }
    });
  }

  it('has at least 100 invalid resources, of both kinds', () => {
    expect(INVALID.length).toBeGreaterThanOrEqual(100);
    expect(new Set(INVALID.map((c) => c.kind))).toEqual(new Set(['ModelPreheat', 'ServedModel']));
  });

  for (const [i, c] of INVALID.entries()) {
    it(`rejects: ${c.name} (message names ${c.field})`, async () => {
      const create = c.kind === 'ModelPreheat' ? resources.createModelPreheat : resources.createServedModel;
      const err = await create(`invalid-${i}`, c.spec).then(
        () => undefined,
        (e: unknown) => e as k8s.ApiException<string>,
      );
      expect(err, 'the apiserver accepted an invalid resource').toBeDefined();
      expect(err!.code).toBe(422);
      const message = JSON.parse(err!.body).message as string;
      expect(message).toContain(c.field);
      if (c.message) expect(message).toContain(c.message);
    });
  }

  it('writing /status does not change metadata.generation', async () => {
    const name = 'status-generation';
    await resources.createModelPreheat(name, { url: 'http://x/y' });
    const before = (await resources.getModelPreheat(name)) as any;
    const patched = (await resources.patchModelPreheatStatus(name, { state: 'PENDING', jobID: 7 })) as any;
    expect(patched.status).toMatchObject({ state: 'PENDING', jobID: 7 });
    expect(patched.metadata.generation).toBe(before.metadata.generation);
    // A spec change, by contrast, moves the generation: the controllers rely on the difference.
    const specPatched = (await resources.patchModelPreheat(name, { spec: { url: 'http://x/z' } })) as any;
    expect(specPatched.metadata.generation).toBe(before.metadata.generation + 1);
  });

  it('prints columns that show a failure: Ready, Reason, and with -o wide the message', async () => {
    const conditions = (reason: string, message: string) => [
      { type: 'Ready', status: 'False', reason, message, lastTransitionTime: '2026-01-01T00:00:00Z' },
      { type: 'Stalled', status: 'True', reason, message, lastTransitionTime: '2026-01-01T00:00:00Z' },
    ];
    const failing = async (
      kind: 'ModelPreheat' | 'ServedModel',
      name: string,
      spec: object,
      status: object,
    ) => {
      if (kind === 'ModelPreheat') {
        await resources.createModelPreheat(name, spec);
        await resources.patchModelPreheatStatus(name, status);
      } else {
        await resources.createServedModel(name, spec);
        await resources.patchServedModelStatus(name, status);
      }
    };
    await failing(
      'ServedModel',
      'no-service',
      { modelName: 'm', fileName: 'm.mar', modelServer: { service: { name: 'missing' } } },
      {
        ready: '0/0',
        conditions: conditions('ServiceNotFound', 'Service missing not found; create it'),
      },
    );
    await failing(
      'ModelPreheat',
      'retrying',
      { url: 'http://origin.example/m.bin' },
      {
        state: 'FAILURE',
        phase: 'RETRYING',
        jobID: 3,
        conditions: conditions('JobFailedWillRetry', 'attempt 1 of 4 failed: origin 404; retrying in 30s'),
      },
    );
    const table = async (plural: 'modelpreheats' | 'servedmodels', name: string) => {
      const t = (await resources.table(plural, name)) as any;
      const names = t.columnDefinitions.map((c: { name: string }) => c.name) as string[];
      const wide = t.columnDefinitions.map((c: { priority: number }) => c.priority > 0) as boolean[];
      return { names, wide, row: Object.fromEntries(names.map((n, i) => [n, t.rows[0].cells[i]])) };
    };
    const at = '2026-01-01T00:00:00Z';
    await failing(
      'ServedModel',
      'rolled-back',
      { modelName: 'm', version: '2', fileName: 'm.mar', modelServer: { service: { name: 'ts' } } },
      {
        ready: '0/3',
        rollout: {
          ...{
            phase: 'RolledBack',
            version: '2',
            previousVersion: '1',
            attempt: '2/',
            reason: 'CanaryFailed',
          },
          ...{ replicas: 3, staged: 3, switched: 0, startTime: at, lastProgressTime: at, completionTime: at },
          canary: {
            replicas: ['pod ts-0 (http://10.0.0.1:8081)'],
            switched: 1,
            holdUntil: at,
            passes: 2,
            failures: 1,
            lastProbeTime: at,
          },
        },
        conditions: conditions(
          'RolledBack',
          '2 rolled back to 1 (CanaryFailed): canary pod ts-0 failed its probe: got HTTP 500, expected 200',
        ),
      },
    );
    const back = await table('servedmodels', 'rolled-back');
    expect(back.row).toMatchObject({ Rollout: 'RolledBack', Reason: 'RolledBack', Ready: 'False' });
    expect(back.wide[back.names.indexOf('Switch-ms')]).toBe(true);
    const sm = await table('servedmodels', 'no-service');
    expect(sm.names).toEqual(SERVED_MODEL_COLUMNS);
    expect(sm.row).toMatchObject({
      Ready: 'False',
      Replicas: '0/0',
      Reason: 'ServiceNotFound',
      Message: 'Service missing not found; create it',
    });
    expect(sm.wide[sm.names.indexOf('Message')]).toBe(true);
    const mph = await table('modelpreheats', 'retrying');
    expect(mph.names).toEqual([
      'Name',
      'Type',
      'State',
      'Ready',
      'Job',
      'Attempts',
      'Group',
      'Message',
      'Age',
    ]);
    expect(mph.row).toMatchObject({ State: 'RETRYING', Ready: 'False', Job: 3 });
    expect(mph.row.Message).toContain('retrying in 30s');
  });

  it('prints the columns kubectl get shows', async () => {
    const table = (await resources.table('servedmodels')) as any;
    expect(table.columnDefinitions.map((c: { name: string }) => c.name)).toEqual(SERVED_MODEL_COLUMNS);
  });
});
