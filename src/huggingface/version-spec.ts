/**
 * A listed repository as one version the agent (or `peerload fetch`) places, one P2P task per file:
 *   - a file the Hub serves itself (git) at its `resolve` URL at the commit sha, with the spec's `hub` header set
 *     (the token, once in the spec however many files name it);
 *   - an LFS file at its CDN URL (locations.ts) with every query parameter of the CDN URLs left out of the task id
 *     (the signature changes with every redirect; the path holds the object's sha256), and no token: the peer
 *     daemon would send it to the CDN and write it into its log (docs/dragonfly.md). A redirect back to the
 *     Hub's own host keeps the token, as huggingface_hub does.
 * LFS files carry their sha256, checked before the directory is placed. A source read with a token gives every
 * file's task the token's tag (storage/credential-tag.ts): a gated or private file is then no task a pod without
 * the token can name through a node's proxy, whether it sits at the Hub or at its CDN.
 */
import type { ModelVersionSpec } from '../place/spec.ts';
import { resolveURL, type HubEndpoint } from './endpoint.ts';
import type { HubListing } from './files.ts';

export interface HubVersionOptions {
  /** The directory under the model root; default the repository id (`org/name`). */
  directory?: string | undefined;
  /** The version's directory name; default the commit sha. */
  version?: string | undefined;
  /** The token's header (HubClient.authHeaders): sent only with requests to the Hub's host. */
  headers?: Record<string, string> | undefined;
  /** The token's task tag (storage/credential-tag.ts hubTokenTag): every file's task carries it. */
  tag?: string | undefined;
  maxBytes?: number | undefined;
  deadlineSeconds?: number | undefined;
}

/** The spec's header set of the Hub's token (place/spec.ts headerSets). */
export const HUB_HEADER_SET = 'hub';

/** Query parameter names a spec's filter may hold (the agent's spec bound). */
const MAX_FILTER = 64;

export function hubVersionSpec(
  endpoint: HubEndpoint,
  listing: HubListing,
  locations: ReadonlyMap<string, string>,
  opts: HubVersionOptions = {},
): ModelVersionSpec {
  const token = opts.headers && Object.keys(opts.headers).length > 0 ? opts.headers : undefined;
  const hubHost = new URL(endpoint.url).host;
  const filter = new Set<string>();
  const files = listing.files.map((f) => {
    const location = locations.get(f.path);
    // A renamed repository's files at its current name: the node daemons fetch them without a redirect.
    const url = location ?? resolveURL(endpoint, listing.movedTo ?? listing.repo, listing.sha, f.path);
    const u = new URL(url);
    const atHub = u.host === hubHost;
    if (!atHub) for (const k of u.searchParams.keys()) filter.add(k);
    return {
      path: f.path,
      url,
      size: f.size,
      ...(atHub && token ? { headerSet: HUB_HEADER_SET } : {}),
      ...(f.sha256 !== undefined ? { sha256: f.sha256 } : {}),
    };
  });
  if (filter.size > MAX_FILTER)
    throw new Error(
      `the CDN URLs of ${listing.repo} hold ${filter.size} query parameters, above ${MAX_FILTER}`,
    );
  return {
    version: opts.version ?? listing.sha,
    directory: opts.directory ?? listing.repo,
    files,
    ...(token && files.some((f) => f.headerSet !== undefined)
      ? { headerSets: { [HUB_HEADER_SET]: token } }
      : {}),
    ...(filter.size > 0 ? { filter: [...filter].sort() } : {}),
    ...(opts.tag !== undefined ? { tag: opts.tag } : {}),
    ...(opts.maxBytes !== undefined ? { maxBytes: opts.maxBytes } : {}),
    ...(opts.deadlineSeconds !== undefined ? { deadlineSeconds: opts.deadlineSeconds } : {}),
  };
}
