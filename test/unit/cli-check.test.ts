/**
 * `peerload check`: plugin configuration + ModelPreheat/ServedModel manifests -> does every download share the
 * preheat's task id, and why not. Fixtures in test/fixtures/check/.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { run } from '../../src/cli/check.ts';
import { SIGNATURE_PARAMS, locationFromURL, type CheckResult } from '../../src/check/consistency.ts';
import type { ObjectStorageType } from '../../src/api/objectstorage.ts';
import { credentialsFromSecretData, type StorageCredentials } from '../../src/storage/credentials.ts';
import { DEFAULT_FILTERS, objectURL, type StorageLocation } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { taskID } from '../../src/storage/taskid.ts';

const FIXTURES = new URL('../fixtures/check/', import.meta.url).pathname;
const fixture = (name: string) => join(FIXTURES, name);

/** Every value of the fixtures that must never be printed (keys, secrets, a header token). */
const SECRETS = [
  'do-not-print',
  'AKIAPLUGINFIXTURE0001',
  'AKIAOPERATORFIXTURE01',
  'LTAIPLUGINFIXTURE001',
  'Bearer',
  '0123456789abcdef0123456789abcdef',
];
const everything: string[] = [];

interface Outcome {
  code: number;
  out: string;
  err: string;
}

async function check(...argv: string[]): Promise<Outcome> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await run(argv, { out: (l) => out.push(l), err: (l) => err.push(l) });
  everything.push(...out, ...err);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

async function checkJSON(...argv: string[]): Promise<{ code: number; results: CheckResult[] }> {
  const r = await check('--json', ...argv);
  return { code: r.code, results: (JSON.parse(r.out) as { results: CheckResult[] }).results };
}

const tmp = mkdtempSync(join(tmpdir(), 'peerload-check-'));
function tmpFile(name: string, content: string): string {
  const path = join(tmp, name);
  writeFileSync(path, content);
  return path;
}

afterEach(() => {
  vi.useRealTimers();
});

afterAll(() => {
  // Over every run of this file: no secret of the fixtures ever reached stdout or stderr.
  const all = everything.join('\n');
  for (const s of SECRETS) expect(all).not.toContain(s);
});

describe('matching configuration', () => {
  it('s3 config + ServedModel with preheat.create: OK with the task id both sides compute', async () => {
    const r = await check('--plugin-config', fixture('s3-plugin.json'), fixture('servedmodel-s3.yaml'));
    expect(r.code).toBe(0);
    const location: StorageLocation = { type: 's3', bucket: 'models', region: 'eu-west-1' };
    const expected = taskID({
      url: objectURL(location, 'models/resnet-18.mar'),
      filter: DEFAULT_FILTERS.s3,
    });
    expect(r.out).toBe(`OK   models/resnet-18.mar  task ${expected}`);
    expect(r.err).toContain('1 of 1 downloads');

    // The id is the one of real signed URLs, signed at different times by either side.
    const creds: StorageCredentials = { type: 's3', accessKeyID: 'AK', secretAccessKey: 'SK' };
    for (const now of [new Date('2026-01-15T08:00:00Z'), new Date('2026-03-01T17:45:00Z')]) {
      const signed = await signObjectURL(location, 'models/resnet-18.mar', creds, {
        now,
        expiresSeconds: 3600,
      });
      expect(taskID({ url: signed.url, filter: signed.filter })).toBe(expected);
    }
  });

  it('a ModelPreheat of plain URLs (one pasted signed) and a ServedModel gated on it by name', async () => {
    const r = await check('--plugin-config', fixture('s3-plugin.json'), fixture('modelpreheat-urls.yaml'));
    expect(r.code).toBe(0);
    const lines = r.out.split('\n');
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatch(/^OK {3}models\/resnet-18\.mar {2}task [0-9a-f]{64}$/);
    // The pasted URL is shown without its signature.
    expect(lines[1]).toMatch(
      /^OK {3}https:\/\/models\.s3\.eu-west-1\.amazonaws\.com\/models\/bert%20base\.mar {2}task [0-9a-f]{64}$/,
    );
  });

  it('--json gives both sides, the filters and the shared id', async () => {
    const { code, results } = await checkJSON(
      '--plugin-config',
      fixture('s3-plugin.json'),
      fixture('servedmodel-s3.yaml'),
    );
    expect(code).toBe(0);
    expect(results).toHaveLength(1);
    const [r] = results;
    expect(r).toMatchObject({
      status: 'OK',
      label: 'models/resnet-18.mar',
      source: 'ServedModel ml/resnet (preheat.create)',
      reasons: [],
      preheat: {
        url: 'https://models.s3.eu-west-1.amazonaws.com/models/resnet-18.mar',
        filter: [...DEFAULT_FILTERS.s3],
      },
      plugin: { url: 'https://models.s3.eu-west-1.amazonaws.com/models/resnet-18.mar' },
    });
    expect(r!.taskID).toBe(r!.preheat!.taskID);
    expect(r!.taskID).toBe(r!.plugin!.taskID);
  });
});

