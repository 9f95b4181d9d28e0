import { describe, expect, it } from 'vitest';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadAll } from 'js-yaml';
import {
  ModelPreheat,
  ServedModel,
  ModelPreheatSpec,
  ServedModelSpec,
  parseDuration,
  durationNanos,
  KINDS,
  customResourceDefinition,
} from '../../src/api/index.ts';
import { INVALID } from '../fixtures/invalid-resources.ts';

const EXAMPLES = join(import.meta.dirname, '../../deploy/examples');

describe('examples', () => {
  const files = readdirSync(EXAMPLES).filter((f) => f.endsWith('.yaml'));
  it('has one example per feature', () => expect(files.length).toBeGreaterThanOrEqual(8));
  for (const file of files) {
    it(`${file} parses with the operator's schema`, () => {
      for (const doc of loadAll(readFileSync(join(EXAMPLES, file), 'utf8')) as { kind: string }[]) {
        const schema = doc.kind === 'ModelPreheat' ? ModelPreheat : ServedModel;
        const parsed = schema.safeParse(doc);
        expect(parsed.error?.issues ?? []).toEqual([]);
      }
    });
  }
});

describe('invalid resources are rejected by zod too, naming the same field', () => {
  for (const c of INVALID) {
    it(c.name, () => {
      const schema = c.kind === 'ModelPreheat' ? ModelPreheatSpec : ServedModelSpec;
      const result = schema.safeParse(JSON.parse(JSON.stringify(c.spec)));
      expect(result.success).toBe(false);
      const paths = result.error!.issues.map((i) =>
        ['spec', ...i.path]
          .map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`))
          .join('')
          .replace(/^\./, '')
          .replace(/\.\[/g, '['),
      );
      // A map value's path goes on with its key (spec.headers.X-Foo): the field named is still spec.headers.
      expect(paths.some((p) => p === c.field || p.startsWith(`${c.field}.`))).toBe(true);
      if (c.message) expect(result.error!.issues.map((i) => i.message).join('; ')).toContain(c.message);
    });
  }
});

describe('the validation rules still take what is valid', () => {
  const sm = (extra: Record<string, unknown>) =>
    ServedModelSpec.safeParse({ modelName: 'm', fileName: 'm.mar', ...extra }).error?.issues ?? [];
  const mph = (extra: Record<string, unknown>) =>
    ModelPreheatSpec.safeParse({ url: 'https://h/m.mar', ...extra }).error?.issues ?? [];
  const grace = (gracePeriod: string) =>
    sm({ modelServer: { service: { name: 'ts' } }, deletion: { gracePeriod } });

  it.each([
    'http://10.0.0.1:8081',
    'https://ts-0.ts.ml.svc.cluster.local:8443',
    'http://torchserve',
    'http://[fd00::7]:8081',
    'http://localhost:65535',
  ])('endpoint %s', (e) => expect(sm({ modelServer: { endpoints: [e] } })).toEqual([]));

  it.each(['1.5s', '1500ms', '2m', '1h30m', '0.25h', '0.0001m', '1.5000s', '0s', '4m59.999s'])(
    'duration %s (whole milliseconds, within the bounds)',
    (d) => {
      const ms = parseDuration(d);
      if (ms >= 1000 && ms <= 300_000)
        expect(mph({ manager: { url: 'http://m:8080', requestTimeout: d } })).toEqual([]);
      expect(grace(d)).toEqual([]);
      expect(durationNanos(d) % 1_000_000n).toBe(0n);
    },
  );

  it('durations are read exactly (no float error) and the whole-milliseconds rule never takes a fraction', () => {
    expect(parseDuration('1.005s')).toBe(1005);
    expect(parseDuration('2m0.5ms')).toBe(120_000.5);
    expect(durationNanos('1h0.000001ms')).toBe(3_600_000_000_001n);
    // Every value the rule takes is whole: random values of each unit with 0 to 7 decimals.
    let accepted = 0;
    for (let i = 0; i < 2000; i++) {
      const unit = ['h', 'm', 's', 'ms'][i % 4]!;
      const decimals = String(Math.floor(Math.random() * 1e7)).slice(0, i % 8);
      const d = `${i % 20}${decimals ? '.' : ''}${decimals}${unit}`;
      if (grace(d).length > 0) continue;
      accepted++;
      expect(durationNanos(d) % 1_000_000n, d).toBe(0n);
    }
    expect(accepted).toBeGreaterThan(500);
  });

  it.each(['http://manager:8080', 'https://gw.example.com/dragonfly', 'http://10.0.0.1:8080/'])(
    'manager url %s',
    (url) => expect(mph({ manager: { url } })).toEqual([]),
  );
  it('a manager named by clusterManagerRef alone', () =>
    expect(mph({ manager: { clusterManagerRef: { name: 'shared' } } })).toEqual([]));

  it('headers that are tokens with ordinary values, a tab included', () =>
    expect(
      mph({
        headers: { 'X-Request-Source': 'peerload', "x!#$%&'*+.^_`|~": 'a\tb', Authorization: 'Bearer t' },
      }),
    ).toEqual([]));

  it('durations at their bounds', () => {
    expect(
      mph({ timeout: '1s', retry: { backoff: '1ms' }, manager: { url: 'http://m', requestTimeout: '1s' } }),
    ).toEqual([]);
    const os = { type: 's3', bucket: 'b', credentialsSecretRef: { name: 's' }, keys: ['k'] };
    expect(mph({ url: undefined, objectStorage: { ...os, signedURLExpiry: '168h' } })).toEqual([]);
    expect(
      mph({ url: undefined, objectStorage: { ...os, signedURLExpiry: '1s', region: 'cn-north-1' } }),
    ).toEqual([]);
  });

  it('deletion grace of 0s (let go after one pass)', () =>
    expect(sm({ modelServer: { service: { name: 'ts' } }, deletion: { gracePeriod: '0s' } })).toEqual([]));
});

