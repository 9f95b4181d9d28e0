/**
 * Where a namespaced resource may send the operator: the admin's allow-lists of hosts (operator flags
 * `--allowed-manager-hosts`, `--allowed-endpoint-hosts`) and the ClusterManagers' namespace lists. Pure: the
 * controllers ask before they read any Secret for a request, so a host outside the lists never receives one.
 *
 * Whoever may create a ModelPreheat or ServedModel in a namespace is not trusted with the operator's reach: the
 * operator holds the default manager's token and reads the namespace's Secrets (manager tokens, storage keys,
 * model-server keys) that the creator may not be allowed to read. So a spec may name a manager or a model server
 * only where an admin said it may go:
 * - `spec.manager.clusterManagerRef`: a ClusterManager that lists (or selects) the namespace;
 * - `spec.manager.url`: a host in `--allowed-manager-hosts` (default empty: none);
 * - `spec.modelServer.endpoints`: hosts in `--allowed-endpoint-hosts` (default empty: none);
 * - no manager named: the operator's own `--manager-url` (the admin's choice).
 *
 * Hosts are compared as written in the URL: names are not resolved (an allowed name is trusted to resolve where the
 * admin expects, as a Service name does), so an IP range rule (`10.0.0.0/8`) matches IP literals only.
 *
 * The scheme is part of a rule: `http://host` allows plain HTTP (and https) to the host, `https://host` https only.
 * An entry without a scheme means what its list says (`bare`): https only for the lists of credentials a source
 * sends (storage keys, registry credentials, a Hub token: they would cross the network in clear otherwise), either
 * scheme for the manager and model-server lists (in-cluster services that speak plain HTTP by default, as they did
 * before schemes were part of a rule; `https://` there keeps a host to TLS).
 */
import { BlockList, isIP } from 'node:net';
import type { ClusterManagerSpec, LabelSelector } from '../api/index.ts';

/**
 * One allow-list entry: a host name (`*.` first matches any sub-domain, `*` inside a label any run of characters of
 * that one label), an IP or an IP range, with an optional port.
 */
export interface HostRule {
  /** Lower-case host name, `*.suffix`, or undefined for an IP rule. */
  name?: string;
  /** For names with a `*` after the leading `*.`: the whole name as a pattern. */
  glob?: RegExp;
  /** For IP and range rules. */
  ips?: BlockList;
  /** Undefined: any port. */
  port?: number;
  /** Whether plain HTTP may go to the host (`http://` entries, and bare entries of a list that allows it). */
  http: boolean;
  /** The entry as the admin wrote it (for messages). */
  text: string;
}

/** The condition reasons of a refused reach, one per rule. */
export const ReachReason = {
  /** spec.manager.url's host is not in --allowed-manager-hosts. */
  ManagerNotAllowed: 'ManagerNotAllowed',
  /** spec.manager.clusterManagerRef names no ClusterManager. */
  ClusterManagerNotFound: 'ClusterManagerNotFound',
  /** The ClusterManager does not list or select the resource's namespace. */
  ClusterManagerNotAllowed: 'ClusterManagerNotAllowed',
  /** A static spec.modelServer.endpoints entry's host is not in --allowed-endpoint-hosts. */
  EndpointNotAllowed: 'EndpointNotAllowed',
  /** An object-storage endpoint (or object host) is not in --allowed-storage-hosts (storage-reach.ts). */
  StorageEndpointNotAllowed: 'StorageEndpointNotAllowed',
  /** An image preheat with registry credentials names a registry outside --allowed-registry-hosts. */
  RegistryNotAllowed: 'RegistryNotAllowed',
  /** A Hub source with a token names an endpoint outside --allowed-hub-hosts (hub-reach.ts). */
  HubNotAllowed: 'HubNotAllowed',
} as const;
export type ReachReason = (typeof ReachReason)[keyof typeof ReachReason];

export type Reach = { allowed: true } | { allowed: false; reason: ReachReason; message: string };

/** Why credentials may not go where a spec names: the reasons of a store's or a source's refusal. */
export type CredentialReachReason = Extract<
  ReachReason,
  'StorageEndpointNotAllowed' | 'RegistryNotAllowed' | 'HubNotAllowed'
