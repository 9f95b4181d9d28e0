/**
 * The model-server emulator's HTTP pieces shared by its routes: TorchServe's error texts and exceptions, the
 * reply shape, route labels of the counters.
 */

// ---------------------------------------------------------------------------------------------------------------
// Constants (TorchServe's texts)

export const NOT_FOUND_MESSAGE = 'Requested resource is not found, please refer to API document.';
const METHOD_NOT_ALLOWED_MESSAGE = 'Requested method is not allowed, please refer to API document.';
/** NettyUtils' no-cache headers, on every TorchServe answer. */
export const NO_CACHE_HEADERS = {
  Pragma: 'no-cache',
  'Cache-Control': 'no-cache; no-store, must-revalidate, private',
  Expires: 'Thu, 01 Jan 1970 00:00:00 UTC',
};

export class HttpError extends Error {
  readonly status: number;
  readonly type: string;
  constructor(status: number, type: string, message: string) {
    super(message);
    this.status = status;
    this.type = type;
  }
}

export const notFound = (msg: string) => new HttpError(404, 'ModelNotFoundException', msg);
export const versionNotFound = (name: string, version: string) =>
  new HttpError(
    404,
    'ModelVersionNotFoundException',
    `Model version: ${version} does not exist for model: ${name}`,
  );
export const badRequest = (msg: string) => new HttpError(400, 'BadRequestException', msg);
export const methodNotAllowed = () =>
  new HttpError(405, 'MethodNotAllowedException', METHOD_NOT_ALLOWED_MESSAGE);

export function errorTypeFor(status: number): string {
  switch (status) {
    case 400:
      return 'BadRequestException';
    case 404:
      return 'ResourceNotFoundException';
    case 408:
      return 'RequestTimeoutException';
    case 409:
      return 'ConflictStatusException';
    case 503:
      return 'ServiceUnavailableException';
    case 507:
      return 'OutOfMemoryError';
    default:
      return 'InternalServerException';
  }
}

export const sleep = (ms: number) =>
  ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve();

export interface Reply {
  status: number;
  /** Serialized as pretty JSON unless `raw` is given. */
  json?: unknown;
  raw?: string;
  contentType?: string | null;
  headers?: Record<string, string>;
}

export function routeLabel(method: string, segments: string[], plugins: string[]): string {
  const first = segments[1] ?? '';
  if (first === 'token') return `${method} /token`;
  if (plugins.includes(first)) return `${method} /{plugin}/models`;
  if (first !== 'models') return `${method} other`;
  if (segments.length < 3) return `${method} /models`;
  if (segments.length === 3) return `${method} /models/{name}`;
  if (segments.length === 4) return `${method} /models/{name}/{version}`;
  return `${method} /models/{name}/{version}/${segments[4]}`;
}