describe('misses, each with its reason', () => {
  it('plugin filter without X-Amz-Signature', async () => {
    const r = await check(
      '--plugin-config',
      fixture('s3-plugin-wrong-filter.json'),
      fixture('servedmodel-s3.yaml'),
    );
    expect(r.code).toBe(1);
    expect(r.out).toContain('MISS models/resnet-18.mar');
    expect(r.out).toContain('only the preheat filters X-Amz-Signature');
    expect(r.out).toContain(
      'plugin: signature parameter X-Amz-Signature is not filtered: the task id changes with every signing',
    );
    expect(r.err).toContain('0 of 1 downloads');
  });

  it('different region, bucket and tag', async () => {
    const { code, results } = await checkJSON(
      '--plugin-config',
      fixture('s3-plugin-mismatch.json'),
      fixture('servedmodel-s3.yaml'),
    );
    expect(code).toBe(1);
    expect(results[0]!.status).toBe('MISS');
    expect(results[0]!.reasons).toEqual([
      { code: 'region', message: 'region: preheat eu-west-1, plugin us-west-2' },
      { code: 'bucket', message: 'bucket: preheat models, plugin other-models' },
      { code: 'tag', message: 'tag: preheat (none), plugin "v2"' },
    ]);
    expect(results[0]!.taskID).toBeUndefined();
  });

  it('path style on one side, virtual-hosted on the other (same endpoint)', async () => {
    const r = await check(
      '--plugin-config',
      fixture('s3-plugin-minio-path-style.json'),
      fixture('servedmodel-minio.yaml'),
    );
    expect(r.code).toBe(1);
    expect(r.out.split('\n')).toEqual([
      'MISS models/resnet-18.mar',
      '     host style: preheat virtual-hosted, plugin path style',
    ]);
  });

  it('AWS on one side, an S3-compatible endpoint on the other', async () => {
    const r = await check(
      '--plugin-config',
      fixture('s3-plugin-minio-path-style.json'),
      fixture('servedmodel-s3.yaml'),
    );
    expect(r.code).toBe(1);
    expect(r.out).toContain('endpoint: preheat (none: AWS S3), plugin http://minio.storage.svc:9000');
    expect(r.out).toContain('host style: preheat virtual-hosted, plugin path style');
  });

  it('oss preheat with the seed filter (Expires, Signature) keeps OSSAccessKeyId in its task id', async () => {
    const r = await check(
      '--plugin-config',
      fixture('oss-plugin.json'),
      fixture('modelpreheat-oss-seed-filter.yaml'),
    );
    expect(r.code).toBe(1);
    expect(r.out).toContain('MISS resnet-18.mar');
    expect(r.out).toContain('MISS bert-base.mar');
    expect(r.out).toContain('only the plugin filters OSSAccessKeyId');
    expect(r.out).toContain('preheat: signature parameter OSSAccessKeyId is not filtered');
  });

  it('key, application and piece length', async () => {
    const config = tmpFile(
      'app.json',
      JSON.stringify({
        header: { 'x-dragonfly-application': 'torchserve', 'X-Dragonfly-Piece-Length': '8mib' },
        object_storage: {
          type: 's3',
          bucket_name: 'models',
          region: 'eu-west-1',
          access_key: 'AKIAPLUGINFIXTURE0001',
          secret_key: 'do-not-print',
        },
      }),
    );
    const manifest = tmpFile(
      'mp.yaml',
      [
        'apiVersion: peerload.io/v1alpha1',
        'kind: ModelPreheat',
        'metadata: {name: p}',
        'spec:',
        '  url: https://models.s3.eu-west-1.amazonaws.com/models/resnet-18.mar',
        '  application: torchserve',
        '  pieceLength: 4194304',
        '---',
        'apiVersion: peerload.io/v1alpha1',
        'kind: ServedModel',
        'metadata: {name: s}',
        'spec:',
        '  modelName: m',
        '  fileName: models/other.mar',
        '  modelServer: {endpoints: ["http://ts:8081"]}',
        '  preheat: {name: p}',
      ].join('\n'),
    );
    const { code, results } = await checkJSON('--plugin-config', config, manifest);
    expect(code).toBe(1);
    expect(results.map((r) => [r.label, r.reasons.map((x) => x.message)])).toEqual([
      [
        'models/other.mar',
        [
          'key: preheat "models/resnet-18.mar", plugin "models/other.mar"',
          'piece length: preheat 4194304, plugin 8388608',
        ],
      ],
    ]);
  });

  it('a ServedModel that nothing preheats', async () => {
    const manifest = tmpFile(
      'sm.yaml',
      [
        'apiVersion: peerload.io/v1alpha1',
        'kind: ServedModel',
        'metadata: {name: s}',
        'spec:',
        '  modelName: m',
        '  fileName: models/resnet-18.mar',
        '  modelServer: {endpoints: ["http://ts:8081"]}',
        '---',
        'apiVersion: peerload.io/v1alpha1',
        'kind: ServedModel',
        'metadata: {name: t}',
        'spec:',
        '  modelName: m',
        '  fileName: models/resnet-18.mar',
        '  modelServer: {endpoints: ["http://ts:8081"]}',
        '  preheat: {name: absent}',
      ].join('\n'),
    );
    const r = await check('--plugin-config', fixture('s3-plugin.json'), manifest);
    expect(r.code).toBe(1);
    expect(r.out).toContain('not preheated: spec.preheat is not set');
    expect(r.out).toContain(
      'spec.preheat.name: ModelPreheat default/absent is not among the given manifests',
    );
  });
});

