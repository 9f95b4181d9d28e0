/**
 * cacheStep: a succeeded preheat's status.cache. An idle operator holds thousands of succeeded preheats; one whose
 * refresh is neither due nor running must cost nothing (no manager, no Secret, no write, no requeue): resolving the
 * manager first would look at every such object again on each resync.
 */
import { describe, expect, it } from 'vitest';
import { ModelPreheatSpec, type ModelPreheat } from '../../src/api/index.ts';
import { cacheStep, REFRESH_ANNOTATION, type CacheDeps } from '../../src/controllers/modelpreheat/cache.ts';
import type { ReconcileContext } from '../../src/runtime/index.ts';

function preheat(annotations: Record<string, string> = {}, spec: Record<string, unknown> = {}) {
  const obj = {
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ModelPreheat',
    metadata: { name: 'p', namespace: 'ns', generation: 1, annotations },
    spec: { url: 'http://origin.example/models/a.mar', ...spec },
    status: {
      state: 'SUCCESS',
      tasks: [{ url: 'http://origin.example/models/a.mar', taskID: 'a'.repeat(64) }],
    },
  } as unknown as ModelPreheat;
  return { obj, spec: ModelPreheatSpec.parse(obj.spec) };
}

function deps() {
  const calls = { secrets: 0, clients: 0, writes: 0, events: 0 };
  const d = {
    // No default manager: resolving one throws, so a step that resolves it first fails here.
    ctx: {
      config: { pollBackoffStart: 1000 },
      events: { record: () => calls.events++ },
    },
    secrets: {
      value: async () => {
        calls.secrets++;
        throw new Error('no Secret in this test');
      },
    },
    clients: {
      get: () => {
        calls.clients++;
        throw new Error('no manager in this test');
      },
    },
    writeStatus: async (obj: ModelPreheat) => {
      calls.writes++;
      return { object: obj };
    },
  } as unknown as CacheDeps;
  return { d, calls };
}

const rc = {
  signal: new AbortController().signal,
  log: { warn: () => undefined, info: () => undefined, debug: () => undefined },
} as unknown as ReconcileContext;

describe('cacheStep', () => {
  it('does nothing for a succeeded preheat whose refresh is neither due nor running', async () => {
    const { d, calls } = deps();
    const { obj, spec } = preheat();
    expect(await cacheStep(d, obj, spec, rc)).toBeUndefined();
    expect(calls).toEqual({ secrets: 0, clients: 0, writes: 0, events: 0 });
  });

  it('with an interval not yet elapsed, only asks to be woken when it is', async () => {
    const { d, calls } = deps();
    const { obj, spec } = preheat({}, { cacheRefreshInterval: '10m' });
    obj.status!.cache = { observedAt: new Date(Date.now() - 60_000).toISOString(), tasks: [] };
    const result = await cacheStep(d, obj, spec, rc);
    expect(result?.requeueAfter).toBeGreaterThan(8 * 60_000);
    expect(result?.requeueAfter).toBeLessThanOrEqual(9 * 60_000);
    expect(calls).toEqual({ secrets: 0, clients: 0, writes: 0, events: 0 });
  });

  it('a refresh asked for with the annotation reaches for the manager, and says why it cannot', async () => {
    const { d, calls } = deps();
    const { obj, spec } = preheat({ [REFRESH_ANNOTATION]: '1' });
    const result = await cacheStep(d, obj, spec, rc);
    expect(result?.requeueAfter).toBe(60_000);
    expect(calls.writes).toBe(1);
  });
});
