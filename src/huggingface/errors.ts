/**
 * The Hub client's errors: an {@link HttpError} with a `reason` a condition or a CLI message can carry, and a
 * message that says what to change. The Hub's own words (`X-Error-Message`) are kept bounded and redacted; the
 * token never appears (it is one of the exchange's secrets, and `redact` knows every remembered one).
 */
import { HttpError, type HttpErrorInit, type HttpErrorKind } from '../http/errors.ts';

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
  ListingTimeout: 'HubListingTimeout',
  /** 429, 5xx, a network failure: the same request may work later. */
  Unavailable: 'HubUnavailable',
  /** An answer that is not the Hub's (not JSON, the wrong shape, a foreign page link). */
  BadAnswer: 'HubBadAnswer',
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
  opts: { kind?: HttpErrorKind; field?: string; status?: number; code?: string; cause?: unknown } = {},
): HubError {
  return new HubError(
    reason,
    {
      kind: opts.kind ?? 'terminal',
      status: opts.status ?? 0,
      operation,
      detail,
      code: opts.code,
      cause: opts.cause,
    },
    opts.field,
  );
}