describe('P2P bypass and daemon version', () => {
  const s3 = {
    type: 's3',
    bucket_name: 'models',
    region: 'eu-west-1',
    access_key: 'AKIAPLUGINFIXTURE0001',
    secret_key: 'plugin-secret-key-fixture-do-not-print',
  };

  it('warns when no addr is set (the default loopback proxy must be a peer daemon), without failing', async () => {
    const r = await check(
      '--plugin-config',
      tmpFile('noaddr.json', JSON.stringify({ object_storage: s3 })),
      fixture('servedmodel-s3.yaml'),
    );
    expect(r.code).toBe(0);
    expect(r.err).toContain('warning: ');
    expect(r.err).toContain('addr is not set: the plugin uses the peer proxy at http://127.0.0.1:4001');
    const fine = await check('--plugin-config', fixture('s3-plugin.json'), fixture('servedmodel-s3.yaml'));
    expect(fine.err).not.toContain('warning');
  });

  it('warns when addr is the object storage endpoint: every download would bypass P2P', async () => {
    const config = {
      addr: 'http://MinIO.storage.svc:9000/',
      object_storage: {
        ...s3,
        region: undefined,
        endpoint: 'http://minio.storage.svc:9000',
        path_style: true,
      },
    };
    const r = await check(
      '--json',
      '--plugin-config',
      tmpFile('origin.json', JSON.stringify(config)),
      fixture('servedmodel-minio.yaml'),
    );
    const warnings = (JSON.parse(r.out) as { warnings: string[] }).warnings;
    expect(warnings).toEqual([
      "addr minio.storage.svc:9000 is the object storage endpoint itself, not a peer daemon's proxy: every download goes straight to the origin and no preheat is used",
    ]);
  });

  it("computes both sides' ids with the daemon version's rule and reports it", async () => {
    for (const [version, rule] of [
      [undefined, '1.4'],
      ['1.4.2', '1.4'],
      ['v1.5.3', '1.5.3+'],
    ] as const) {
      const config = { addr: '127.0.0.1:4001', daemon_version: version, object_storage: s3 };
      const { code, results } = await checkJSON(
        '--plugin-config',
        tmpFile('v.json', JSON.stringify(config)),
        fixture('servedmodel-s3.yaml'),
      );
      expect(code).toBe(0);
      expect(results[0]!.plugin!.rule).toBe(rule);
      expect(results[0]!.preheat!.rule).toBe(rule);
    }
  });
});

