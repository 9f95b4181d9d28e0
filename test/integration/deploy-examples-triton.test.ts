/**
 * deploy/examples/triton (Triton + the `peerload agent` sidecar) and its hard-link variant: what the driver relies
 * on is in the manifests (explicit model control on the volume the agent writes, the agent's port and token as the
 * ServedModel names them, the daemon's proxy on the node), and the real apiserver admits them: the base under Pod
 * Security `restricted` with no warning, the hard-link variant (a node volume) refused by `restricted` for that
 * alone.
 */
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { GVR, ServedModelSpec } from '../../src/api/index.ts';
import { KubeClient } from '../../src/runtime/index.ts';
import { applyInto, expectHardLinkRefusal, podSecurityNamespace } from '../support/example-apply.ts';
import { kubeConfig, readManifests, REPO_ROOT } from '../support/kube.ts';
import { kustomize, type Manifest } from '../support/runtime-deploy.ts';

const kube = new KubeClient(kubeConfig(inject('kubeconfigPath')));
afterAll(() => kube.close());

const base = kustomize(join(REPO_ROOT, 'deploy/examples/triton'));
const hardlink = kustomize(join(REPO_ROOT, 'deploy/examples/triton-hardlink'));
const one = (ms: Manifest[], kind: string, name?: string) =>
  ms.find((m) => m.kind === kind && (!name || m.metadata.name === name)) as any;
const [servedModel] = readManifests(join(REPO_ROOT, 'deploy/examples/triton/servedmodel.yaml')) as any[];
const podSpec = (ms: Manifest[]) => one(ms, 'Deployment').spec.template.spec;
const container = (ms: Manifest[], name: string) =>
  [...(podSpec(ms).initContainers ?? []), ...podSpec(ms).containers].find(
    (c: { name: string }) => c.name === name,
  );
const flag = (c: { args: string[] }, name: string) =>
  c.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
const mountOf = (c: { volumeMounts: { name: string; mountPath: string }[] }, volume: string) =>
  c.volumeMounts.find((m) => m.name === volume);

const namespace = (level: 'restricted' | 'privileged') => podSecurityNamespace(kube, 'example-triton', level);
/** Server-side apply into `ns`; the apiserver's warnings. */
const apply = (ms: Manifest[], ns: string, dryRun = false) => applyInto(kube, ms, ns, dryRun);

const podOf = (ms: Manifest[], name: string): Manifest =>
  ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, labels: { 'app.kubernetes.io/name': 'triton' } },
    spec: podSpec(ms),
  }) as Manifest;

