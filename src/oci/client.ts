/**
 * The read side of the OCI distribution API that placing a model needs: a manifest by tag or digest (bounded, its
 * digest computed from the bytes and checked against the one asked for and the one the registry announces), and
 * the `Authorization` a blob GET needs, which the peer proxy then carries to the registry.
 *
 * Authentication as registries do it: anonymous first; on a 401 the `WWW-Authenticate` challenge decides —
 * `Basic` sends the credentials, `Bearer realm=…,service=…,scope=…` asks the realm for a token (with the
 * credentials as Basic when there are some, anonymously otherwise) and sends `Bearer <token>`. Credentials go only
 * to a registry, and a token realm, that the allow-list admits.
 *
 * What the agents get ({@link RegistryClient.agentGrant}) is the token, scoped to pulling the one repository and
 * short-lived, never the credentials themselves: a registry that takes only Basic is refused unless the admin lists
 * it among the registries whose credentials may be forwarded.
 */
import { createHash } from 'node:crypto';
import type { Dispatcher } from 'undici';
import { z } from 'zod';
import { hostAllowed, urlReach, type HostRule } from '../policy/reach.ts';
import { USER_AGENT } from '../version.ts';
import { parseChallenges, type Challenge } from './challenge.ts';
import type { RegistryCredentials } from './credentials.ts';
import type { SourceBudget } from '../http/budget.ts';
import { DEFAULT_REGISTRY_TIMEOUT_MS, OciError, OciReason, ociBudget } from './errors.ts';
import { MANIFEST_ACCEPT } from './media-types.ts';
import { formatReference, type OciReference } from './reference.ts';

/** Far above any model manifest (a thousand layers is ~300 KiB). */
export const DEFAULT_MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
/**
 * A token service's answer at most: a registry's bearer token is a few KiB (a JWT with its certificate chain), and
 * it is copied into the Authorization of every blob an agent fetches, so a realm may not send a megabyte of it.
 */
export const MAX_TOKEN_RESPONSE_BYTES = 64 * 1024;
/**
 * A token's characters, so that `Bearer <token>` fits the 8 KiB header value an agent takes (place/spec.ts) and
 * registries' own request-line limits; real tokens are 1–4 KiB.
 */
export const MAX_TOKEN_CHARS = 8192 - 'Bearer '.length;
/** A tags list of one entry (asked for only to find the repository's Authorization). */
const TAGS_BYTES = 64 * 1024;
/** A 401's `WWW-Authenticate` at most, in characters: a challenge is a scheme and a handful of parameters. */
export const MAX_CHALLENGE_CHARS = 4096;

export interface RegistryClientOptions {
  dispatcher: Dispatcher;
  /** http:// instead of https:// (a registry on loopback or inside the cluster without TLS). */
  plainHTTP?: boolean | undefined;
  credentials?: RegistryCredentials | undefined;
  /**
   * The hosts the admin allows. Given: every request must go to one of them, token realms included. Absent: only
   * anonymous pulls (credentials are refused, since nothing says where they may go).
   */
  allowedHosts?: readonly HostRule[] | undefined;
  maxManifestBytes?: number | undefined;
  /**
   * Registries whose Basic credentials may go to the agents (and so through the node daemons, which log request
   * headers), when the registry names no token service. Absent or not matching: such a registry is refused.
   */
  basicForwardHosts?: readonly HostRule[] | undefined;
  /** Each exchange, ms (default 60 s). */
  timeoutMs?: number | undefined;
  /**
   * The resolution's budget (src/http/budget.ts): every answer (manifest, challenge, token) is read through it.
   * Without one, each call (a manifest, an authorization) has a budget of the default bounds of its own.
   */
  budget?: SourceBudget<OciError> | undefined;
}

export interface FetchedManifest {
  /** sha256 of the bytes. */
  digest: string;
  body: Buffer;
  contentType: string | undefined;
}

/** What an agent sends with each blob GET of one repository. */
export interface PullGrant {
  /** `Bearer <token>` (or, where the admin allows it, `Basic …`); undefined: anonymous. */
  authorization: string | undefined;
  /** How long a bearer token works from when it was given, ms (the token service's `expires_in`). */
  lifetimeMs: number | undefined;
}

