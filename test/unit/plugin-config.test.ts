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
import { objectURL } from '../../src/storage/objecturl.ts';

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
