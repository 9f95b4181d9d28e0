/**
 * The Hub API as huggingface_hub 2.4.0 uses it for a download: `model_info` at a revision for the commit sha
 * (`GET /api/models/{repo}/revision/{revision}`), then `list_repo_tree(recursive=True)` at that sha, page after
 * page by the `Link` header. Each exchange is bounded (time, body bytes); the token goes only to an endpoint the
 * admin allows (endpoint.ts) and never to a page link on another origin.
 */
import type { Dispatcher } from 'undici';
import { parseBody } from '../http/body.ts';
import { INVALID_RESPONSE } from '../http/classify.ts';
import { headerValue, sendRequest, type HttpResponse } from '../http/request.ts';
import { USER_AGENT } from '../version.ts';
import { answerError, nextLink, RepoInfoSchema, TreePageSchema, type TreeEntry } from './answers.ts';
import { repoInfoPath, resolveURL, tokenAllowed, treePath, type HubEndpoint } from './endpoint.ts';
import type { SourceBudget } from '../sources/budget.ts';
import { HubError, HubReason, hubBudget, hubError } from './errors.ts';

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
   * The resolution's budget (src/sources/budget.ts): every answer is read through it. A client serves one
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
      throw hubError(
        HubReason.TokenNotAllowed,
        'use the token',
        `the token may only go to the allowed Hub hosts (${opts.endpoint.tokenHosts.map((r) => r.text).join(', ') || 'none'}), not to ${new URL(opts.endpoint.url).host}: use an allowed endpoint, drop the token for a public repository, or ask an admin to allow the host`,
        { kind: 'auth', field: 'endpoint' },
      );
    this.token = opts.token;
  }

  /** The headers the token may join; the request headers of a download through the peer proxy too. */
  authHeaders(): Record<string, string> {
    return this.token === undefined ? {} : { authorization: `Bearer ${this.token}` };
  }

  private async get(
    path: string,
    operation: string,
    ctx: { repo: string; revision: string },
    signal?: AbortSignal,
    method: 'GET' | 'HEAD' = 'GET',
  ) {
    const secrets = this.token === undefined ? [] : [this.token];
    const budget = this.budget;
    budget.answer();
    const res = await sendRequest(
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
    // A redirect is an answer: an LFS file's `resolve` is a 302 to its CDN URL, not followed here.
    if (res.status < 200 || res.status > 399)
      throw answerError(res, { ...ctx, operation, withToken: this.token !== undefined });
    return res;
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
    const operation = `resolve ${repo}@${revision}`;
    const res = await this.get(repoInfoPath(repo, revision), operation, { repo, revision }, signal);
    return this.parsed(res, RepoInfoSchema, operation).sha;
  }

  /**
   * Where a file's bytes are: a `HEAD` of its `resolve` URL at `sha`, as huggingface_hub asks for a file's
   * metadata, not followed. An LFS file answers with a redirect: its absolute `Location` (a CDN URL signed for a
   * while); a git file answers itself: undefined. A gated repository lists its files to anyone and refuses only
   * their bytes, so this is also where a missing or refused token shows, before any download starts.
   */
  async fileLocation(
    repo: string,
    sha: string,
    path: string,
    signal?: AbortSignal,
  ): Promise<string | undefined> {
    const url = new URL(resolveURL(this.endpoint, repo, sha, path));
    const operation = `locate ${path} of ${repo}@${sha}`;
    const res = await this.get(url.pathname, operation, { repo, revision: sha }, signal, 'HEAD');
    if (res.status < 300) return undefined;
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

export function isHubError(e: unknown): e is HubError {
  return e instanceof HubError;
}
