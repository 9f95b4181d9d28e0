/** A manager job followed until it ends, as the real-network tests and benchmarks wait for their preheats. */
import type { ManagerClient } from '../../src/manager/client.ts';
import type { ManagerJob } from '../../src/manager/types.ts';
import { waitFor } from './process.ts';

/** Polls job `id` until SUCCESS or FAILURE and returns it (the manager writes the state on its own poll). */
export function jobEnd(
  manager: ManagerClient,
  id: number,
  opts: { timeoutMs: number; intervalMs: number },
): Promise<ManagerJob> {
  return waitFor(
    `manager job ${id} to end`,
    async () => {
      const j = await manager.getJob(id);
      return (j.state === 'SUCCESS' || j.state === 'FAILURE') && j;
    },
    opts,
  );
}
