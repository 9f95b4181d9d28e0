/**
 * deploy/examples/triton-oci (a Triton model from an OCI registry): the ServedModel names the registry Secret the
 * kustomization ships, a dockerconfigjson with an entry for the reference's registry that no pod mounts, and the
 * real apiserver admits it all under Pod Security `restricted` with no warning (the ServedModel too, by its CRD).
 */
import { join } from 'node:path';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { GVR, ServedModelSpec } from '../../src/api/index.ts';
import { secretCredentials } from '../../src/oci/credentials.ts';
import { parseReference } from '../../src/oci/reference.ts';
import { KubeClient } from '../../src/runtime/index.ts';
import { applyInto, podSecurityNamespace } from '../support/example-apply.ts';
import { kubeConfig, readManifests, REPO_ROOT } from '../support/kube.ts';
import { kustomize, type Manifest } from '../support/runtime-deploy.ts';

const kube = new KubeClient(kubeConfig(inject('kubeconfigPath')));
afterAll(() => kube.close());

const manifests = kustomize(join(REPO_ROOT, 'deploy/examples/triton-oci'));
const [servedModel] = readManifests(join(REPO_ROOT, 'deploy/examples/triton-oci/servedmodel.yaml')) as any[];
const one = (kind: string, name?: string) =>
  manifests.find((m) => m.kind === kind && (!name || m.metadata.name === name)) as any;

const restrictedNamespace = () => podSecurityNamespace(kube, 'example-oci', 'restricted');
const apply = (ms: Manifest[], ns: string, dryRun = false) => applyInto(kube, ms, ns, dryRun);

describe('deploy/examples/triton-oci', () => {
  it("names the registry Secret it ships: a dockerconfigjson with the reference's registry, mounted into no pod", () => {
    const oci = servedModel.spec.source.oci;
    const secret = one('Secret', oci.credentialsSecretRef.name);
    expect(secret.type).toBe('kubernetes.io/dockerconfigjson');
    const registry = parseReference(oci.reference).registry;
    expect(secretCredentials(secret.stringData, registry)).toEqual({
      username: 'replace-with-robot',
      password: 'replace-with-password',
    });
    const pod = one('Deployment').spec.template.spec;
    const secretsMounted = pod.volumes.filter((v: any) => v.secret).map((v: any) => v.secret.secretName);
    expect(secretsMounted).not.toContain(secret.metadata.name);
    // The agent the ServedModel names is the triton example's.
    const agent = pod.containers.find((c: any) => c.name === 'peerload-agent');
    expect(agent.ports).toEqual([{ name: 'agent', containerPort: servedModel.spec.modelServer.agent.port }]);
    expect(servedModel.spec.modelServer.driver).toBe('triton');
  });

  it("servedmodel.yaml is accepted by the operator's schema and by the CRD", async () => {
    expect(ServedModelSpec.safeParse(servedModel.spec).error?.issues ?? []).toEqual([]);
    const ns = await restrictedNamespace();
    expect(await apply([servedModel], ns, true)).toEqual([]);
  });

  it('is applied under Pod Security `restricted` with no warning, and its pod admitted', async () => {
    const ns = await restrictedNamespace();
    expect(await apply(manifests, ns)).toEqual([]);
    const pod = {
      apiVersion: 'v1',
      kind: 'Pod',
      metadata: { name: 'triton-oci-0', labels: { 'app.kubernetes.io/name': 'triton' } },
      spec: one('Deployment').spec.template.spec,
    } as Manifest;
    expect(await apply([pod], ns)).toEqual([]);
    const created = (await kube.resource(GVR.pods).get(ns, 'triton-oci-0')) as any;
    expect(created.metadata.name).toBe('triton-oci-0');
  });
});
