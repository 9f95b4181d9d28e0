/**
 * A listed repository as one version the agent (or `peerload fetch`) places: every file's `resolve` URL at the
 * commit sha, so each file is one P2P task for as long as the commit stays, whoever downloads it, and a preheat
 * of the same URLs is the same tasks. The peer daemon follows the Hub's redirect of an LFS file to its signed CDN
 * URL itself (back-to-source follows redirects and drops `Authorization` on the way to another host), so the
 * signature never enters a task id and the CDN is read once per file. LFS files carry their sha256, checked
 * before the directory is placed.
 */
import type { ModelVersionSpec } from '../agent/spec.ts';
import { resolveURL, type HubEndpoint } from './endpoint.ts';
import type { HubListing } from './files.ts';

export interface HubVersionOptions {
  /** The directory under the model root; default the repository id (`org/name`). */
  directory?: string | undefined;
  /** The version's directory name; default the commit sha. */
  version?: string | undefined;
  /** The token's header (HubClient.authHeaders), sent by the daemon to the Hub only. */
  headers?: Record<string, string> | undefined;
  maxBytes?: number | undefined;
  deadlineSeconds?: number | undefined;
}

export function hubVersionSpec(
  endpoint: HubEndpoint,
  listing: HubListing,
  opts: HubVersionOptions = {},
): ModelVersionSpec {
  const headers = opts.headers && Object.keys(opts.headers).length > 0 ? opts.headers : undefined;
  return {
    version: opts.version ?? listing.sha,
    directory: opts.directory ?? listing.repo,
    files: listing.files.map((f) => ({
      path: f.path,
      url: resolveURL(endpoint, listing.repo, listing.sha, f.path),
      size: f.size,
      ...(f.sha256 !== undefined ? { sha256: f.sha256 } : {}),
    })),
    ...(headers ? { headers } : {}),
    ...(opts.maxBytes !== undefined ? { maxBytes: opts.maxBytes } : {}),
    ...(opts.deadlineSeconds !== undefined ? { deadlineSeconds: opts.deadlineSeconds } : {}),
  };
}
