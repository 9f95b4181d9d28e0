import { describe, expect, it } from 'vitest';
import { SecretReader, SecretNotFoundError } from '../../src/controllers/secrets.ts';
import { ApiError, type KubeClient } from '../../src/runtime/kube.ts';

/** A KubeClient whose Secret GETs are counted and answered by hand. */
function fakeKube() {
  const gets: Array<{ name: string; resolve: (v: unknown) => void; reject: (e: unknown) => void }> = [];
  const kube = {
    resource: () => ({
      get: (_ns: string, name: string) =>
        new Promise((resolve, reject) => gets.push({ name, resolve, reject })),
    }),
  } as unknown as KubeClient;
  return { kube, gets };
}
const b64 = (s: string) => Buffer.from(s).toString('base64');
const tick = () => new Promise((r) => setImmediate(r));

describe('SecretReader', () => {
  it('concurrent reads of one Secret share one GET; the result is reused for ttlMs, then read again', async () => {
    let t = 1_000;
    const { kube, gets } = fakeKube();
    const reader = new SecretReader(kube, { ttlMs: 5_000, now: () => t });
    const reads = Array.from({ length: 10 }, () => reader.value('ns', { name: 's', key: 'token' }));
    expect(gets).toHaveLength(1);
    gets[0]!.resolve({ metadata: { name: 's' }, data: { token: b64('abc\n') } });
    expect(await Promise.all(reads)).toEqual(Array(10).fill('abc'));
    t += 4_999;
    expect(await reader.value('ns', { name: 's', key: 'token' })).toBe('abc');
    expect(gets).toHaveLength(1);
    t += 1;
    const again = reader.value('ns', { name: 's', key: 'token' });
    expect(gets).toHaveLength(2);
    gets[1]!.resolve({ metadata: { name: 's' }, data: { token: b64('rotated') } });
    expect(await again).toBe('rotated');
  });

  it('a failed read is not kept; a caller that aborts stops waiting without failing the others', async () => {
    const { kube, gets } = fakeKube();
    const reader = new SecretReader(kube);
    const missing = reader.data('ns', 'gone');
    gets[0]!.reject(new ApiError(404, 'NotFound', 'not found'));
    await expect(missing).rejects.toBeInstanceOf(SecretNotFoundError);
    await tick();
    void reader.data('ns', 'gone').catch(() => {});
    expect(gets).toHaveLength(2);

    const abort = new AbortController();
    const impatient = reader.data('ns', 'slow', abort.signal);
    const patient = reader.data('ns', 'slow');
    abort.abort(new Error('reconcile cancelled'));
    await expect(impatient).rejects.toThrow('reconcile cancelled');
    gets[2]!.resolve({ metadata: { name: 'slow' }, data: { k: b64('v') } });
    expect(await patient).toEqual({ k: b64('v') });
  });
});
