/**
 * deploy/examples/torchserve (the model-server side) and deploy/examples/install (kubectl with a manager URL):
 * what the README promises is in the manifests, and the real apiserver accepts them (server-side apply, dry run).
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { GVR, ServedModelSpec } from '../../src/api/index.ts';
import { KubeClient, type KubeObject } from '../../src/runtime/index.ts';
import { createNamespace, kubeConfig, readManifests, REPO_ROOT, waitFor } from '../support/kube.ts';
import { gvrOf, kustomize, serverSideApply, type Manifest } from '../support/runtime-deploy.ts';
import { serviceAccountIdentity, writeServiceAccountKubeconfig } from '../support/service-account.ts';
import { kubeconfigFromFile } from '../../src/runtime/kubeconfig.ts';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { parseHubURI } from '../../src/api/hub-reference.ts';
import { DEFAULT_MODEL_ROOT } from '../../src/servers/driver.ts';
import { applyInto, expectHardLinkRefusal } from '../support/example-apply.ts';

const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const kube = new KubeClient(kc);
afterAll(() => kube.close());

const torchserve = kustomize(join(REPO_ROOT, 'deploy/examples/torchserve'));
const one = (ms: Manifest[], kind: string, name?: string) =>
  ms.find((m) => m.kind === kind && (!name || m.metadata.name === name)) as any;

/** A server-side apply (dry run) of a ServedModel example into a new namespace: what the apiserver makes of it. */
const dryRunServedModel = async (prefix: string, sm: any) => {
  const ns = await createNamespace(kc, prefix);
  return kube
    .resource(GVR.servedModels)
    .patch(
      ns,
      sm.metadata.name,
      { ...sm, metadata: { ...sm.metadata, namespace: ns } },
      { type: 'apply', fieldManager: 'peerload-tests', dryRun: true },
    );
};

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

  it("gives the publisher that one Secret's patch, nothing else", () => {
    expect(one(torchserve, 'Role').rules).toEqual([
      {
        apiGroups: [''],
        resources: ['secrets'],
        resourceNames: ['torchserve-keys'],
        verbs: ['patch'],
      },
    ]);
    expect(one(torchserve, 'RoleBinding').subjects).toEqual([{ kind: 'ServiceAccount', name: 'torchserve' }]);
    expect(pod.serviceAccountName).toBe('torchserve');
  });

  it('mounts an API token into the key publisher only', () => {
    expect(pod.automountServiceAccountToken).toBe(false);
    const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
    const mounts = (c: any) => (c.volumeMounts ?? []).map((m: { name: string }) => m.name);
    for (const c of [...pod.initContainers, ...pod.containers].filter(
      (c: any) => c.name !== 'key-publisher',
    )) {
      expect(mounts(c), c.name).not.toContain('kube-api-access');
      expect(
        c.volumeMounts.map((m: { mountPath: string }) => m.mountPath),
        c.name,
      ).not.toContain(SA_DIR);
    }
    expect(container('key-publisher').volumeMounts).toContainEqual({
      name: 'kube-api-access',
      mountPath: SA_DIR,
      readOnly: true,
    });
    const volume = pod.volumes.find((v: { name: string }) => v.name === 'kube-api-access');
    expect(volume.projected.sources.map((s: object) => Object.keys(s)[0])).toEqual([
      'serviceAccountToken',
      'configMap',
      'downwardAPI',
    ]);
  });

  it('is accepted by the apiserver (server-side apply, dry run)', async () => {
    const ns = await createNamespace(kc, 'example-ts');
    for (const m of torchserve.filter((m) => !m.kind.startsWith('ValidatingAdmissionPolicy'))) {
      const r = await serverSideApply(kube, m, { namespace: ns, dryRun: true });
      expect(r.metadata.name).toBe(m.metadata.name);
    }
  });

  it('servedmodel.yaml reads the published keys of this Service, and the CRD accepts it', async () => {
    const [sm] = readManifests(join(REPO_ROOT, 'deploy/examples/torchserve/servedmodel.yaml')) as any[];
    expect(sm.spec.modelServer).toEqual({
      service: { name: one(torchserve, 'Service').metadata.name, port: 'management' },
      managementTokenSecretRef: { name: 'torchserve-keys', key: '{pod}.json' },
    });
    const r = await dryRunServedModel('example-sm', sm);
    expect(r.metadata.name).toBe('resnet18');
  });
});

