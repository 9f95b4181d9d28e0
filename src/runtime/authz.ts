/**
 * Who may read an endpoint, decided by the kube-apiserver as controller-runtime's
 * `filters.WithAuthenticationAndAuthorization` does for /metrics: the request's bearer token is checked with a
 * TokenReview (no token or an unknown one: 401), then the user it names must be allowed the request's verb on
 * the path by a SubjectAccessReview (`nonResourceURLs: ["/metrics"], verbs: ["get"]` in a ClusterRole; not
 * allowed: 403). Both answers are cached as client-go's delegating authenticator and authorizer cache them
 * (token 1 min; allowed 5 min, denied 30 s), in a bounded cache keyed by the token's SHA-256, so a scrape every
 * few seconds costs no apiserver calls and a flood of distinct tokens cannot grow the process. The operator
 * needs `create` on tokenreviews (authentication.k8s.io) and subjectaccessreviews (authorization.k8s.io).
 *
 * Tokens never appear in logs or answers: only the user name does.
 */
import { createHash } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import type { KubeClient } from './kube.ts';

export type AccessDecision =
  { allowed: true; user: string } | { allowed: false; status: 401 | 403 | 500; message: string };

export type Authorize = (req: IncomingMessage, path: string) => Promise<AccessDecision>;

interface UserInfo {
  username: string;
  uid?: string;
  groups?: string[];
  extra?: Record<string, string[]>;
}

interface TokenReview {
  status?: { authenticated?: boolean; user?: UserInfo; error?: string };
}
interface SubjectAccessReview {
  status?: { allowed?: boolean; denied?: boolean; reason?: string };
}

export interface DelegatedAuthOptions {
  logger?: Logger;
  tokenTtlMs?: number;
  allowTtlMs?: number;
  denyTtlMs?: number;
  /** Entries kept per cache; the oldest go first. */
  maxEntries?: number;
}

/** A small TTL cache, bounded: insertion order is age order, so the first key is the oldest. */
class TtlCache<V> {
  private readonly entries = new Map<string, { value: V; until: number }>();
  private readonly max: number;

  constructor(max: number) {
    this.max = max;
  }

  get(key: string): V | undefined {
    const e = this.entries.get(key);
    if (!e) return undefined;
    if (e.until > Date.now()) return e.value;
    this.entries.delete(key);
    return undefined;
  }

  set(key: string, value: V, ttlMs: number): void {
    this.entries.delete(key);
    while (this.entries.size >= this.max) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, { value, until: Date.now() + ttlMs });
  }

  get size(): number {
    return this.entries.size;
  }
}

/** The TokenReview + SubjectAccessReview check of one endpoint server. */
export class DelegatedAuth {
  private readonly kube: KubeClient;
  private readonly logger: Logger | undefined;
  private readonly tokenTtlMs: number;
  private readonly allowTtlMs: number;
  private readonly denyTtlMs: number;
  private readonly users: TtlCache<UserInfo | null>;
  private readonly decisions: TtlCache<boolean>;

  constructor(kube: KubeClient, opts: DelegatedAuthOptions = {}) {
    this.kube = kube;
    this.logger = opts.logger;
    this.tokenTtlMs = opts.tokenTtlMs ?? 60_000;
    this.allowTtlMs = opts.allowTtlMs ?? 300_000;
    this.denyTtlMs = opts.denyTtlMs ?? 30_000;
    this.users = new TtlCache(opts.maxEntries ?? 256);
    this.decisions = new TtlCache(opts.maxEntries ?? 256);
  }

  /** Entries cached now (tokens, decisions): bounded by `maxEntries` each. */
  get cached(): { users: number; decisions: number } {
    return { users: this.users.size, decisions: this.decisions.size };
  }

  readonly authorize: Authorize = async (req, path) => {
    const header = req.headers.authorization ?? '';
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m) return { allowed: false, status: 401, message: 'Unauthorized' };
    const token = m[1]!;
    const tokenKey = createHash('sha256').update(token).digest('base64');
    let user = this.users.get(tokenKey);
    if (user === undefined) {
      try {
        const review = await this.kube.request<TokenReview>(
          'POST',
          '/apis/authentication.k8s.io/v1/tokenreviews',
          {
            body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenReview', spec: { token } },
            timeoutMs: 10_000,
          },
        );
        user = review.status?.authenticated && review.status.user?.username ? review.status.user : null;
      } catch (err) {
        this.logger?.error({ err: (err as Error).message }, 'TokenReview failed');
        return { allowed: false, status: 500, message: 'Authentication failed' };
      }
      this.users.set(tokenKey, user, this.tokenTtlMs);
    }
    if (!user) return { allowed: false, status: 401, message: 'Unauthorized' };

    // HEAD is a GET without the body, as the apiserver's own request info has it.
    const verb = req.method === 'HEAD' ? 'get' : (req.method ?? 'GET').toLowerCase();
    const decisionKey = `${tokenKey} ${verb} ${path}`;
    let allowed = this.decisions.get(decisionKey);
    if (allowed === undefined) {
      try {
        const review = await this.kube.request<SubjectAccessReview>(
          'POST',
          '/apis/authorization.k8s.io/v1/subjectaccessreviews',
          {
            body: {
              apiVersion: 'authorization.k8s.io/v1',
              kind: 'SubjectAccessReview',
              spec: {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                nonResourceAttributes: { path, verb },
              },
            },
            timeoutMs: 10_000,
          },
        );
        allowed = review.status?.allowed === true && review.status.denied !== true;
      } catch (err) {
        this.logger?.error(
          { user: user.username, err: (err as Error).message },
          'SubjectAccessReview failed',
        );
        return { allowed: false, status: 500, message: `Authorization for user ${user.username} failed` };
      }
      this.decisions.set(decisionKey, allowed, allowed ? this.allowTtlMs : this.denyTtlMs);
    }
    if (!allowed) {
      this.logger?.debug({ user: user.username, verb, path }, 'access denied');
      return { allowed: false, status: 403, message: `Authorization denied for user ${user.username}` };
    }
    return { allowed: true, user: user.username };
  };
}
