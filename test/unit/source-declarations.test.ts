/**
 * The source seam holds its shape (as driver-declarations.test.ts does for the model servers): every member src/api
 * declares has a kind in src/sources and no kind is missing a declaration; the controllers name no source kind
 * (they import nothing of a kind's client, read no member of spec.source by name); src/api names the kinds only in
 * its source declarations.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { SOURCE_MEMBERS, SOURCES } from '../../src/api/index.ts';
import { ModelSources, modelSources } from '../../src/sources/index.ts';
import { imports, sourceFiles } from '../../scripts/source-shape.ts';

const sources = () =>
  modelSources({
    secretData: () => Promise.reject(new Error('not read')),
    secretValue: () => Promise.reject(new Error('not read')),
    registryHosts: [],
    hubHosts: [],
    hubRedirectHosts: [],
  });

/** The folders that hold a source kind's client: only src/sources (and the CLI) may import them. */
const KIND_FOLDERS = SOURCE_MEMBERS.map((m) => `src/${m}/`);

/**
 * What controllers may still import from a kind's folder, and why. The manager's image preheat (ModelPreheat
 * `type: image`) is a job type of the P2P manager, not a model source: its registry Secret is read as one.
 */
const ALLOWED: Record<string, string> = {
  'src/controllers/modelpreheat/request.ts -> src/oci/credentials.ts':
    "an image preheat's registry Secret (a manager job type, not spec.source)",
};

describe('the source declarations', () => {
  it('every declared member has a kind in the table, and the table refuses a missing one', () => {
    expect(Object.keys(SOURCES).sort()).toEqual([...SOURCE_MEMBERS].sort());
    expect(SOURCE_MEMBERS.length).toBeGreaterThanOrEqual(2);
    expect(() => sources()).not.toThrow();
    expect(() => new ModelSources([])).toThrow(/no source kind for spec\.source\./);
  });

  it('the table picks the kind by the member a spec sets: each refusal names its own field', () => {
    const s = sources();
    expect(
      s.reach({ oci: { reference: 'registry.example.com/m:v1', credentialsSecretRef: { name: 'r' } } }),
    ).toMatchObject({
      allowed: false,
      reason: 'RegistryNotAllowed',
      message: /^spec\.source\.oci\.reference: /,
    });
    expect(
      s.reach({
        huggingface: { repo: 'org/m', revision: 'main', tokenSecretRef: { name: 'hf', key: 'token' } },
      }),
    ).toMatchObject({
      allowed: false,
      reason: 'HubNotAllowed',
      message: /^spec\.source\.huggingface\.endpoint: /,
    });
    expect(s.reach({ oci: { reference: 'registry.example.com/m:v1' } })).toEqual({ allowed: true });
  });
});

describe('the controllers name no source kind', () => {
  const controllers = sourceFiles('src/controllers');

  it('import nothing of a kind (its client, its reference, its errors) but what is listed with a reason', () => {
    expect(controllers.length).toBeGreaterThan(30);
    const named = imports(controllers)
      .filter((i) => KIND_FOLDERS.some((f) => i.to.startsWith(f)))
      .map((i) => `${i.from} -> ${i.to}`);
    expect(named.filter((n) => !(n in ALLOWED))).toEqual([]);
  });

  it('read no member of spec.source by name', () => {
    const member = new RegExp(`\\.(${SOURCE_MEMBERS.join('|')})\\b[?!]?\\.?`);
    const found = controllers.flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .map((line, i) => ({ line, at: `${f}:${i + 1}` }))
        // Comments may name a kind (they say why); code may not.
        .filter(({ line }) => !/^\s*(\*|\/\/|\/\*)/.test(line) && member.test(line.replace(/\/\/.*$/, '')))
        .map(({ at, line }) => `${at}: ${line.trim()}`),
    );
    expect(found).toEqual([]);
  });
});

describe('src/api names the kinds only in its source declarations', () => {
  it('the CR schemas take spec.source and status.source from sources.ts', () => {
    const declarations = new Set([
      'src/api/sources.ts',
      'src/api/source-oci.ts',
      'src/api/source-huggingface.ts',
      'src/api/hub-reference.ts',
      'src/api/index.ts',
    ]);
    const kindFiles = new Set(['./source-oci.ts', './source-huggingface.ts', './hub-reference.ts']);
    const offenders = sourceFiles('src/api')
      .filter((f) => !declarations.has(f))
      .filter((f) =>
        [...readFileSync(f, 'utf8').matchAll(/from '([^']+)'/g)].some((m) => kindFiles.has(m[1]!)),
      );
    expect(offenders).toEqual([]);
  });
});