describe('defaults', () => {
  it('fills in what a user leaves out', () => {
    const spec = ServedModelSpec.parse({
      modelName: 'm',
      fileName: 'm.mar',
      modelServer: { service: { name: 'ts' } },
    });
    expect(spec.workers).toEqual({ min: 1 });
    expect(spec.rollout).toEqual({ maxConcurrent: 10, seedFirst: true, strategy: 'Rolling' });
    expect(spec.modelServer.pluginPath).toBe('p2p');
    expect(spec.modelServer.service?.port).toBe('management');
    const mph = ModelPreheatSpec.parse({ url: 'http://x/y' });
    expect(mph).toMatchObject({
      type: 'file',
      scope: 'single_seed_peer',
      retry: { limit: 3, backoff: '30s' },
    });
  });
});

describe('parseDuration', () => {
  it.each([
    ['90s', 90_000],
    ['1h30m', 5_400_000],
    ['250ms', 250],
    ['1.5h', 5_400_000],
  ])('%s = %d ms', (text, ms) => expect(parseDuration(text)).toBe(ms));
  it('rejects malformed text', () => expect(() => parseDuration('10 minutes')).toThrow(/invalid duration/));
});

describe('generated CRDs', () => {
  for (const info of KINDS) {
    const crd = customResourceDefinition(info) as any;
    const schema = crd.spec.versions[0].schema.openAPIV3Schema;
    it(`${info.kind} is structural: no $schema, no additionalProperties:false, no propertyNames`, () => {
      const text = JSON.stringify(schema);
      expect(text).not.toContain('$schema');
      expect(text).not.toContain('"additionalProperties":false');
      expect(text).not.toContain('propertyNames');
      expect(text).not.toContain('9007199254740991');
    });
    it(`${info.kind} has a status subresource when it has a status, short name, category and scope`, () => {
      expect(crd.spec.versions[0].subresources).toEqual(info.status ? { status: {} } : undefined);
      expect(crd.spec.scope).toBe(info.kind === 'ClusterManager' ? 'Cluster' : 'Namespaced');
      expect(crd.spec.names.shortNames).toEqual(info.shortNames);
      expect(crd.spec.names.categories).toEqual(['peerload']);
    });
    it(`${info.kind} committed YAML is up to date`, () => {
      const committed = readFileSync(
        join(import.meta.dirname, `../../crds/${info.plural}.peerload.io.yaml`),
        'utf8',
      );
      expect(loadAll(committed)[0]).toEqual(JSON.parse(JSON.stringify(crd)));
    });
  }
  it('conditions are a map list keyed by type', () => {
    const crd = customResourceDefinition(KINDS[0]!) as any;
    const conditions = crd.spec.versions[0].schema.openAPIV3Schema.properties.status.properties.conditions;
    expect(conditions['x-kubernetes-list-type']).toBe('map');
    expect(conditions['x-kubernetes-list-map-keys']).toEqual(['type']);
  });
});
