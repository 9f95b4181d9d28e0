/**
 * Operator configuration from flags and environment (`--resync-period 5m` or `PEERLOAD_RESYNC_PERIOD=5m`;
 * a flag wins over the environment), validated with zod. A bad value fails with one message naming the flag
 * and its variable, e.g. `--workers (PEERLOAD_WORKERS): must be an integer between 1 and 64, got "x"`.
 */
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { parseArgs } from 'node:util';
import { argsErrorMessage } from './args-error.ts';
import { z } from 'zod';
import { DURATION_PATTERN, parseDuration } from './api/index.ts';
import { DAEMON_VERSION_HINT, DEFAULT_TASK_ID_RULE, taskIdRule } from './storage/taskid.ts';
import { parseHostRules, type BareScheme, type HostRule } from './policy/reach.ts';
import { defaultStorageHosts } from './policy/storage-reach.ts';
import { DEFAULT_HUB_REDIRECT_HOSTS, DEFAULT_HUB_TOKEN_HOSTS } from './huggingface/endpoint.ts';

/**
 * A comma-separated host allow-list (src/policy/reach.ts); a bad entry fails naming it. `bare`: what an entry
 * without a scheme allows (https only for the lists of a source's credentials).
 */
const hostRules = (bare: BareScheme) =>
  z.string().transform((list, ctx): HostRule[] => {
    try {
      return parseHostRules(list, bare);
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: (err as Error).message });
      return [];
    }
  });

const duration = (what: string) =>
  z
    .string()
    .regex(new RegExp(DURATION_PATTERN), `must be a duration such as 90s, 10m or 1h30m`)
    .transform((s) => parseDuration(s))
    // Each one ends up in a timer: whole milliseconds, and far below 2^31-1 ms (where a Node timer fires at once).
    .refine((ms) => Number.isInteger(ms), 'must be a whole number of milliseconds')
    .refine((ms) => ms <= 24 * 3_600_000, 'must be at most 24h')
    .describe(what);

const bool = z
  .union([z.boolean(), z.enum(['true', 'false', '1', '0', 'yes', 'no'])])
  .transform((v) => v === true || v === 'true' || v === '1' || v === 'yes');

const address = z
  .string()
  .regex(/^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]*):\d{1,5}$/, 'must be host:port or :port, e.g. :8080')
  .refine((a) => Number(a.slice(a.lastIndexOf(':') + 1)) <= 65535, 'port must be at most 65535');

