/**
 * Which of a deleted ModelPreheat's tasks `evictOnDelete` may delete from the P2P network: only those no other
 * resource in the cluster still uses. A task is the network's, not the resource's: two tenants preheating the same
 * URL (same task id) share one task, and one tenant's delete must not evict the other's cached model. Pure: the
 * controller passes what its informer caches hold.
 */

/** The parts of a ModelPreheat this decision reads. */
export interface PreheatRef {
  metadata: { name: string; namespace?: string; uid?: string; deletionTimestamp?: string };
  status?: { tasks?: { url: string; taskID: string }[] | undefined } | undefined;
}

/** The parts of a ServedModel this decision reads. */
export interface ServedModelRef {
  metadata: { name: string; namespace?: string; uid?: string; deletionTimestamp?: string };
  spec?: { preheat?: { name?: string | undefined } | undefined } | undefined;
  status?:
    { preheatName?: string | undefined; cache?: { tasks?: { taskID: string }[] } | undefined } | undefined;
}

export interface EvictionPlan<T> {
  /** Tasks nobody else uses: evict them. */
  evict: T[];
  /**
   * Tasks kept, each with the first other resource that still uses it: `Kind namespace/name` in `self`'s namespace,
   * `a Kind in another namespace` elsewhere (this goes into an Event of `self`'s namespace, which must not name
   * another tenant's resources).
   */
  kept: { task: T; usedBy: string }[];
}

const alive = (o: { metadata: { deletionTimestamp?: string } }) => o.metadata.deletionTimestamp === undefined;
const idOf = (o: { metadata: { name: string; namespace?: string } }) =>
  `${o.metadata.namespace ?? ''}/${o.metadata.name}`;

/**
 * Splits `tasks` of `self` into those to evict and those another live resource still uses: another ModelPreheat
 * whose status lists the same task id or URL, or a ServedModel whose status.cache lists the task id or whose preheat
 * gate is `self`. Resources being deleted do not keep a task (they are leaving too; each evicts what it may).
 */
export function planEviction<T extends { url: string; taskID: string }>(
  self: PreheatRef,
  tasks: readonly T[],
  others: { preheats: readonly PreheatRef[]; servedModels: readonly ServedModelRef[] },
): EvictionPlan<T> {
  const users = new Map<string, string>();
  const use = (key: string, who: string) => {
    if (!users.has(key)) users.set(key, who);
  };
  const who = (kind: string, o: { metadata: { name: string; namespace?: string } }) =>
    o.metadata.namespace === self.metadata.namespace
      ? `${kind} ${idOf(o)}`
      : `a ${kind} in another namespace`;
  const isSelf = (o: PreheatRef) =>
    self.metadata.uid !== undefined ? o.metadata.uid === self.metadata.uid : idOf(o) === idOf(self);
  for (const p of others.preheats) {
    if (isSelf(p) || !alive(p)) continue;
    for (const t of p.status?.tasks ?? []) {
      use(`id:${t.taskID}`, who('ModelPreheat', p));
      use(`url:${t.url}`, who('ModelPreheat', p));
    }
  }
  let gatedBy: string | undefined;
  for (const sm of others.servedModels) {
    if (!alive(sm)) continue;
    for (const t of sm.status?.cache?.tasks ?? []) use(`id:${t.taskID}`, who('ServedModel', sm));
    const gate = sm.spec?.preheat?.name ?? sm.status?.preheatName;
    if (
      gatedBy === undefined &&
      gate === self.metadata.name &&
      sm.metadata.namespace === self.metadata.namespace
    )
      gatedBy = `ServedModel ${idOf(sm)}`;
  }
  const plan: EvictionPlan<T> = { evict: [], kept: [] };
  for (const task of tasks) {
    const usedBy = gatedBy ?? users.get(`id:${task.taskID}`) ?? users.get(`url:${task.url}`);
    if (usedBy) plan.kept.push({ task, usedBy });
    else plan.evict.push(task);
  }
  return plan;
}