/** The distribution spec's lifetime of a token whose answer gives none, s. */
const DEFAULT_TOKEN_SECONDS = 60;

interface Answer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: Buffer;
}

const TokenResponse = z.object({
  token: z.string().min(1).optional(),
  access_token: z.string().min(1).optional(),
  expires_in: z.number().int().positive().optional(),
});

const header = (h: Answer['headers'], name: string) => {
  const v = h[name];
  return Array.isArray(v) ? v.join(', ') : v;
};

export class RegistryClient {
  readonly registry: string;
  readonly baseURL: string;
  private readonly opts: RegistryClientOptions;
  /** The Authorization that worked, per repository. */
  private readonly authorizations = new Map<string, string | undefined>();
  /** How long the token of a repository's Authorization works, ms. */
  private readonly lifetimes = new Map<string, number>();

  constructor(registry: string, opts: RegistryClientOptions) {
    this.registry = registry;
    this.baseURL = `${opts.plainHTTP ? 'http' : 'https'}://${registry}`;
    this.opts = opts;
    if (opts.allowedHosts !== undefined && !hostAllowed(this.baseURL, opts.allowedHosts))
      throw new OciError(
        OciReason.RegistryNotAllowed,
        urlReach(this.baseURL, opts.allowedHosts) === 'plain'
          ? `the registry ${registry} is plain HTTP, and the allowed registry hosts (${opts.allowedHosts.map((r) => r.text).join(', ')}) allow it over https only: the credentials would cross the network in clear; use https, or an admin adds http://${registry} to the allow-list`
          : `the registry ${registry} is not in the allowed registry hosts (${opts.allowedHosts.map((r) => r.text).join(', ') || 'none'}): an admin adds it to the allow-list`,
      );
    if (opts.credentials !== undefined && opts.allowedHosts === undefined)
      throw new OciError(
        OciReason.RegistryNotAllowed,
        `registry credentials are given but no registry allow-list: list ${registry} in the allowed registry hosts so the credentials may go there`,
      );
  }

  private get secrets(): string[] {
    const c = this.opts.credentials;
    return c ? [c.password, Buffer.from(`${c.username}:${c.password}`).toString('base64')] : [];
  }

  /** `<base>/v2/<repository>/blobs/<digest>`: the URL the peer proxy fetches (and the daemon's task id is of). */
  blobURL(repository: string, digest: string): string {
    return `${this.baseURL}/v2/${repository}/blobs/${digest}`;
  }

  /**
   * The manifest of `ref`, checked: its bytes hash to the digest the reference names, and to the
   * `Docker-Content-Digest` the registry announces (a tag resolves to that digest).
   */
  async manifest(ref: OciReference, signal?: AbortSignal): Promise<FetchedManifest> {
    return this.within((budget) => this.readManifest(ref, budget, signal));
  }

  /** `work` within the client's budget, or within one of its own closed when the work ends. */
  private async within<T>(work: (budget: SourceBudget<OciError>) => Promise<T>): Promise<T> {
    if (this.opts.budget) return work(this.opts.budget);
    const budget = ociBudget(this.registry, { requestTimeoutMs: this.opts.timeoutMs });
    try {
      return await work(budget);
    } finally {
      budget.close();
    }
  }

  private async readManifest(
    ref: OciReference,
    budget: SourceBudget<OciError>,
    signal?: AbortSignal,
  ): Promise<FetchedManifest> {
    const what = formatReference(ref);
    const path = `/v2/${ref.repository}/manifests/${ref.digest ?? ref.tag!}`;
    const max = this.opts.maxManifestBytes ?? DEFAULT_MAX_MANIFEST_BYTES;
    const res = await this.get(
      budget,
      ref.repository,
      path,
      { accept: MANIFEST_ACCEPT },
      max,
      what,
      'manifest',
      signal,
    );
    const digest = `sha256:${createHash('sha256').update(res.body).digest('hex')}`;
    if (ref.digest !== undefined && digest !== ref.digest)
      throw new OciError(
        OciReason.DigestMismatch,
        `the registry served a manifest for ${what} whose bytes hash to ${digest}: the registry (or something between) changed it`,
      );
    const announced = header(res.headers, 'docker-content-digest');
    if (announced !== undefined && announced.startsWith('sha256:') && announced !== digest)
      throw new OciError(
        OciReason.DigestMismatch,
        `the registry announced ${announced} for the manifest of ${what}, but its bytes hash to ${digest}`,
      );
    return { digest, body: res.body, contentType: header(res.headers, 'content-type') };
  }

