/**
 * A real two-node Kubernetes cluster of processes on this machine, for tests that run what a cluster admin runs
 * (pods, DaemonSets, Services, `helm install`). Binaries and images come from scripts/setup-cluster.sh (cached).
 *
 * One etcd + kube-apiserver (Node,RBAC authorization, NodeRestriction, service-account keys, a small openssl CA),
 * kube-controller-manager, kube-scheduler and one kube-proxy (iptables mode) for the cluster; per node its own
 * containerd (own root, state and socket: a shared one lets each kubelet collect the other's sandboxes), its own
 * bridge and pod range (CNI bridge + host-local), its own kubelet (own cgroup root, node IP on its bridge). CoreDNS
 * serves cluster DNS (cluster-dns.ts). What it changes on the machine and how stop takes it back: cluster-host.ts.
 * One cluster at a time: kube-proxy owns its iptables chains in the machine's one network namespace.
 */
import { execFile, execFileSync, spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { request } from 'node:https';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import {
  bridgeName,
  cgroupPids,
  cgroupRoot,
  CLUSTER_CHAIN,
  CLUSTER_CIDR,
  CLUSTER_DNS_IP,
  containerLogLinks,
  createCgroupRoot,
  hostState,
  iptablesChains,
  nodeIP,
  nodeName,
  pidsNaming,
  podCIDR,
  removeCgroups,
  removeChains,
  restoreSysctls,
  SERVICE_CIDR,
  setUpNetwork,
  tearDownNetwork,
  unmountUnder,
  type HostState,
} from './cluster-host.ts';
import { coreDNSManifests } from './cluster-dns.ts';
import { kubeconfig, makeCA, makeCert, type KeyPair } from './cluster-pki.ts';
import { freePort } from './ports.ts';
import { startProcess, waitFor, type ManagedProcess } from './process.ts';

const exec = promisify(execFile);
const REPO_ROOT = resolve(import.meta.dirname, '../..');
const NODES = 2;
/** Where containerd 1.6's shims put their sockets whatever its state directory (a fixed path). */
const SHIM_SOCKETS = '/run/containerd/s';
/** Where libcni caches each attachment's result (containerd's default; a fixed path). */
const CNI_RESULTS = '/var/lib/cni/results';
const STATE_FILE = 'cluster-state.json';

export type ClusterImage = 'pause' | 'coredns' | 'busybox';

/** What scripts/setup-cluster.sh built: the binaries and the images' references and OCI archives. */
export interface ClusterAssets {
  bin: string;
  controlPlaneBin: string;
  images: Record<ClusterImage, { ref: string; archive: string }>;
}

export interface ClusterNode {
  name: string;
  /** The node's InternalIP: its bridge's address, where its kubelet listens. */
  ip: string;
  podCIDR: string;
  bridge: string;
  containerdSocket: string;
  cgroupRoot: string;
}

export interface Cluster {
  dir: string;
  /** One log per process (etcd, kube-apiserver, containerd-<node>, kubelet-<node>, ...). */
  logDir: string;
  /** A kubeconfig with the admin identity (system:masters, a client certificate). */
  kubeconfigPath: string;
  /** https://<node 0's IP>:<port>: reachable from the machine and from every pod. */
  server: string;
  caPath: string;
  nodes: ClusterNode[];
  clusterCIDR: string;
  serviceCIDR: string;
  /** The kubelets' clusterDNS: the `kube-dns` Service in kube-system (CoreDNS). */
  clusterDNS: string;
  /** The images already in both nodes' containerd (use them with `imagePullPolicy: Never`). */
  images: Record<ClusterImage, string>;
  assets: ClusterAssets;
  /** `ctr -n k8s.io images import` of an OCI (or docker) archive into both nodes' containerd. */
  importImage(archivePath: string): Promise<void>;
  /** The cluster's kubectl with the admin kubeconfig; resolves with stdout, rejects with stderr in the message. */
  kubectl(args: string[], opts?: { input?: string; timeoutMs?: number }): Promise<string>;
  /** Stops every process and removes everything the start added; idempotent. */
  stop(): Promise<void>;
}

export interface ClusterOptions {
  assets?: ClusterAssets;
  /** Keep the directory (logs, etcd, kubelet roots) after stop, for debugging. */
  keepDir?: boolean;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

/** Runs the idempotent set-up script (cached binaries and images). */
export function clusterAssets(): ClusterAssets {
  const out = execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-cluster.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const kv = Object.fromEntries(
    out
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  const image = (n: string) => ({ ref: kv[`${n}_IMAGE`]!, archive: kv[`${n}_ARCHIVE`]! });
  return {
    bin: kv.BIN!,
    controlPlaneBin: kv.CONTROL_PLANE_BIN!,
    images: { pause: image('PAUSE'), coredns: image('COREDNS'), busybox: image('BUSYBOX') },
  };
}

/** The cluster's record on disk: enough for a stop from another process (cluster-cli.ts). */
interface ClusterState {
  dir: string;
  before: HostState;
  shimSocketsBefore: string[];
  cniResultsBefore: string[];
}

export async function startCluster(opts: ClusterOptions = {}): Promise<Cluster> {
  const log = opts.log ?? (() => undefined);
  const assets = opts.assets ?? clusterAssets();
  if (existsSync(`/sys/class/net/${bridgeName(0)}`)) {
    throw new Error(
      `bridge ${bridgeName(0)} exists: a cluster is running or was left behind (node test/support/cluster-cli.ts stop)`,
    );
  }
  const dir = mkdtempSync('/tmp/peerload-cluster-');
  const logDir = join(dir, 'logs');
  mkdirSync(logDir);
  const state: ClusterState = {
    dir,
    before: await hostState(NODES),
    shimSocketsBefore: listDir(SHIM_SOCKETS),
    cniResultsBefore: listDir(CNI_RESULTS),
  };
  writeFileSync(join(dir, STATE_FILE), JSON.stringify(state));
  const procs: ManagedProcess[] = [];
  const t0 = Date.now();
  const step = (what: string) => log(`[cluster] ${what} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await stopCluster(state, procs, opts.keepDir ?? false);
  };
  try {
    const handle = await bringUp({ dir, logDir, assets, procs, step, stop });
    return handle;
  } catch (err) {
    printLogTails(logDir);
    await stop().catch((e: unknown) => console.error(`[cluster] stop after a failed start: ${String(e)}`));
    throw err;
  }
}

interface BringUp {
  dir: string;
  logDir: string;
  assets: ClusterAssets;
  procs: ManagedProcess[];
  step: (what: string) => void;
  stop: () => Promise<void>;
}

async function bringUp(b: BringUp): Promise<Cluster> {
  const { dir, logDir, assets, procs } = b;
  const pki = join(dir, 'pki');
  mkdirSync(pki);
  const nodes: ClusterNode[] = Array.from({ length: NODES }, (_, i) => ({
    name: nodeName(i),
    ip: nodeIP(i),
    podCIDR: podCIDR(i),
    bridge: bridgeName(i),
    containerdSocket: join(dir, `node-${i}`, 'containerd.sock'),
    cgroupRoot: cgroupRoot(i),
  }));
  const certs = await makeCerts(pki, nodes);
  b.step('certificates');
  await setUpNetwork(NODES);
  for (const n of nodes) createCgroupRoot(n.cgroupRoot);
  b.step('bridges, routes, cgroups');

  const start = (name: string, bin: string, args: string[]) => {
    const p = startProcess(name, bin, args, join(logDir, `${name}.log`), { env: processEnv() });
    procs.push(p);
    return p;
  };
  const ctr = (n: ClusterNode, args: string[]) =>
    exec('ctr', ['--address', n.containerdSocket, '-n', 'k8s.io', ...args], { maxBuffer: 16 * 1024 * 1024 });
  await Promise.all(nodes.map((n, i) => startContainerd(dir, i, n, assets, start, ctr)));
  b.step('containerd on both nodes, images imported');

  const server = await startControlPlane(dir, certs, assets, start);
  b.step('etcd and kube-apiserver ready');
  const kubeconfigPath = join(dir, 'admin.kubeconfig');
  writeFileSync(kubeconfigPath, kubeconfig(server, certs.ca.cert, certs.admin, 'admin'), { mode: 0o600 });
  const kubectl = kubectlRunner(join(assets.bin, 'kubectl'), kubeconfigPath);
  await startControllers(dir, server, certs, assets, start);
  await Promise.all(nodes.map((n, i) => startKubelet(dir, i, n, server, certs, assets, start)));
  await waitFor(
    'both nodes Ready',
    async () => {
      const list = JSON.parse(await kubectl(['get', 'nodes', '-o', 'json'])) as NodeList;
      return nodes.every((n) => list.items.some((it) => it.metadata.name === n.name && isReady(it)));
    },
    { timeoutMs: 90_000, intervalMs: 250 },
  );
  b.step('both nodes Ready');
  await kubectl(['apply', '-f', '-'], {
    input: JSON.stringify(coreDNSManifests(assets.images.coredns.ref, CLUSTER_DNS_IP)),
  });
  await kubectl(['-n', 'kube-system', 'rollout', 'status', 'deployment/coredns', '--timeout=120s'], {
    timeoutMs: 130_000,
  });
  b.step('CoreDNS ready');

  return {
    dir,
    logDir,
    kubeconfigPath,
    server,
    caPath: certs.ca.cert,
    nodes,
    clusterCIDR: CLUSTER_CIDR,
    serviceCIDR: SERVICE_CIDR,
    clusterDNS: CLUSTER_DNS_IP,
    images: {
      pause: assets.images.pause.ref,
      coredns: assets.images.coredns.ref,
      busybox: assets.images.busybox.ref,
    },
    assets,
    importImage: (archivePath) => importImage(nodes, archivePath),
    kubectl,
    stop: b.stop,
  };
}

interface NodeList {
  items: { metadata: { name: string }; status?: { conditions?: { type: string; status: string }[] } }[];
}
const isReady = (n: NodeList['items'][number]) =>
  n.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;

type Start = (name: string, bin: string, args: string[]) => ManagedProcess;
type Ctr = (n: ClusterNode, args: string[]) => Promise<unknown>;

function processEnv(): NodeJS.ProcessEnv {
  // containerd finds its shim and runc on PATH, the kubelet iptables and mount; the test's PATH may lack sbin.
  return { ...process.env, PATH: `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin` };
}

interface Certs {
  ca: KeyPair;
  apiserver: KeyPair;
  apiserverKubeletClient: KeyPair;
  admin: KeyPair;
  controllerManager: KeyPair;
  scheduler: KeyPair;
  kubeProxy: KeyPair;
  kubeletClient: KeyPair[];
  kubeletServing: KeyPair[];
  saKey: string;
  saPub: string;
}

async function makeCerts(pki: string, nodes: ClusterNode[]): Promise<Certs> {
  const ca = await makeCA(pki);
  const cert = (name: string, cn: string, org?: string, server?: { ips: string[]; dns: string[] }) =>
    makeCert(pki, ca, { name, cn, org, server });
  const apiserverDNS = [
    'kubernetes',
    'kubernetes.default',
    'kubernetes.default.svc',
    'kubernetes.default.svc.cluster.local',
  ];
  const [apiserver, apiserverKubeletClient, admin, controllerManager, scheduler, kubeProxy] =
    await Promise.all([
      cert('apiserver', 'kube-apiserver', undefined, {
        ips: [nodes[0]!.ip, '10.96.0.1', '127.0.0.1'],
        dns: apiserverDNS,
      }),
      // The kubelets authorize the apiserver's exec, logs and port-forward calls by webhook: system:masters may.
      cert('apiserver-kubelet-client', 'kube-apiserver-kubelet-client', 'system:masters'),
      cert('admin', 'peerload-admin', 'system:masters'),
      cert('controller-manager', 'system:kube-controller-manager'),
      cert('scheduler', 'system:kube-scheduler'),
      cert('kube-proxy', 'system:kube-proxy'),
    ]);
  const kubeletClient = await Promise.all(
    nodes.map((n) => cert(`kubelet-${n.name}`, `system:node:${n.name}`, 'system:nodes')),
  );
  const kubeletServing = await Promise.all(
    nodes.map((n) => cert(`kubelet-serving-${n.name}`, n.name, undefined, { ips: [n.ip], dns: [n.name] })),
  );
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const saKey = join(pki, 'sa.key');
  const saPub = join(pki, 'sa.pub');
  writeFileSync(saKey, privateKey.export({ type: 'pkcs1', format: 'pem' }), { mode: 0o600 });
  writeFileSync(saPub, publicKey.export({ type: 'spki', format: 'pem' }));
  return {
    ca,
    apiserver,
    apiserverKubeletClient,
    admin,
    controllerManager,
    scheduler,
    kubeProxy,
    kubeletClient,
    kubeletServing,
    saKey,
    saPub,
  };
}

async function startContainerd(
  dir: string,
  i: number,
  n: ClusterNode,
  assets: ClusterAssets,
  start: Start,
  ctr: Ctr,
): Promise<void> {
  const nd = join(dir, `node-${i}`);
  const cniConf = join(nd, 'cni');
  mkdirSync(cniConf, { recursive: true });
  writeFileSync(
    join(cniConf, '10-peerload.conflist'),
    JSON.stringify({
      cniVersion: '1.0.0',
      name: `peerload-cluster-${i}`,
      plugins: [
        {
          type: 'bridge',
          bridge: n.bridge,
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            ranges: [[{ subnet: n.podCIDR, gateway: n.ip }]],
            routes: [{ dst: '0.0.0.0/0' }],
            dataDir: join(nd, 'ipam'),
          },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
      ],
    }),
  );
  const config = join(nd, 'containerd.toml');
  writeFileSync(config, containerdConfig(nd, n, cniConf, assets.images.pause.ref));
  start(`containerd-${n.name}`, 'containerd', ['--config', config]);
  await waitFor(`containerd of ${n.name}`, async () => (await ctr(n, ['version']), true), {
    timeoutMs: 30_000,
    intervalMs: 100,
  });
  for (const image of Object.values(assets.images)) await ctr(n, ['images', 'import', image.archive]);
}

function containerdConfig(nd: string, n: ClusterNode, cniConf: string, sandboxImage: string): string {
  // restrict_oom_score_adj: the container lacks CAP_SYS_RESOURCE, so runc cannot lower a sandbox's oom_score_adj.
  // The stream server on a port of its own (its default, 10010, would be the other node's too). Network namespaces
  // under the state directory, so a stop finds them with the other mounts.
  return `version = 2
root = "${nd}/containerd/root"
state = "${nd}/containerd/state"
[grpc]
  address = "${n.containerdSocket}"
[plugins."io.containerd.internal.v1.opt"]
  path = "${nd}/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${sandboxImage}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "${nd}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "${cniConf}"
`;
}

async function startControlPlane(
  dir: string,
  certs: Certs,
  assets: ClusterAssets,
  start: Start,
): Promise<string> {
  const [etcdClient, etcdPeer] = [await freePort(), await freePort()];
  const etcdURL = `http://127.0.0.1:${etcdClient}`;
  start('etcd', join(assets.controlPlaneBin, 'etcd'), [
    `--data-dir=${join(dir, 'etcd')}`,
    `--listen-client-urls=${etcdURL}`,
    `--advertise-client-urls=${etcdURL}`,
    `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
    `--initial-cluster=default=http://127.0.0.1:${etcdPeer}`,
    '--unsafe-no-fsync',
    '--log-level=warn',
  ]);
  await waitFor('etcd health', async () => (await fetch(`${etcdURL}/health`)).ok, { timeoutMs: 30_000 });
  // On node 0's bridge address, so pods reach it (the `kubernetes` Service's endpoint) as the machine does.
  const host = nodeIP(0);
  const port = await freePort(host);
  const server = `https://${host}:${port}`;
  const apiserver = start('kube-apiserver', join(assets.controlPlaneBin, 'kube-apiserver'), [
    `--etcd-servers=${etcdURL}`,
    `--bind-address=${host}`,
    `--advertise-address=${host}`,
    `--secure-port=${port}`,
    `--tls-cert-file=${certs.apiserver.cert}`,
    `--tls-private-key-file=${certs.apiserver.key}`,
    `--client-ca-file=${certs.ca.cert}`,
    '--authorization-mode=Node,RBAC',
    '--enable-admission-plugins=NodeRestriction',
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
    `--service-account-key-file=${certs.saPub}`,
    `--service-account-signing-key-file=${certs.saKey}`,
    `--kubelet-client-certificate=${certs.apiserverKubeletClient.cert}`,
    `--kubelet-client-key=${certs.apiserverKubeletClient.key}`,
    `--kubelet-certificate-authority=${certs.ca.cert}`,
    '--kubelet-preferred-address-types=InternalIP',
    '--allow-privileged=true',
    `--cert-dir=${join(dir, 'apiserver-certs')}`,
    '--v=1',
  ]);
  const ca = readFileSync(certs.ca.cert, 'utf8');
  const cert = readFileSync(certs.admin.cert, 'utf8');
  const key = readFileSync(certs.admin.key, 'utf8');
  const early = apiserver.exited.then((code) => {
    throw new Error(`kube-apiserver exited with ${code}`);
  });
  early.catch(() => undefined);
  await Promise.race([
    early,
    waitFor('kube-apiserver /readyz', async () => (await get(`${server}/readyz`, ca, cert, key)) === 200, {
      timeoutMs: 90_000,
      intervalMs: 250,
    }),
  ]);
  return server;
}

async function startControllers(
  dir: string,
  server: string,
  certs: Certs,
  assets: ClusterAssets,
  start: Start,
): Promise<void> {
  const kc = (name: string, pair: KeyPair, user: string) => {
    const p = join(dir, `${name}.kubeconfig`);
    writeFileSync(p, kubeconfig(server, certs.ca.cert, pair, user), { mode: 0o600 });
    return p;
  };
  const cm = kc('controller-manager', certs.controllerManager, 'system:kube-controller-manager');
  start('kube-controller-manager', join(assets.bin, 'kube-controller-manager'), [
    `--kubeconfig=${cm}`,
    `--authentication-kubeconfig=${cm}`,
    `--authorization-kubeconfig=${cm}`,
    '--bind-address=127.0.0.1',
    `--secure-port=${await freePort()}`,
    `--cert-dir=${join(dir, 'controller-manager-certs')}`,
    '--use-service-account-credentials',
    `--root-ca-file=${certs.ca.cert}`,
    `--service-account-private-key-file=${certs.saKey}`,
    `--cluster-signing-cert-file=${certs.ca.cert}`,
    `--cluster-signing-key-file=${certs.ca.key}`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    `--cluster-cidr=${CLUSTER_CIDR}`,
    // Each node's pod range is its CNI configuration's (host-local), not one the controller hands out.
    '--allocate-node-cidrs=false',
    '--leader-elect=false',
    '--v=1',
  ]);
  const sched = kc('scheduler', certs.scheduler, 'system:kube-scheduler');
  start('kube-scheduler', join(assets.bin, 'kube-scheduler'), [
    `--kubeconfig=${sched}`,
    `--authentication-kubeconfig=${sched}`,
    `--authorization-kubeconfig=${sched}`,
    '--bind-address=127.0.0.1',
    `--secure-port=${await freePort()}`,
    '--leader-elect=false',
    '--v=1',
  ]);
  const proxyConfig = join(dir, 'kube-proxy.yaml');
  writeFileSync(
    proxyConfig,
    JSON.stringify({
      apiVersion: 'kubeproxy.config.k8s.io/v1alpha1',
      kind: 'KubeProxyConfiguration',
      clientConnection: { kubeconfig: kc('kube-proxy', certs.kubeProxy, 'system:kube-proxy') },
      mode: 'iptables',
      hostnameOverride: nodeName(0),
      clusterCIDR: CLUSTER_CIDR,
      bindAddress: '127.0.0.1',
      healthzBindAddress: `127.0.0.1:${await freePort()}`,
      metricsBindAddress: `127.0.0.1:${await freePort()}`,
      // NodePorts on the nodes' addresses only, not on loopback (where other tests' servers listen), and no
      // route_localnet for it.
      nodePortAddresses: Array.from({ length: NODES }, (_, i) => `${nodeIP(i)}/32`),
      iptables: { localhostNodePorts: false, masqueradeAll: false },
      // Zeros leave the host's conntrack sysctls alone.
      conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: '0s', tcpCloseWaitTimeout: '0s' },
    }),
  );
  start('kube-proxy', join(assets.bin, 'kube-proxy'), [`--config=${proxyConfig}`, '--v=1']);
}

async function startKubelet(
  dir: string,
  i: number,
  n: ClusterNode,
  server: string,
  certs: Certs,
  assets: ClusterAssets,
  start: Start,
): Promise<void> {
  const nd = join(dir, `node-${i}`);
  const kc = join(nd, 'kubelet.kubeconfig');
  writeFileSync(kc, kubeconfig(server, certs.ca.cert, certs.kubeletClient[i]!, `system:node:${n.name}`), {
    mode: 0o600,
  });
  const config = join(nd, 'kubelet.yaml');
  writeFileSync(
    config,
    JSON.stringify({
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      address: n.ip,
      port: 10250,
      readOnlyPort: 0,
      healthzBindAddress: '127.0.0.1',
      healthzPort: await freePort(),
      authentication: {
        anonymous: { enabled: false },
        webhook: { enabled: true },
        x509: { clientCAFile: certs.ca.cert },
      },
      authorization: { mode: 'Webhook' },
      tlsCertFile: certs.kubeletServing[i]!.cert,
      tlsPrivateKeyFile: certs.kubeletServing[i]!.key,
      cgroupDriver: 'cgroupfs',
      cgroupRoot: n.cgroupRoot,
      containerRuntimeEndpoint: `unix://${n.containerdSocket}`,
      clusterDomain: 'cluster.local',
      clusterDNS: [CLUSTER_DNS_IP],
      failSwapOn: false,
      // Imported images cannot be pulled again: never collect them.
      imageGCHighThresholdPercent: 100,
      imageGCLowThresholdPercent: 99,
      // The machine's disk is shared with builds (buildah's vfs copies whole file systems): the default thresholds
      // (10 % and 15 % free) evicted every pod at 13 % free. 1 GiB left is the signal here.
      evictionHard: {
        'memory.available': '100Mi',
        'nodefs.available': '1Gi',
        'imagefs.available': '1Gi',
        'nodefs.inodesFree': '1%',
        'imagefs.inodesFree': '1%',
      },
      podLogsDir: join(nd, 'pod-logs'),
      volumePluginDir: join(nd, 'volume-plugins'),
      rotateCertificates: false,
      serverTLSBootstrap: false,
    }),
  );
  start(`kubelet-${n.name}`, join(assets.bin, 'kubelet'), [
    `--config=${config}`,
    `--kubeconfig=${kc}`,
    `--root-dir=${join(nd, 'kubelet')}`,
    `--cert-dir=${join(nd, 'kubelet-certs')}`,
    `--node-ip=${n.ip}`,
    `--hostname-override=${n.name}`,
    '--v=1',
  ]);
}

/** `ctr -n k8s.io images import` of an archive into each node's containerd. */
export async function importImage(nodes: ClusterNode[], archivePath: string): Promise<void> {
  await Promise.all(
    nodes.map((n) =>
      exec('ctr', ['--address', n.containerdSocket, '-n', 'k8s.io', 'images', 'import', archivePath], {
        maxBuffer: 16 * 1024 * 1024,
      }),
    ),
  );
}

/** What a test process needs of a cluster another process started (vitest's provide/inject: plain data). */
export interface ClusterInfo {
  dir: string;
  logDir: string;
  kubeconfigPath: string;
  kubectlPath: string;
  server: string;
  nodes: ClusterNode[];
  clusterCIDR: string;
  serviceCIDR: string;
  clusterDNS: string;
  images: Record<ClusterImage, string>;
}

export function clusterInfo(c: Cluster): ClusterInfo {
  return {
    dir: c.dir,
    logDir: c.logDir,
    kubeconfigPath: c.kubeconfigPath,
    kubectlPath: join(c.assets.bin, 'kubectl'),
    server: c.server,
    nodes: c.nodes,
    clusterCIDR: c.clusterCIDR,
    serviceCIDR: c.serviceCIDR,
    clusterDNS: c.clusterDNS,
    images: c.images,
  };
}

/** The `kubectl` helper of a Cluster, for a test process holding only its ClusterInfo. */
export function clusterKubectl(info: ClusterInfo): Cluster['kubectl'] {
  return kubectlRunner(info.kubectlPath, info.kubeconfigPath);
}

function kubectlRunner(bin: string, kubeconfigPath: string): Cluster['kubectl'] {
  return (args, opts = {}) =>
    new Promise((resolvePromise, reject) => {
      const child = spawn(bin, ['--kubeconfig', kubeconfigPath, ...args], {
        stdio: ['pipe', 'pipe', 'pipe'],
      });
      let stdout = '';
      let stderr = '';
      child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
      child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
      const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        if (code === 0) resolvePromise(stdout);
        else reject(new Error(`kubectl ${args.join(' ')} exited with ${code}: ${stderr.trim()}`));
      });
      child.stdin.end(opts.input ?? '');
    });
}

function get(url: string, ca: string, cert: string, key: string): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const req = request(url, { ca, cert, key, timeout: 5000 }, (res) => {
      res.resume();
      res.on('end', () => resolvePromise(res.statusCode ?? 0));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

function listDir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function printLogTails(logDir: string): void {
  for (const f of listDir(logDir)) {
    const lines = readFileSync(join(logDir, f), 'utf8').trimEnd().split('\n').slice(-15);
    console.error(`[cluster] --- ${f} (last ${lines.length} lines) ---\n${lines.join('\n')}`);
  }
}

/**
 * Stops a cluster from its directory's state file: for a cluster whose starting process is gone (cluster-cli.ts).
 */
export async function stopClusterDir(dir: string, keepDir = false): Promise<void> {
  const state = JSON.parse(readFileSync(join(dir, STATE_FILE), 'utf8')) as ClusterState;
  await stopCluster(state, [], keepDir);
}

/** What the machine had before the start of the cluster of `dir` (as its stop compares). */
export function hostStateBefore(dir: string): HostState {
  return (JSON.parse(readFileSync(join(dir, STATE_FILE), 'utf8')) as ClusterState).before;
}

/** The cluster directories on this machine (running or left behind). */
export function clusterDirs(): string[] {
  return listDir('/tmp')
    .filter((e) => e.startsWith('peerload-cluster-'))
    .map((e) => join('/tmp', e))
    .filter((d) => existsSync(join(d, STATE_FILE)));
}

async function stopCluster(state: ClusterState, procs: ManagedProcess[], keepDir: boolean): Promise<void> {
  const { dir } = state;
  const byName = (prefix: string) => procs.filter((p) => p.name.startsWith(prefix));
  // First what starts and restarts containers, then the containers themselves, then containerd and the rest.
  await Promise.all(
    ['kubelet-', 'kube-controller-manager', 'kube-scheduler', 'kube-proxy'].flatMap((n) =>
      byName(n).map((p) => p.stop(5_000)),
    ),
  );
  await killWhere(() =>
    pidsNaming(dir).filter((pid) => /kubelet|kube-controller|kube-scheduler|kube-proxy/.test(cmd(pid))),
  );
  for (let i = 0; i < NODES; i++) await removeContainers(join(dir, `node-${i}`, 'containerd.sock'));
  await Promise.all(byName('containerd-').map((p) => p.stop(5_000)));
  await Promise.all(procs.map((p) => p.stop(5_000)));
  // Whatever is left (a shim, a container whose shim died, a process of a start in another process): killed.
  await killWhere(() => [
    ...pidsNaming(dir),
    ...Array.from({ length: NODES }, (_, i) => cgroupPids(cgroupRoot(i))).flat(),
  ]);
  await unmountUnder(dir);
  const chainsNow = await iptablesChains();
  await removeChains(chainsNow.filter((c) => CLUSTER_CHAIN.test(c) && !state.before.chains.includes(c)));
  await tearDownNetwork(NODES);
  for (let i = 0; i < NODES; i++) {
    await waitFor(`cgroups of ${nodeName(i)} removed`, () => removeCgroups(cgroupRoot(i)).length === 0, {
      timeoutMs: 10_000,
      intervalMs: 200,
    }).catch((err: unknown) => console.error(`[cluster] ${String(err)}`));
  }
  restoreSysctls(state.before.sysctls);
  for (const l of containerLogLinks(dir)) rmSync(l, { force: true });
  for (const s of listDir(SHIM_SOCKETS).filter((e) => !state.shimSocketsBefore.includes(e))) {
    rmSync(join(SHIM_SOCKETS, s), { force: true });
  }
  for (const r of listDir(CNI_RESULTS).filter((e) => e.startsWith('peerload-cluster-'))) {
    if (!state.cniResultsBefore.includes(r)) rmSync(join(CNI_RESULTS, r), { force: true });
  }
  if (!keepDir) rmSync(dir, { recursive: true, force: true });
  else rmSync(join(dir, STATE_FILE), { force: true });
}

/** Kills and deletes every task and container of a node's containerd (no CNI teardown: the bridge goes whole). */
async function removeContainers(socket: string): Promise<void> {
  if (!existsSync(socket)) return;
  const ctr = (args: string[]) =>
    exec('ctr', ['--address', socket, '-n', 'k8s.io', ...args], { timeout: 20_000 }).then(
      (r) => r.stdout,
      () => '',
    );
  const tasks = (await ctr(['tasks', 'ls', '-q'])).split('\n').filter(Boolean);
  await Promise.all(tasks.map((t) => ctr(['tasks', 'kill', '--all', '--signal', 'SIGKILL', t])));
  await Promise.all(tasks.map((t) => ctr(['tasks', 'delete', '--force', t])));
  const containers = (await ctr(['containers', 'ls', '-q'])).split('\n').filter(Boolean);
  await Promise.all(containers.map((c) => ctr(['containers', 'delete', c])));
}

function cmd(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
}

/** SIGKILLs the PIDs `find` returns until it returns none (10 s at most). */
async function killWhere(find: () => number[]): Promise<void> {
  await waitFor(
    'processes gone',
    () => {
      const pids = find();
      for (const pid of pids) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // gone already
        }
      }
      return pids.length === 0;
    },
    { timeoutMs: 10_000, intervalMs: 100 },
  ).catch((err: unknown) => console.error(`[cluster] ${String(err)}`));
}
