/**
 * deploy/examples/torchserve (the model-server side) and deploy/examples/install (kubectl with a manager URL):
 * what the README promises is in the manifests, and the real apiserver accepts them (server-side apply, dry run).
 */
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { GVR } from '../../src/api/index.ts';
import { KubeClient } from '../../src/runtime/index.ts';
import { createNamespace, kubeConfig, readManifests, REPO_ROOT } from '../support/kube.ts';
import { gvrOf, kustomize, type Manifest } from '../support/runtime-deploy.ts';

const kc = kubeConfig(inject('kubeconfigPath'));
const kube = new KubeClient(kc);
afterAll(() => kube.close());

const torchserve = kustomize(join(REPO_ROOT, 'deploy/examples/torchserve'));
const one = (ms: Manifest[], kind: string, name?: string) =>
  ms.find((m) => m.kind === kind && (!name || m.metadata.name === name)) as any;

describe('deploy/examples/torchserve', () => {
  const pod = one(torchserve, 'Deployment').spec.template.spec;
  const container = (name: string) => pod.containers.find((c: { name: string }) => c.name === name);

  it('copies the plugin jar from the jar-only image into --plugins-path', () => {
    const init = pod.initContainers[0];
    expect(init.image).toBe('ghcr.io/peerload/peerload-torchserve-plugin:0.1.0');
    expect(init.command).toEqual([
      '/bin/busybox',
      'cp',
      '/plugin/peerload-torchserve-plugin.jar',
      '/plugins/',
    ]);
    expect(init.volumeMounts).toEqual([{ name: 'plugins', mountPath: '/plugins' }]);
    expect(container('torchserve').args).toContain('--plugins-path=/plugins');
  });

  it('reads the plugin configuration from a Secret and enables the model API', () => {
    const ts = container('torchserve');
    expect(ts.env).toContainEqual({ name: 'P2P_ENDPOINT_CONFIG', value: '/etc/p2p-endpoint/config.json' });
    expect(pod.volumes).toContainEqual({
      name: 'p2p-endpoint-config',
      secret: { secretName: 'p2p-endpoint-config' },
    });
    const config = JSON.parse(one(torchserve, 'Secret', 'p2p-endpoint-config').stringData['config.json']);
    expect(config.object_storage.type).toBe('s3');
    expect(one(torchserve, 'ConfigMap').data['config.properties']).toMatch(/^enable_model_api=true$/m);
  });

  it('runs the key publisher on the working directory TorchServe writes key_file.json to', () => {
    const ts = container('torchserve');
    const pub = container('key-publisher');
    expect(pub.command).toEqual(['peerload', 'publish-keys']);
    expect(pub.args).toEqual(['--secret=torchserve-keys', `--key-file=${ts.workingDir}/key_file.json`]);
    const runMount = (c: { volumeMounts: { name: string; mountPath: string }[] }) =>
      c.volumeMounts.find((m) => m.mountPath === ts.workingDir)?.name;
    expect(runMount(ts)).toBe('run');
    expect(runMount(pub)).toBe('run');
    expect(pub.env.map((e: { name: string }) => e.name)).toEqual(['POD_NAME', 'POD_NAMESPACE']);
    // The Service's management port is the ServedModel's default port name.
    expect(one(torchserve, 'Service').spec.ports.map((p: { name: string }) => p.name)).toContain(
      'management',
    );
  });

  it("gives the publisher that one Secret's get and patch, nothing else", () => {
    expect(one(torchserve, 'Role').rules).toEqual([
      {
        apiGroups: [''],
        resources: ['secrets'],
        resourceNames: ['torchserve-keys'],
        verbs: ['get', 'patch'],
      },
    ]);
    expect(one(torchserve, 'RoleBinding').subjects).toEqual([{ kind: 'ServiceAccount', name: 'torchserve' }]);
    expect(pod.serviceAccountName).toBe('torchserve');
  });

  it('is accepted by the apiserver (server-side apply, dry run)', async () => {
    const ns = await createNamespace(kc, 'example-ts');
    for (const m of torchserve) {
      const r = await kube.resource(gvrOf(m)).patch(
        ns,
        m.metadata.name,
        { ...m, metadata: { ...m.metadata, namespace: ns } },
        {
          type: 'apply',
          fieldManager: 'peerload-tests',
          force: true,
          dryRun: true,
        },
      );
      expect(r.metadata.name).toBe(m.metadata.name);
    }
  });

  it('servedmodel.yaml reads the published keys of this Service, and the CRD accepts it', async () => {
    const [sm] = readManifests(join(REPO_ROOT, 'deploy/examples/torchserve/servedmodel.yaml')) as any[];
    expect(sm.spec.modelServer).toEqual({
      service: { name: one(torchserve, 'Service').metadata.name, port: 'management' },
      managementTokenSecretRef: { name: 'torchserve-keys', key: '{pod}.json' },
    });
    const ns = await createNamespace(kc, 'example-sm');
    const r = await kube.resource(GVR.servedModels).patch(
      ns,
      sm.metadata.name,
      { ...sm, metadata: { ...sm.metadata, namespace: ns } },
      {
        type: 'apply',
        fieldManager: 'peerload-tests',
        dryRun: true,
      },
    );
    expect(r.metadata.name).toBe('resnet18');
  });
});