  /**
   * The Authorization header a GET of `repository`'s blobs needs (undefined: anonymous). Known once a manifest of
   * the repository was read; else found by asking the registry.
   */
  async pullAuthorization(repository: string, signal?: AbortSignal): Promise<string | undefined> {
    if (!this.authorizations.has(repository))
      await this.within((budget) =>
        this.get(
          budget,
          repository,
          `/v2/${repository}/tags/list?n=1`,
          {},
          TAGS_BYTES,
          repository,
          'tags',
          signal,
        ),
      );
    return this.authorizations.get(repository);
  }

  /**
   * What the agents send to read `repository`'s blobs: the bearer token the operator got for pulling it (found as
   * {@link pullAuthorization} does), with its expiry. The credentials themselves only for a registry of
   * `basicForwardHosts`; another registry answering with Basic alone is refused (BasicAuthNotForwarded).
   */
  async agentGrant(repository: string, signal?: AbortSignal): Promise<PullGrant> {
    const authorization = await this.pullAuthorization(repository, signal);
    if (authorization?.startsWith('Basic ') && !hostAllowed(this.baseURL, this.opts.basicForwardHosts ?? []))
      throw new OciError(
        OciReason.BasicAuthNotForwarded,
        `the registry ${this.registry} takes only Basic credentials (its challenge names no token service), so the agents would get the Secret's user and password, which the node daemons write into their logs: use a registry with a token service, or an admin who accepts that lists ${this.registry} in --allowed-basic-auth-registry-hosts`,
      );
    return { authorization, lifetimeMs: this.lifetimes.get(repository) };
  }

  private async get(
    budget: SourceBudget<OciError>,
    repository: string,
    path: string,
    headers: Record<string, string>,
    maxBytes: number,
    what: string,
    object: 'manifest' | 'tags',
    signal: AbortSignal | undefined,
  ): Promise<Answer> {
    let authorization = this.authorizations.get(repository);
    const send = () =>
      this.exchange(
        budget,
        this.baseURL,
        path,
        { ...headers, ...(authorization ? { authorization } : {}) },
        maxBytes,
        what,
        signal,
      );
    let res = await send();
    if (res.status === 401 && !this.authorizations.has(repository)) {
      authorization = await this.authorize(budget, repository, res, what, signal);
      res = await send();
    }
    if (res.status === 200) {
      this.authorizations.set(repository, authorization);
      return res;
    }
    throw this.failure(res, what, object, this.opts.credentials !== undefined);
  }

  /** Answers a 401's challenge: the Authorization to send, or throws Unauthorized. */
  private async authorize(
    budget: SourceBudget<OciError>,
    repository: string,
    res: Answer,
    what: string,
    signal?: AbortSignal,
  ): Promise<string> {
    const challenge = header(res.headers, 'www-authenticate') ?? '';
    if (challenge.length > MAX_CHALLENGE_CHARS)
      throw budget.hit(
        'tooLarge',
        'maxEntryChars',
        `the challenge (WWW-Authenticate) of ${this.registry} for ${what} is longer than ${MAX_CHALLENGE_CHARS} characters`,
      );
    const challenges = parseChallenges(challenge);
    const creds = this.opts.credentials;
    const bearer = challenges.find((c) => c.scheme === 'bearer');
    if (bearer) {
      const { token, seconds } = await this.token(budget, bearer, repository, what, signal);
      this.lifetimes.set(repository, seconds * 1000);
      return `Bearer ${token}`;
    }
    if (challenges.some((c) => c.scheme === 'basic')) {
      if (!creds)
        throw new OciError(
          OciReason.Unauthorized,
          `the registry ${this.registry} requires credentials for ${what} (401, Basic): give registry credentials`,
          { status: 401 },
        );
      return `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`;
    }
    throw new OciError(
      OciReason.Unauthorized,
      `the registry ${this.registry} answered 401 for ${what} without a Basic or Bearer challenge`,
      { status: 401 },
    );
  }

