/**
 * status.replicas within a size: one row per replica, full while the rows fit REPLICA_ROWS_BUDGET, compact past it
 * (where it runs and since when it changed left out: the pod, its UID, the node and its IP, lastUpdateTime), and
 * past that again only the first MESSAGES_KEPT messages. A row's memory for the next pass (registered, version,
 * since, localHit) always stays. So a ServedModel on 1,000 nodes stays well under the 256 KiB a status may take
 * here (an apiserver refuses objects over 1.5 MiB, and every watcher receives each write whole).
 */
import type { ServedModelStatus } from '../../api/index.ts';

type ReplicaStatus = NonNullable<ServedModelStatus['replicas']>[number];

/** Bytes status.replicas may take (the rest of the status is bounded by its own schema). */
export const REPLICA_ROWS_BUDGET = 192 * 1024;
/** Messages kept once even compact rows are over the budget (the replicas not ready come first in a read). */
export const MESSAGES_KEPT = 50;

const size = (rows: readonly object[]) => Buffer.byteLength(JSON.stringify(rows));

export function boundedRows(rows: ReplicaStatus[], budget = REPLICA_ROWS_BUDGET): ReplicaStatus[] {
  if (size(rows) <= budget) return rows;
  const compact = rows.map(
    ({ pod: _pod, podUID: _uid, node: _node, nodeIP: _ip, lastUpdateTime: _t, ...kept }) => kept,
  );
  if (size(compact) <= budget) return compact;
  let messages = 0;
  return compact.map((r) => {
    if (r.message === undefined || messages++ < MESSAGES_KEPT) return r;
    const { message: _m, ...rest } = r;
    return rest;
  });
}