const ALL = {
  kubeconfig: { flag: 'kubeconfig', help: 'Path of a kubeconfig; default: in-cluster, else $KUBECONFIG' },
  namespace: { flag: 'namespace', help: 'Namespace to watch; empty: all namespaces' },
  metricsAddress: { flag: 'metrics-address', help: 'Address of /metrics, /healthz and /readyz' },
  metricsSecure: {
    flag: 'metrics-secure',
    help: 'Serve HTTPS; /metrics only to a bearer token allowed `get` on it (TokenReview + SubjectAccessReview). --no-metrics-secure: plain HTTP, no authentication (local development only)',
    boolean: true,
  },
  metricsCertDir: {
    flag: 'metrics-cert-dir',
    help: 'Directory with tls.crt and tls.key (a mounted kubernetes.io/tls Secret, re-read when it changes); default: a self-signed certificate made at start',
  },
  leaderElect: { flag: 'leader-elect', help: 'Elect a leader (--no-leader-elect to disable)', boolean: true },
  leaderElectionId: { flag: 'leader-election-id', help: 'Name of the Lease' },
  leaderElectionNamespace: {
    flag: 'leader-election-namespace',
    help: "Namespace of the Lease; default: the pod's namespace",
  },
  leaseDuration: { flag: 'lease-duration', help: 'How long a non-renewed lease is respected' },
  renewDeadline: { flag: 'renew-deadline', help: 'How long the leader retries renewing before giving up' },
  retryPeriod: { flag: 'retry-period', help: 'Interval of lease acquire/renew attempts' },
  identity: { flag: 'identity', help: 'Leader identity; default: <hostname>_<random>' },
  workers: { flag: 'workers', help: 'Concurrent reconciles per controller' },
  maxWorkersPerNamespace: {
    flag: 'max-workers-per-namespace',
    help: "Reconciles of one namespace at once per controller (the rest stay free for other namespaces' objects); default: all but a quarter of --workers. Set it to --workers where one tenant owns the cluster",
  },
  maxConcurrentRegistrations: {
    flag: 'max-concurrent-registrations',
    help: 'Model registrations (download + register) in flight at once, over all ServedModels',
  },
  maxRegistrationsPerNamespace: {
    flag: 'max-registrations-per-namespace',
    help: "Registrations of one namespace's ServedModels in flight at once; default: all but a quarter of --max-concurrent-registrations. Set it to that where one tenant owns the cluster",
  },
  resyncPeriod: { flag: 'resync-period', help: 'Replay the cache to the controllers this often (0s: never)' },
  logLevel: { flag: 'log-level', help: 'trace, debug, info, warn, error, fatal or silent' },
  shutdownTimeout: { flag: 'shutdown-timeout', help: 'Deadline for in-flight reconciles on SIGTERM' },
  managerUrl: { flag: 'manager-url', help: 'Default P2P manager base URL' },
  managerApiPath: { flag: 'manager-api-path', help: 'Default manager job API prefix: /api/v1 or /oapi/v1' },
  managerTokenSecret: {
    flag: 'manager-token-secret',
    help: 'Default manager token Secret as [namespace/]name (namespace default: the Lease namespace)',
  },
  managerTokenSecretKey: { flag: 'manager-token-secret-key', help: 'Key of the token in that Secret' },
  allowedManagerHosts: {
    flag: 'allowed-manager-hosts',
    help: 'Hosts a namespaced spec.manager.url may name, comma-separated: name, *.domain, IP or CIDR, each with an optional :port, http or https (https://host: TLS only); * allows any (empty: none, only ClusterManagers and --manager-url)',
  },
  allowedEndpointHosts: {
    flag: 'allowed-endpoint-hosts',
    help: 'Hosts a ServedModel spec.modelServer.endpoints may name, same syntax (empty: none, only Service discovery)',
  },
  allowedStorageHosts: {
    flag: 'allowed-storage-hosts',
    help: "Hosts an objectStorage location's credentials may go to (its endpoint, its signed URLs, its listings), same syntax; `*` inside a label matches within it. Over https only; http://host allows plain HTTP to that host. Default: the storage services' own hosts; empty: none",
  },
  allowedRegistryHosts: {
    flag: 'allowed-registry-hosts',
    help: 'Registries (and token services) a ModelPreheat imageCredentialsSecretRef or a ServedModel source.oci credentialsSecretRef may name, same syntax, https only unless written http://host (plainHTTP); empty: none; images without credentials go anywhere',
  },
  allowedBasicAuthRegistryHosts: {
    flag: 'allowed-basic-auth-registry-hosts',
    help: 'Registries of --allowed-registry-hosts that take only Basic credentials (no token service) whose user and password may go to the agents, and through the node daemons, which log request headers; same syntax (empty: none, such registries are refused with BasicAuthNotForwarded)',
  },
  allowedHubHosts: {
    flag: 'allowed-hub-hosts',
    help: 'Hugging Face Hub hosts a ServedModel or ModelPreheat source.huggingface token may go to (its endpoint), same syntax, https only unless written http://host. Default: huggingface.co; empty: none (public repositories only)',
  },
  sourceTimeout: {
    flag: 'source-timeout',
    help: "How long one resolution of a ServedModel's or ModelPreheat's source may take however slowly its host answers (a Hub's revision, tree pages and LFS redirects; a registry's manifest, challenge and token); past it the object is Stalled with SourceTimeout and tried again with backoff",
  },
  allowedHubRedirectHosts: {
    flag: 'allowed-hub-redirect-hosts',
    help: "Hosts a Hugging Face Hub may redirect an LFS file to (its CDN) besides its own, same syntax, https only unless written http://host; the agents are told to fetch no other. Default: the public Hub's CDNs (cdn-lfs.hf.co, cdn-lfs-*.hf.co, cdn-lfs.huggingface.co, cdn-lfs-*.huggingface.co, cas-bridge.xethub.hf.co, *.cdn.hf.co); empty: none",
  },
  pollBackoffStart: { flag: 'poll-backoff-start', help: 'First interval when polling external jobs' },
  pollBackoffMax: { flag: 'poll-backoff-max', help: 'Longest interval when polling external jobs' },
  cleanupGracePeriod: {
    flag: 'cleanup-grace-period',
    help: 'How long a ServedModel deletion retries unreachable replicas before it lets go (default of spec.deletion.gracePeriod)',
  },
  peerDaemonVersion: {
    flag: 'peer-daemon-version',
    help: 'Peer daemon (dragonfly-client) version whose task ids status shows: 1.4, 1.5.3+ or e.g. 1.4.2; default 1.4',
  },
} as const satisfies Record<string, { flag: string; help: string; boolean?: boolean }>;
type Key = keyof typeof ALL;

