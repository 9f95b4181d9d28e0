/**
 * The Hub's redirects within its own origin, followed as huggingface_hub follows them: a renamed repository's API
 * and `resolve` calls answer 307 with the new name's path (a relative `Location`), and huggingface_hub asks again
 * there (its HTTP client follows API redirects; its `resolve` HEAD follows relative ones only, so an LFS file's
 * redirect to the CDN stays an answer). Here a target is followed only on the endpoint's own origin (scheme, host and
 * port: where the token may go), for a `resolve` HEAD only when relative, at most {@link MAX_HUB_REDIRECTS} times;
 * any other redirect is the caller's answer.
 * Pure but for `send`.
 */
import { headerValue, type HttpResponse } from '../http/request.ts';
import { repoProblem } from '../api/hub-reference.ts';

/**
 * Hops followed per call. A rename is one (the Hub points an old name straight at the current one); an owner
 * change and a rename of the same repository, or a mirror that adds a trailing-slash redirect, two or three. Each hop
 * is another exchange carrying the token, so a Hub that redirects in a loop is stopped after a few, not after
 * huggingface_hub's 20 (its API client) or never (its `resolve` HEAD loop).
 */
export const MAX_HUB_REDIRECTS = 5;

const REDIRECT_STATUSES: ReadonlySet<number> = new Set([301, 302, 303, 307, 308]);

/** The answer a call ended with and the URL that gave it (another than the first after a followed redirect). */
export interface FollowedAnswer {
  res: HttpResponse;
  url: URL;
  hops: number;
}

/**
 * Where a redirect answer points when that is on `from`'s own origin; undefined for any other answer. With
 * `relativeOnly` (a `resolve` HEAD, as huggingface_hub's) only a Location without a scheme or host counts: an
 * absolute one, even to the same origin, is where a file's bytes are (a mirror's own LFS store), an answer.
 */
export function sameOriginTarget(res: HttpResponse, from: URL, relativeOnly = false): URL | undefined {
  if (!REDIRECT_STATUSES.has(res.status)) return undefined;
  const location = headerValue(res.headers.location);
  if (location === undefined) return undefined;
  if (relativeOnly && /^([a-z][a-z0-9+.-]*:|\/\/)/i.test(location.trim())) return undefined;
  let target: URL;
  try {
    target = new URL(location, from);
  } catch {
    return undefined;
  }
  target.hash = '';
  return target.origin === from.origin ? target : undefined;
}

/**
 * Sends `first`, then each same-origin redirect target (relative ones only with `relativeOnly`), until an answer
 * that is not one; throws `tooMany()` when more than `maxHops` redirects came in a row.
 */
export async function followSameOrigin(
  first: URL,
  send: (url: URL) => Promise<HttpResponse>,
  tooMany: () => Error,
  opts: { relativeOnly?: boolean; maxHops?: number } = {},
): Promise<FollowedAnswer> {
  const maxHops = opts.maxHops ?? MAX_HUB_REDIRECTS;
  let url = first;
  for (let hops = 0; ; hops++) {
    const res = await send(url);
    const next = sameOriginTarget(res, url, opts.relativeOnly);
    if (next === undefined) return { res, url, hops };
    if (hops >= maxHops) throw tooMany();
    url = next;
  }
}

/**
 * The repository a followed API call ended at (`/api/models/{namespace}/{name}/...`), when it is a valid id other
 * than `asked`: the name a renamed repository has now. Undefined otherwise.
 */
export function movedRepository(url: URL, asked: string): string | undefined {
  const parts = url.pathname.split('/');
  if (parts[1] !== 'api' || parts[2] !== 'models' || parts.length < 5) return undefined;
  let repo: string;
  try {
    repo = `${decodeURIComponent(parts[3]!)}/${decodeURIComponent(parts[4]!)}`;
  } catch {
    return undefined;
  }
  return repo !== asked && repoProblem(repo) === undefined ? repo : undefined;
}