describe('deploy/examples/torchserve-hardlink', () => {
  const ms = kustomize(join(REPO_ROOT, 'deploy/examples/torchserve-hardlink'));
  const pod = one(ms, 'Deployment').spec.template.spec;
  const ts = pod.containers.find((c: { name: string }) => c.name === 'torchserve');

  it("mounts the pod's own directory of the node volume as the model store, named in hard_link_dir", () => {
    expect(pod.volumes.find((v: { name: string }) => v.name === 'model-store')).toEqual({
      name: 'model-store',
      hostPath: { path: '/var/lib/dragonfly/model-stores', type: 'DirectoryOrCreate' },
    });
    const mount = ts.volumeMounts.find((m: { name: string }) => m.name === 'model-store');
    expect(mount).toEqual({
      name: 'model-store',
      mountPath: '/home/model-server/model-store',
      subPathExpr: '$(POD_NAME)',
    });
    expect(ts.args).toContain(`--model-store=${mount.mountPath}`);
    expect(ts.env).toContainEqual({
      name: 'POD_NAME',
      valueFrom: { fieldRef: { fieldPath: 'metadata.name' } },
    });
    const config = JSON.parse(one(ms, 'Secret', 'p2p-endpoint-config').stringData['config.json']);
    expect(config.hard_link_dir).toBe('/var/lib/dragonfly/model-stores/${POD_NAME}');
    // The directory is handed to TorchServe's user before it starts (fsGroup does not apply to hostPath).
    const owner = pod.initContainers.find((c: { name: string }) => c.name === 'model-store-owner');
    expect(owner.command).toEqual(['chown', '1000:1000', '/model-store']);
    expect(owner.volumeMounts[0].subPathExpr).toBe('$(POD_NAME)');
  });

  it('is accepted by the apiserver (server-side apply, dry run)', async () => {
    const ns = await createNamespace(kc, 'example-ts-hl');
    for (const m of ms) {
      const r = await kube
        .resource(gvrOf(m))
        .patch(
          ns,
          m.metadata.name,
          { ...m, metadata: { ...m.metadata, namespace: ns } },
          { type: 'apply', fieldManager: 'peerload-tests', force: true, dryRun: true },
        );
      expect(r.metadata.name).toBe(m.metadata.name);
    }
  });
});

describe('deploy/examples/install', () => {
  it('is deploy/default with the manager URL set', () => {
    const ms = kustomize(join(REPO_ROOT, 'deploy/examples/install'));
    const c = one(ms, 'Deployment').spec.template.spec.containers[0];
    expect(c.env).toContainEqual({
      name: 'PEERLOAD_MANAGER_URL',
      value: 'http://dragonfly-manager.dragonfly-system:8080',
    });
    expect(ms.filter((m) => m.kind === 'CustomResourceDefinition')).toHaveLength(3);
  });
});