/** Every operator flag by name, with whether it is a host allow-list: for tooling that must cover each one (the tests'
 *  loopback profile is held to it). */
export function operatorFlags(): { flag: string; hostList: boolean }[] {
  return (Object.keys(ALL) as Key[]).map((key) => ({ flag: ALL[key].flag, hostList: HOST_LISTS.has(key) }));
}

const HOST_LISTS = new Set<Key>([
  'allowedManagerHosts',
  'allowedEndpointHosts',
  'allowedStorageHosts',
  'allowedRegistryHosts',
  'allowedBasicAuthRegistryHosts',
  'allowedHubHosts',
  'allowedHubRedirectHosts',
]);

const envName = (flag: string): string => `PEERLOAD_${flag.toUpperCase().replace(/-/g, '_')}`;

const OperatorConfigSchema = z
  .object({
    kubeconfig: z.string().min(1).optional(),
    namespace: z
      .string()
      .regex(/^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$/, 'must be a namespace name or empty')
      .max(63)
      .default(''),
    metricsAddress: address.default(':8443'),
    // Secure by default, as controller-runtime's scaffold: the metrics name every object the operator holds.
    metricsSecure: bool.default(true),
    metricsCertDir: z.string().min(1).optional(),
    leaderElect: bool.default(true),
    leaderElectionId: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, 'must be a lowercase RFC 1123 name')
      .max(253)
      .default('peerload-operator'),
    leaderElectionNamespace: z
      .string()
      .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, 'must be a namespace name')
      .max(63)
      .optional(),
    leaseDuration: duration('lease duration').default(15_000),
    renewDeadline: duration('renew deadline').default(10_000),
    retryPeriod: duration('retry period').default(2_000),
    identity: z.string().min(1).max(128).optional(),
    workers: z.coerce
      .number({ message: 'must be an integer between 1 and 64' })
      .int('must be an integer between 1 and 64')
      .min(1, 'must be an integer between 1 and 64')
      .max(64, 'must be an integer between 1 and 64')
      .default(4),
    // Above --workers it means --workers: one namespace may then hold every worker.
    maxWorkersPerNamespace: z.coerce
      .number({ message: 'must be an integer between 1 and 64' })
      .int('must be an integer between 1 and 64')
      .min(1, 'must be an integer between 1 and 64')
      .max(64, 'must be an integer between 1 and 64')
      .optional(),
    // Each holds a connection to a replica while its plugin downloads; the rest wait in phase Pending.
    maxConcurrentRegistrations: z.coerce
      .number({ message: 'must be an integer between 1 and 1000' })
      .int('must be an integer between 1 and 1000')
      .min(1, 'must be an integer between 1 and 1000')
      .max(1000, 'must be an integer between 1 and 1000')
      .default(32),
    maxRegistrationsPerNamespace: z.coerce
      .number({ message: 'must be an integer between 1 and 1000' })
      .int('must be an integer between 1 and 1000')
      .min(1, 'must be an integer between 1 and 1000')
      .max(1000, 'must be an integer between 1 and 1000')
      .optional(),
    resyncPeriod: duration('resync period').default(600_000),
    logLevel: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
    shutdownTimeout: duration('shutdown timeout').default(25_000),
    managerUrl: z
      .string()
      .regex(/^https?:\/\/[^\s/?#]+[^\s]*$/, 'must be an absolute http:// or https:// URL')
      .optional(),
    managerApiPath: z.enum(['/api/v1', '/oapi/v1']).default('/api/v1'),
    managerTokenSecret: z
      .string()
      .regex(/^([a-z0-9]([-a-z0-9]*[a-z0-9])?\/)?[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, 'must be [namespace/]name')
      .optional(),
    managerTokenSecretKey: z.string().min(1).default('token'),
    // Default empty: a namespaced spec sends the operator nowhere an admin did not choose (docs/security.md).
    // In-cluster services that speak plain HTTP by default: an entry without a scheme allows http too.
    allowedManagerHosts: hostRules('any').default([]),
    allowedEndpointHosts: hostRules('any').default([]),
    // The storage services' hosts only (storage-reach.ts says why not their whole domains); registries: none, the
    // admin names them, since no domain is one registry operator's and a registry names its token realm itself.
    // A source's credentials: https only, unless an entry is written http://host.
    allowedStorageHosts: hostRules('https').default(defaultStorageHosts()),
    allowedRegistryHosts: hostRules('https').default([]),
    // None: the agents get the registry's short-lived tokens, never a Secret's password, unless the admin says so.
    allowedBasicAuthRegistryHosts: hostRules('https').default([]),
    // The public Hub only: a mirror or an Enterprise Hub is the admin's to name.
    allowedHubHosts: hostRules('https').default(parseHostRules(DEFAULT_HUB_TOKEN_HOSTS)),
    // The public Hub's CDNs only: a mirror's or an Enterprise Hub's CDN is the admin's to name. https only unless
    // written http://host, like the credential lists: a redirect's signed URL reads a gated file for whoever has it.
    allowedHubRedirectHosts: hostRules('https').default(parseHostRules(DEFAULT_HUB_REDIRECT_HOSTS)),
    // The source budget's deadline (src/http/budget.ts): two minutes, as for a bucket listing.
    sourceTimeout: duration('source timeout').default(120_000),
    pollBackoffStart: duration('poll backoff start').default(2_000),
    pollBackoffMax: duration('poll backoff max').default(60_000),
    cleanupGracePeriod: duration('cleanup grace period').default(120_000),
    // The rule of the tested Dragonfly release (v2.5.1 bundles client 1.4.2); spec.peerDaemonVersion overrides it.
    peerDaemonVersion: z
      .string()
      .transform((v, ctx) => {
        const rule = taskIdRule(v);
        if (rule === undefined) ctx.addIssue({ code: 'custom', message: DAEMON_VERSION_HINT });
        return rule ?? DEFAULT_TASK_ID_RULE;
      })
      .default(DEFAULT_TASK_ID_RULE),
  })
  .superRefine((c, ctx) => {
    if (c.leaderElect && !(c.leaseDuration > c.renewDeadline)) {
      ctx.addIssue({
        code: 'custom',
        path: ['renewDeadline'],
        message: 'must be shorter than --lease-duration',
      });
    }
    if (c.leaderElect && !(c.renewDeadline > c.retryPeriod * 1.2)) {
      ctx.addIssue({
        code: 'custom',
        path: ['retryPeriod'],
        message: 'must be shorter than --renew-deadline / 1.2',
      });
    }
    if (c.pollBackoffMax < c.pollBackoffStart) {
      ctx.addIssue({
        code: 'custom',
        path: ['pollBackoffMax'],
        message: 'must not be below --poll-backoff-start',
      });
    }
    if (c.metricsCertDir !== undefined && !c.metricsSecure) {
      ctx.addIssue({
        code: 'custom',
        path: ['metricsCertDir'],
        message: 'serves HTTPS: drop --no-metrics-secure, or this flag',
      });
    }
    if (c.retryPeriod <= 0)
      ctx.addIssue({ code: 'custom', path: ['retryPeriod'], message: 'must be positive' });
  });

export type OperatorConfig = z.output<typeof OperatorConfigSchema> & {
  leaderElectionNamespace: string;
  identity: string;
};

/** A configuration error: the message names the flag (and its environment variable). */
export class ConfigError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ConfigError';
  }
}

