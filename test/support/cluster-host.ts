/**
 * What the real cluster (cluster.ts) changes on the machine, and how it takes it back: the node bridges with their
 * policy routing, the kubelets' cgroup roots, host sysctls, iptables chains, mounts and processes. Every name here is
 * fixed (one cluster at a time: kube-proxy owns its chains in the machine's one network namespace), and what was on
 * the machine before the start is recorded in the cluster's state file, so a stop, even from another process
 * (cluster-cli.ts), removes only what the cluster added.
 */
import { execFile } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';

const exec = promisify(execFile);

/** The pod range of node i is 10.244.i.0/24; its bridge holds 10.244.i.1, the node's IP. */
export const CLUSTER_CIDR = '10.244.0.0/16';
export const SERVICE_CIDR = '10.96.0.0/16';
export const CLUSTER_DNS_IP = '10.96.0.10';
export const nodeName = (i: number) => `peerload-node-${i}`;
export const nodeIP = (i: number) => `10.244.${i}.1`;
export const podCIDR = (i: number) => `10.244.${i}.0/24`;
export const bridgeName = (i: number) => `plcluster${i}`;
/** Each kubelet's own cgroup root (a kubelet removes cgroups under its root that it does not know). */
export const cgroupRoot = (i: number) => `/${nodeName(i)}`;
/** The routing table traffic from the bridges looks up: the pod and service ranges, nothing else. */
const POD_TABLE = 4244;
const RULE_PREF = 4244;

const CGROUP_V1 = ['cpu', 'cpuacct', 'cpuset', 'memory', 'devices', 'freezer', 'blkio', 'pids', 'systemd'];
const CGROUP_ALL = [...CGROUP_V1, 'unified', 'hugetlb', 'net_cls', 'net_prio', 'perf_event', 'rdma', 'misc'];

/**
 * Host sysctls the cluster's processes write: the kubelet's kernel defaults (protectKernelDefaults off), the bridge
 * plugin's ip_forward, kube-proxy's conntrack and bridge settings (its configuration asks for none of these; kept so
 * that a change is restored whichever writes it).
 */
const SYSCTLS = [
  'vm.overcommit_memory',
  'vm.panic_on_oom',
  'kernel.panic',
  'kernel.panic_on_oops',
  'kernel.keys.root_maxkeys',
  'kernel.keys.root_maxbytes',
  'net.ipv4.ip_forward',
  'net.ipv4.conf.all.route_localnet',
  'net.ipv4.conf.all.forwarding',
  'net.bridge.bridge-nf-call-iptables',
  'net.bridge.bridge-nf-call-ip6tables',
  'net.netfilter.nf_conntrack_max',
  'net.netfilter.nf_conntrack_tcp_timeout_established',
  'net.netfilter.nf_conntrack_tcp_timeout_close_wait',
];
const sysctlPath = (key: string) => join('/proc/sys', ...key.split('.'));

export function readSysctls(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const key of SYSCTLS) {
    try {
      out[key] = readFileSync(sysctlPath(key), 'utf8').trim();
    } catch {
      // not on this kernel (or this network namespace): nothing to restore
    }
  }
  return out;
}

/** Writes back each recorded sysctl that differs now; returns what it restored. */
export function restoreSysctls(before: Record<string, string>): string[] {
  const restored: string[] = [];
  for (const [key, value] of Object.entries(before)) {
    const now = readFileSync(sysctlPath(key), 'utf8').trim();
    if (now === value) continue;
    writeFileSync(sysctlPath(key), value);
    restored.push(`${key} ${now} -> ${value}`);
  }
  return restored;
}

async function run(cmd: string, args: string[]): Promise<string> {
  const { stdout } = await exec(cmd, args, { maxBuffer: 64 * 1024 * 1024 });
  return stdout;
}
async function tryRun(cmd: string, args: string[]): Promise<void> {
  await exec(cmd, args).catch(() => undefined);
}

/** The bridges with the node addresses, the service range routed to node 0's bridge, and the policy routing. */
export async function setUpNetwork(nodes: number): Promise<void> {
  for (let i = 0; i < nodes; i++) {
    const br = bridgeName(i);
    await run('ip', ['link', 'add', br, 'type', 'bridge']);
    await run('ip', ['addr', 'add', `${nodeIP(i)}/24`, 'dev', br]);
    await run('ip', ['link', 'set', br, 'up']);
    await run('ip', ['route', 'add', podCIDR(i), 'dev', br, 'table', String(POD_TABLE)]);
    // Traffic from the pods looks up a table that knows only the cluster's ranges: it stays on the machine
    // (addresses of the machine itself are in the local table, looked up first).
    await run('ip', ['rule', 'add', 'iif', br, 'lookup', String(POD_TABLE), 'pref', String(RULE_PREF + i)]);
  }
  // A ClusterIP is rewritten by kube-proxy's rules, but the first route lookup needs a route to the range.
  await run('ip', ['route', 'add', SERVICE_CIDR, 'dev', bridgeName(0)]);
  await run('ip', ['route', 'add', SERVICE_CIDR, 'dev', bridgeName(0), 'table', String(POD_TABLE)]);
  await run('ip', ['route', 'add', 'unreachable', 'default', 'table', String(POD_TABLE)]);
}

