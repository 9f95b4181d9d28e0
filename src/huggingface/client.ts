/**
 * The Hub API as huggingface_hub 2.4.0 uses it for a download: `model_info` at a revision for the commit sha
 * (`GET /api/models/{repo}/revision/{revision}`), then `list_repo_tree(recursive=True)` at that sha, page after
 * page by the `Link` header. Each exchange is bounded (time, body bytes); the token goes only to an endpoint the
 * admin allows (endpoint.ts) and never to a page link or a redirect on another origin. Redirects on the endpoint's
 * origin are followed (a renamed repository, redirects.ts).
 */
import type { Dispatcher } from 'undici';
import { parseBody } from '../http/body.ts';
import { INVALID_RESPONSE } from '../http/classify.ts';
import { headerValue, sendRequest, type HttpResponse } from '../http/request.ts';
import { USER_AGENT } from '../version.ts';
import { answerError, nextLink, RepoInfoSchema, TreePageSchema, type TreeEntry } from './answers.ts';
import {
  repoInfoPath,
  resolveURL,
  tokenAllowed,
  tokenRefusal,
  treePath,
  type HubEndpoint,
} from './endpoint.ts';
import type { SourceBudget } from '../http/budget.ts';
import { HubError, HubReason, hubBudget, hubError } from './errors.ts';
import { followSameOrigin, MAX_HUB_REDIRECTS, movedRepository } from './redirects.ts';

export interface HubClientOptions {
  endpoint: HubEndpoint;
  dispatcher: Dispatcher;
  /** The user access token, if any. */
  token?: string | undefined;
  /** One exchange, ms. */
  timeoutMs?: number | undefined;
  /** Largest answer body read (a tree page of 1,000 entries is about 300 KB); default the budget's. */
  maxResponseBytes?: number | undefined;
  /**
   * The resolution's budget (src/http/budget.ts): every answer is read through it. A client serves one
   * resolution; without one it has a budget of the default bounds of its own.
   */
  budget?: SourceBudget<HubError> | undefined;
}

export const DEFAULT_HUB_TIMEOUT_MS = 30_000;

export class HubClient {
  readonly endpoint: HubEndpoint;
  private readonly dispatcher: Dispatcher;
  private readonly token: string | undefined;
  private readonly timeoutMs: number;
  private readonly maxResponseBytes: number | undefined;
  readonly budget: SourceBudget<HubError>;

  /** Throws {@link HubError} `TokenNotAllowed` when a token is given for an endpoint outside the allow-list. */
  constructor(opts: HubClientOptions) {
    this.endpoint = opts.endpoint;
    this.dispatcher = opts.dispatcher;
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_HUB_TIMEOUT_MS;
    this.maxResponseBytes = opts.maxResponseBytes;
    this.budget = opts.budget ?? hubBudget(opts.endpoint.url, 'the repository');
    if (opts.token !== undefined && !tokenAllowed(opts.endpoint))
      throw hubError(HubReason.TokenNotAllowed, 'send the token', tokenRefusal(opts.endpoint), {
        kind: 'auth',
        field: 'endpoint',
        // Nothing was sent: not a network error.
        code: 'NOT_SENT',
      });
    this.token = opts.token;
  }

  /** The headers the token may join; the request headers of a download through the peer proxy too. */
  authHeaders(): Record<string, string> {
    return this.token === undefined ? {} : { authorization: `Bearer ${this.token}` };
  }

  /**
   * One call, its redirects on the endpoint's origin followed (a renamed repository: redirects.ts; a `resolve` HEAD's
   * relative ones only). Another redirect is an answer: an LFS file's `resolve` HEAD is a 302 to its CDN URL; an API
   * call's is refused.
   */
  private async get(
    path: string,
    operation: string,
    ctx: { repo: string; revision: string },
    signal?: AbortSignal,
    method: 'GET' | 'HEAD' = 'GET',
  ): Promise<HttpResponse & { url: URL }> {
    const secrets = this.token === undefined ? [] : [this.token];
    const { res, url } = await followSameOrigin(
      new URL(path, this.endpoint.url),
      (u) => this.send(u.pathname + u.search, method, operation, secrets, signal),
      () =>
        hubError(
          HubReason.BadAnswer,
          operation,
          `more than ${MAX_HUB_REDIRECTS} redirects in a row within ${this.endpoint.url}: a loop, not a moved repository`,
          { code: INVALID_RESPONSE },
        ),
      // A resolve HEAD follows relative redirects only, as huggingface_hub's: an absolute one is the file's bytes.
      { relativeOnly: method === 'HEAD' },
    );
    if (res.status < 200 || res.status > 399)
      throw answerError(res, { ...ctx, operation, withToken: this.token !== undefined });
    if (res.status > 299 && method === 'GET')
      throw hubError(
        HubReason.BadAnswer,
        operation,
        `a redirect off the endpoint (to ${originOf(headerValue(res.headers.location), url)}), not followed: the token stays with ${this.endpoint.url}`,
        { status: res.status, code: INVALID_RESPONSE },
      );
    return { ...res, url };
  }

