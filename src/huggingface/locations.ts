/**
 * Each LFS file's CDN URL, asked of the Hub right before the download (the signature lasts about an hour): the
 * downloader then fetches the CDN URL through the peer proxy with every query parameter left out of the task id.
 * The CDN's path names the object by its sha256, so the id is the object's whoever downloads it and whenever,
 * and the Hub's token never travels with it: the token goes to the Hub here, directly, and the peer daemon (which
 * logs a proxied request's headers) never sees it for an LFS file. The HEADs are the resolution's answers like the
 * listing's: read through the client's budget, within its one deadline (src/sources/budget.ts).
 */
import type { HubClient } from './client.ts';
import type { HubListing } from './files.ts';

/** `HEAD`s of the Hub at once. */
export const LOCATE_CONCURRENCY = 8;

/** Path -> absolute URL of the LFS files' redirects (files the Hub answers itself are absent). */
export async function lfsLocations(
  client: HubClient,
  listing: HubListing,
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
      const location = await client.fileLocation(listing.repo, listing.sha, f.path, signal);
      if (location !== undefined) found.set(f.path, location);
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