const SA_NAMESPACE_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

/**
 * Parses flags (`argv`) and environment (`env`). `--help` returns `{ help: text }`. Throws
 * {@link ConfigError} with the offending flag named.
 */
export function loadConfig(
  argv: string[],
  env: NodeJS.ProcessEnv = process.env,
): { config: OperatorConfig } | { help: string } {
  const options: Record<string, { type: 'string' | 'boolean' }> = { help: { type: 'boolean' } };
  for (const o of Object.values(ALL)) options[o.flag] = { type: 'boolean' in o ? 'boolean' : 'string' };
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      args: argv,
      options,
      strict: true,
      allowPositionals: false,
      allowNegative: true,
    }).values;
  } catch (err) {
    throw new ConfigError(argsErrorMessage(err, usage()));
  }
  if (values.help) return { help: usage() };

  const raw: Record<string, unknown> = {};
  for (const [key, o] of Object.entries(ALL) as [Key, (typeof ALL)[Key]][]) {
    const v = values[o.flag] ?? env[envName(o.flag)];
    if (v !== undefined && v !== '') raw[key] = v;
    // An empty host list is "none", not "the default" (for --allowed-storage-hosts they differ).
    else if (v === '' && (key === 'namespace' || HOST_LISTS.has(key))) raw[key] = '';
  }
  const parsed = OperatorConfigSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => {
      const key = String(i.path[0] ?? '') as Key;
      const o = ALL[key];
      const given = key in raw ? `, got "${String(raw[key])}"` : '';
      return o ? `--${o.flag} (${envName(o.flag)}): ${i.message}${given}` : i.message;
    });
    throw new ConfigError(lines.join('; '));
  }
  const c = parsed.data;
  return {
    config: {
      ...c,
      leaderElectionNamespace: c.leaderElectionNamespace ?? podNamespace(env) ?? (c.namespace || 'default'),
      identity: c.identity ?? `${env.POD_NAME || hostname()}_${randomBytes(4).toString('hex')}`,
    },
  };
}

