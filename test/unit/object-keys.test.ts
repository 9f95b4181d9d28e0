/**
 * The object-key rules of the CRDs and the operator against test/vectors/object-keys.json, which the plugin's JUnit
 * suite (ObjectKeyVectorsTest) checks too: the CRD and the plugin cannot disagree on what a key may be.
 */
import { describe, expect, it } from 'vitest';
import { ModelPreheatSpec, ServedModelSpec } from '../../src/api/index.ts';
import { ObjectKey, objectKeyProblem } from '../../src/api/objectkey.ts';
import { OBJECT_KEYS as vectors } from '../fixtures/object-keys.ts';

const servedModel = (fileName: string) => ({
  modelName: 'm',
  fileName,
  modelServer: { service: { name: 'ts' } },
});
const preheat = (key: string) => ({
  objectStorage: { type: 's3', bucket: 'b', credentialsSecretRef: { name: 's' }, keys: [key] },
});

describe('object keys (shared vectors)', () => {
  it('has cases on both sides', () => {
    expect(vectors.accepted.length).toBeGreaterThanOrEqual(10);
    expect(vectors.rejected.length).toBeGreaterThanOrEqual(20);
  });

  for (const c of vectors.accepted) {
    it(`accepts ${JSON.stringify(c.key).slice(0, 40)}: ${c.why}`, () => {
      const key = c.key;
      expect(objectKeyProblem(key)).toBeUndefined();
      expect(ObjectKey.safeParse(key).success).toBe(true);
      expect(ServedModelSpec.safeParse(servedModel(key)).success).toBe(true);
      expect(ModelPreheatSpec.safeParse(preheat(key)).success).toBe(true);
    });
  }

  for (const c of vectors.rejected) {
    it(`rejects ${JSON.stringify(c.key).slice(0, 40)}: ${c.why}`, () => {
      const key = c.key;
      expect(objectKeyProblem(key)).toContain(c.reason);
      expect(ObjectKey.safeParse(key).success).toBe(false);
      const sm = ServedModelSpec.safeParse(servedModel(key));
      expect(sm.error?.issues[0]?.path).toEqual(['fileName']);
      const mp = ModelPreheatSpec.safeParse(preheat(key));
      expect(mp.error?.issues[0]?.path).toEqual(['objectStorage', 'keys', 0]);
    });
  }
});