>;
/** Whether a spec's credentials may go where it names. */
export type CredentialReach =
  { allowed: true } | { allowed: false; reason: CredentialReachReason; message: string };
const ALLOWED: Reach = { allowed: true };

export interface ReachPolicy {
  managerHosts: readonly HostRule[];
  endpointHosts: readonly HostRule[];
}

const HOST_NAME = /^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A name with `*` inside labels (`*.s3.*.amazonaws.com`, `oss-*.aliyuncs.com`): letters, digits, `-`, `*` per label. */
const GLOB_NAME = /^(\*\.)?[a-z0-9*][-a-z0-9*]*(\.[a-z0-9*][-a-z0-9*]*)*$/;

/**
 * The pattern of a glob name: a leading `*.` is one or more labels (as for a plain `*.suffix` rule), any other `*`
 * stays inside its label. Hand-written: the syntax is these two forms, and no glob library keeps a `*` in its label
 * the way DNS names need.
 */
function globPattern(name: string): RegExp {
  const sub = name.startsWith('*.');
  const body = (sub ? name.slice(2) : name)
    .split('.')
    .map((label) => (label === '*' ? '[a-z0-9-]+' : label.split('*').join('[a-z0-9-]*')))
    .join('\\.');
  return new RegExp(`^${sub ? '(?:[a-z0-9-]+\\.)+' : ''}${body}$`);
}

/**
 * What an entry without a scheme allows: `https` only (the credential lists), or `any` (http too: the manager and
 * model-server lists).
 */
export type BareScheme = 'https' | 'any';

/**
 * Parses one allow-list entry: `name`, `*.domain`, an IPv4/IPv6 address (IPv6 in brackets when a port follows),
 * a CIDR range (`10.0.0.0/8`, `fd00::/8`), each optionally `:port`; `*` alone allows every host. `http://` first
 * allows plain HTTP there, `https://` first TLS only; without either, `bare` decides. Throws a message naming the
 * entry.
 */
export function parseHostRule(entry: string, bare: BareScheme = 'https'): HostRule {
  const text = entry.trim();
  const bad = (why: string) => new Error(`"${text}": ${why}`);
  if (text === '') throw bad('empty entry');
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(text);
  if (scheme && !/^https?$/i.test(scheme[1]!))
    throw bad('the scheme may be http:// (plain HTTP allowed) or https:// (TLS only), or left out');
  const http = scheme ? scheme[1]!.toLowerCase() === 'http' : bare === 'any';
  const rest = scheme ? text.slice(scheme[0].length).replace(/\/$/, '') : text;
  if (rest === '') throw bad('no host after the scheme');
  // A range's `/prefix` is the one `/` an entry holds.
  if (/[/?#@]/.test(rest.replace(/\/\d+(?=(:\d+)?$)/, '')))
    throw bad('an entry is a scheme, a host and a port only: no path, query or user');
  return { ...parseHost(rest, bad), http, text };
}

/** The host part of an entry (after its scheme). */
function parseHost(text: string, bad: (why: string) => Error): Omit<HostRule, 'http' | 'text'> {
  if (text === '*') return { name: '*' };
  let host = text;
  let port: number | undefined;
  const bracket = /^\[([^\]]+)\](?::(\d+))?$/.exec(text);
  if (bracket) {
    host = bracket[1]!;
    if (bracket[2] !== undefined) port = Number(bracket[2]);
  } else if (isIP(text) !== 6 && !/^[0-9a-fA-F:]+\/\d+$/.test(text)) {
    const colon = text.lastIndexOf(':');
    if (colon >= 0) {
      host = text.slice(0, colon);
      port = Number(text.slice(colon + 1));
      if (!/^\d+$/.test(text.slice(colon + 1))) throw bad('the port must be a number');
    }
  }
  if (port !== undefined && !(port >= 1 && port <= 65535)) throw bad('the port must be 1 to 65535');
  const range = /^(.+)\/(\d+)$/.exec(host);
  if (range) {
    const family = isIP(range[1]!);
    const prefix = Number(range[2]);
    if (family === 0) throw bad('a range must be an IP address and a prefix length, e.g. 10.0.0.0/8');
    if (prefix > (family === 4 ? 32 : 128)) throw bad('the prefix length is too long');
    const ips = new BlockList();
    ips.addSubnet(range[1]!, prefix, family === 4 ? 'ipv4' : 'ipv6');
    return { ips, ...(port !== undefined ? { port } : {}) };
  }
  const family = isIP(host);
  if (family !== 0) {
    const ips = new BlockList();
    ips.addAddress(host, family === 4 ? 'ipv4' : 'ipv6');
    return { ips, ...(port !== undefined ? { port } : {}) };
  }
  const name = host.toLowerCase().replace(/\.$/, '');
  const portPart = port !== undefined ? { port } : {};
  if (HOST_NAME.test(name)) return { name, ...portPart };
  if (GLOB_NAME.test(name) && !name.split('.').every((l) => l === '*') && !/\*\*/.test(name))
    return { name, glob: globPattern(name), ...portPart };
  throw bad('must be a host name, *.domain, an IP address or a range, with an optional :port');
}

/** Parses a comma-separated allow-list (empty: nothing allowed); `bare`: what an entry without a scheme allows. */
export function parseHostRules(list: string, bare: BareScheme = 'https'): HostRule[] {
  return list
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '')
    .map((e) => parseHostRule(e, bare));
}

