/**
 * What the deploy/examples tests do on the real apiserver: a namespace at a Pod Security level (enforce, warn and
 * audit), and a server-side apply of rendered manifests into it that returns the apiserver's warnings.
 */
import { randomBytes } from 'node:crypto';
import { expect } from 'vitest';
import type { KubeClient, KubeObject } from '../../src/runtime/index.ts';
import { gvrOf, serverSideApply, type Manifest } from './runtime-deploy.ts';

/** A new namespace `<prefix>-<random>` whose Pod Security enforce, warn and audit levels are `level`. */
export async function podSecurityNamespace(
  kube: KubeClient,
  prefix: string,
  level: 'restricted' | 'baseline' | 'privileged',
): Promise<string> {
  const name = `${prefix}-${randomBytes(3).toString('hex')}`;
  const labels = Object.fromEntries(
    ['enforce', 'warn', 'audit'].map((mode) => [`pod-security.kubernetes.io/${mode}`, level]),
  );
  await kube.resource(gvrOf({ apiVersion: 'v1', kind: 'Namespace' })).create({
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name, labels },
  } as KubeObject);
  return name;
}

/**
 * Applies (server-side, as the field manager `peerload-tests`) into `ns` (undefined: each into its own namespace),
 * cluster-scoped objects as they are; the apiserver's warnings.
 */
export async function applyInto(
  kube: KubeClient,
  ms: Manifest[],
  ns: string | undefined,
  dryRun = false,
): Promise<string[]> {
  const warnings: string[] = [];
  const off = kube.onRequest((r) => warnings.push(...(r.warnings ?? [])));
  try {
    for (const m of ms) {
      const r = await serverSideApply(kube, m, { namespace: ns, dryRun });
      if (r.metadata.name !== m.metadata.name)
        throw new Error(`applied ${m.kind} ${m.metadata.name} came back as ${r.metadata.name}`);
    }
  } finally {
    off();
  }
  return warnings;
}

/**
 * The checks a Pod Security refusal names, each as the apiserver words it ("check (detail)", the detail's last
 * parenthesis dropped); null when `message` is no such refusal.
 */
export function podSecurityViolations(message: string): string[] | null {
  const m = /violates PodSecurity "restricted:latest": (.*)$/.exec(message);
  return m ? m[1]!.split(/\), (?=[a-zA-Z])/).map((v) => v.replace(/\)$/, '')) : null;
}

/**
 * Checks that `applying` a hard-link example's pod is refused by `restricted` Pod Security for what such a pod needs
 * and for nothing else: a node volume (hostPath, `volume`) and a root init container (`initContainer`) that hands
 * the directory to the server's user.
 */
export async function expectHardLinkRefusal(
  applying: Promise<unknown>,
  initContainer: string,
  volume: string,
): Promise<void> {
  const err = await applying.then(
    () => new Error('admitted'),
    (e: Error) => e,
  );
  // "check (detail), check (detail)": the checks and what each names.
  const violations = podSecurityViolations(err.message)!;
  expect(violations, err.message).not.toBeNull();
  expect(violations.map((v) => v.split(' (')[0]).sort()).toEqual([
    'restricted volume types',
    'runAsNonRoot != true',
    'runAsUser=0',
    'unrestricted capabilities',
  ]);
  for (const v of violations)
    expect(v).toMatch(new RegExp(`container "${initContainer}"|volume "${volume}"`));
}
