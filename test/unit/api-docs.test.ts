/** What `kubectl explain` and the README tell a user: every field described, no internal references. */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { KINDS, customResourceDefinition } from '../../src/api/crd.ts';

const ROOT = join(import.meta.dirname, '../..');
/** "seed 2.2", "(seed)", "seed `filter`": references to a document users do not have. */
const INTERNAL = /\bseed (\d|`)|\(seed[;)]|shared\/contracts|design\.md/;

function fields(node: any, path: string, out: [string, any][]): [string, any][] {
  for (const [k, v] of Object.entries<any>(node?.properties ?? {})) {
    out.push([`${path}.${k}`, v]);
    fields(v, `${path}.${k}`, out);
  }
  if (node?.items) fields(node.items, `${path}[]`, out);
  for (const b of node?.anyOf ?? []) fields(b, path, out);
  return out;
}

describe('API documentation', () => {
  for (const info of KINDS) {
    it(`${info.kind}: every spec and status field has a description (kubectl explain)`, () => {
      const schema = (customResourceDefinition(info) as any).spec.versions[0].schema.openAPIV3Schema;
      const all = fields(
        {
          properties: {
            spec: schema.properties.spec,
            ...(schema.properties.status ? { status: schema.properties.status } : {}),
          },
        },
        info.kind,
        [],
      );
      // A kind without status (ClusterManager) has fewer fields, each described all the same.
      expect(all.length).toBeGreaterThan(info.status ? 40 : 12);
      expect(all.filter(([, v]) => !v.description).map(([p]) => p)).toEqual([]);
      expect(
        all.filter(([, v]) => INTERNAL.test(v.description)).map(([p, v]) => `${p}: ${v.description}`),
      ).toEqual([]);
    });
  }

  it('the generated CRDs and the README carry no internal references and no links outside the repository', () => {
    const files = [
      ...readdirSync(join(ROOT, 'crds')).map((f) => join(ROOT, 'crds', f)),
      join(ROOT, 'README.md'),
    ];
    for (const f of files) {
      const text = readFileSync(f, 'utf8');
      expect(text.match(INTERNAL)?.[0], f).toBeUndefined();
      // Relative links that climb out of the repository.
      expect(text.match(/\]\(\.\.\/[^)]*\)|`\.\.\/[^`]*`/)?.[0], f).toBeUndefined();
    }
  });
});
