/** How a driver's errors read for the conditions: the one mapping of its clients' {@link HttpError}s. */
import { HttpError } from '../http/errors.ts';
import { integrityOf } from './agent-client.ts';
import type { Failure } from './driver.ts';
import { ReplicaError } from './endpoint.ts';

/**
 * The failure of `err` when it is one of `type`'s (the errors of the driver's own clients), else undefined: an
 * error that is not the server's answer (a bug, an abort) is not read as one.
 */
export function failureOf(
  err: unknown,
  type: abstract new (...args: never[]) => HttpError,
): Failure | undefined {
  if (!(err instanceof type)) return undefined;
  const integrity = err instanceof ReplicaError ? integrityOf(err.reason) : undefined;
  return {
    kind: err.kind,
    retryable: err.retryable,
    message: err.message,
    ...(integrity ? { integrity } : {}),
  };
}
