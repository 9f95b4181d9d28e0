/**
 * Where the Hub is and who may receive a token: the endpoint (the public Hub, a mirror or an Enterprise Hub) and
 * the admin's allow-list of hosts a Hub token may be sent to (the rule syntax of src/policy/reach.ts: https only,
 * plain HTTP to a host listed as `http://host`). A token is
 * sent to the endpoint only when its host is allowed, whatever a spec or a command line names; the URLs of the
 * Hub's API and of its `resolve` route are built here, so every caller builds them alike.
 */
import { hostAllowed, parseHostRules, urlReach, type HostRule } from '../policy/reach.ts';

export const DEFAULT_HUB_ENDPOINT = 'https://huggingface.co';
/** The default allow-list of the token: the public Hub only. */
export const DEFAULT_HUB_TOKEN_HOSTS = 'huggingface.co';

/**
 * The default allow-list of an LFS file's redirect: the public Hub's own CDNs, where huggingface.co's `resolve`
 * sends an LFS file's bytes: the LFS buckets' CloudFront (`cdn-lfs.hf.co`, the regional `cdn-lfs-us-1.hf.co`,
 * `cdn-lfs-eu-1.hf.co`, and the older `cdn-lfs*.huggingface.co` names) and the Xet storage bridge
 * (`cas-bridge.xethub.hf.co`, and its regional `*.cdn.hf.co` names such as `us.aws.cdn.hf.co`).
 */
export const DEFAULT_HUB_REDIRECT_HOSTS = [
  'cdn-lfs.hf.co',
  'cdn-lfs-*.hf.co',
  'cdn-lfs.huggingface.co',
  'cdn-lfs-*.huggingface.co',
  'cas-bridge.xethub.hf.co',
  '*.cdn.hf.co',
].join(',');

export interface HubEndpoint {
  /** `https://host[:port]`, no trailing `/`. */
  url: string;
  /** Hosts a token may go to. */
  tokenHosts: readonly HostRule[];
}

/** Why `url` cannot be a Hub endpoint, or undefined. */
export function endpointProblem(url: string): string | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return 'is not a URL';
  }
  if (u.protocol !== 'https:' && u.protocol !== 'http:') return 'must be an http(s) URL';
  if (u.username || u.password) return 'must not hold credentials';
  if (u.search || u.hash) return 'must not have a query or fragment';
  if (u.pathname !== '/' && u.pathname !== '')
    return "must be the Hub's root URL (no path), e.g. https://huggingface.co";
  return undefined;
}

/** The endpoint of `url` (default the public Hub) under the token allow-list `tokenHosts` (comma-separated). */
export function hubEndpoint(url = DEFAULT_HUB_ENDPOINT, tokenHosts = DEFAULT_HUB_TOKEN_HOSTS): HubEndpoint {
  const problem = endpointProblem(url);
  if (problem) throw new Error(`the Hub endpoint "${url}" ${problem}`);
  return { url: new URL(url).origin, tokenHosts: parseHostRules(tokenHosts) };
}

/** Whether a token may be sent to the endpoint (its scheme, host and port: https unless listed as http://host). */
export function tokenAllowed(endpoint: HubEndpoint): boolean {
  return hostAllowed(endpoint.url, endpoint.tokenHosts);
}

/** Why the token may not go to the endpoint, with the fix (no flag named: the operator and the CLI name theirs). */
export function tokenRefusal(endpoint: HubEndpoint): string {
  const host = new URL(endpoint.url).host;
  const list = endpoint.tokenHosts.map((r) => r.text).join(', ') || 'none';
  if (urlReach(endpoint.url, endpoint.tokenHosts) === 'plain')
    return `the endpoint ${endpoint.url} is plain HTTP and the allowed Hub hosts (${list}) allow ${host} over https only: the token would cross the network in clear; use https://${host}, or ask an admin to allow http://${host}`;
  return `the token may only go to the allowed Hub hosts (${list}), not to ${host}: use an allowed endpoint, drop the token for a public repository, or ask an admin to allow the host`;
}

/** A revision or path as one URL segment each (huggingface_hub quotes the revision with `safe=''`). */
const segment = (s: string) => encodeURIComponent(s);
const filePath = (p: string) => p.split('/').map(segment).join('/');

/** `/api/models/{repo}/revision/{revision}`. */
export function repoInfoPath(repo: string, revision: string): string {
  return `/api/models/${repo}/revision/${segment(revision)}`;
}

/** `/api/models/{repo}/tree/{revision}?recursive=true`. */
export function treePath(repo: string, revision: string): string {
  return `/api/models/${repo}/tree/${segment(revision)}?recursive=true`;
}

/** The `resolve` URL of a file at a revision: what huggingface_hub downloads and what a P2P task is keyed on. */
export function resolveURL(endpoint: HubEndpoint, repo: string, revision: string, path: string): string {
  return `${endpoint.url}/${repo}/resolve/${segment(revision)}/${filePath(path)}`;
}