export async function tearDownNetwork(nodes: number): Promise<void> {
  for (let i = 0; i < nodes; i++) {
    await tryRun('ip', ['rule', 'del', 'pref', String(RULE_PREF + i)]);
    await tryRun('ip', ['link', 'del', bridgeName(i)]);
  }
  await tryRun('ip', ['route', 'del', SERVICE_CIDR, 'dev', bridgeName(0)]);
  await tryRun('ip', ['route', 'flush', 'table', String(POD_TABLE)]);
}

/** Creates a kubelet's cgroup root in every v1 hierarchy, cpuset's cpus and mems copied from the parent. */
export function createCgroupRoot(root: string): void {
  for (const h of CGROUP_V1) {
    const base = join('/sys/fs/cgroup', h);
    if (!existsSync(base)) continue;
    const dir = join(base, root);
    if (!existsSync(dir)) mkdirSync(dir);
    if (h === 'cpuset') {
      for (const f of ['cpuset.cpus', 'cpuset.mems']) {
        writeFileSync(join(dir, f), readFileSync(join(base, f), 'utf8').trim());
      }
    }
  }
}
/** Every cgroup directory under `root` in every hierarchy, deepest first. */
function cgroupDirs(root: string): string[] {
  const dirs: string[] = [];
  const walk = (dir: string) => {
    let entries: string[];
    try {
      entries = readdirSync(dir);
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(dir, e);
      try {
        if (statSync(p).isDirectory()) walk(p);
      } catch {
        // gone meanwhile
      }
    }
    dirs.push(dir);
  };
  for (const h of CGROUP_ALL) {
    const dir = join('/sys/fs/cgroup', h, root);
    if (existsSync(dir)) walk(dir);
  }
  return dirs;
}

export function removeCgroups(root: string): string[] {
  const failed: string[] = [];
  for (const dir of cgroupDirs(root)) {
    try {
      rmdirSync(dir);
    } catch (err) {
      failed.push(`${dir}: ${(err as Error).message}`);
    }
  }
  return failed;
}

