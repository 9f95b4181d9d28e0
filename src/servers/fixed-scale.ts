/**
 * Servers whose scaling is `fixed` (src/api/drivers.ts): no per-model worker count (one engine, or a server-wide
 * pool), so a served model has one worker and is ready with it. Admission refuses any other count; a driver refuses
 * it the same way should one reach it, rather than report it done.
 */

/** What a served version of such a server holds. */
export const FIXED_WORKERS = { minWorkers: 1, maxWorkers: 1 } as const;

/** Why `workers` cannot be applied to `server`, or undefined for the one count it has. */
export function fixedScale(server: string, workers: { min: number; max: number }): string | undefined {
  if (workers.min === 1 && workers.max === 1) return undefined;
  return `${server} has no per-model worker count: set spec.workers.min and max to 1`;
}
