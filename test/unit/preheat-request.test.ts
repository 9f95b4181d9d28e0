import { describe, expect, it } from 'vitest';
import { ModelPreheatSpec, ServedModelSpec } from '../../src/api/index.ts';
import { ownedPreheatSpec } from '../../src/api/servedmodel.ts';
import { planObjects, planPreheat } from '../../src/controllers/modelpreheat/request.ts';
import type { SecretReader } from '../../src/controllers/secrets.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS, taskID } from '../../src/storage/taskid.ts';
import { objectURL } from '../../src/storage/objecturl.ts';
import { credentialTag, registryCredentialTag } from '../../src/storage/credential-tag.ts';

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
    // The spec's tag with the credentials': only holders of the same secret name these tasks.
    const credential = credentialTag(location, {
      type: 's3',
      accessKeyID: 'AKIDEXAMPLE',
      secretAccessKey: 'wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY',
    });
    expect(request.tag).toBe(`v1/${credential}`);
    // The id a later download of the bare object URL (re-signed at any time, with the same credentials) will have.
    expect(tasks[0]!.taskID).toBe(
      taskID({
        url: objectURL(location, 'a/one.mar'),
        filter: request.filteredQueryParams,
        tag: `v1/${credential}`,
      }),
    );
    expect(tasks[0]!.taskID).not.toBe(
      taskID({ url: objectURL(location, 'a/one.mar'), filter: request.filteredQueryParams, tag: 'v1' }),
    );
    expect(JSON.stringify(request)).not.toContain('wJalrXUtnFEMI');
    expect(JSON.stringify(tasks)).not.toContain('Signature=');
  });

  it("names a private object's task by its credentials: tenants with the same secret share it, another secret (or none) cannot name it", async () => {
    const spec = ModelPreheatSpec.parse({
      objectStorage: {
        type: 's3',
        bucket: 'models',
        region: 'eu-west-1',
        keys: ['m.mar'],
        credentialsSecretRef: { name: 's3' },
      },
      evictOnDelete: true,
    });
    const creds = (secretAccessKey: string, accessKeyID = 'AKIDEXAMPLE') =>
      ({ type: 's3', accessKeyID, secretAccessKey }) as const;
    const idOf = async (c: ReturnType<typeof creds>) =>
      (await planObjects(spec, ['m.mar'], c, { bio: 't' })).tasks[0]!.taskID;
    const tenantA = await idOf(creds('secret-of-a'));
    // Another namespace's Secret holding the same secret (even under another access key id): the same task.
    expect(await idOf(creds('secret-of-a', 'AKIDOTHER'))).toBe(tenantA);
    // Another tenant's secret for the same bucket and key: another task, so its eviction (delete_task by these
    // ids) never touches tenant A's.
    expect(await idOf(creds('secret-of-b'))).not.toBe(tenantA);
    // The same URL preheated without credentials (spec.url): the public task, not tenant A's either.
    const bare = await planPreheat(
      ModelPreheatSpec.parse({
        url: objectURL({ type: 's3', bucket: 'models', region: 'eu-west-1' }, 'm.mar'),
      }),
      'ns',
      secrets,
      { bio: 't' },
    );
    expect(bare.tasks[0]!.taskID).not.toBe(tenantA);
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

  it("shows the task id of the peer daemon's version: spec.peerDaemonVersion, else the operator's default", async () => {
    // Unsorted, with ~: the two rules part (client 1.4 keeps the order and escapes ~; >= 1.5.3 sorts).
    const url = 'https://cdn.example.com/m.mar?v=2&a=~1&X-Amz-Signature=abc';
    const filter = DEFAULT_FILTERED_QUERY_PARAMS;
    const old = taskID({ url, filter, rule: '1.4' });
    const sorted = taskID({ url, filter, rule: '1.5.3+' });
    expect(old).not.toBe(sorted);
    const at = new Date('2026-01-02T03:04:05Z');
    const spec = (extra: object) => ModelPreheatSpec.parse({ url, ...extra });
    expect((await planPreheat(spec({}), 'ns', secrets, { bio: 't' }, at)).tasks[0]!.taskID).toBe(old);
    expect(
      (await planPreheat(spec({}), 'ns', secrets, { bio: 't' }, at, undefined, '1.5.3+')).tasks[0]!.taskID,
    ).toBe(sorted);
    for (const [version, id] of [
      ['1.5.3', sorted],
      ['v1.6.0', sorted],
      ['1.4.2', old],
      ['1.4', old],
    ] as const) {
      const p = await planPreheat(
        spec({ peerDaemonVersion: version }),
        'ns',
        secrets,
        { bio: 't' },
        at,
        undefined,
        '1.5.3+',
      );
      expect(p.tasks[0]!.taskID, version).toBe(id);
    }
    expect(ModelPreheatSpec.safeParse({ url, peerDaemonVersion: 'latest' }).error?.issues[0]).toMatchObject({
      path: ['peerDaemonVersion'],
      message: expect.stringContaining('must be "1.4", "1.5.3+" or'),
    });
  });

  it("a ServedModel's preheat.peerDaemonVersion reaches the ModelPreheat it owns", () => {
    const spec = ServedModelSpec.parse({
      modelName: 'm',
      fileName: 'm.mar',
      modelServer: { endpoints: ['http://ts:8081'] },
      preheat: {
        create: true,
        objectStorage: { type: 's3', bucket: 'b', credentialsSecretRef: { name: 's' } },
        peerDaemonVersion: '1.5.3',
      },
    });
    expect(ModelPreheatSpec.parse(ownedPreheatSpec(spec)).peerDaemonVersion).toBe('1.5.3');
    const { preheat: _p, ...without } = spec;
    const plain = ServedModelSpec.parse({
      ...without,
      preheat: {
        create: true,
        objectStorage: { type: 's3', bucket: 'b', credentialsSecretRef: { name: 's' } },
      },
    });
    expect(ModelPreheatSpec.parse(ownedPreheatSpec(plain)).peerDaemonVersion).toBeUndefined();
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

  it("image with credentials: the job's tag is the registry credentials' (the agents' blobs name it), none anonymous", async () => {
    const url = 'https://registry.example.com/v2/ml/ts/manifests/sha256:' + 'a'.repeat(64);
    const credential = registryCredentialTag(url, 'ml/ts', {
      username: 'robot',
      password: 'registry-password',
    });
    const tagged = await plan({ type: 'image', url, imageCredentialsSecretRef: { name: 'reg' } });
    expect(tagged.request.tag).toBe(credential);
    // The same for the blob URLs the manager derives and the agents fetch (same registry and repository).
    expect(
      registryCredentialTag('https://registry.example.com', 'ml/ts', {
        username: 'robot',
        password: 'registry-password',
      }),
    ).toBe(credential);
    const withOwn = await plan({ type: 'image', url, imageCredentialsSecretRef: { name: 'reg' }, tag: 'v1' });
    expect(withOwn.request.tag).toBe(`v1/${credential}`);
    const anonymous = await plan({ type: 'image', url });
    expect(anonymous.request.tag).toBeUndefined();
  });
});
