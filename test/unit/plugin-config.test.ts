/**
 * The check's reading of the plugin configuration against test/vectors/plugin-config.json, which the plugin's JUnit
 * suite (PluginConfigVectorsTest) runs against PluginConfig.java: the check accepts exactly what the plugin
 * accepts, with the same normalised values, and refuses the rest naming the same field.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CheckInputError } from '../../src/check/input.ts';
import { parsePluginConfig } from '../../src/check/plugin-config.ts';
import { pluginSide } from '../../src/check/plugin-side.ts';
import { objectURL, parseEndpoint } from '../../src/storage/objecturl.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS } from '../../src/storage/taskid.ts';

interface Vectors {
  key: string;
  valid: { why: string; config: unknown; expect: Record<string, unknown> }[];
  invalid: { why: string; field: string | null; config?: unknown; text?: string }[];
}
const vectors = JSON.parse(
  readFileSync(join(import.meta.dirname, '../vectors/plugin-config.json'), 'utf8'),
) as Vectors;

/** Credentials in the vectors: never in a message. */
const SECRETS = ['vector-secret', 'dmVjdG9yLWtleQ', 'AKIAVECTOR'];

describe('plugin configuration (shared vectors with PluginConfig.java)', () => {
  it('has cases on both sides', () => {
    expect(vectors.valid.length).toBeGreaterThanOrEqual(30);
    expect(vectors.invalid.length).toBeGreaterThanOrEqual(50);
  });

  for (const c of vectors.valid) {
    it(`accepts: ${c.why}`, () => {
      const config = parsePluginConfig(JSON.stringify(c.config), 'c.json');
      const loc = config.location;
      const actual: Record<string, unknown> = {
        addr: config.addr,
        headers: config.headers,
        filter: config.filter,
        filterConfigured: config.filterConfigured,
        type: loc.type,
        bucket: loc.type === 'abs' ? loc.container : loc.bucket,
        objectURL: objectURL(loc, vectors.key),
        daemonRule: config.rule,
        maxBytes: config.maxBytes,
        downloadTimeoutMs: config.downloadTimeoutMs,
      };
      for (const [name, value] of Object.entries(c.expect)) expect(actual[name], name).toEqual(value);
    });
  }

  for (const c of vectors.invalid) {
    it(`refuses: ${c.why}`, () => {
      const text = c.text ?? JSON.stringify(c.config);
      let error: unknown;
      try {
        parsePluginConfig(text, 'c.json');
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(CheckInputError);
      const message = (error as Error).message;
      expect(message.startsWith('c.json: ')).toBe(true);
      if (c.field !== null) expect(message).toContain(`field "${c.field}"`);
      for (const s of SECRETS) expect(message).not.toContain(s);
    });
  }
});

describe('the plugin side: what the daemon sees of the downloads', () => {
  const s3 = { type: 's3', bucket_name: 'b', access_key: 'a', secret_key: 's' };
  const side = (config: object) =>
    pluginSide(parsePluginConfig(JSON.stringify({ addr: 'http://node:4001', ...config }), 'c.json'));

  it('an empty filter sends none, so the daemon applies its own default', () => {
    const p = side({ filter: [], object_storage: s3 });
    expect(p.filter).toEqual([...DEFAULT_FILTERED_QUERY_PARAMS]);
    expect(p.filterSource).toBe("empty filter: the daemon's default");
    expect(side({ object_storage: s3 }).filterSource).toBe('s3 default filter');
    expect(side({ filter: ['X-Amz-Date'], object_storage: s3 })).toMatchObject({
      filter: ['X-Amz-Date'],
      filterSource: 'config filter',
    });
  });

  it('takes tag, application and piece length from the headers, whatever their case; empty is none', () => {
    const p = side({
      header: { 'x-dragonfly-tag': 't', 'X-Dragonfly-Application': '', 'X-DRAGONFLY-PIECE-LENGTH': '4mib' },
      object_storage: s3,
    });
    expect(p).toMatchObject({ tag: 't', application: undefined, pieceLength: 4 * 1024 * 1024 });
    expect(p.warnings).toEqual([]);
  });

  it('warns when addr is the endpoint itself, default ports included', () => {
    const p = side({
      addr: 'minio.storage:80',
      object_storage: { ...s3, endpoint: 'http://MINIO.storage', path_style: true },
    });
    expect(p.warnings).toEqual([
      "addr minio.storage:80 is the object storage endpoint itself, not a peer daemon's proxy: every download goes straight to the origin and no preheat is used",
    ]);
    expect(side({ object_storage: { ...s3, endpoint: 'https://minio.storage' } }).warnings).toEqual([]);
  });
});

describe('parseEndpoint (the one endpoint parser)', () => {
  it('splits scheme, authority, host, port and path as written', () => {
    expect(parseEndpoint('HTTP://MinIO:9000/s3//')).toEqual({
      base: 'HTTP://MinIO:9000/s3',
      scheme: 'http',
      authority: 'MinIO:9000',
      host: 'minio',
      port: '9000',
      path: '/s3',
    });
    expect(parseEndpoint('https://[::1]:9443')).toMatchObject({ host: '[::1]', port: '9443', path: '' });
    expect(parseEndpoint('https://h')).toMatchObject({ host: 'h', port: '', path: '' });
  });

  it.each(['ftp://h', 'http://u@h', 'http://h?x', 'http://h#x', 'h:9000', 'http://h h'])(
    'refuses %s',
    (e) => {
      expect(() => parseEndpoint(e)).toThrow(/endpoint must be an absolute http\(s\) URL/);
    },
  );
});
