/** evictOnDelete evicts only the tasks no other resource in the cluster still uses (src/policy/shared-tasks.ts). */
import { describe, expect, it } from 'vitest';
import { planEviction, type PreheatRef, type ServedModelRef } from '../../src/policy/shared-tasks.ts';

const task = (n: number) => ({ url: `http://origin/m${n}.mar`, taskID: `t${n}` });
const preheat = (
  ns: string,
  name: string,
  tasks: { url: string; taskID: string }[],
  deleting = false,
): PreheatRef => ({
  metadata: { namespace: ns, name, uid: `${ns}-${name}`, ...(deleting ? { deletionTimestamp: 'x' } : {}) },
  status: { tasks },
});
const self = preheat('team-a', 'mine', [task(1), task(2), task(3)], true);

describe('planEviction', () => {
  it('alone in the cluster: every task is evicted', () => {
    expect(planEviction(self, self.status!.tasks!, { preheats: [self], servedModels: [] })).toEqual({
      evict: [task(1), task(2), task(3)],
      kept: [],
    });
  });

  it("another tenant's ModelPreheat with the same task id keeps that task", () => {
    const other = preheat('team-b', 'theirs', [task(2)]);
    const plan = planEviction(self, self.status!.tasks!, { preheats: [self, other], servedModels: [] });
    expect(plan.evict).toEqual([task(1), task(3)]);
    // Named only as "in another namespace": the Event goes to team-a, which must not learn team-b's names.
    expect(plan.kept).toEqual([{ task: task(2), usedBy: 'a ModelPreheat in another namespace' }]);
    const neighbour = preheat('team-a', 'neighbour', [task(2)]);
    expect(planEviction(self, [task(2)], { preheats: [neighbour], servedModels: [] }).kept).toEqual([
      { task: task(2), usedBy: 'ModelPreheat team-a/neighbour' },
    ]);
  });

  it('the same URL under another task id (another tag) keeps it too', () => {
    const other = preheat('team-b', 'theirs', [{ url: task(3).url, taskID: 'other-id' }]);
    expect(planEviction(self, self.status!.tasks!, { preheats: [other], servedModels: [] }).evict).toEqual([
      task(1),
      task(2),
    ]);
  });

  it('a resource being deleted keeps nothing', () => {
    const other = preheat('team-b', 'theirs', [task(1), task(2), task(3)], true);
    expect(planEviction(self, self.status!.tasks!, { preheats: [other], servedModels: [] }).kept).toEqual([]);
  });

  it('a ServedModel whose cache lists the task, or whose gate is this preheat, keeps it', () => {
    const cached: ServedModelRef = {
      metadata: { namespace: 'team-c', name: 'sm' },
      status: { cache: { tasks: [{ taskID: 't1' }] } },
    };
    expect(planEviction(self, self.status!.tasks!, { preheats: [], servedModels: [cached] }).kept).toEqual([
      { task: task(1), usedBy: 'a ServedModel in another namespace' },
    ]);
    const gated: ServedModelRef = {
      metadata: { namespace: 'team-a', name: 'app' },
      spec: { preheat: { name: 'mine' } },
    };
    expect(planEviction(self, self.status!.tasks!, { preheats: [], servedModels: [gated] }).evict).toEqual(
      [],
    );
    // The same preheat name in another namespace is another preheat.
    const elsewhere: ServedModelRef = { ...gated, metadata: { namespace: 'team-b', name: 'app' } };
    expect(planEviction(self, self.status!.tasks!, { preheats: [], servedModels: [elsewhere] }).kept).toEqual(
      [],
    );
  });
});
