/**
 * The cluster project's global set-up: one real two-node cluster (cluster.ts) per run, its ClusterInfo provided as
 * `inject('cluster')`. The teardown stops it and fails the run when anything it added is left on the machine
 * (processes, mounts, links, routes, rules, iptables chains, cgroups) or a sysctl differs from before the start:
 * vitest reports an error thrown by a global teardown but exits 0, so the teardown sets the exit code itself
 * (test/cluster/cluster.test.ts holds the check to finding what a running cluster added).
 */
import type { TestProject } from 'vitest/node';
import { clusterInfo, startCluster, type Cluster } from './cluster.ts';
import { hostState, leftovers, type HostState } from './cluster-host.ts';

let cluster: Cluster | undefined;
let before: HostState | undefined;

export async function setup(project: TestProject): Promise<void> {
  before = await hostState();
  const t0 = Date.now();
  // PEERLOAD_CLUSTER_KEEP_DIR=1 keeps the cluster's directory (logs, kubelet roots) after the run, for debugging.
  cluster = await startCluster({
    log: (l) => console.log(l),
    keepDir: !!process.env.PEERLOAD_CLUSTER_KEEP_DIR,
  });
  console.log(`[cluster] started in ${((Date.now() - t0) / 1000).toFixed(1)} s; logs in ${cluster.logDir}`);
  project.provide('cluster', clusterInfo(cluster));
}

export async function teardown(): Promise<void> {
  if (!cluster || !before) return;
  const t0 = Date.now();
  await cluster.stop();
  console.log(`[cluster] stopped in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  const left = leftovers(before, await hostState(), cluster.dir);
  if (left.length) {
    console.error(`[cluster] FAILED: the cluster's stop left behind:\n${left.join('\n')}`);
    process.exitCode = 1;
    return;
  }
  console.log('[cluster] nothing left behind; sysctls as before the start');
}
