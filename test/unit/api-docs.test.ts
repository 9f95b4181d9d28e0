/** What `kubectl explain` and the docs tell a user: every field described, no internal references. */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { KINDS, customResourceDefinition } from '../../src/api/crd.ts';
import { apiReferencePage } from '../../src/cli/crds.ts';

const ROOT = join(import.meta.dirname, '../..');
/** Section numbers and file names of the specification, which users do not have. */
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

  it('docs/api.md is the reference generated from src/api (npm run crds)', () => {
    const page = readFileSync(join(ROOT, 'docs/api.md'), 'utf8');
    expect(page).toBe(apiReferencePage());
    for (const info of KINDS) expect(page).toContain(`## ${info.kind} (`);
    // Nested fields have their rows, with required marked.
    expect(page).toContain('| `spec.modelServer.managementTokenSecretRef.key` (required) | string |');
  });

  it('the generated CRDs and the docs carry no internal references', () => {
    const files = [
      ...readdirSync(join(ROOT, 'crds')).map((f) => join(ROOT, 'crds', f)),
      join(ROOT, 'README.md'),
      join(ROOT, 'CONTRIBUTING.md'),
      ...readdirSync(join(ROOT, 'docs'))
        .filter((f) => f.endsWith('.md'))
        .map((f) => join(ROOT, 'docs', f)),
    ];
    expect(files.map((f) => f.slice(ROOT.length + 1))).toContain('docs/api.md');
    for (const f of files) expect(readFileSync(f, 'utf8').match(INTERNAL)?.[0], f).toBeUndefined();
  });
});
