/**
 * Loading a kubeconfig without loading `@kubernetes/client-node`.
 *
 * Importing client-node costs ~90 MiB of RSS (it pulls in every generated API model), a third of the
 * operator's memory budget. The operator needs only what a pod or a plain kubeconfig holds: server, CA,
 * bearer token (inline or a file re-read as it rotates), client certificate, basic auth, impersonation.
 * Kubeconfigs whose user runs an `exec` or `auth-provider` plugin are handed to client-node's KubeConfig,
 * imported only then. client-node's KubeConfig objects are accepted as they are (tests pass them).
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { delimiter, dirname, isAbsolute, join } from 'node:path';
import { load } from 'js-yaml';

export interface KubeCluster {
  name?: string;
  server: string;
  caData?: string;
  caFile?: string;
  skipTLSVerify?: boolean;
  tlsServerName?: string;
}

export interface KubeUser {
  name?: string;
  token?: string;
  tokenFile?: string;
  certData?: string;
  certFile?: string;
  keyData?: string;
  keyFile?: string;
  username?: string;
  password?: string;
  impersonateUser?: string;
  impersonateGroups?: string[];
}

/** What the runtime needs of a kubeconfig; client-node's KubeConfig has the same shape. */
export interface KubeConfigLike {
  getCurrentCluster(): KubeCluster | null;
  getCurrentUser(): KubeUser | null;
  /** Fills `opts.headers` (Authorization, Impersonate-User) for one request. */
  applyToHTTPSOptions(opts: { headers?: Record<string, string> }): Promise<void>;
}

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

class SimpleKubeConfig implements KubeConfigLike {
  private readonly cluster: KubeCluster;
  private readonly user: KubeUser;
  constructor(cluster: KubeCluster, user: KubeUser) {
    this.cluster = cluster;
    this.user = user;
  }
  getCurrentCluster(): KubeCluster {
    return this.cluster;
  }
  getCurrentUser(): KubeUser {
    return this.user;
  }
  async applyToHTTPSOptions(opts: { headers?: Record<string, string> }): Promise<void> {
    const headers = (opts.headers ??= {});
    const token = this.user.tokenFile ? readFileSync(this.user.tokenFile, 'utf8').trim() : this.user.token;
    if (token) headers.Authorization = `Bearer ${token}`;
    if (this.user.impersonateUser) headers['Impersonate-User'] = this.user.impersonateUser;
  }
}

/** The pod's service account and the `kubernetes` Service, as client-go's rest.InClusterConfig. */
export function inClusterConfig(env: NodeJS.ProcessEnv = process.env): KubeConfigLike {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT ?? '443';
  if (!host) throw new Error('not running in a cluster: KUBERNETES_SERVICE_HOST is not set');
  const server = `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
  return new SimpleKubeConfig(
    { name: 'in-cluster', server, caFile: join(SA_DIR, 'ca.crt') },
    { name: 'in-cluster', tokenFile: join(SA_DIR, 'token') },
  );
}

type Named<T> = { name: string } & T;
interface RawKubeconfig {
  'current-context'?: string;
  contexts?: Named<{ context?: { cluster?: string; user?: string } }>[];
  clusters?: Named<{ cluster?: Record<string, unknown> }>[];
  users?: Named<{ user?: Record<string, unknown> }>[];
}

/**
 * Parses a kubeconfig file. Returns undefined when its user needs an auth plugin (exec / auth-provider),
 * which only client-node's KubeConfig implements.
 */
export function kubeconfigFromFile(path: string): KubeConfigLike | undefined {
  const raw = (load(readFileSync(path, 'utf8')) ?? {}) as RawKubeconfig;
  const ctxName = raw['current-context'];
  const ctx = raw.contexts?.find((c) => c.name === ctxName)?.context;
  if (!ctx) throw new Error(`kubeconfig ${path}: current context "${ctxName ?? ''}" not found`);
  const c = raw.clusters?.find((x) => x.name === ctx.cluster)?.cluster;
  if (!c || typeof c.server !== 'string')
    throw new Error(`kubeconfig ${path}: cluster "${ctx.cluster}" not found`);
  const u = raw.users?.find((x) => x.name === ctx.user)?.user ?? {};
  if (u.exec || u['auth-provider']) return undefined;
  const dir = dirname(path);
  const file = (v: unknown) => (typeof v === 'string' && v ? (isAbsolute(v) ? v : join(dir, v)) : undefined);
  const str = (v: unknown) => (typeof v === 'string' && v ? v : undefined);
  return new SimpleKubeConfig(
    {
      name: ctx.cluster,
      server: c.server,
      caData: str(c['certificate-authority-data']),
      caFile: file(c['certificate-authority']),
      skipTLSVerify: c['insecure-skip-tls-verify'] === true,
      tlsServerName: str(c['tls-server-name']),
    },
    {
      name: ctx.user,
      token: str(u.token),
      tokenFile: file(u.tokenFile ?? u['token-file']),
      certData: str(u['client-certificate-data']),
      certFile: file(u['client-certificate']),
      keyData: str(u['client-key-data']),
      keyFile: file(u['client-key']),
      username: str(u.username),
      password: str(u.password),
      impersonateUser: str(u.as),
      impersonateGroups: Array.isArray(u['as-groups']) ? (u['as-groups'] as string[]) : undefined,
    },
  );
}

/** The file to use when none is given: the first existing entry of $KUBECONFIG, else ~/.kube/config. */
function defaultKubeconfigPath(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const candidates = [
    ...(env.KUBECONFIG?.split(delimiter) ?? []),
    join(env.HOME || homedir(), '.kube', 'config'),
  ];
  return candidates.find((p) => p && existsSync(p));
}

/**
 * Loads the KubeConfig: the file when given, else in-cluster when running in a pod, else $KUBECONFIG or
 * ~/.kube/config. Auth plugins load client-node on demand.
 */
export async function loadKubeConfig(
  path?: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<KubeConfigLike> {
  if (!path && env.KUBERNETES_SERVICE_HOST) return inClusterConfig(env);
  const file = path ?? defaultKubeconfigPath(env);
  if (!file)
    throw new Error(
      'no kubeconfig: not in a cluster, and neither --kubeconfig, $KUBECONFIG nor ~/.kube/config',
    );
  const simple = kubeconfigFromFile(file);
  if (simple) return simple;
  // The container image leaves client-node out (scripts/bundle.ts): a pod never needs an auth plugin.
  const { KubeConfig } = await import('@kubernetes/client-node').catch(() => {
    throw new Error(
      `kubeconfig ${file}: its user runs an auth plugin (exec or auth-provider), which this build ` +
        'does not include (bundled without @kubernetes/client-node); use a token or client certificate, or run it from npm',
    );
  });
  const kc = new KubeConfig();
  kc.loadFromFile(file);
  return kc as unknown as KubeConfigLike;
}

export function readFileOrData(file?: string, data?: string): Buffer | undefined {
  if (file) return readFileSync(file);
  if (data) return Buffer.from(data, 'base64');
  return undefined;
}
