/**
 * Node targeting past the manager's bound on one job (at most 100 IPs): the replicas' nodes are split into batches
 * of at most MAX_TARGET_IPS, each batch one owned ModelPreheat (`<name>-preheat`, then `<name>-preheat-1`, ...),
 * so each batch is one job per generation and its status.peers stays within the bound. A node keeps its batch
 * while it stays, so scaling out touches only the batches that take the new nodes. Pure, unit-tested.
 */
import {
  MAX_TARGET_IPS,
  ownedPreheatName,
  ModelPreheatSpec,
  type ModelPreheat,
  type ServedModelStatus,
} from '../../api/index.ts';
import { contentKey } from '../modelpreheat/targets.ts';
import { jobRunningOn, type Gate } from './preheat.ts';

/** Failed nodes status.nodePreheat names (the counts cover every node). */
export const MAX_LISTED_NODE_FAILURES = 10;

/** The name of batch `index` of a ServedModel's owned preheat; batch 0 keeps the name of a single preheat. */
export function batchPreheatName(sm: { metadata: { name: string } }, index: number): string {
  const base = ownedPreheatName(sm);
  if (index === 0) return base;
  const suffix = `-${index}`;
  return base.slice(0, 253 - suffix.length) + suffix;
}

/** The batch index of `name` among a ServedModel's owned preheats, or undefined when it is not one of them. */
export function batchIndexOf(sm: { metadata: { name: string } }, name: string): number | undefined {
  const base = ownedPreheatName(sm);
  if (name === base) return 0;
  const m = /-(\d{1,4})$/.exec(name);
  if (!m) return undefined;
  const index = Number(m[1]);
  return index > 0 && batchPreheatName(sm, index) === name ? index : undefined;
}

/**
 * The IPs each batch targets once `desired` (the replicas' node IPs) is taken in, from what each batch targets now
 * (`current[i]`, undefined for a batch without targets). An IP already in a batch stays there; new IPs fill the
 * batches with room, in order, then new batches. A batch that takes new IPs drops the ones no longer desired (its
 * spec changes anyway); a batch that takes none is left as it is, since a removal alone changes nothing on the
 * network. Returns one entry per batch (as many as `current` or more): `current[i]` itself (the same array, or
 * undefined) when that batch does not change, else its new list.
 */
export function assignBatches(
  current: readonly (readonly string[] | undefined)[],
  desired: readonly string[],
  size: number = MAX_TARGET_IPS,
): (readonly string[] | undefined)[] {
  const held = new Set(current.flatMap((ips) => ips ?? []));
  const wanted = new Set(desired);
  let fresh = [...wanted].filter((ip) => !held.has(ip)).sort();
  const out: (readonly string[] | undefined)[] = [];
  for (const ips of current) {
    const kept = (ips ?? []).filter((ip) => wanted.has(ip));
    const room = size - kept.length;
    if (fresh.length === 0 || room <= 0) {
      out.push(ips);
      continue;
    }
    out.push([...kept, ...fresh.slice(0, room)].sort());
    fresh = fresh.slice(room);
  }
  for (let i = 0; i < fresh.length; i += size) out.push(fresh.slice(i, i + size));
  return out;
}

/**
 * The gate of the batches as a whole: open when every batch succeeded, else the first that is closed for good (a
 * failure), else the first closed one.
 */
export function combineGates(gates: readonly Gate[], firstName: string): Gate {
  const closed = gates.filter((g) => g.state === 'closed');
  if (closed.length === 0) {
    if (gates.length === 1) return gates[0]!;
    return { state: 'open', preheatName: firstName, message: `all ${gates.length} node batches preheated` };
  }
  return closed.find((g) => g.final) ?? closed[0]!;
}

type NodePreheat = NonNullable<ServedModelStatus['nodePreheat']>;

/**
 * The nodes' preheat over every batch, in counts: nodes targeted, holding the model (for the batch's current
 * content), fetching it now (a job of the current generation runs on them), failed; and the first failures with the
 * peer's words. Bounded whatever the number of nodes.
 */
export function nodePreheatSummary(batches: readonly ModelPreheat[]): NodePreheat {
  const out: NodePreheat = { batches: batches.length, nodes: 0, preheated: 0, fetching: 0, failed: 0 };
  const failures: NonNullable<NodePreheat['failures']> = [];
  for (const b of batches) {
    // The key of the spec as the ModelPreheat controller parses it (its defaults applied), as status keeps it.
    const parsed = ModelPreheatSpec.safeParse(b.spec);
    const fresh = parsed.success && b.status?.contentKey === contentKey(parsed.data);
    const peers = new Map(fresh ? (b.status?.peers ?? []).map((p) => [p.ip, p]) : []);
    for (const ip of b.spec?.targets?.ips ?? []) {
      out.nodes++;
      const peer = peers.get(ip);
      if (peer?.state === 'Preheated') out.preheated++;
      else if (jobRunningOn(b, ip) !== undefined) out.fetching++;
      else if (peer?.state === 'Failed') {
        out.failed++;
        if (failures.length < MAX_LISTED_NODE_FAILURES)
          failures.push({ ip, preheat: b.metadata.name, message: peer.message ?? 'failed' });
      }
    }
  }
  return failures.length > 0 ? { ...out, failures } : out;
}