describe('bad input: exit 2, naming the field, never a value', () => {
  it('plugin config without bucket_name', async () => {
    const r = await check(
      '--plugin-config',
      fixture('bad-missing-bucket.json'),
      fixture('servedmodel-s3.yaml'),
    );
    expect(r.code).toBe(2);
    expect(r.out).toBe('');
    expect(r.err).toContain('bad-missing-bucket.json: field "object_storage.bucket_name" is required');
  });

  it.each([
    [
      'unknown field',
      { object_storage: { type: 's3', bucket_name: 'b', access_key: 'a', secret_key: 's', x: 1 } },
      'unknown field "object_storage.x"',
    ],
    [
      'bad type',
      { object_storage: { type: 'ftp' } },
      'field "object_storage.type" type must be one of s3, oss, gcs, abs',
    ],
    ['no object_storage', {}, 'field "object_storage" is required'],
    [
      'oss without endpoint',
      {
        object_storage: {
          type: 'oss',
          bucket_name: 'b',
          access_key_id: 'i',
          access_key_secret: 'do-not-print',
        },
      },
      'field "object_storage.endpoint" is required',
    ],
    [
      'path_style without endpoint',
      {
        object_storage: { type: 's3', bucket_name: 'b', access_key: 'a', secret_key: 's', path_style: true },
      },
      'field "object_storage.path_style" needs object_storage.endpoint',
    ],
    [
      'filter not names',
      {
        filter: ['a&b'],
        object_storage: { type: 'gcs', bucket_name: 'b', project_id: 'p', service_account_path: '/sa.json' },
      },
      'field "filter[0]" must be a non-empty query parameter name',
    ],
    [
      'reserved header',
      {
        header: { 'X-Dragonfly-Filter': 'x' },
        object_storage: { type: 'abs', account_name: 'acct', account_key: 'AAAA', container_name: 'c' },
      },
      'field "header.X-Dragonfly-Filter": this header is set by the plugin',
    ],
    [
      'Use-P2P header (the plugin always sends it)',
      {
        header: { 'x-dragonfly-use-p2p': 'false' },
        object_storage: { type: 's3', bucket_name: 'b', access_key: 'a', secret_key: 's' },
      },
      'field "header.x-dragonfly-use-p2p": the plugin always sends X-Dragonfly-Use-P2P: true',
    ],
    [
      'bad daemon version',
      {
        daemon_version: 'newest',
        object_storage: { type: 's3', bucket_name: 'b', access_key: 'a', secret_key: 's' },
      },
      'field "daemon_version" must be "1.4", "1.5.3+" or the peer daemon\'s (dragonfly-client) version',
    ],
    [
      'bad piece length',
      {
        header: { 'X-Dragonfly-Piece-Length': 'big' },
        object_storage: { type: 's3', bucket_name: 'b', access_key: 'a', secret_key: 's' },
      },
      'field "header.X-Dragonfly-Piece-Length": not a size',
    ],
  ])('%s', async (_what, config, message) => {
    const r = await check(
      '--plugin-config',
      tmpFile('c.json', JSON.stringify(config)),
      fixture('servedmodel-s3.yaml'),
    );
    expect(r.code).toBe(2);
    expect(r.err).toContain(message);
  });

  it('invalid JSON: the position only, not the text around it', async () => {
    const r = await check(
      '--plugin-config',
      tmpFile('broken.json', '{"object_storage": {"secret_key": "do-not-print" oops}}'),
      fixture('servedmodel-s3.yaml'),
    );
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/broken\.json: not valid JSON \(at position \d+/);
  });

  it('a bad manifest names the document and the field', async () => {
    const r = await check('--plugin-config', fixture('s3-plugin.json'), fixture('bad-manifest.yaml'));
    expect(r.code).toBe(2);
    expect(r.err).toContain(
      'bad-manifest.yaml: document 1 (ModelPreheat broken): spec.objectStorage.bucket: bucket is required',
    );
  });

  it('invalid YAML, a missing file, missing arguments', async () => {
    const yaml = await check('--plugin-config', fixture('s3-plugin.json'), tmpFile('y.yaml', 'a: [b\nc: d'));
    expect(yaml.code).toBe(2);
    expect(yaml.err).toMatch(/y\.yaml: not valid YAML at line \d+, column \d+/);
    const missing = await check('--plugin-config', fixture('nope.json'), fixture('servedmodel-s3.yaml'));
    expect(missing.code).toBe(2);
    expect(missing.err).toContain('cannot read');
    expect((await check(fixture('servedmodel-s3.yaml'))).err).toContain('--plugin-config is required');
    expect((await check('--plugin-config', fixture('s3-plugin.json'))).err).toContain(
      'at least one manifest',
    );
    const none = await check(
      '--plugin-config',
      fixture('s3-plugin.json'),
      tmpFile('n.yaml', 'kind: Service\n'),
    );
    expect(none.code).toBe(2);
    expect(none.err).toContain('no ModelPreheat or ServedModel');
  });
});

