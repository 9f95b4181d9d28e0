/**
 * How much work one listing may cost, and the error it ends with. A prefix names an endpoint the spec chose, so the
 * server answering may be anyone's: every listing is bounded in time (each request, the whole listing) and in what
 * it keeps (one page's body, the pages, the keys and their bytes), and a bound that is hit is a {@link ListError}
 * that says which and what to change, never a process that runs out of memory or a worker held forever.
 *
 * The defaults keep one listing's memory to a few MiB and its time to minutes: the operator runs with a 160 MiB heap
 * and up to one listing per worker.
 */

/** Listing a prefix with more objects than this fails: the model directory caps (maxFiles) apply after include/exclude. */
export const DEFAULT_MAX_LISTED = 100_000;
/** Key text kept at most (UTF-16 code units): 100,000 keys of 80 characters. */
export const DEFAULT_MAX_KEY_BYTES = 8 * 1024 * 1024;
/**
 * One page's body at most. A page asks for 1,000 objects; S3's keys are at most 1,024 bytes, so a real page stays
 * under 1.5 MiB, and Azure's and GCS's metadata per object under 2 KiB.
 */
export const DEFAULT_MAX_PAGE_BYTES = 4 * 1024 * 1024;
/** Pages at most: a server that answers "truncated" forever with empty pages is stopped by this (and the time-out). */
export const DEFAULT_MAX_PAGES = 1_000;
/** One request (connect, headers and body) at most, ms. */
export const DEFAULT_LIST_REQUEST_TIMEOUT_MS = 30_000;
/** The whole listing at most, ms. */
export const DEFAULT_LIST_TIMEOUT_MS = 120_000;
export { MAX_ERROR_BODY_BYTES } from '../http/body.ts';

/** The bounds of one listing; every field has its default. */
export interface ListBounds {
  maxListed: number;
  maxKeyBytes: number;
  maxPageBytes: number;
  maxPages: number;
  requestTimeoutMs: number;
  timeoutMs: number;
}

export const DEFAULT_LIST_BOUNDS: ListBounds = {
  maxListed: DEFAULT_MAX_LISTED,
  maxKeyBytes: DEFAULT_MAX_KEY_BYTES,
  maxPageBytes: DEFAULT_MAX_PAGE_BYTES,
  maxPages: DEFAULT_MAX_PAGES,
  requestTimeoutMs: DEFAULT_LIST_REQUEST_TIMEOUT_MS,
  timeoutMs: DEFAULT_LIST_TIMEOUT_MS,
};

/**
 * Why a listing failed: `tooLarge`, a size bound (the same answer will pass it again: only another prefix or
 * endpoint helps); `timedOut`, a time bound (the server may answer later, or never); `failed`, anything else
 * (credentials, bucket, network, the server's error).
 */
export type ListFailure = 'failed' | 'tooLarge' | 'timedOut';

/** A listing that failed; the message names the location and prefix and never holds a secret. */
export class ListError extends Error {
  readonly failure: ListFailure;
  constructor(message: string, options?: { cause?: unknown; failure?: ListFailure }) {
    super(message, options);
    this.name = 'ListError';
    this.failure = options?.failure ?? 'failed';
  }
}

/** A bound hit during a listing, before the location is known to the message; list.ts words it. */
export { BoundHit as ListBoundHit } from '../http/budget.ts';
