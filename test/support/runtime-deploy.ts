/** Renders deploy/ with kustomize (kubectl kustomize) for the deploy tests. */
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadAll } from 'js-yaml';
import type { Gvr } from '../../src/runtime/index.ts';
import { REPO_ROOT } from './kube.ts';

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [k: string]: unknown;
}

export function kustomize(dir: string): Manifest[] {
  const out = execFileSync('kubectl', ['kustomize', dir], { encoding: 'utf8' });
  return (loadAll(out) as (Manifest | null)[]).filter((d): d is Manifest => !!d);
}

/**
 * Renders deploy/default. kustomize only accepts a directory outside the kustomization root when it has a
 * kustomization of its own: until crds/kustomization.yaml is committed, render a copy that adds it.
 */
export function renderDefault(): { manifests: Manifest[]; usedCopy: boolean } {
  if (existsSync(join(REPO_ROOT, 'crds/kustomization.yaml'))) {
    return { manifests: kustomize(join(REPO_ROOT, 'deploy/default')), usedCopy: false };
  }
  const dir = mkdtempSync(join(tmpdir(), 'peerload-kustomize-'));
  try {
    cpSync(join(REPO_ROOT, 'deploy'), join(dir, 'deploy'), { recursive: true });
    cpSync(join(REPO_ROOT, 'crds'), join(dir, 'crds'), { recursive: true });
    writeFileSync(
      join(dir, 'crds/kustomization.yaml'),
      'resources:\n  - modelpreheats.peerload.io.yaml\n  - servedmodels.peerload.io.yaml\n',
    );
    return { manifests: kustomize(join(dir, 'deploy/default')), usedCopy: true };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const RESOURCES: Record<string, [resource: string, namespaced: boolean]> = {
  Namespace: ['namespaces', false],
  ServiceAccount: ['serviceaccounts', true],
  Service: ['services', true],
  ClusterRole: ['clusterroles', false],
  ClusterRoleBinding: ['clusterrolebindings', false],
  Role: ['roles', true],
  RoleBinding: ['rolebindings', true],
  Deployment: ['deployments', true],
  PodDisruptionBudget: ['poddisruptionbudgets', true],
  CustomResourceDefinition: ['customresourcedefinitions', false],
};

/** The resource of a rendered manifest (the kinds deploy/ uses). */
export function gvrOf(m: { apiVersion: string; kind: string }): Gvr {
  const r = RESOURCES[m.kind];
  if (!r) throw new Error(`no resource known for kind ${m.kind}`);
  const [group, version] = m.apiVersion.includes('/') ? m.apiVersion.split('/') : ['', m.apiVersion];
  return { group: group!, version: version!, resource: r[0], namespaced: r[1], kind: m.kind };
}
