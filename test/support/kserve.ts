/** KServe from the Go module proxy (scripts/setup-kserve.sh): its CRDs, installed into the test apiserver. */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { load } from 'js-yaml';
import type { KubeClient, KubeObject } from '../../src/runtime/index.ts';
import { REPO_ROOT } from './kube.ts';

/** The directory of KServe's CRDs (config/crd/full of the pinned module). */
export function kserveCrdDir(): string {
  const out = execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-kserve.sh'), '--crds'], {
    encoding: 'utf8',
  });
  return out.trim().split('\n').pop()!;
}

const CRD_GVR = {
  group: 'apiextensions.k8s.io',
  version: 'v1',
  resource: 'customresourcedefinitions',
  namespaced: false,
  kind: 'CustomResourceDefinition',
} as const;

type Crd = KubeObject & { status?: { conditions?: { type: string; status: string }[] } };

/**
 * Creates the CRDs at `files` (relative to the CRD directory) unless they exist, and waits until they are
 * Established. Created, not applied: the InferenceService CRD (~2 MB of YAML) is above what the last-applied
 * annotation of a client-side apply may hold.
 */
export async function installKServeCrds(kube: KubeClient, files: readonly string[]): Promise<void> {
  const dir = kserveCrdDir();
  const crds = kube.resource<Crd>(CRD_GVR);
  for (const file of files) {
    const crd = load(readFileSync(join(dir, file), 'utf8')) as Crd;
    await crds.create(crd).catch((e: unknown) => {
      if (!/409|AlreadyExists/.test(String(e))) throw e;
    });
    for (let i = 0; ; i++) {
      const got = await crds.get(undefined, crd.metadata.name);
      if (got.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True')) break;
      if (i > 100) throw new Error(`CRD ${crd.metadata.name} is not Established`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}
