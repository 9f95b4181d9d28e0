/**
 * How the Open Inference Protocol repository servers (Triton, MLServer) fail. They answer errors as
 * `{"error": "..."}`, read by the replica endpoint (src/servers/endpoint.ts) like every replica's; the shared
 * classification holds with one exception, seen on the real server: Triton answers a load of a model its
 * repository does not hold with 500 "failed to poll from model repository" (also for a config it cannot parse).
 * The model is not there, so `notFound`, not a retryable server fault.
 */
import type { StatusException } from '../../http/classify.ts';

/** Triton's answer to a load of a model its repository does not hold (or whose config it cannot read). */
export const TRITON_POLL_FAILED = 'failed to poll from model repository';

/** The OIP servers' exceptions to the shared classification. */
export const OIP_STATUS_EXCEPTIONS: readonly StatusException[] = [
  { status: 500, text: new RegExp(TRITON_POLL_FAILED), kind: 'notFound' },
];