/** How `url` stands against `rules`: allowed; `plain` (its host is allowed, over https only); or refused. */
export function urlReach(url: string, rules: readonly HostRule[]): 'allowed' | 'plain' | 'refused' {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'refused';
  }
  if (u.username || u.password) return 'refused';
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return 'refused';
  const host = u.hostname
    .replace(/^\[(.*)\]$/, '$1')
    .toLowerCase()
    .replace(/\.$/, '');
  const port = u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80;
  const matching = rules.filter((r) => hostMatches(r, host, port));
  if (matching.length === 0) return 'refused';
  return u.protocol === 'https:' || matching.some((r) => r.http) ? 'allowed' : 'plain';
}

/**
 * Whether `url`'s scheme, host and port match one of `rules`: https to a listed host, plain http only to a host
 * listed with `http://` (or in a list whose bare entries allow it). A URL that does not parse matches nothing.
 */
export function hostAllowed(url: string, rules: readonly HostRule[]): boolean {
  return urlReach(url, rules) === 'allowed';
}

/**
 * The words of a refusal of `url` for `listName` (`--allowed-hub-hosts`): the host that is not listed, or the plain
 * HTTP that is not allowed to a listed host, with the entry an admin would add.
 */
export function refusalText(
  url: string,
  rules: readonly HostRule[],
  listName: string,
  owner = "the operator's",
): string {
  const host = hostOf(url);
  if (urlReach(url, rules) === 'plain')
    return (
      `${originOf(url)} is plain HTTP: ${owner} ${listName} allows ${host} over https only, so the credentials ` +
      `would cross the network in clear (use https://${host}, or an admin adds http://${host} to the list)`
    );
  return `host ${host} is not in ${owner} ${listName} ${listed(rules)}`;
}

/** Whether a rule's host and port (not its scheme) match. */
function hostMatches(r: HostRule, host: string, port: number): boolean {
  if (r.port !== undefined && r.port !== port) return false;
  if (r.name === '*') return true;
  const family = isIP(host);
  if (r.ips) return family !== 0 && r.ips.check(host, family === 4 ? 'ipv4' : 'ipv6');
  if (family !== 0 || !r.name) return false;
  if (r.glob) return r.glob.test(host);
  return r.name.startsWith('*.') ? host.endsWith(r.name.slice(1)) : host === r.name;
}

/** A list as a message shows it. */
export const listed = (rules: readonly HostRule[]) =>
  rules.length > 0 ? `(${rules.map((r) => r.text).join(', ')})` : '(empty)';
