/** Renders deploy/ with a pinned kustomize for the deploy tests. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { loadAll } from 'js-yaml';
import type { Gvr, KubeClient } from '../../src/runtime/index.ts';
import { REPO_ROOT } from './kube.ts';

export interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [k: string]: unknown;
}

/** kustomize built by scripts/setup-kustomize.sh (pinned; no dependency on a kubectl of unknown version). */
function kustomizeBin(): string {
  const dir = execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-kustomize.sh')], {
    encoding: 'utf8',
  }).trim();
  return join(dir.split('\n').pop()!, 'kustomize');
}

export function kustomize(dir: string): Manifest[] {
  const out = execFileSync(kustomizeBin(), ['build', dir], { encoding: 'utf8' });
  return (loadAll(out) as (Manifest | null)[]).filter((d): d is Manifest => !!d);
}

/** Renders deploy/default: the operator and the CRDs, exactly what `kubectl apply -k deploy/default` applies. */
export function renderDefault(): Manifest[] {
  return kustomize(join(REPO_ROOT, 'deploy/default'));
}

const RESOURCES: Record<string, [resource: string, namespaced: boolean]> = {
  Namespace: ['namespaces', false],
  ServiceAccount: ['serviceaccounts', true],
  Secret: ['secrets', true],
  ConfigMap: ['configmaps', true],
  Service: ['services', true],
  ClusterRole: ['clusterroles', false],
  ClusterRoleBinding: ['clusterrolebindings', false],
  Role: ['roles', true],
  RoleBinding: ['rolebindings', true],
  Deployment: ['deployments', true],
  PodDisruptionBudget: ['poddisruptionbudgets', true],
  CustomResourceDefinition: ['customresourcedefinitions', false],
  NetworkPolicy: ['networkpolicies', true],
  Pod: ['pods', true],
  ValidatingAdmissionPolicy: ['validatingadmissionpolicies', false],
  ValidatingAdmissionPolicyBinding: ['validatingadmissionpolicybindings', false],
  ServedModel: ['servedmodels', true],
  ModelPreheat: ['modelpreheats', true],
};

/** The resource of a rendered manifest (the kinds deploy/ uses). */
export function gvrOf(m: { apiVersion: string; kind: string }): Gvr {
  const r = RESOURCES[m.kind];
  if (!r) throw new Error(`no resource known for kind ${m.kind}`);
  const [group, version] = m.apiVersion.includes('/') ? m.apiVersion.split('/') : ['', m.apiVersion];
  return { group: group!, version: version!, resource: r[0], namespaced: r[1], kind: m.kind };
}

/**
 * Applies `m` server-side as `fieldManager` (default `peerload-tests`), taking over its fields as `kubectl apply
 * --server-side --force-conflicts` does: into `namespace` when it is namespaced (default its own), in a dry run when
 * `dryRun`. Resolves with the object as the apiserver made it.
 */
export function serverSideApply(
  kube: KubeClient,
  m: Manifest,
  o: { namespace?: string; dryRun?: boolean; fieldManager?: string } = {},
) {
  const gvr = gvrOf(m);
  const namespace = gvr.namespaced ? (o.namespace ?? m.metadata.namespace) : undefined;
  const body = { ...m, metadata: { ...m.metadata, ...(namespace ? { namespace } : {}) } };
  return kube.resource(gvr).patch(namespace, m.metadata.name, body, {
    type: 'apply',
    fieldManager: o.fieldManager ?? 'peerload-tests',
    force: true,
    dryRun: o.dryRun ?? false,
  });
}
