/**
 * Vitest global set-up for integration and e2e tests: one real control plane for the whole run, with the
 * CRDs of crds/ installed. Tests reach it through `inject('kubeconfigPath')` (see kube.ts).
 */
import type { TestProject } from 'vitest/node';
import { startControlPlane, type ControlPlane } from './controlplane.ts';
import { installCRDs } from './kube.ts';

let cp: ControlPlane | undefined;

export async function setup(project: TestProject): Promise<void> {
  cp = await startControlPlane();
  console.log(`[control plane] kube-apiserver ${cp.version} at ${cp.server} (etcd ${cp.etcdURL})`);
  await installCRDs(cp.kubeconfigPath);
  project.provide('kubeconfigPath', cp.kubeconfigPath);
  project.provide('apiserverVersion', cp.version);
}

export async function teardown(): Promise<void> {
  await cp?.stop();
}
