import { getEventListeners } from 'node:events';
import { describe, expect, it } from 'vitest';
import { forgetSecrets, redact, rememberedCount } from '../../src/redact.ts';
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

describe('SecretReader does not grow', () => {
  it("the controller's process-long signal keeps no listener per read: flat over 10,000 reads", async () => {
    const kube = {
      resource: () => ({
        get: async (_ns: string, name: string) => ({
          metadata: { name },
          data: { token: b64(`value-of-${name}`) },
        }),
      }),
    } as unknown as KubeClient;
    const reader = new SecretReader(kube, { ttlMs: 5_000 });
    const controller = new AbortController();
    const signal = controller.signal;
    for (let i = 0; i < 10_000; i++) {
      // 100 Secrets: cached reads and fresh ones alike.
      expect(await reader.value('ns', { name: `s${i % 100}`, key: 'token' }, signal)).toBe(
        `value-of-s${i % 100}`,
      );
    }
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
    // A read still in flight holds exactly its own listener, gone once the read is done.
    const slow = new SecretReader({
      resource: () => ({
        get: () => new Promise((r) => setTimeout(() => r({ metadata: {}, data: {} }), 20)),
      }),
    } as unknown as KubeClient);
    const pending = slow.data('ns', 'x', signal);
    expect(getEventListeners(signal, 'abort')).toHaveLength(1);
    await pending;
    expect(getEventListeners(signal, 'abort')).toHaveLength(0);
  });

  it("a Secret's values are remembered as it is now: a changed Secret's old value and a deleted one's are dropped", async () => {
    forgetSecrets();
    let data: Record<string, string> | undefined = { token: b64('first-token-value'), password: b64('pw12') };
    const kube = {
      resource: () => ({
        get: async () => {
          if (!data) throw new ApiError(404, 'NotFound', 'not found');
          return { metadata: { name: 's' }, data };
        },
      }),
    } as unknown as KubeClient;
    const reader = new SecretReader(kube, { ttlMs: 0 });
    await reader.data('ns', 's');
    expect(redact('sent first-token-value with pw12')).toBe('sent *** with ***');
    data = { token: b64('second-token-value') };
    await reader.data('ns', 's');
    expect(redact('first-token-value second-token-value pw12')).toBe('first-token-value *** pw12');
    expect(rememberedCount()).toEqual({ secrets: 1, values: 1 });
    data = undefined;
    await expect(reader.data('ns', 's')).rejects.toBeInstanceOf(SecretNotFoundError);
    expect(rememberedCount()).toEqual({ secrets: 0, values: 0 });
    expect(redact('second-token-value')).toBe('second-token-value');
    // 10,000 rotations of one Secret remember one value, not 10,000.
    for (let i = 0; i < 10_000; i++) {
      data = { token: b64(`rotated-token-${i}`) };
      await reader.data('ns', 's');
    }
    expect(rememberedCount()).toEqual({ secrets: 1, values: 1 });
    forgetSecrets();
  });
});
