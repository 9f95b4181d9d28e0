/**
 * Typed errors of the manager job API (its error answers and what each means). Every failure of the client
 * is a {@link ManagerError}, an {@link HttpError} of the shared HTTP layer (src/http/): controllers map `kind` to
 * conditions in one place and never look at HTTP details.
 *
 * Messages carry the manager's own text (`{"message"}`, `{"errors"}` or a text body) and never a credential:
 * request bodies and headers are never quoted, and whatever the manager says passes the redaction boundary.
 */
import type { StatusException } from '../http/classify.ts';
import { HttpError, boundDetail, type HttpErrorInit, type HttpErrorKind } from '../http/errors.ts';

export type ManagerErrorKind = HttpErrorKind;

export interface ManagerErrorInit extends Omit<HttpErrorInit, 'detail'> {
  /** The manager's own message (already redacted), or a description of the network failure. */
  managerMessage: string;
}

export class ManagerError extends HttpError {
  readonly managerMessage: string;

  constructor(init: ManagerErrorInit) {
    super('manager', { ...init, detail: init.managerMessage });
    this.name = 'ManagerError';
    this.managerMessage = init.managerMessage;
  }

  /** A ManagerError out of the shared layer's fields (transport failures). */
  static from(init: HttpErrorInit): ManagerError {
    return new ManagerError({ ...init, managerMessage: init.detail });
  }
}

/**
 * What the manager's SSRF-safe dialer says when it refuses an address (v2.5.1: `dial tcp 127.0.0.1:5000: ip
 * 127.0.0.1 is invalid`): its registry client dials global unicast addresses only, so an image preheat of a
 * loopback or link-local registry fails at job creation with a 500 that no retry changes.
 */
export const MANAGER_ADDRESS_REFUSED = /\bis invalid\b/i;

/**
 * The manager contract's exceptions to the shared classification (src/http/classify.ts), read with its message:
 * 403 is an auth failure (a token without the scope, an expired one); a 5xx whose message is `invalid params`
 * (`invalid params: url is required`) is the request's fault, and one whose message says an address `is invalid`
 * is the manager refusing to dial the URL's host: both terminal.
 */
export const MANAGER_STATUS_EXCEPTIONS: readonly StatusException[] = [
  { status: 403, kind: 'auth' },
  { status: '5xx', text: /^\s*invalid params\b/i, kind: 'terminal' },
  { status: '5xx', text: MANAGER_ADDRESS_REFUSED, kind: 'terminal' },
];

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

/**
 * The manager's message out of an error body: `{"message"}` (handlers), `{"errors"}` (validation), a JSON string,
 * or plain text (429 `rate limit exceeded`). Bounded; `secrets` are replaced by `***`.
 */
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
  return boundDetail(message, secrets);
}