/** A namespace that enforces, warns and audits the `restricted` Pod Security level. */
async function restrictedNamespace(prefix: string): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`;
  const level = 'restricted';
  await kube.resource(gvrOf({ apiVersion: 'v1', kind: 'Namespace' })).create({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: {
      name,
      labels: {
        'pod-security.kubernetes.io/enforce': level,
        'pod-security.kubernetes.io/warn': level,
        'pod-security.kubernetes.io/audit': level,
      },
    },
  } as KubeObject);
  return name;
}

/** Applies (server-side) into `ns`, returning the apiserver's warnings; cluster-scoped objects as they are. */
const applyAll = (ms: Manifest[], ns: string, dryRun = false) => applyInto(kube, ms, ns, dryRun);

/** The pod of the example's Deployment, as its ReplicaSet would create it (`app` its app.kubernetes.io/name). */
const podOf = (ms: Manifest[], name: string, ns: string, app = 'torchserve'): Manifest =>
  ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels: { 'app.kubernetes.io/name': app } },
    spec: one(ms, 'Deployment').spec.template.spec,
  }) as Manifest;

describe('deploy/examples/torchserve under Pod Security `restricted`', () => {
  it('is applied and its pod admitted with no rejection and no warning', async () => {
    const ns = await restrictedNamespace('example-pss');
    // The Deployment is checked by the `warn` mode (its pod template), the Pod by `enforce`.
    expect(await applyAll(torchserve, ns)).toEqual([]);
    expect(await applyAll([podOf(torchserve, 'torchserve-0', ns)], ns)).toEqual([]);
    // No token was added to the pod by the apiserver (the ServiceAccount admission plugin adds
    // kube-api-access-* when automounting): the only token is the publisher's projected one.
    const created = (await kube.resource(GVR.pods).get(ns, 'torchserve-0')) as any;
    expect(created.spec.volumes.map((v: { name: string }) => v.name).sort()).toEqual([
      'kube-api-access',
      'model-store',
      'p2p-endpoint-config',
      'plugins',
      'run',
      'torchserve-config',
    ]);
    const withToken = [...created.spec.initContainers, ...created.spec.containers]
      .filter((c: any) => (c.volumeMounts ?? []).some((m: { name: string }) => m.name === 'kube-api-access'))
      .map((c: { name: string }) => c.name);
    expect(withToken).toEqual(['key-publisher']);
    // The level is enforced: a pod running as root is refused.
    const root = structuredClone(podOf(torchserve, 'root', ns)) as any;
    root.spec.securityContext.runAsUser = 0;
    await expect(applyAll([root], ns)).rejects.toThrow(/violates PodSecurity "restricted:latest"/);
  });

  it("lets each pod's token change only that pod's key (key-policy.yaml)", async () => {
    const ns = await restrictedNamespace('example-keys');
    await applyAll(torchserve, ns);
    const pods: Record<string, string> = {};
    for (const name of ['ts-a', 'ts-b']) {
      await applyAll([podOf(torchserve, name, ns)], ns);
      pods[name] = ((await kube.resource(GVR.pods).get(ns, name)) as KubeObject).metadata.uid!;
    }
    // The token the kubelet would project into ts-a's publisher: bound to the pod.
    const tr = await kube.request<{ status: { token: string } }>(
      'POST',
      `/api/v1/namespaces/${ns}/serviceaccounts/torchserve/token`,
      {
        body: {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: {
            expirationSeconds: 3607,
            boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: 'ts-a', uid: pods['ts-a'] },
          },
        },
      },
    );
    const id = await serviceAccountIdentity(kubeconfigPath, ns, 'torchserve'); // the cluster's address and CA
    const path = join(mkdtempSync(join(tmpdir(), 'peerload-pod-token-')), 'kubeconfig');
    writeServiceAccountKubeconfig(path, { ...id, token: tr.status.token });
    const asPodA = new KubeClient(kubeconfigFromFile(path)!);
    const secrets = asPodA.resource<KubeObject & { data?: Record<string, string> }>(GVR.secrets);
    const b64 = (s: string) => Buffer.from(s).toString('base64');
    try {
      await waitFor('the policy in force', async () => {
        try {
          await secrets.patch(ns, 'torchserve-keys', { data: { 'ts-b.json': b64('{}') } });
          await kube.resource(GVR.secrets).patch(ns, 'torchserve-keys', { data: { 'ts-b.json': null } });
          return false;
        } catch (err) {
          return /only its own key ts-a\.json/.test((err as Error).message);
        }
      });
      // Its own key: allowed, also removing it (what the publisher does on SIGTERM).
      await secrets.patch(ns, 'torchserve-keys', { data: { 'ts-a.json': b64('{"a":1}') } });
      await kube
        .resource(GVR.secrets)
        .patch(ns, 'torchserve-keys', { data: { 'ts-b.json': b64('{"b":1}') } });
      await secrets.patch(ns, 'torchserve-keys', { data: { 'ts-a.json': b64('{"a":2}') } });
      // Another pod's key: neither changed nor removed; nor the label that puts the Secret under the policy.
      await expect(
        secrets.patch(ns, 'torchserve-keys', { data: { 'ts-b.json': b64('{"evil":1}') } }),
      ).rejects.toThrow(/a pod may change only its own key ts-a\.json in this Secret/);
      await expect(secrets.patch(ns, 'torchserve-keys', { data: { 'ts-b.json': null } })).rejects.toThrow(
        /only its own key/,
      );
      await expect(
        secrets.patch(ns, 'torchserve-keys', { metadata: { labels: { 'peerload.io/per-pod-keys': null } } }),
      ).rejects.toThrow(/may not change the labels/);
      // RBAC: no reading, and no other Secret.
      await expect(secrets.get(ns, 'torchserve-keys')).rejects.toThrow(/403/);
      await expect(secrets.patch(ns, 'p2p-endpoint-config', { data: { x: b64('y') } })).rejects.toThrow(
        /403/,
      );
      const data = ((await kube.resource(GVR.secrets).get(ns, 'torchserve-keys')) as any).data;
      expect(Buffer.from(data['ts-a.json'], 'base64').toString()).toBe('{"a":2}');
      expect(Buffer.from(data['ts-b.json'], 'base64').toString()).toBe('{"b":1}');
      await secrets.patch(ns, 'torchserve-keys', { data: { 'ts-a.json': null } });
    } finally {
      await asPodA.close();
    }
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
      const r = await serverSideApply(kube, m, { namespace: ns, dryRun: true });
      expect(r.metadata.name).toBe(m.metadata.name);
    }
  });
});

describe('deploy/examples/torchserve-hardlink under Pod Security', () => {
  // A node volume shared with the peer daemon is a hostPath, which no Pod Security level but `privileged`
  // admits, and handing the pod's directory to TorchServe's user takes root (fsGroup does not apply to
  // hostPath): the example needs a privileged namespace. Everything else is `restricted`.
  it('is refused by `restricted` for the node volume and the chown init container only', async () => {
    const ms = kustomize(join(REPO_ROOT, 'deploy/examples/torchserve-hardlink'));
    const ns = await restrictedNamespace('example-hl-pss');
    await applyAll(
      ms.filter((m) => m.kind === 'ServiceAccount'),
      ns,
    );
    await expectHardLinkRefusal(applyAll([podOf(ms, 'hl', ns)], ns), 'model-store-owner', 'model-store');
  });
});

describe('deploy/examples/vllm', () => {
  const vllm = kustomize(join(REPO_ROOT, 'deploy/examples/vllm'));
  const pod = one(vllm, 'Deployment').spec.template.spec;
  const container = (name: string) => pod.containers.find((c: { name: string }) => c.name === name);
  const flag = (c: { args: string[] }, name: string) =>
    c.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const mountOf = (c: { volumeMounts: { name: string; mountPath: string }[] }, path: string) =>
    c.volumeMounts.find((m) => m.mountPath === path)?.name;

  it('fetches the base model through the node peer before start, into the directory vLLM starts on', () => {
    const [fetch] = pod.initContainers;
    expect(fetch.command).toEqual(['peerload', 'fetch']);
    const spec = ModelVersionSpecSchema.parse(
      JSON.parse(one(vllm, 'ConfigMap', 'vllm-base-model').data['spec.json']),
    );
    // peerload fetch places <root>/<name>/<version>: exactly vLLM's --model, served under the same name.
    const model = `${flag(fetch, 'root')}/${flag(fetch, 'name')}/${spec.version}`;
    expect(flag(container('vllm'), 'model')).toBe(model);
    expect(flag(container('vllm'), 'served-model-name')).toBe(flag(fetch, 'name'));
    expect(spec.files.every((f) => f.key !== undefined)).toBe(true); // signed in the pod, with its Secret
    expect(flag(fetch, 'proxy')).toBe('http://$(NODE_IP):4001');
    expect(fetch.env).toContainEqual({
      name: 'NODE_IP',
      valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } },
    });
    expect(mountOf(fetch, '/models')).toBe('models');
  });

  it('runs the agent beside vLLM on one model volume, at the path the driver loads adapters from', () => {
    const agent = container('agent');
    const server = container('vllm');
    expect(agent.command).toEqual(['peerload', 'agent']);
    expect(flag(agent, 'root')).toBe(DEFAULT_MODEL_ROOT);
    expect(mountOf(agent, DEFAULT_MODEL_ROOT)).toBe('models');
    expect(mountOf(server, DEFAULT_MODEL_ROOT)).toBe('models');
    expect(flag(agent, 'address')).toBe('0.0.0.0:8095');
    expect(one(vllm, 'Service').spec.ports.map((p: { name: string }) => p.name)).toEqual(['http', 'agent']);
    expect(mountOf(agent, '/etc/peerload/agent')).toBe('agent-token');
    expect(pod.volumes).toContainEqual({ name: 'agent-token', secret: { secretName: 'vllm-agent-token' } });
    expect(server.env).toContainEqual({ name: 'VLLM_ALLOW_RUNTIME_LORA_UPDATING', value: 'True' });
    expect(server.args).toContain('--enable-lora');
    // The storage credentials go to fetch and the agent, never to the server.
    expect(mountOf(server, '/etc/peerload/storage')).toBeUndefined();
  });

  it('is applied and its pod admitted under Pod Security `restricted` with no warning', async () => {
    const ns = await restrictedNamespace('example-vllm');
    expect(await applyAll(vllm, ns)).toEqual([]);
    expect(await applyAll([podOf(vllm, 'vllm-0', ns, 'vllm')], ns)).toEqual([]);
  });

  it('servedmodel-adapter.yaml names this Service, the agent and the API key, and the CRD accepts it', async () => {
    const [sm] = readManifests(join(REPO_ROOT, 'deploy/examples/vllm/servedmodel-adapter.yaml')) as any[];
    expect(ServedModelSpec.safeParse(sm.spec).success).toBe(true);
    const { driver, service, agent, managementTokenSecretRef } = sm.spec.modelServer;
    expect(driver).toBe('vllm');
    expect(service.name).toBe(one(vllm, 'Service').metadata.name);
    expect(agent.port).toBe(8095);
    expect(agent.root).toBe(DEFAULT_MODEL_ROOT);
    expect(agent.tokenSecretRef.name).toBe('vllm-agent-token');
    expect(one(vllm, 'Secret', managementTokenSecretRef.name).stringData).toHaveProperty(
      managementTokenSecretRef.key,
    );
    const r = await dryRunServedModel('example-vllm-sm', sm);
    expect(r.metadata.name).toBe('sql-adapter');
  });
});

describe('deploy/examples/vllm-hub', () => {
  const ms = kustomize(join(REPO_ROOT, 'deploy/examples/vllm-hub'));
  const pod = one(ms, 'Deployment').spec.template.spec;
  const flag = (args: string[], name: string) =>
    args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

  it('fetches the base model from the Hub through the node peer, into the directory vLLM starts on', () => {
    const [fetch] = pod.initContainers;
    expect(fetch.command).toEqual(['peerload', 'fetch']);
    const [uri, dest] = fetch.args as string[];
    const ref = parseHubURI(uri!);
    // peerload fetch hf:// places DEST/<namespace>/<name>/<--version>: exactly vLLM's --model.
    const vllm = pod.containers.find((c: { name: string }) => c.name === 'vllm');
    expect(flag(vllm.args, 'model')).toBe(`${dest}/${ref.repo}/${flag(fetch.args, 'version')}`);
    expect(flag(fetch.args, 'proxy')).toBe('http://$(NODE_IP):4001');
    // The token file is the Secret's key, mounted into fetch only; vLLM never reaches the Hub.
    const mount = fetch.volumeMounts.find((m: { name: string }) => m.name === 'hf-token');
    expect(flag(fetch.args, 'token-file')).toBe(`${mount.mountPath}/token`);
    expect(one(ms, 'Secret', 'hf-token').stringData).toHaveProperty('token');
    expect(vllm.volumeMounts.some((m: { name: string }) => m.name === 'hf-token')).toBe(false);
    expect(vllm.env).toContainEqual({ name: 'HF_HUB_OFFLINE', value: '1' });
  });

  it('is applied and its pod admitted under Pod Security `restricted` with no warning', async () => {
    const ns = await restrictedNamespace('example-vllm-hub');
    expect(await applyAll(ms, ns)).toEqual([]);
    expect(await applyAll([podOf(ms, 'vllm-hub-0', ns, 'vllm-hub')], ns)).toEqual([]);
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
