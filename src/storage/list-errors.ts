/**
 * A failed listing in our own words. The endpoint a prefix names may be any host the admin's list admits, and what
 * answers there may be anything the operator can reach (cloud metadata included): an error answer's text, or an SDK
 * message quoting it, in a status condition would be a read channel into it. So a listing's failure says the HTTP
 * status, the provider's error code when it is one of the codes the provider documents ({@link STORE_ERROR_CODES}),
 * and what to check; none of the answer's text. A failure without an answer (a refused connection, a reset) says
 * its transport code, which is the operator's own.
 */

/** The error codes S3 (and OSS's S3 API), Azure Blob and GCS answer for a listing: the only words repeated. */
export const STORE_ERROR_CODES: ReadonlySet<string> = new Set([
  // S3 and OSS (`<Error><Code>`).
  'AccessDenied',
  'AllAccessDisabled',
  'AccountProblem',
  'AuthorizationHeaderMalformed',
  'ExpiredToken',
  'InternalError',
  'InvalidAccessKeyId',
  'InvalidArgument',
  'InvalidBucketName',
  'InvalidRequest',
  'InvalidToken',
  'NoSuchBucket',
  'NotImplemented',
  'PermanentRedirect',
  'RequestTimeTooSkewed',
  'ServiceUnavailable',
  'SignatureDoesNotMatch',
  'SlowDown',
  'TemporaryRedirect',
  // Azure Blob (`x-ms-error-code`).
  'AccountIsDisabled',
  'AuthenticationFailed',
  'AuthorizationFailure',
  'AuthorizationPermissionMismatch',
  'ContainerBeingDeleted',
  'ContainerDisabled',
  'ContainerNotFound',
  'InsufficientAccountPermissions',
  'InvalidAuthenticationInfo',
  'InvalidQueryParameterValue',
  'InvalidResourceName',
  'OperationTimedOut',
  'ResourceNotFound',
  'ServerBusy',
  // GCS (`error.errors[].reason` of the JSON API).
  'authError',
  'backendError',
  'forbidden',
  'invalid',
  'notFound',
  'rateLimitExceeded',
  'required',
  'unauthorized',
  'userProjectMissing',
]);

/** Node's and undici's transport codes (ECONNREFUSED, UND_ERR_SOCKET): the operator's own words. */
const TRANSPORT_CODE = /^(E[A-Z]{2,20}|UND_ERR_[A-Z_]{2,40})$/;

/** A GCS JSON API error answer, as the listing throws it: its status and its documented reason, never its text. */
export class StoreAnswerError extends Error {
  readonly statusCode: number;
  readonly code: string | undefined;
  constructor(statusCode: number, code: string | undefined) {
    super(`HTTP ${statusCode}`);
    this.name = 'StoreAnswerError';
    this.statusCode = statusCode;
    this.code = code;
  }
}

/** The `error.errors[0].reason` of a GCS JSON error body, when it is a known one. */
export function gcsErrorCode(text: string): string | undefined {
  try {
    const reason = (JSON.parse(text) as { error?: { errors?: { reason?: unknown }[] } }).error?.errors?.[0]
      ?.reason;
    return typeof reason === 'string' && STORE_ERROR_CODES.has(reason) ? reason : undefined;
  } catch {
    return undefined;
  }
}

/** The provider's code an SDK error carries (S3: its name and `Code`; Azure: `code`), when it is a known one. */
function knownCode(e: unknown): string | undefined {
  const o = (e ?? {}) as { name?: unknown; Code?: unknown; code?: unknown };
  for (const c of [o.code, o.Code, o.name]) if (typeof c === 'string' && STORE_ERROR_CODES.has(c)) return c;
  return undefined;
}

/** What to check for an answer of `status`. */
function advice(status: number): string {
  if (status >= 200 && status < 300)
    return 'the answer is not a listing: check that the endpoint is the store';
  if (status === 401 || status === 403)
    return 'check the credentials Secret and its permission to list the bucket (container)';
  if (status === 404) return 'check the bucket (container) name, the account and the endpoint';
  if (status >= 300 && status < 400) return 'the store redirects: check the endpoint and the region';
  if (status === 429 || status >= 500) return 'the store failed; it is listed again later';
  return 'check the endpoint, the bucket (container) and the credentials';
}

/**
 * A listing's failure `e` (an SDK's error, undici's, {@link StoreAnswerError}) in our words: `HTTP 403,
 * SignatureDoesNotMatch: check the credentials...`, or `ECONNREFUSED: the store was not reached`.
 */
export function describeListFailure(e: unknown): string {
  const o = (e ?? {}) as { $metadata?: { httpStatusCode?: unknown }; statusCode?: unknown; code?: unknown };
  const status = o.$metadata?.httpStatusCode ?? o.statusCode;
  const code = knownCode(e);
  if (typeof status === 'number' && status > 0)
    return `HTTP ${status}${code ? `, ${code}` : ''}: ${advice(status)}`;
  const transport = [o.code, (e as { cause?: { code?: unknown } } | undefined)?.cause?.code].find(
    (c): c is string => typeof c === 'string' && TRANSPORT_CODE.test(c),
  );
  return `${transport ?? 'the request failed'}: the store was not reached, or its answer was not one (check the endpoint)`;
}
