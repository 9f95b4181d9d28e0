import { beforeAll, describe, expect, inject, it } from 'vitest';
import * as k8s from '@kubernetes/client-node';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { createNamespace, kubeConfig, readManifests, REPO_ROOT } from '../support/kube.ts';
import { INVALID } from '../fixtures/invalid-resources.ts';

const GROUP = 'peerload.io';
const VERSION = 'v1alpha1';

let kc: k8s.KubeConfig;
let objects: k8s.KubernetesObjectApi;
let custom: k8s.CustomObjectsApi;
let ns: string;

beforeAll(async () => {
  kc = kubeConfig(inject('kubeconfigPath'));
  objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  custom = kc.makeApiClient(k8s.CustomObjectsApi);
  ns = await createNamespace(kc, 'crds');
  console.log(`apiserver under test: ${inject('apiserverVersion')}`);
});

const plural = (kind: string) => (kind === 'ModelPreheat' ? 'modelpreheats' : 'servedmodels');

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
      const body = {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: c.kind,
        metadata: { name: `invalid-${i}` },
        spec: c.spec,
      };
      const err = await custom
        .createNamespacedCustomObject({
          group: GROUP,
          version: VERSION,
          namespace: ns,
          plural: plural(c.kind),
          body,
        })
        .then(
          () => undefined,
          (e: unknown) => e as k8s.ApiException<string>,
        );
      expect(err, 'the apiserver accepted an invalid resource').toBeDefined();
      expect(err!.code).toBe(422);
      const message = JSON.parse(err!.body).message as string;
      expect(message).toContain(c.field);
    });
  }

  it('writing /status does not change metadata.generation', async () => {
    const name = 'status-generation';
    await custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: 'modelpreheats',
      body: {
        apiVersion: `${GROUP}/${VERSION}`,
        kind: 'ModelPreheat',
        metadata: { name },
        spec: { url: 'http://x/y' },
      },
    });
    const before = (await custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace: ns,
      plural: 'modelpreheats',
      name,
    })) as any;
    const patched = (await custom.patchNamespacedCustomObjectStatus(
      {
        group: GROUP,
        version: VERSION,
        namespace: ns,
        plural: 'modelpreheats',
        name,
        body: { status: { state: 'PENDING', jobID: 7 } },
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    )) as any;
    expect(patched.status).toMatchObject({ state: 'PENDING', jobID: 7 });
    expect(patched.metadata.generation).toBe(before.metadata.generation);
    // A spec change, by contrast, moves the generation: the controllers rely on the difference.
    const specPatched = (await custom.patchNamespacedCustomObject(
      {
        group: GROUP,
        version: VERSION,
        namespace: ns,
        plural: 'modelpreheats',
        name,
        body: { spec: { url: 'http://x/z' } },
      },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    )) as any;
    expect(specPatched.metadata.generation).toBe(before.metadata.generation + 1);
  });

  it('prints the columns kubectl get shows', async () => {
    const table = (await kc
      .makeApiClient(k8s.CustomObjectsApi)
      .listNamespacedCustomObject(
        { group: GROUP, version: VERSION, namespace: ns, plural: 'servedmodels' },
        k8s.setHeaderOptions('Accept', 'application/json;as=Table;v=v1;g=meta.k8s.io'),
      )) as any;
    expect(table.columnDefinitions.map((c: { name: string }) => c.name)).toEqual([
      'Name',
      'Model',
      'Version',
      'Ready',
      'File',
      'Age',
    ]);
  });
});