const hostOf = (url: string) => {
  try {
    return new URL(url).host;
  } catch {
    return url;
  }
};
const originOf = (url: string) => {
  try {
    return new URL(url).origin;
  } catch {
    return url;
  }
};

/** A namespaced `spec.manager.url`: allowed only to hosts in the admin's --allowed-manager-hosts. */
export function managerURLReach(url: string, field: string, policy: ReachPolicy): Reach {
  if (hostAllowed(url, policy.managerHosts)) return ALLOWED;
  return {
    allowed: false,
    reason: ReachReason.ManagerNotAllowed,
    message:
      `${field}: ${refusalText(url, policy.managerHosts, '--allowed-manager-hosts')}, ` +
      `so no request (and no Secret) is sent to it; name a ClusterManager in ${field.replace(/\.url$/, '')}.clusterManagerRef, ` +
      'leave the manager unset to use the operator default, or ask an admin to allow the host',
  };
}

/** Static `spec.modelServer.endpoints`: every host must be in the admin's --allowed-endpoint-hosts. */
export function endpointsReach(
  endpoints: readonly string[] | undefined,
  field: string,
  policy: ReachPolicy,
): Reach {
  const refused = (endpoints ?? []).filter((e) => !hostAllowed(e, policy.endpointHosts));
  if (refused.length === 0) return ALLOWED;
  return {
    allowed: false,
    reason: ReachReason.EndpointNotAllowed,
    message:
      `${field}: ${refused.length} endpoint(s) (${refused.slice(0, 3).map(hostOf).join(', ')}${refused.length > 3 ? ', ...' : ''}) ` +
      `are not in the operator's --allowed-endpoint-hosts ${listed(policy.endpointHosts)}, so the operator sends them no request ` +
      '(no key, no registration, no unregistration on delete); use spec.modelServer.service (the replicas of a Service in ' +
      'this namespace), or ask an admin to allow the hosts',
  };
}

/** Whether `labels` meet `selector` (metav1.LabelSelector: every matchLabels entry and every expression). */
export function labelsMatch(selector: LabelSelector, labels: Readonly<Record<string, string>>): boolean {
  // Hand-written: @kubernetes/client-node has no selector matcher, and these four operators are the whole language.
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const value = labels[e.key];
    const ok =
      e.operator === 'Exists'
        ? has
        : e.operator === 'DoesNotExist'
          ? !has
          : e.operator === 'In'
            ? has && (e.values ?? []).includes(value!)
            : !has || !(e.values ?? []).includes(value!);
    if (!ok) return false;
  }
  return true;
}

/** Whether a ClusterManager lets `namespace` (with `labels`; undefined when unknown) use it. */
export function namespaceAllowed(
  spec: Pick<ClusterManagerSpec, 'namespaces' | 'namespaceSelector'>,
  namespace: string,
  labels: Readonly<Record<string, string>> | undefined,
): boolean {
  if (spec.namespaces?.includes(namespace)) return true;
  return (
    spec.namespaceSelector !== undefined &&
    labels !== undefined &&
    labelsMatch(spec.namespaceSelector, labels)
  );
}

/** A namespaced `spec.manager.clusterManagerRef`: the ClusterManager must exist and list or select the namespace. */
export function clusterManagerReach(
  name: string,
  field: string,
  namespace: string,
  clusterManager: { spec: Pick<ClusterManagerSpec, 'namespaces' | 'namespaceSelector'> } | undefined,
  namespaceLabels: Readonly<Record<string, string>> | undefined,
): Reach {
  if (!clusterManager)
    return {
      allowed: false,
      reason: ReachReason.ClusterManagerNotFound,
      message: `${field}: ClusterManager ${name} not found; ask an admin to create it, or fix the name`,
    };
  if (namespaceAllowed(clusterManager.spec, namespace, namespaceLabels)) return ALLOWED;
  return {
    allowed: false,
    reason: ReachReason.ClusterManagerNotAllowed,
    message:
      `${field}: ClusterManager ${name} does not allow namespace ${namespace} (neither in its spec.namespaces nor ` +
      'selected by its spec.namespaceSelector); ask an admin to add the namespace, or use another manager',
  };
}