  /**
   * The bearer token flow: GET realm?service=…&scope=repository:<repository>:pull, Basic credentials when there
   * are some. The scope is ours, not the challenge's: the token reaches the agents, and pulling this repository is
   * all they need.
   */
  private async token(
    budget: SourceBudget<OciError>,
    challenge: Challenge,
    repository: string,
    what: string,
    signal?: AbortSignal,
  ): Promise<{ token: string; seconds: number }> {
    const realm = challenge.params['realm'];
    let url: URL;
    try {
      url = new URL(realm ?? '');
    } catch {
      throw new OciError(
        OciReason.RegistryError,
        `the registry ${this.registry} sent a Bearer challenge without a usable realm`,
      );
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:')
      throw new OciError(
        OciReason.RegistryError,
        `the registry ${this.registry} sent a token realm that is not http(s)`,
      );
    const creds = this.opts.credentials;
    const allowed = this.opts.allowedHosts;
    if (allowed !== undefined && !hostAllowed(url.origin, allowed))
      throw new OciError(
        OciReason.RegistryNotAllowed,
        urlReach(url.origin, allowed) === 'plain'
          ? `the token service ${url.origin} of the registry ${this.registry} is plain HTTP, allowed over https only: the credentials would cross the network in clear; an admin adds http://${url.host} to the allow-list`
          : `the token service ${url.host} of the registry ${this.registry} is not in the allowed registry hosts: an admin adds it to the allow-list`,
      );
    if (challenge.params['service'] !== undefined)
      url.searchParams.set('service', challenge.params['service']);
    url.searchParams.set('scope', `repository:${repository}:pull`);
    const headers: Record<string, string> = creds
      ? { authorization: `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}` }
      : {};
    const res = await this.exchange(
      budget,
      url.origin,
      `${url.pathname}${url.search}`,
      headers,
      MAX_TOKEN_RESPONSE_BYTES,
      what,
      signal,
      'token service',
    );
    if (res.status === 401 || res.status === 403)
      throw new OciError(
        res.status === 401 ? OciReason.Unauthorized : OciReason.Forbidden,
        `the token service of ${this.registry} refused ${creds ? 'the credentials' : 'an anonymous token'} for ${what} (${res.status}): ${creds ? 'check the registry credentials and their pull permission' : 'give registry credentials'}`,
        { status: res.status, secrets: this.secrets },
      );
    if (res.status !== 200)
      throw new OciError(
        OciReason.RegistryError,
        `the token service of ${this.registry} answered ${res.status} for ${what}`,
        { status: res.status },
      );
    let token: string | undefined;
    let seconds = DEFAULT_TOKEN_SECONDS;
    try {
      const t = TokenResponse.parse(JSON.parse(res.body.toString('utf8')));
      token = t.token ?? t.access_token;
      seconds = t.expires_in ?? DEFAULT_TOKEN_SECONDS;
    } catch {
      token = undefined;
    }
    if (!token)
      throw new OciError(
        OciReason.RegistryError,
        `the token service of ${this.registry} sent no token for ${what}`,
      );
    if (token.length > MAX_TOKEN_CHARS)
      throw new OciError(
        OciReason.TokenTooLarge,
        `the token service of ${this.registry} sent a token of ${token.length} characters for ${what}, above the ${MAX_TOKEN_CHARS} a request header (and an agent) takes: the token service is misconfigured, or not a registry's`,
      );
    return { token, seconds };
  }

  private failure(res: Answer, what: string, object: string, authorized: boolean): OciError {
    const code = registryErrorCode(res.body);
    const detail = code ? `, ${code}` : '';
    const status = res.status;
    const scope = parseChallenges(header(res.headers, 'www-authenticate') ?? '').find(
      (c) => c.params['error'] === 'insufficient_scope',
    );
    if (status === 401 && scope && authorized)
      return new OciError(
        OciReason.Unauthorized,
        `the registry ${this.registry} refused the credentials of ${what} (401, insufficient_scope): they lack pull permission on the repository`,
        { status },
      );
    if (status === 401)
      return new OciError(
        OciReason.Unauthorized,
        `the registry ${this.registry} refused ${authorized ? 'the credentials' : 'an anonymous pull'} of ${what} (401${detail}): ${authorized ? 'check the registry credentials' : 'give registry credentials'}`,
        { status },
      );
    if (status === 403)
      return new OciError(
        OciReason.Forbidden,
        `the registry ${this.registry} forbids pulling ${what} (403${detail}): the credentials lack pull permission on the repository`,
        { status },
      );
    if (status === 404)
      return new OciError(
        OciReason.NotFound,
        `the registry ${this.registry} has no ${object} ${what} (404${detail}): check the repository and the tag or digest`,
        { status },
      );
    return new OciError(
      OciReason.RegistryError,
      `the registry ${this.registry} answered ${status}${detail} for ${what}`,
      { status },
    );
  }

  /**
   * One GET, read through the resolution's budget: the body within `maxBytes` (and what is left of the total), an
   * error answer's first bytes only, the exchange within its own time-out and the resolution's deadline.
   */
  private async exchange(
    budget: SourceBudget<OciError>,
    origin: string,
    path: string,
    headers: Record<string, string>,
    maxBytes: number,
    what: string,
    signal: AbortSignal | undefined,
    answering: 'registry' | 'token service' = 'registry',
  ): Promise<Answer> {
    budget.answer();
    const req = budget.request(this.opts.timeoutMs ?? DEFAULT_REGISTRY_TIMEOUT_MS);
    const s = signal ? AbortSignal.any([signal, req.signal]) : req.signal;
    try {
      const res = await this.opts.dispatcher.request({
        origin,
        path,
        method: 'GET',
        headers: { 'user-agent': USER_AGENT, ...headers },
        signal: s,
        headersTimeout: req.ms,
        bodyTimeout: req.ms,
      });
      const body = await budget.read(res.body, {
        maxBytes,
        error: res.statusCode < 200 || res.statusCode > 299,
        what: `the ${answering} answer for ${what}`,
      });
      return { status: res.statusCode, headers: res.headers, body };
    } catch (e) {
      if (e instanceof OciError) throw e;
      if (signal?.aborted) throw signal.reason ?? e;
      if (budget.signal.aborted) throw budget.signal.reason as Error;
      const why = req.timedOut()
        ? 'no answer in time'
        : ((e as { code?: string }).code ?? (e as Error).message);
      throw new OciError(
        OciReason.RegistryError,
        `cannot reach ${new URL(origin).host} for ${what}: ${why}`,
        {
          secrets: this.secrets,
        },
      );
    } finally {
      req.done();
    }
  }
}

/**
 * The error codes of the distribution spec (and Docker Hub's TOOMANYREQUESTS): the only words of a registry's error
 * body a message repeats. A registry may be any host a tenant names (anonymous pulls), so its text is never quoted:
 * that would be a read channel into whatever the operator can reach, cloud metadata included.
 */
export const REGISTRY_ERROR_CODES: ReadonlySet<string> = new Set([
  'BLOB_UNKNOWN',
  'BLOB_UPLOAD_INVALID',
  'BLOB_UPLOAD_UNKNOWN',
  'DIGEST_INVALID',
  'MANIFEST_BLOB_UNKNOWN',
  'MANIFEST_INVALID',
  'MANIFEST_UNKNOWN',
  'MANIFEST_UNVERIFIED',
  'NAME_INVALID',
  'NAME_UNKNOWN',
  'SIZE_INVALID',
  'TAG_INVALID',
  'UNAUTHORIZED',
  'DENIED',
  'UNSUPPORTED',
  'TOOMANYREQUESTS',
]);

/** The first `errors[].code` of a distribution error body (MANIFEST_UNKNOWN, DENIED...), if it is a known one. */
function registryErrorCode(body: Buffer): string | undefined {
  try {
    const j = JSON.parse(body.toString('utf8')) as {
      errors?: { code?: unknown }[];
    };
    const code = j.errors?.[0]?.code;
    return typeof code === 'string' && REGISTRY_ERROR_CODES.has(code) ? code : undefined;
  } catch {
    return undefined;
  }
}
