/**
 * Typed errors of the manager job API (shared/contracts/manager-jobs.md, "Errors"). Every failure of the client
 * is a {@link ManagerError}; controllers map `kind` to conditions in one place and never look at HTTP details.
 *
 * Messages carry the manager's own text (`{"message"}`, `{"errors"}` or a text body) and never a credential:
 * request bodies and headers are never quoted, and whatever the manager says passes the redaction boundary.
 */
import { redact } from '../redact.ts';

export const MANAGER_ERROR_KINDS = ['retryable', 'terminal', 'auth', 'notFound', 'conflict'] as const;
export type ManagerErrorKind = (typeof MANAGER_ERROR_KINDS)[number];

export interface ManagerErrorInit {
  kind: ManagerErrorKind;
  /** HTTP status; 0 for network errors and time-outs. */
  status: number;
  /** The manager's own message (already redacted), or a description of the network failure. */
  managerMessage: string;
  /** What the client was doing, e.g. `create preheat job`, `get job 7`. */
  operation: string;
  /** From `Retry-After` (429/503), in milliseconds. */
  retryAfterMs?: number | undefined;
  /** Network error code such as ECONNREFUSED, or `TIMEOUT`. */
  code?: string | undefined;
  cause?: unknown;
}

export class ManagerError extends Error {
  readonly kind: ManagerErrorKind;
  readonly status: number;
  readonly managerMessage: string;
  readonly operation: string;
  readonly retryAfterMs: number | undefined;
  readonly code: string | undefined;

  constructor(init: ManagerErrorInit) {
    const where = init.status > 0 ? `HTTP ${init.status}` : (init.code ?? 'network error');
    super(redact(`manager ${init.operation} failed (${where}): ${init.managerMessage}`), {
      cause: init.cause,
    });
    this.name = 'ManagerError';
    this.kind = init.kind;
    this.status = init.status;
    this.managerMessage = init.managerMessage;
    this.operation = init.operation;
    this.retryAfterMs = init.retryAfterMs;
    this.code = init.code;
  }

  /** True when the same request may succeed later without any change of input or credentials. */
  get retryable(): boolean {
    return this.kind === 'retryable';
  }
}

export function isManagerError(e: unknown): e is ManagerError {
  return e instanceof ManagerError;
}

/** The manager's service errors that are caused by the request itself (`invalid params: url is required`). */
const INVALID_PARAMS = /^invalid params\b/i;

/** Maps an HTTP status + the manager's message to a kind, per the contract's retry policy. */
export function kindForStatus(status: number, message: string): ManagerErrorKind {
  if (status === 401 || status === 403) return 'auth';
  if (status === 404) return 'notFound';
  if (status === 409) return 'conflict';
  if (status === 429 || status === 408) return 'retryable';
  if (status >= 500) return INVALID_PARAMS.test(message.trim()) ? 'terminal' : 'retryable';
  return 'terminal';
}

/**
 * `Retry-After` as milliseconds: delta-seconds or an HTTP date (RFC 9110 10.2.3). Undefined when absent or
 * malformed; never negative.
 */
export function parseRetryAfter(value: string | undefined, now = Date.now()): number | undefined {
  if (value === undefined) return undefined;
  const text = value.trim();
  if (/^[0-9]+$/.test(text)) return Number(text) * 1000;
  const at = Date.parse(text);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

const MAX_MESSAGE = 1024;

/**
 * The manager's message out of an error body: `{"message"}` (handlers), `{"errors"}` (validation), a JSON string,
 * or plain text (429). Truncated; `secrets` are replaced by `***`.
 */
/**
 * The first of several JSON objects written back to back: the real manager's create middleware (v2.5.1) answers a
 * body it cannot bind with a 422 and does not abort, so the handler appends its own 422 (`{"errors":…}{"errors":…}`).
 */
function parseManagerJSON(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (e) {
    const boundary = text.startsWith('{') ? text.indexOf('}{') : -1;
    if (boundary < 0) throw e;
    return JSON.parse(text.slice(0, boundary + 1));
  }
}

export function extractManagerMessage(body: string, secrets: readonly string[] = []): string {
  let message = body.trim();
  try {
    const parsed = parseManagerJSON(message);
    if (typeof parsed === 'string') message = parsed;
    else if (parsed && typeof parsed === 'object') {
      const o = parsed as Record<string, unknown>;
      const m = o['message'] ?? o['errors'] ?? o['error'];
      if (typeof m === 'string') message = m;
      else if (m !== undefined) message = JSON.stringify(m);
    }
  } catch {
    // not JSON: the text itself
  }
  return redact(message.length > MAX_MESSAGE ? message.slice(0, MAX_MESSAGE) + '…' : message, secrets);
}