  private send(
    path: string,
    method: 'GET' | 'HEAD',
    operation: string,
    secrets: string[],
    signal?: AbortSignal,
  ) {
    // Each hop is an answer of the resolution's budget: a redirect loop spends it too.
    const budget = this.budget;
    budget.answer();
    return sendRequest(
      {
        dispatcher: this.dispatcher,
        origin: this.endpoint.url,
        path,
        method,
        headers: { 'user-agent': USER_AGENT, accept: 'application/json', ...this.authHeaders() },
        timeoutMs: this.timeoutMs,
        signal: signal ? AbortSignal.any([signal, budget.signal]) : budget.signal,
        operation,
        secrets,
        read: (body, ok) => budget.text(body, { maxBytes: this.maxResponseBytes, error: !ok }),
      },
      (init) => new HubError(HubReason.Unavailable, init),
    );
  }

  private parsed<S extends Parameters<typeof parseBody>[1]>(res: HttpResponse, schema: S, operation: string) {
    const body = parseBody(res.text, schema);
    if (!body.ok)
      throw new HubError(HubReason.BadAnswer, {
        kind: 'terminal',
        status: res.status,
        operation,
        detail: `${body.problem}: is the endpoint a Hugging Face Hub?`,
        code: INVALID_RESPONSE,
      });
    return body.data;
  }

  /** The commit sha `revision` (a branch, tag or sha) names now. */
  async resolveRevision(repo: string, revision: string, signal?: AbortSignal): Promise<string> {
    return (await this.revisionOf(repo, revision, signal)).sha;
  }

  /**
   * The commit sha `revision` names now, and the repository's name now: `repo`, or the name the Hub redirected a
   * renamed repository to (the listing and the files' URLs use it, so no later call is redirected again).
   */
  async revisionOf(
    repo: string,
    revision: string,
    signal?: AbortSignal,
  ): Promise<{ sha: string; repo: string }> {
    const operation = `resolve ${repo}@${revision}`;
    const res = await this.get(repoInfoPath(repo, revision), operation, { repo, revision }, signal);
    const sha = this.parsed(res, RepoInfoSchema, operation).sha;
    return { sha, repo: movedRepository(res.url, repo) ?? repo };
  }

  /**
   * Where a file's bytes are: a `HEAD` of its `resolve` URL at `sha`, as huggingface_hub asks for a file's
   * metadata, its relative redirects followed (a renamed repository). An LFS file answers with a redirect to an
   * absolute `Location` (a CDN URL signed for a while); a git file answers itself: undefined, or the URL that
   * answered when a redirect moved it. A gated repository lists its files to anyone and refuses only
   * their bytes, so this is also where a missing or refused token shows, before any download starts.
   */
  async fileLocation(
    repo: string,
    sha: string,
    path: string,
    signal?: AbortSignal,
  ): Promise<string | undefined> {
    const asked = new URL(resolveURL(this.endpoint, repo, sha, path));
    const operation = `locate ${path} of ${repo}@${sha}`;
    const res = await this.get(asked.pathname, operation, { repo, revision: sha }, signal, 'HEAD');
    const url = res.url;
    if (res.status < 300) return url.href === asked.href ? undefined : url.href;
    const location = headerValue(res.headers.location);
    let target: URL | undefined;
    try {
      target = location ? new URL(location, url) : undefined;
    } catch {
      target = undefined;
    }
    if (!target || (target.protocol !== 'https:' && target.protocol !== 'http:'))
      throw hubError(HubReason.BadAnswer, operation, `a ${res.status} without a usable http(s) Location`);
    return target.toString();
  }

  /**
   * Every entry of the tree at `sha`, recursively, page by page; `onPage` sees each page's count so far (a caller
   * stops a listing that grows past its bound by throwing).
   */
  async listTree(
    repo: string,
    sha: string,
    opts: { signal?: AbortSignal | undefined; onPage?: (entries: number) => void } = {},
  ): Promise<TreeEntry[]> {
    const operation = `list ${repo}@${sha}`;
    const entries: TreeEntry[] = [];
    let path: string | undefined = treePath(repo, sha);
    while (path !== undefined) {
      const res = await this.get(path, operation, { repo, revision: sha }, opts.signal);
      for (const e of this.parsed(res, TreePageSchema, operation)) {
        // Kept across pages: each entry's text and all of it are the budget's to bound.
        this.budget.entry(e.path, e.type === 'file' ? e.oid : '');
        entries.push(e);
      }
      opts.onPage?.(entries.length);
      path = this.pagePath(headerValue(res.headers.link), operation);
    }
    return entries;
  }

  /** The next page's path, refused when the link leaves the endpoint (the token would follow it). */
  private pagePath(link: string | undefined, operation: string): string | undefined {
    const next = nextLink(link);
    if (next === undefined) return undefined;
    let u: URL;
    try {
      u = new URL(next, this.endpoint.url);
    } catch {
      u = new URL('invalid:');
    }
    if (u.origin !== this.endpoint.url)
      throw hubError(
        HubReason.BadAnswer,
        operation,
        `the next page's link leaves the endpoint (${u.origin}); the listing stops there`,
      );
    return u.pathname + u.search;
  }
}

/** The origin a Location names, for a message (never its path or query: a signed URL's signature stays out). */
function originOf(location: string | undefined, base: URL): string {
  try {
    return new URL(location ?? '', base).origin;
  } catch {
    return 'an unusable Location';
  }
}

export function isHubError(e: unknown): e is HubError {
  return e instanceof HubError;
}
