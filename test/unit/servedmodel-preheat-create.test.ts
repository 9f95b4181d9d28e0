/**
 * Creating the owned ModelPreheat while the informer is behind: the apiserver's AlreadyExists is our own create of
 * an earlier pass, answered as created (its watch event brings the next pass); any other failure stays one.
 */
import { describe, expect, it } from 'vitest';
import { ServedModelSpec, type ServedModel } from '../../src/api/index.ts';
import { ensureOwnedPreheat } from '../../src/controllers/servedmodel/preheat.ts';
import { ApiError } from '../../src/runtime/index.ts';

/** A TorchServe model whose ServedModel creates and owns its preheat. */
const owningPreheat = {
  create: true,
  objectStorage: { type: 's3', bucket: 'm', credentialsSecretRef: { name: 's3' } },
};
const spec = ServedModelSpec.parse({
  modelName: 'echo',
  fileName: 'echo.mar',
  modelServer: { service: { name: 'ts' } },
  preheat: owningPreheat,
});
const sm = {
  metadata: { name: 'echo', namespace: 'ns', uid: 'uid-1', generation: 1 },
} as unknown as ServedModel;

function kubeAnswering(err: ApiError | undefined) {
  const created: unknown[] = [];
  const kube = {
    resource: () => ({
      create: async (o: unknown) => {
        created.push(o);
        if (err) throw err;
        return o;
      },
    }),
  } as never;
  return { kube, created };
}

describe('ensureOwnedPreheat creating the owned ModelPreheat', () => {
  it('creates it, owned by the ServedModel', async () => {
    const { kube, created } = kubeAnswering(undefined);
    await expect(ensureOwnedPreheat(kube, sm, spec, undefined, ['10.0.0.1'])).resolves.toEqual({
      contentChanged: true,
    });
    expect(created).toMatchObject([
      { metadata: { name: 'echo-preheat', ownerReferences: [{ uid: 'uid-1', controller: true }] } },
    ]);
  });

  it('takes AlreadyExists (the cache behind its own create) as created, not as a failure', async () => {
    const { kube } = kubeAnswering(
      new ApiError(409, 'AlreadyExists', 'modelpreheats "echo-preheat" already exists'),
    );
    await expect(ensureOwnedPreheat(kube, sm, spec, undefined, [])).resolves.toEqual({
      contentChanged: true,
    });
  });

  it('passes on every other failure of the create', async () => {
    for (const err of [
      new ApiError(403, 'Forbidden', 'forbidden'),
      new ApiError(409, 'Conflict', 'the object has been modified'),
      new ApiError(0, 'Unknown', 'ECONNREFUSED'),
    ])
      await expect(ensureOwnedPreheat(kubeAnswering(err).kube, sm, spec, undefined, [])).rejects.toBe(err);
  });
});
