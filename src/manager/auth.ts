/**
 * Credentials toward the manager, by the routes each manager version serves:
 * - none (manager up to v2.4.0 on /api/v1);
 * - a personal access token (PAT, /oapi/v1 from v2.1.0): `Authorization: Bearer <token>`, or `?access_token=`;
 * - user + password: `POST /api/v1/users/signin` -> `{"token","expire"}`, a JWT sent as `Authorization: Bearer`,
 *   renewed before `expire`. Concurrent callers share one sign-in (one promise in flight).
 */
import { abortable } from '../http/abortable.ts';
import { ManagerError } from './errors.ts';

export type ManagerAuth =
  | { type: 'none' }
  | { type: 'token'; token: string; /** default header */ in?: 'header' | 'query' }
  | { type: 'signIn'; username: string; password: string };

/** What a request carries for authentication. */
export interface AuthMaterial {
  headers: Record<string, string>;
  query: Record<string, string>;
  /** The JWT used, so a 401 can invalidate exactly that one. */
  jwt?: string;
}

export interface SignInResult {
  token: string;
  /** Absolute expiry, ms since epoch; undefined when the manager did not say. */
  expiresAt: number | undefined;
}

export type SignInFn = (username: string, password: string) => Promise<SignInResult>;

export interface AuthProviderOptions {
  /** Renew this long before `expire` (capped at half of the token's lifetime). Default 60 s. */
  renewBeforeMs?: number;
  /** Lifetime assumed when the manager sends no `expire`. Default 10 min. */
  defaultLifetimeMs?: number;
  now?: () => number;
}

export class AuthProvider {
  readonly #auth: ManagerAuth;
  readonly #signIn: SignInFn | undefined;
  readonly #renewBeforeMs: number;
  readonly #defaultLifetimeMs: number;
  readonly #now: () => number;
  #jwt: { token: string; renewAt: number; expiresAt: number } | undefined;
  #pending: Promise<string> | undefined;
  /** Sign-ins performed (observability and tests). */
  signIns = 0;

  constructor(auth: ManagerAuth, signIn?: SignInFn, opts: AuthProviderOptions = {}) {
    this.#auth = auth;
    this.#signIn = signIn;
    this.#renewBeforeMs = opts.renewBeforeMs ?? 60_000;
    this.#defaultLifetimeMs = opts.defaultLifetimeMs ?? 600_000;
    this.#now = opts.now ?? Date.now;
    if (auth.type === 'signIn' && !signIn) throw new Error('sign-in auth needs a sign-in function');
  }

  get type(): ManagerAuth['type'] {
    return this.#auth.type;
  }

  /** Values that must never appear in a message (redacted from whatever the manager echoes). */
  secrets(): string[] {
    switch (this.#auth.type) {
      case 'none':
        return [];
      case 'token':
        return [this.#auth.token];
      case 'signIn':
        return [this.#auth.password, ...(this.#jwt ? [this.#jwt.token] : [])];
    }
  }

  /** What the next request carries; `signal` ends the caller's wait for a sign-in (the sign-in goes on). */
  async material(signal?: AbortSignal): Promise<AuthMaterial> {
    switch (this.#auth.type) {
      case 'none':
        return { headers: {}, query: {} };
      case 'token':
        return this.#auth.in === 'query'
          ? { headers: {}, query: { access_token: this.#auth.token } }
          : { headers: { authorization: `Bearer ${this.#auth.token}` }, query: {} };
      case 'signIn': {
        const jwt = await abortable(this.#currentJWT(), signal);
        return { headers: { authorization: `Bearer ${jwt}` }, query: {}, jwt };
      }
    }
  }

  /** Forgets a JWT the manager rejected (401), unless a newer one already replaced it. */
  invalidate(jwt: string | undefined): void {
    if (jwt !== undefined && this.#jwt?.token === jwt) this.#jwt = undefined;
  }

  #currentJWT(): Promise<string> {
    const now = this.#now();
    if (this.#jwt && now < this.#jwt.renewAt) return Promise.resolve(this.#jwt.token);
    // A still-valid token is used while the renewal runs only by callers that arrive before it settles: they
    // wait for the same promise, so N parallel calls sign in once.
    this.#pending ??= this.#doSignIn().finally(() => {
      this.#pending = undefined;
    });
    return this.#pending;
  }

  async #doSignIn(): Promise<string> {
    if (this.#auth.type !== 'signIn') throw new Error('not sign-in auth');
    this.signIns++;
    const started = this.#now();
    let result: SignInResult;
    try {
      result = await this.#signIn!(this.#auth.username, this.#auth.password);
    } catch (e) {
      if (e instanceof ManagerError) throw e;
      throw new ManagerError({
        kind: 'retryable',
        status: 0,
        operation: 'sign-in',
        managerMessage: 'sign-in failed',
        cause: e,
      });
    }
    const expiresAt = result.expiresAt ?? started + this.#defaultLifetimeMs;
    const lifetime = Math.max(0, expiresAt - started);
    const margin = Math.min(this.#renewBeforeMs, lifetime / 2);
    this.#jwt = { token: result.token, expiresAt, renewAt: expiresAt - margin };
    return result.token;
  }
}

/** `expire` of the sign-in answer (RFC 3339 from gin-jwt; tolerates unix seconds or ms) as ms since epoch. */
export function parseExpire(expire: string | number | null | undefined): number | undefined {
  if (expire === null || expire === undefined || expire === '') return undefined;
  if (typeof expire === 'number') return expire < 1e12 ? expire * 1000 : expire;
  if (/^[0-9]+$/.test(expire)) return parseExpire(Number(expire));
  const t = Date.parse(expire);
  return Number.isNaN(t) ? undefined : t;
}
