/** Kubernetes helpers for tests: clients on the test control plane, namespaces, CRDs, waiting. */
import * as k8s from '@kubernetes/client-node';
import { loadAll } from 'js-yaml';
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { randomBytes } from 'node:crypto';
import { waitFor } from './process.ts';

export const REPO_ROOT = resolve(import.meta.dirname, '../..');

export function kubeConfig(path: string): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromFile(path);
  return kc;
}

/** A KubeConfig that impersonates `user` (and groups): how tests act with a narrower identity than admin. */
export function impersonating(path: string, user: string, groups: string[] = []): k8s.KubeConfig {
  const kc = kubeConfig(path);
  kc.users = kc.users.map((u) => ({ ...u, impersonateUser: user, impersonateGroups: groups }));
  return kc;
}

export function readManifests(path: string): k8s.KubernetesObject[] {
  return loadAll(readFileSync(path, 'utf8')).filter((d): d is k8s.KubernetesObject => !!d);
}

/** Server-side applies the committed CRDs and waits until the apiserver serves them. */
export async function installCRDs(kubeconfigPath: string): Promise<void> {
  const kc = kubeConfig(kubeconfigPath);
  const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  const ext = kc.makeApiClient(k8s.ApiextensionsV1Api);
  const dir = join(REPO_ROOT, 'crds');
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.peerload.io.yaml'))) {
    // The typed client re-serialises known kinds from their TypeScript property names
    // (`xKubernetesValidations`); a plain YAML object must be loaded into the model (loadYaml) or those keys vanish.
    const crd = k8s.loadYaml<k8s.V1CustomResourceDefinition>(readFileSync(join(dir, file), 'utf8'));
    await objects.patch(crd, undefined, undefined, 'peerload-tests', true, k8s.PatchStrategy.ServerSideApply);
    await waitFor(`CRD ${crd.metadata?.name} Established`, async () => {
      const got = await ext.readCustomResourceDefinition({ name: crd.metadata!.name! });
      return got.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True');
    });
  }
}

/** Creates a namespace with a unique name for one test file. */
/** The namespaces this test file created: namespace-cleanup.ts empties them of peerload objects after the file. */
export const createdNamespaces: string[] = [];

export async function createNamespace(kc: k8s.KubeConfig, prefix: string): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`.toLowerCase();
  await kc.makeApiClient(k8s.CoreV1Api).createNamespace({ body: { metadata: { name } } });
  createdNamespaces.push(name);
  return name;
}

export { waitFor };

/** Creates Secret `name` in `namespace` holding `stringData` (Opaque unless `type` says otherwise). */
export async function createSecret(
  kc: k8s.KubeConfig,
  namespace: string,
  name: string,
  stringData: Record<string, string>,
  type?: string,
): Promise<void> {
  await kc.makeApiClient(k8s.CoreV1Api).createNamespacedSecret({
    namespace,
    body: { metadata: { name }, ...(type ? { type } : {}), stringData },
  });
}

/**
 * Creates a `kubernetes.io/dockerconfigjson` Secret, as `kubectl create secret docker-registry` writes it: `auths`
 * maps each registry host to its `user:password`.
 */
export function createRegistrySecret(
  kc: k8s.KubeConfig,
  namespace: string,
  name: string,
  auths: Record<string, string>,
): Promise<void> {
  const entries = Object.entries(auths).map(([host, userPass]) => [
    host,
    { auth: Buffer.from(userPass).toString('base64') },
  ]);
  return createSecret(
    kc,
    namespace,
    name,
    {
      '.dockerconfigjson': JSON.stringify({ auths: Object.fromEntries(entries) }),
    },
    'kubernetes.io/dockerconfigjson',
  );
}

/** peerload's resources of one plural (`modelpreheats`, `servedmodels`) as plain JSON: create and read. */
export function peerloadResources<T>(kc: k8s.KubeConfig, kind: string, plural: string) {
  const custom = kc.makeApiClient(k8s.CustomObjectsApi);
  const at = { group: 'peerload.io', version: 'v1alpha1', plural };
  return {
    create: (namespace: string, name: string, spec: object) =>
      custom.createNamespacedCustomObject({
        ...at,
        namespace,
        body: { apiVersion: `${at.group}/${at.version}`, kind, metadata: { name }, spec },
      }),
    get: async (namespace: string, name: string): Promise<T> =>
      (await custom.getNamespacedCustomObject({ ...at, namespace, name })) as T,
  };
}
