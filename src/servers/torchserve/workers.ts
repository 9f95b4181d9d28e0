/** Worker counts out of describe answers: what "ready" means for a model on one replica. */
import type { ModelDescription } from './wire.ts';

export interface WorkerCounts {
  ready: number;
  /** Not READY yet (TorchServe shows a starting worker as UNLOADING). */
  notReady: number;
  total: number;
}

/**
 * Worker counts of a description (or of the entries of a describe answer, optionally only `version`).
 * Only `READY` counts as ready: a starting worker shows `UNLOADING`.
 */
export function workerCounts(
  desc: ModelDescription | readonly ModelDescription[],
  version?: string,
): WorkerCounts {
  const list = Array.isArray(desc) ? (desc as readonly ModelDescription[]) : [desc as ModelDescription];
  let ready = 0;
  let total = 0;
  for (const d of list) {
    if (version !== undefined && d.modelVersion !== version) continue;
    for (const w of d.workers) {
      total++;
      if (w.status === 'READY') ready++;
    }
  }
  return { ready, notReady: total - ready, total };
}

/** Number of READY workers (see {@link workerCounts}). */
export function readyWorkers(desc: ModelDescription | readonly ModelDescription[], version?: string): number {
  return workerCounts(desc, version).ready;
}