function podNamespace(env: NodeJS.ProcessEnv): string | undefined {
  if (env.POD_NAMESPACE) return env.POD_NAMESPACE;
  try {
    return readFileSync(SA_NAMESPACE_FILE, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

/** Flags whose value is a duration (parsed to ms), shown back as a duration in the help. */
const DURATIONS = new Set<Key>([
  'leaseDuration',
  'renewDeadline',
  'retryPeriod',
  'resyncPeriod',
  'shutdownTimeout',
  'sourceTimeout',
  'pollBackoffStart',
  'pollBackoffMax',
]);

function defaultText(key: Key): string {
  const v = (OperatorConfigSchema.safeParse({}).data as Record<string, unknown> | undefined)?.[key];
  if (v === undefined || v === '' || (Array.isArray(v) && v.length === 0)) return '';
  if (Array.isArray(v)) return ` (default ${(v as HostRule[]).map((r) => r.text).join(',')})`;
  if (DURATIONS.has(key) && typeof v === 'number')
    return ` (default ${v % 60_000 === 0 ? `${v / 60_000}m` : `${v / 1000}s`})`;
  return ` (default ${String(v)})`;
}

export function usage(): string {
  const width = Math.max(...Object.values(ALL).map((o) => o.flag.length)) + 2;
  const lines = (Object.entries(ALL) as [Key, (typeof ALL)[Key]][]).map(
    ([key, o]) => `  --${o.flag.padEnd(width)}${o.help}${defaultText(key)} [${envName(o.flag)}]`,
  );
  return `Usage: peerload operator [options]\n\nRuns the peerload controllers.\n\nOptions (flag, or the environment variable in brackets):\n${lines.join('\n')}`;
}