describe('building blocks', () => {
  it("locationFromURL reads the providers' host forms and the plugin endpoint", () => {
    expect(locationFromURL('https://m.s3.eu-west-1.amazonaws.com/a/b%20c.mar')).toEqual({
      location: { type: 's3', bucket: 'm', region: 'eu-west-1' },
      key: 'a/b c.mar',
    });
    expect(locationFromURL('https://m.oss-cn-hangzhou.aliyuncs.com/k')).toEqual({
      location: { type: 'oss', bucket: 'm', endpoint: 'https://oss-cn-hangzhou.aliyuncs.com' },
      key: 'k',
    });
    expect(locationFromURL('https://storage.googleapis.com/b/x/y')?.key).toBe('x/y');
    expect(locationFromURL('https://acct.blob.core.windows.net/c/k')?.location).toMatchObject({
      type: 'abs',
      accountName: 'acct',
      container: 'c',
    });
    const minio: StorageLocation = {
      type: 's3',
      bucket: 'b',
      endpoint: 'http://minio:9000',
      pathStyle: true,
    };
    expect(locationFromURL('http://minio:9000/b/k.mar', minio)?.location).toMatchObject({ pathStyle: true });
    expect(locationFromURL('http://b.minio:9000/k.mar', minio)?.location).toMatchObject({
      bucket: 'b',
      endpoint: 'http://minio:9000',
    });
    expect(locationFromURL('http://elsewhere/k.mar', minio)).toBeUndefined();
  });

  // The table the check reasons with must be what the signers really add, and its "signing" parameters exactly
  // those whose values change between two signings (on different days, with the same credentials).
  const kinds: [ObjectStorageType, StorageLocation, StorageCredentials][] = [
    ['s3', { type: 's3', bucket: 'b' }, { type: 's3', accessKeyID: 'AK', secretAccessKey: 'SK' }],
    [
      'oss',
      { type: 'oss', bucket: 'b', endpoint: 'https://oss-cn-hangzhou.aliyuncs.com' },
      { type: 'oss', accessKeyID: 'AK', accessKeySecret: 'SK' },
    ],
    ['abs', { type: 'abs', accountName: 'acct', container: 'c' }, { type: 'abs', accountKey: 'AAAA' }],
    [
      'gcs',
      { type: 'gcs', bucket: 'b' },
      credentialsFromSecretData(
        'gcs',
        {
          'service_account.json': readFileSync(
            new URL('../../plugin/src/test/resources/gcs-conformance-service-account.json', import.meta.url),
            'utf8',
          ),
        },
        { encoding: 'utf8' },
      ),
    ],
  ];
  it.each(kinds)('%s signature parameters', async (type, location, creds) => {
    const at = async (iso: string) => {
      vi.useFakeTimers({ toFake: ['Date'], now: new Date(iso) });
      const s = await signObjectURL(location, 'k', creds, { now: new Date(iso), expiresSeconds: 3600 });
      return new URL(s.url).searchParams;
    };
    const one = await at('2026-01-15T08:00:00Z');
    const two = await at('2026-01-16T09:30:00Z');
    const table = SIGNATURE_PARAMS[type].filter((p) => p.varies !== 'session');
    expect([...one.keys()].sort()).toEqual(table.map((p) => p.name).sort());
    const changing = [...one.keys()].filter((k) => one.get(k) !== two.get(k)).sort();
    expect(changing).toEqual(
      table
        .filter((p) => p.varies === 'signing')
        .map((p) => p.name)
        .sort(),
    );
    for (const p of table.filter((x) => x.varies === 'constant')) expect(one.get(p.name)).toBe(p.value);
  });
});

