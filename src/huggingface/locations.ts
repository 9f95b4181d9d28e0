/**
 * Each LFS file's CDN URL, asked of the Hub right before the download (the signature lasts about an hour): the
 * downloader then fetches the CDN URL through the peer proxy with every query parameter left out of the task id.
 * The CDN's path names the object by its sha256, so the id is the object's whoever downloads it and whenever,
 * and the Hub's token never travels with it: the token goes to the Hub here, directly, and the peer daemon (which
 * logs a proxied request's headers) never sees it for an LFS file. The HEADs are the resolution's answers like the
 * listing's: read through the client's budget, within its one deadline (src/http/budget.ts).
 *
 * Whoever runs the Hub chooses the redirect, and the agents fetch it through the node daemons (from inside the
 * cluster, with no hash check for what is not an LFS file's content): so every target is checked against the
 * admin's redirect allow-list before any agent or daemon is told about it. A redirect to the Hub's own origin
 * reaches nothing the endpoint does not; any other host must be listed (by default the public Hub's CDNs), so an
 * address inside the cluster, a link-local or loopback one, or another tenant's bucket is refused unless an admin
 * lists it. Hosts and schemes are compared as written, like every allow-list (src/policy/reach.ts): a bare entry
 * allows https only, `http://host` plain HTTP too, since a redirect's signed URL reads the file for whoever holds it.
 */
import { urlReach, type HostRule } from '../policy/reach.ts';
import type { HubClient } from './client.ts';
import { HubError, HubReason } from './errors.ts';
import type { HubListing } from './files.ts';

/** Where an LFS file's redirect may lead: the admin's hosts, and the flag that sets them (for messages). */
export interface RedirectPolicy {
  hosts: readonly HostRule[];
  /** `--allowed-hub-redirect-hosts` (the operator) or `--redirect-hosts` (`peerload fetch hf://`). */
  flag: string;
}

/** Throws HubRedirectNotAllowed unless `location` is on the Hub's own origin or a listed host. */
function checkRedirect(
  client: HubClient,
  listing: HubListing,
  path: string,
  location: string,
  policy: RedirectPolicy,
): void {
  const target = new URL(location);
  const reach = urlReach(location, policy.hosts);
  if (target.origin === client.endpoint.url || reach === 'allowed') return;
  const listed = policy.hosts.length > 0 ? policy.hosts.map((r) => r.text).join(', ') : 'empty';
  const why =
    reach === 'plain'
      ? `which ${policy.flag} (${listed}) allows over https only (an admin adds http://${target.host} for plain HTTP)`
      : `which is not in ${policy.flag} (${listed})`;
  throw new HubError(
    HubReason.RedirectNotAllowed,
    {
      kind: 'terminal',
      status: 0,
      code: HubReason.RedirectNotAllowed,
      operation: `locate ${path} of ${listing.repo}@${listing.sha}`,
      detail:
        `the Hub redirects ${path} to ${target.protocol}//${target.host}, ${why}, ` +
        `so no agent or peer daemon is told to fetch it; if that host is the Hub's own CDN, ask an ` +
        `admin to add it to ${policy.flag}`,
    },
    'endpoint',
  );
}

/** `HEAD`s of the Hub at once. */
export const LOCATE_CONCURRENCY = 8;

/** Path -> absolute URL of the LFS files' redirects (files the Hub answers itself are absent). */
export async function lfsLocations(
  client: HubClient,
  listing: HubListing,
  redirects: RedirectPolicy,
  signal?: AbortSignal,
): Promise<Map<string, string>> {
  const lfs = listing.files.filter((f) => f.sha256 !== undefined);
  const found = new Map<string, string>();
  let next = 0;
  let failed = false;
  const worker = async () => {
    // A failed HEAD ends the phase: the other workers ask nothing more of a Hub that refused or broke a bound.
    while (next < lfs.length && !failed) {
      const f = lfs[next++]!;
      const location = await client.fileLocation(
        listing.movedTo ?? listing.repo,
        listing.sha,
        f.path,
        signal,
      );
      if (location === undefined) continue;
      checkRedirect(client, listing, f.path, location, redirects);
      found.set(f.path, location);
    }
  };
  const run = () =>
    worker().catch((e: unknown) => {
      failed = true;
      throw e;
    });
  await Promise.all(Array.from({ length: Math.min(LOCATE_CONCURRENCY, lfs.length) }, run));
  return found;
}
