/**
 * The KServe install (deploy/kserve and the chart's kserve.storageContainer) against the real apiserver with KServe's
 * own CRDs (v0.20.0, from the Go module proxy): the ClusterStorageContainer is accepted and nothing of it is pruned
 * by KServe's structural schema, the chart renders the same object, an InferenceService with an s3:// storageUri
 * stays as it was (nothing in it changes), and every URI the manifest claims is one `peerload fetch` takes.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { load } from 'js-yaml';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { DEFAULT_HUB_REDIRECT_HOSTS } from '../../src/huggingface/endpoint.ts';
import { parseStorageUri } from '../../src/kserve/uri.ts';
import { KubeClient } from '../../src/runtime/index.ts';
import { helmTemplate } from '../support/helm.ts';
import { installKServeCrds } from '../support/kserve.ts';
import { kubeConfig, REPO_ROOT } from '../support/kube.ts';
import { kustomize, type Manifest } from '../support/runtime-deploy.ts';

const kc = kubeConfig(inject('kubeconfigPath'));
const CSC = {
  group: 'serving.kserve.io',
  version: 'v1alpha1',
  resource: 'clusterstoragecontainers',
  namespaced: false,
  kind: 'ClusterStorageContainer',
} as const;
const ISVC = {
  group: 'serving.kserve.io',
  version: 'v1beta1',
  resource: 'inferenceservices',
  namespaced: true,
  kind: 'InferenceService',
} as const;

type Obj = Manifest & { spec: any };
const [deployed] = kustomize(join(REPO_ROOT, 'deploy/kserve')) as Obj[];

describe('the KServe ClusterStorageContainer', () => {
  let kube: KubeClient;
  beforeAll(async () => {
    kube = new KubeClient(kc);
    await installKServeCrds(kube, [
      'clusterstoragecontainer/serving.kserve.io_clusterstoragecontainers.yaml',
      'serving.kserve.io_inferenceservices.yaml',
    ]);
  });
  afterAll(async () => {
    await kube
      ?.resource(CSC)
      .delete(undefined, deployed!.metadata.name)
      .catch(() => undefined);
    await kube?.close();
  });

  it('deploy/kserve is accepted by the apiserver with KServe CRDs, nothing pruned', async () => {
    expect(deployed!.kind).toBe('ClusterStorageContainer');
    const created = (await kube.resource(CSC).create(deployed as any)) as Obj;
    // KServe's schema keeps every field as written (a field it did not know would be pruned away silently) and
    // defaults one: a single URI per init container, as `peerload fetch` takes.
    expect(created.spec).toEqual({ ...deployed!.spec, supportsMultiModelDownload: false });
    const c = created.spec.container;
    expect(c.command.slice(0, 3)).toEqual(['peerload', 'fetch', '--kserve']);
    expect(c.command).toContain('--proxy=http://$(NODE_IP):4001');
    expect(c.env).toEqual([{ name: 'NODE_IP', valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } } }]);
    // KServe appends the URI and the destination as args: the container must not set its own.
    expect(c.args).toBeUndefined();
    expect(c.name).toBe('storage-initializer');
  });

  it('the chart renders the same object (its allow-list and image from the chart values)', () => {
    const none = helmTemplate('r', 'peerload-system').filter((m) => m.kind === 'ClusterStorageContainer');
    expect(none).toEqual([]);
    const [rendered] = helmTemplate('r', 'peerload-system', {
      'kserve.storageContainer.enabled': 'true',
    }).filter((m) => m.kind === 'ClusterStorageContainer') as Obj[];
    expect(rendered!.spec).toEqual(deployed!.spec);
    const [minio] = helmTemplate('r', 'peerload-system', {
      'kserve.storageContainer.enabled': 'true',
      'kserve.storageContainer.allowedStorageHosts[0]': 'minio.storage.svc:9000',
    }).filter((m) => m.kind === 'ClusterStorageContainer') as Obj[];
    expect(minio!.spec.container.command).toContain('--allowed-storage-hosts=minio.storage.svc:9000');
    // HF_TOKEN's hosts: the chart's allowedHubHosts, or the container's own (a mirror HF_ENDPOINT names).
    expect(rendered!.spec.container.command).toContain('--allowed-hub-hosts=huggingface.co');
    const [mirror] = helmTemplate('r', 'peerload-system', {
      'kserve.storageContainer.enabled': 'true',
      'kserve.storageContainer.allowedHubHosts[0]': 'http://hf-mirror.corp.example',
    }).filter((m) => m.kind === 'ClusterStorageContainer') as Obj[];
    expect(mirror!.spec.container.command).toContain('--allowed-hub-hosts=http://hf-mirror.corp.example');
    // An LFS redirect's hosts: the chart's allowedHubRedirectHosts (the public Hub's CDNs), or the container's own.
    expect(rendered!.spec.container.command).toContain(
      `--allowed-hub-redirect-hosts=${DEFAULT_HUB_REDIRECT_HOSTS}`,
    );
    const [cdn] = helmTemplate('r', 'peerload-system', {
      'kserve.storageContainer.enabled': 'true',
      'kserve.storageContainer.allowedHubRedirectHosts[0]': 'http://cdn.hf-mirror.corp.example',
    }).filter((m) => m.kind === 'ClusterStorageContainer') as Obj[];
    expect(cdn!.spec.container.command).toContain(
      '--allowed-hub-redirect-hosts=http://cdn.hf-mirror.corp.example',
    );
  });

  it('an InferenceService with an s3:// storageUri needs no change (accepted as KServe documents it)', async () => {
    const isvc = load(
      readFileSync(join(REPO_ROOT, 'deploy/kserve/example-inferenceservice.yaml'), 'utf8'),
    ) as Obj;
    const ns = 'default';
    const dry = (await kube
      .resource(ISVC)
      .create({ ...isvc, metadata: { ...isvc.metadata, namespace: ns } } as any, {
        dryRun: true,
      })) as Obj;
    expect(dry.spec.predictor.model.storageUri).toMatch(/^s3:\/\//);
    expect(JSON.stringify(dry.spec)).not.toContain('peerload');
  });

  it('every URI format the manifest claims is one peerload fetch takes (object store or hf)', () => {
    const samples = [
      's3://models/llm/',
      's3://models/sklearn/model.joblib',
      'gs://kfserving-examples/models/sklearn/1.0/model',
      'https://acct.blob.core.windows.net/models/llm',
      'hf://meta-llama/Llama-3.2-1B',
      'hf://org/model:main',
      // Claimed by no format: left to KServe's own initializer.
      'https://acct.file.core.windows.net/share/model',
      'pvc://claim/model',
      'hdfs://nn/model',
    ];
    const formats = deployed!.spec.supportedUriFormats as { prefix?: string; regex?: string }[];
    // KServe's match (IsStorageUriSupported): strings.HasPrefix, or regexp.MatchString (unanchored).
    const claimed = (uri: string) =>
      formats.some((f) => (f.prefix ? uri.startsWith(f.prefix) : new RegExp(f.regex!).test(uri)));
    const taken = samples.filter(claimed);
    expect(taken).toHaveLength(6);
    for (const uri of taken) expect(['object', 'hf']).toContain(parseStorageUri(uri).kind);
  });
});
