/**
 * The Hub client's errors: an {@link HttpError} with a `reason` a condition or a CLI message can carry, and a
 * message that says what to change. The Hub's own words (`X-Error-Message`, the body) are never quoted: an endpoint
 * may be any host a tenant names, so only the status and a known `X-Error-Code` are (answers.ts); the token never
 * appears (it is one of the exchange's secrets, and `redact` knows every remembered one).
 */
import { HttpError, type HttpErrorInit, type HttpErrorKind } from '../http/errors.ts';
import {
  SourceBoundReason,
  SourceBudget,
  sourceBounds,
  type BoundHit,
  type SourceBounds,
} from '../http/budget.ts';

export const HubReason = {
  /** 401 without a token: a gated repository, or a private (or missing) one the Hub will not name. */
  TokenRequired: 'HubTokenRequired',
  /** 401 with a token: the Hub does not know the token. */
  TokenRejected: 'HubTokenRejected',
  /** A token was given for an endpoint the admin does not allow it to go to. */
  TokenNotAllowed: 'HubTokenNotAllowed',
  /** 403: the token's account is not granted the repository (a gated one not accepted) or the action. */
  Forbidden: 'HubForbidden',
  RepoNotFound: 'HubRepoNotFound',
  RevisionNotFound: 'HubRevisionNotFound',
  /** The revision holds no file, or none the selection keeps. */
  NoFiles: 'HubNoFiles',
  /** The selection breaks maxFiles / maxBytes, or the listing its own bound. */
  TooLarge: 'HubTooLarge',
  /** 429, 5xx, a network failure: the same request may work later. */
  Unavailable: 'HubUnavailable',
  /** An answer that is not the Hub's (not JSON, the wrong shape, a foreign page link). */
  BadAnswer: 'HubBadAnswer',
  /** An LFS file's redirect names a host outside the admin's redirect allow-list (locations.ts). */
  RedirectNotAllowed: 'HubRedirectNotAllowed',
  /** The resolution passed a bound of its budget in size (src/http/budget.ts): final for the generation. */
  SourceTooLarge: SourceBoundReason.TooLarge,
  /** The resolution did not complete within its deadline: tried again with backoff. */
  SourceTimeout: SourceBoundReason.Timeout,
} as const;
export type HubReason = (typeof HubReason)[keyof typeof HubReason];

export class HubError extends HttpError {
  readonly reason: HubReason;
  /** The spec field to change, when one is to blame (`revision`, `include`, `maxFiles`, `token`...). */
  readonly field: string | undefined;
  constructor(reason: HubReason, init: HttpErrorInit, field?: string) {
    super('Hugging Face Hub', init);
    this.name = 'HubError';
    this.reason = reason;
    this.field = field;
  }
}

/** A failure decided here rather than answered by the Hub. */
export function hubError(
  reason: HubReason,
  operation: string,
  detail: string,
  opts: { kind?: HttpErrorKind; field?: string; status?: number; cause?: unknown; code?: string } = {},
): HubError {
  return new HubError(
    reason,
    {
      kind: opts.kind ?? 'terminal',
      status: opts.status ?? 0,
      operation,
      detail,
      cause: opts.cause,
      code: opts.code,
    },
    opts.field,
  );
}

/**
 * One resolution's budget against a Hub (src/http/budget.ts): every answer of it (revision, tree pages, LFS
 * HEADs) read through it, a bound hit a {@link HubError} that names the bound and what to change.
 */
export function hubBudget(
  endpoint: string,
  repo: string,
  bounds: Partial<SourceBounds> = {},
): SourceBudget<HubError> {
  return new SourceBudget(sourceBounds(bounds), {
    terms: { whole: 'the resolution of the repository', holder: 'the repository' },
    toError: (hit: BoundHit) => {
      const ofRepo = hit.bound === 'maxEntries' || hit.bound === 'maxEntriesChars';
      const advice =
        hit.failure === 'timedOut'
          ? `the Hub at ${endpoint} did not answer in time; it is asked again later`
          : ofRepo
            ? `the repository is too large to list: name a smaller repository`
            : `check that the endpoint ${endpoint} is a Hugging Face Hub: its answers passed the source bounds`;
      return hubError(hit.reason, `resolve ${repo}`, `${hit.message}: ${advice}`, {
        kind: hit.failure === 'timedOut' ? 'retryable' : 'terminal',
        field: ofRepo ? 'repo' : 'endpoint',
        cause: hit,
        code: hit.reason,
      });
    },
  });
}