describe('directories in the manifests', () => {
  it('a directory preheat and a ServedModel of files are named in notes, not compared with the plugin', async () => {
    const manifests = tmpFile(
      'directories.yaml',
      `apiVersion: peerload.io/v1alpha1
kind: ModelPreheat
metadata: {name: llama, namespace: ml}
spec:
  objectStorage:
    type: s3
    bucket: models
    region: eu-west-1
    credentialsSecretRef: {name: s3}
    prefix: llm/llama/
---
apiVersion: peerload.io/v1alpha1
kind: ServedModel
metadata: {name: llama, namespace: ml}
spec:
  modelName: llama
  files: {prefix: llm/llama/}
  modelServer: {endpoints: ['http://198.18.0.1:8000']}
  preheat: {name: llama, objectStorage: {type: s3, bucket: models, region: eu-west-1, credentialsSecretRef: {name: s3}}}
`,
    );
    const r = await check('--json', '--plugin-config', fixture('s3-plugin.json'), manifests);
    const out = JSON.parse(r.out) as { results: CheckResult[]; notes: string[] };
    expect(out.results).toEqual([]);
    expect(out.notes).toEqual([
      'ModelPreheat ml/llama: a directory (objectStorage.prefix) is not checked from manifests (its files are known by listing): use `peerload taskid --prefix` or `peerload check --agent-spec`',
      'ServedModel ml/llama: a directory (spec.files) is placed by the agent, not downloaded by the plugin: use `peerload check --agent-spec`',
    ]);
  });
});