describe('deploy/examples/triton', () => {
  const triton = container(base, 'triton');
  const agent = container(base, 'peerload-agent');

  it('runs Triton with explicit model control on the volume the agent places versions into', () => {
    expect(triton.args).toContain('--model-control-mode=explicit');
    const repository = flag(triton, 'model-repository');
    expect(mountOf(triton, 'models')).toEqual({ name: 'models', mountPath: repository, readOnly: true });
    expect(mountOf(agent, 'models')).toEqual({ name: 'models', mountPath: flag(agent, 'root') });
    expect(podSpec(base).volumes).toContainEqual({ name: 'models', emptyDir: {} });
    // Model configs are copied beside the versions, as the pod's user (the agent writes the same directories).
    const configs = container(base, 'model-configs');
    expect(mountOf(configs, 'models')!.mountPath).toBe('/models');
    expect(configs.command.join(' ')).toContain('config.pbtxt');
    expect(one(base, 'ConfigMap', 'triton-model-config').data['echo.config.pbtxt']).toContain(
      'backend: "python"',
    );
  });

  it('runs the agent from the operator image, on the port and with the token the ServedModel names', () => {
    expect(agent.image).toBe('ghcr.io/peerload/peerload:0.1.0');
    expect(agent.command).toEqual(['peerload', 'agent']);
    const { agent: access, service, driver } = servedModel.spec.modelServer;
    expect(driver).toBe('triton');
    expect(flag(agent, 'address')).toBe(`0.0.0.0:${access.port}`);
    expect(agent.ports).toEqual([{ name: 'agent', containerPort: access.port }]);
    const tokenDir = mountOf(agent, 'agent-token')!.mountPath;
    expect(flag(agent, 'token-file')).toBe(`${tokenDir}/${access.tokenSecretRef.key}`);
    expect(podSpec(base).volumes).toContainEqual({
      name: 'agent-token',
      secret: { secretName: access.tokenSecretRef.name },
    });
    expect(one(base, 'Secret', access.tokenSecretRef.name).stringData).toHaveProperty(
      access.tokenSecretRef.key,
    );
    // The storage credentials reach the agent alone.
    expect(flag(agent, 'credentials-dir')).toBe(mountOf(agent, 'storage')!.mountPath);
    expect(mountOf(triton, 'storage')).toBeUndefined();
    expect(mountOf(triton, 'agent-token')).toBeUndefined();
    // The node's peer daemon, by the node's address.
    expect(flag(agent, 'proxy')).toBe('http://$(HOST_IP):4001');
    expect(agent.env).toContainEqual({
      name: 'HOST_IP',
      valueFrom: { fieldRef: { fieldPath: 'status.hostIP' } },
    });
    // The driver calls the repository API on the Service's port the ServedModel names.
    const port = one(base, 'Service').spec.ports.find((p: { name: string }) => p.name === service.port);
    expect(triton.ports).toContainEqual({ name: port.targetPort, containerPort: port.port });
    expect(one(base, 'Service').metadata.name).toBe(service.name);
    expect(servedModel.spec.files.prefix).toMatch(/\/$/);
  });

  it("servedmodel.yaml is accepted by the CRD, and by the operator's schema as it is", async () => {
    expect(ServedModelSpec.safeParse(servedModel.spec).success).toBe(true);
    const ns = await namespace('restricted');
    expect(await apply([servedModel], ns, true)).toEqual([]);
  });

  it('is applied under Pod Security `restricted` with no warning, and its pod admitted', async () => {
    const ns = await namespace('restricted');
    expect(await apply(base, ns)).toEqual([]);
    expect(await apply([podOf(base, 'triton-0')], ns)).toEqual([]);
    const created = (await kube.resource(GVR.pods).get(ns, 'triton-0')) as any;
    expect(created.spec.automountServiceAccountToken).toBe(false);
    expect(created.spec.volumes.map((v: { name: string }) => v.name).sort()).toEqual([
      'agent-token',
      'model-config',
      'models',
      'storage',
    ]);
  });
});

describe('deploy/examples/triton-hardlink', () => {
  const agent = container(hardlink, 'peerload-agent');

  it("mounts the pod's directory of the node volume as the model root, named to the daemon by --hard-link-root", () => {
    const volume = podSpec(hardlink).volumes.find((v: { name: string }) => v.name === 'models');
    expect(volume).toEqual({
      name: 'models',
      hostPath: { path: '/var/lib/dragonfly/model-roots', type: 'DirectoryOrCreate' },
    });
    for (const name of ['model-root-owner', 'model-configs', 'triton', 'peerload-agent'])
      expect(mountOf(container(hardlink, name), 'models'), name).toMatchObject({
        subPathExpr: '$(POD_NAME)',
      });
    expect(flag(agent, 'hard-link-root')).toBe(`${volume.hostPath.path}/$(POD_NAME)`);
    expect(flag(agent, 'proxy')).toBe('http://$(HOST_IP):4001');
    // The directory is the agent's user's before anything writes to it (fsGroup does not apply to hostPath).
    expect(podSpec(hardlink).initContainers[0].name).toBe('model-root-owner');
  });

  it("names Triton's uid to the agent (--server-uid), a non-root one without capabilities, so links stay read-only for it", () => {
    const triton = container(hardlink, 'triton');
    const uid = triton.securityContext?.runAsUser ?? podSpec(hardlink).securityContext.runAsUser;
    expect(uid).toBeGreaterThan(0);
    expect(flag(agent, 'server-uid')).toBe(String(uid));
    expect(triton.securityContext.capabilities.drop).toEqual(['ALL']);
    expect(triton.securityContext.allowPrivilegeEscalation).toBe(false);
    expect(mountOf(triton, 'models')).toMatchObject({ readOnly: true });
  });

  it('is refused by `restricted` for the node volume and the chown init container only; admitted as privileged', async () => {
    const restricted = await namespace('restricted');
    await expectHardLinkRefusal(apply([podOf(hardlink, 'hl')], restricted), 'model-root-owner', 'models');
    const privileged = await namespace('privileged');
    expect(await apply(hardlink, privileged, true)).toEqual([]);
  });
});
