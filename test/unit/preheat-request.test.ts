import { describe, expect, it } from 'vitest';
import { ModelPreheatSpec } from '../../src/api/index.ts';
import { planPreheat } from '../../src/controllers/preheat-request.ts';
import type { SecretReader } from '../../src/controllers/secrets.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS, taskID } from '../../src/storage/taskid.ts';
import { objectURL } from '../../src/storage/objecturl.ts';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const secrets = {
  data: async () => ({
    access_key: b64('AKIDEXAMPLE'),
    secret_key: b64('wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY'),
  }),
  value: async (_ns: string, ref: { key: string }) =>
    ref.key === 'username' ? 'robot' : 'registry-password',
} as unknown as SecretReader;
const plan = (spec: unknown) =>
  planPreheat(ModelPreheatSpec.parse(spec), 'ns', secrets, { bio: 'test' }, new Date('2026-01-02T03:04:05Z'));

describe('planPreheat', () => {
  it('signs every key of a bucket, sends the storage filter, and shows unsigned URLs with their task ids', async () => {
    const location = { type: 's3', bucket: 'models', region: 'eu-west-1' } as const;
    const { request, tasks } = await plan({
      objectStorage: { ...location, keys: ['a/one.mar', 'two.mar'], credentialsSecretRef: { name: 's3' } },
      tag: 'v1',
    });
    expect(request.type).toBe('file');
    expect(request.urls).toHaveLength(2);
    expect(request.urls![0]).toMatch(
      /^https:\/\/models\.s3\.eu-west-1\.amazonaws\.com\/a\/one\.mar\?.*X-Amz-Signature=/,
    );
    expect(request.filteredQueryParams).toContain('X-Amz-Signature');
    expect(tasks.map((t) => t.url)).toEqual([
      objectURL(location, 'a/one.mar'),
      objectURL(location, 'two.mar'),
    ]);
    // The id a later download of the bare object URL (re-signed at any time) will have.
    expect(tasks[0]!.taskID).toBe(
      taskID({ url: objectURL(location, 'a/one.mar'), filter: request.filteredQueryParams, tag: 'v1' }),
    );
    expect(JSON.stringify(tasks)).not.toContain('Signature=');
  });

  it('without a filter, computes task ids with the manager default list (what the manager will apply)', async () => {
    const url = 'https://cdn.example.com/m.mar?X-Amz-Signature=abc&v=2';
    for (const filteredQueryParams of [undefined, []]) {
      const { request, tasks } = await plan({ url, ...(filteredQueryParams ? { filteredQueryParams } : {}) });
      expect(request.filteredQueryParams ?? []).toEqual(filteredQueryParams ?? []);
      expect(tasks[0]!.taskID).toBe(taskID({ url, filter: DEFAULT_FILTERED_QUERY_PARAMS }));
      expect(tasks[0]!.url).toBe('https://cdn.example.com/m.mar?X-Amz-Signature=***&v=***');
    }
  });

  it('image: passes registry credentials and timeout in the request, lists no task ids yet', async () => {
    const { request, tasks } = await plan({
      type: 'image',
      url: 'https://registry.example.com/v2/ml/ts/manifests/1.0',
      imageCredentialsSecretRef: { name: 'reg' },
      timeout: '90s',
    });
    expect(request).toMatchObject({
      type: 'image',
      username: 'robot',
      password: 'registry-password',
      timeoutMs: 90_000,
    });
    expect(tasks).toEqual([]);
  });
});