/** PIDs in any cgroup under `root`. */
export function cgroupPids(root: string): number[] {
  const pids = new Set<number>();
  for (const dir of cgroupDirs(root)) {
    try {
      for (const l of readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n')) if (l) pids.add(Number(l));
    } catch {
      // removed meanwhile
    }
  }
  return [...pids];
}

/** PIDs whose command line names `dir` (the cluster's processes, containerd's shims included). */
export function pidsNaming(dir: string): number[] {
  const pids: number[] = [];
  for (const e of readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || Number(e) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${e}/cmdline`, 'utf8').includes(dir)) pids.push(Number(e));
    } catch {
      // exited meanwhile
    }
  }
  return pids;
}

/** Mount points at or under `dir`, deepest first. */
function mountsUnder(dir: string): string[] {
  return readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4]?.replace(/\\040/g, ' '))
    .filter((m): m is string => !!m && (m === dir || m.startsWith(`${dir}/`)))
    .reverse();
}

export async function unmountUnder(dir: string): Promise<void> {
  // Lazy: a mount still busy (a netns a dying process holds) goes when its last user does.
  for (const m of mountsUnder(dir)) await tryRun('umount', ['-l', m]);
}

/**
 * The chains the cluster's processes make: the kubelets' and kube-proxy's (KUBE-), the CNI portmap plugin's
 * (CNI-HOSTPORT-, CNI-DN-). Other CNI users on the machine (podman) have chains of their own (CNI-FORWARD,
 * CNI-ADMIN, ...) that a stop must not touch; only chains of these names that were not there before are removed.
 */
export const CLUSTER_CHAIN = /^(ip6?tables) \S+ (KUBE-|CNI-HOSTPORT-|CNI-DN-)/;

/** iptables and ip6tables chains, per table (`iptables -S` -N lines and built-ins). */
export async function iptablesChains(): Promise<string[]> {
  const chains: string[] = [];
  for (const tool of ['iptables', 'ip6tables']) {
    for (const table of ['filter', 'nat', 'mangle', 'raw']) {
      const out = await run(tool, ['-w', '-t', table, '-S']).catch(() => '');
      for (const l of out.split('\n')) {
        const m = /^-[NP] (\S+)/.exec(l);
        if (m) chains.push(`${tool} ${table} ${m[1]}`);
      }
    }
  }
  return chains;
}

/**
 * Removes the chains in `added` (as iptablesChains names them): first every rule that jumps to one of them, then
 * their rules, then the chains.
 */
export async function removeChains(added: string[]): Promise<void> {
  const byTable = new Map<string, Set<string>>();
  for (const c of added) {
    const [tool, table, chain] = c.split(' ') as [string, string, string];
    const key = `${tool} ${table}`;
    if (!byTable.has(key)) byTable.set(key, new Set());
    byTable.get(key)!.add(chain);
  }
  for (const [key, chains] of byTable) {
    const [tool, table] = key.split(' ') as [string, string];
    const rules = (await run(tool, ['-w', '-t', table, '-S']).catch(() => '')).split('\n');
    for (const rule of rules) {
      const m = /^-A (\S+) .*-j (\S+)/.exec(rule);
      if (!m || !chains.has(m[2]!) || chains.has(m[1]!)) continue;
      await tryRun(tool, ['-w', '-t', table, ...splitRule(rule.replace(/^-A/, '-D'))]);
    }
    for (const chain of chains) await tryRun(tool, ['-w', '-t', table, '-F', chain]);
    for (const chain of chains) await tryRun(tool, ['-w', '-t', table, '-X', chain]);
  }
}

/** An `iptables -S` line as arguments (comments are its only quoted words). */
function splitRule(rule: string): string[] {
  const args: string[] = [];
  for (const m of rule.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)) args.push(m[1] !== undefined ? m[1] : m[2]!);
  return args;
}

/** Symbolic links the kubelets made in /var/log/containers (a fixed path) to their pod logs under `dir`. */
export function containerLogLinks(dir: string): string[] {
  const base = '/var/log/containers';
  if (!existsSync(base)) return [];
  return readdirSync(base)
    .map((e) => join(base, e))
    .filter((p) => {
      try {
        return readlinkSync(p).startsWith(dir);
      } catch {
        return false;
      }
    });
}

/** What a cluster may leave on the machine, in comparable lines (see leftovers). */
export interface HostState {
  links: string[];
  routes: string[];
  rules: string[];
  chains: string[];
  cgroups: string[];
  sysctls: Record<string, string>;
}

export async function hostState(nodes = 2): Promise<HostState> {
  const lines = async (args: string[]) =>
    (await run('ip', args))
      .split('\n')
      .map((l) => l.trim())
      .filter(Boolean);
  const cgroups: string[] = [];
  for (let i = 0; i < nodes; i++) cgroups.push(...cgroupDirs(cgroupRoot(i)));
  return {
    links: (await lines(['-o', 'link', 'show'])).map((l) => l.split(':')[1]!.trim().split('@')[0]!),
    routes: [
      ...(await lines(['route', 'show', 'table', 'all'])),
      ...(await lines(['-6', 'route', 'show', 'table', 'all'])),
    ],
    rules: [...(await lines(['rule', 'show'])), ...(await lines(['-6', 'rule', 'show']))],
    chains: await iptablesChains(),
    cgroups,
    sysctls: readSysctls(),
  };
}

/**
 * What `after` has that `before` had not (and sysctls that differ), plus processes, mounts and log links still
 * naming the cluster's directory: each a line saying what is left.
 */
export function leftovers(before: HostState, after: HostState, dir: string, nodes = 2): string[] {
  const added = (what: string, a: string[], b: string[]) =>
    b.filter((x) => !a.includes(x)).map((x) => `${what}: ${x}`);
  const out = [
    ...added('link', before.links, after.links),
    ...added('route', before.routes, after.routes),
    ...added('rule', before.rules, after.rules),
    ...added(
      'iptables chain',
      before.chains,
      after.chains.filter((c) => CLUSTER_CHAIN.test(c)),
    ),
    ...added('cgroup', before.cgroups, after.cgroups),
  ];
  for (const [k, v] of Object.entries(before.sysctls)) {
    if (after.sysctls[k] !== v) out.push(`sysctl ${k}: ${v} before, ${after.sysctls[k]} now`);
  }
  for (const pid of pidsNaming(dir)) out.push(`process ${pid}: ${cmdline(pid)}`);
  for (let i = 0; i < nodes; i++) {
    for (const pid of cgroupPids(cgroupRoot(i)))
      out.push(`process ${pid} in ${cgroupRoot(i)}: ${cmdline(pid)}`);
  }
  for (const m of mountsUnder(dir)) out.push(`mount: ${m}`);
  for (const l of containerLogLinks(dir)) out.push(`log link: ${l}`);
  return out;
}

function cmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').trim();
  } catch {
    return '(exited)';
  }
}
