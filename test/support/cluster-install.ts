/**
 * What an admin installs into the real two-node cluster (test/support/cluster.ts) before peerload serves a model:
 * the images (built here, imported into both nodes' containerd: nothing can be pulled), Dragonfly as pods
 * (test/cluster/dragonfly.yaml), the manager's personal access token as the Secret the chart names, and
 * `helm install` of charts/peerload.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from './kube.ts';
import { importImage, type ClusterInfo, type Cluster } from './cluster.ts';
import { createPersonalAccessToken, ROOT_USER, signIn } from './dragonfly.ts';
import { waitFor } from './process.ts';

const run = promisify(execFile);

/** What the install and deploy/examples/triton-hardlink run. */
const IMAGES = ['peerload', 'busybox', 'triton', 'manager', 'scheduler', 'client', 'mariadb', 'redis'];

export interface ClusterImages {
  /** Tag → OCI archive, as scripts/build-cluster-images.sh printed them. */
  archives: Map<string, string>;
  /** The operator's image (the chart's default repository, the package version). */
  peerload: string;
  /** The one tag that starts with `prefix` (a repository and its colon). */
  tagOf(prefix: string): string;
}

/**
 * Builds (cached by their inputs) and imports into both nodes every image the install and the examples run, and
 * the `extra` images of build-cluster-images.sh a test names (e.g. `kserve`).
 */
export async function importClusterImages(info: ClusterInfo, extra: string[] = []): Promise<ClusterImages> {
  const names = [...IMAGES, ...extra];
  const { stdout } = await run('bash', [join(REPO_ROOT, 'scripts/build-cluster-images.sh'), ...names], {
    maxBuffer: 16 << 20,
    timeout: 3_600_000,
  });
  const archives = new Map(
    stdout
      .trim()
      .split('\n')
      .map((l) => l.split('\t') as [string, string]),
  );
  // One at a time: both nodes' containerd unpack each in parallel already, and two cores are all there is.
  for (const archive of archives.values()) await importImage(info.nodes, archive);
  const tagOf = (prefix: string) => {
    const tag = [...archives.keys()].find((t) => t.startsWith(prefix));
    if (!tag) throw new Error(`build-cluster-images.sh printed no ${prefix} image:\n${stdout}`);
    return tag;
  };
  return { archives, peerload: tagOf('ghcr.io/peerload/peerload:'), tagOf };
}

/** What the tests read of a pod; a test that reads more extends it. */
export interface ClusterPod {
  metadata: { name: string; deletionTimestamp?: string };
  spec: { nodeName: string };
  status: { podIP?: string; conditions?: { type: string; status: string }[] };
}

/** Whether the pod's Ready condition is True. */
export const podReady = (p: ClusterPod): boolean =>
  p.status.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

/** The pods of `ns` that `selector` matches, but those being deleted. */
export async function livePods<P extends ClusterPod = ClusterPod>(
  kubectl: Cluster['kubectl'],
  ns: string,
  selector: string,
): Promise<P[]> {
  const list = JSON.parse(await kubectl(['get', 'pods', '-n', ns, '-l', selector, '-o', 'json'])) as {
    items: P[];
  };
  return list.items.filter((p) => !p.metadata.deletionTimestamp);
}

/** `kubectl rollout status` of each workload, in order. */
export async function rolledOut(kubectl: Cluster['kubectl'], ns: string, workloads: string[]): Promise<void> {
  for (const w of workloads)
    await kubectl(['rollout', 'status', '-n', ns, w, '--timeout=300s'], { timeoutMs: 310_000 });
}

export interface InstalledDragonfly {
  /** The manager's REST API as the machine reaches it (its Service's ClusterIP, through kube-proxy). */
  managerURL: string;
  /** In-cluster URL of the manager, as the chart's manager.url takes it. */
  inClusterURL: string;
  /** A personal access token with the job and cluster scopes. */
  token: string;
}

/**
 * Applies test/cluster/dragonfly.yaml (MariaDB's and Redis's tags: the Debian packages' versions the images were
 * built with) and waits for every component, then for the manager to take sign-ins.
 */
export async function installDragonfly(
  kubectl: Cluster['kubectl'],
  images: ClusterImages,
): Promise<InstalledDragonfly> {
  const manifests = (await readFile(join(REPO_ROOT, 'test/cluster/dragonfly.yaml'), 'utf8')).replace(
    /peerload\.local\/(mariadb|redis):debian/g,
    (_, name: string) => images.tagOf(`peerload.local/${name}:`),
  );
  await kubectl(['apply', '-f', '-'], { input: manifests });
  const ns = 'dragonfly-system';
  await rolledOut(kubectl, ns, [
    'deployment/dragonfly-mysql',
    'deployment/dragonfly-redis',
    'deployment/dragonfly-manager',
    'statefulset/dragonfly-scheduler',
    'statefulset/dragonfly-seed-client',
    'daemonset/dragonfly-client',
  ]);
  const ip = (
    await kubectl(['get', 'service', '-n', ns, 'dragonfly-manager', '-o', 'jsonpath={.spec.clusterIP}'])
  ).trim();
  const managerURL = `http://${ip}:8080`;
  const jwt = await waitFor('the manager to take sign-ins', () => signIn(managerURL, ROOT_USER), {
    timeoutMs: 120_000,
    intervalMs: 1_000,
  });
  const token = await createPersonalAccessToken(managerURL, jwt, 'peerload', ['job', 'cluster']);
  return { managerURL, inClusterURL: `http://dragonfly-manager.dragonfly-system:8080`, token };
}

/**
 * What a person would look at when a cluster test fails: the namespaces' workloads, pods and events, the peerload
 * objects' status, and the last lines of every container of the operator and of `pods` (a label selector per
 * namespace).
 */
export async function clusterReport(
  kubectl: Cluster['kubectl'],
  namespaces: Record<string, string | undefined>,
): Promise<string> {
  const out: string[] = [];
  const get = async (args: string[]) => {
    out.push(`$ kubectl ${args.join(' ')}`);
    out.push(await kubectl(args).catch((err: Error) => err.message));
  };
  for (const [ns, selector] of Object.entries(namespaces)) {
    await get(['get', 'all,servedmodels,modelpreheats', '-n', ns, '-o', 'wide']);
    await get(['get', 'servedmodels,modelpreheats', '-n', ns, '-o', 'yaml']);
    await get(['get', 'events', '-n', ns, '--sort-by=.lastTimestamp']);
    if (selector) await get(['logs', '-n', ns, '-l', selector, '--all-containers', '--prefix', '--tail=40']);
  }
  return out.join('\n');
}
