/** helm built by scripts/setup-helm.sh (pinned, from the Go module proxy), for the chart tests. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { loadAll } from 'js-yaml';
import { REPO_ROOT } from './kube.ts';
import type { Manifest } from './runtime-deploy.ts';

export const CHART = join(REPO_ROOT, 'charts/peerload');

export function helmBin(): string {
  const dir = execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-helm.sh')], { encoding: 'utf8' }).trim();
  return join(dir.split('\n').pop()!, 'helm');
}

export function helm(args: string[]): string {
  // stderr: helm notes the crds/ symbolic links to crds/ of the repository on every run.
  return execFileSync(helmBin(), args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
}

/** `helm template <release> charts/peerload -n <namespace> --set ...`, parsed. */
export function helmTemplate(
  release: string,
  namespace: string,
  set: Record<string, string> = {},
  extra: string[] = [],
): Manifest[] {
  const sets = Object.entries(set).flatMap(([k, v]) => ['--set', `${k}=${v}`]);
  const out = helm(['template', release, CHART, '--namespace', namespace, ...sets, ...extra]);
  return (loadAll(out) as (Manifest | null)[]).filter((d): d is Manifest => !!d);
}
