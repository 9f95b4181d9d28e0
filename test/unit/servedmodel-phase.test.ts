/**
 * Which phase a ServedModel's pass is in (phase.ts), case by case: the questions that stop a pass, in their order,
 * then the serving steps as the pass does them.
 */
import { defaultStorageHosts } from '../../src/policy/storage-reach.ts';
import { describe, expect, it } from 'vitest';
import type { ServedModel } from '../../src/api/index.ts';
import { servedModelPhase, type PhaseInput } from '../../src/controllers/servedmodel/phase.ts';
import { FINALIZER } from '../../src/controllers/servedmodel/cleanup.ts';
import { parseHostRules, type HostRule } from '../../src/policy/reach.ts';
import { modelSources } from '../../src/sources/index.ts';
import { ModelServerDrivers, type ModelLayout, type ModelServerDriver } from '../../src/servers/driver.ts';

const driver = (name: string, layouts: ModelLayout[], stages = false, probes = false): ModelServerDriver =>
  ({
    name,
    layouts,
    stages,
    probes,
    replica: () => undefined,
    prune: () => undefined,
    failure: () => undefined,
  }) as never;
const drivers = new ModelServerDrivers([
  driver('archives', ['archive']),
  driver('staging', ['archive'], true),
  driver('probing', ['archive'], true, true),
  driver('dirs', ['directory']),
  driver('triton', ['directory']),
]);

const ARCHIVE = {
  modelName: 'resnet',
  fileName: 'models/resnet.mar',
  modelServer: { service: { name: 'ts' }, driver: 'archives' },
};
const DIRECTORY = {
  modelName: 'llama',
  files: { prefix: 'models/llama/' },
  modelServer: { service: { name: 'ts' }, driver: 'dirs' },
  preheat: {
    name: 'llama-preheat',
    objectStorage: { type: 's3', bucket: 'w', credentialsSecretRef: { name: 's3' } },
  },
};

function sm(spec: object, meta: Partial<ServedModel['metadata']> = {}): ServedModel {
  return {
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ServedModel',
    metadata: { name: 'm', namespace: 'ns', uid: 'u', generation: 1, finalizers: [FINALIZER], ...meta },
    spec,
  } as unknown as ServedModel;
}

const SOURCE = {
  modelName: 'simple',
  version: '1',
  source: { oci: { reference: 'registry.example.com/models/simple:v1' } },
  modelServer: {
    service: { name: 'triton' },
    driver: 'triton',
    agent: { port: 8200, tokenSecretRef: { name: 'agent', key: 'token' } },
  },
};
const withCredentials = (reference: string) => ({
  ...SOURCE,
  source: { oci: { reference, credentialsSecretRef: { name: 'registry' } } },
});

/** The operator's sources with the admin lists these cases name (nothing is resolved: only their reach). */
const sourcesWith = (lists: { hubHosts?: HostRule[] } = {}) =>
  modelSources({
    secretData: () => Promise.reject(new Error('not read')),
    secretValue: () => Promise.reject(new Error('not read')),
    registryHosts: parseHostRules('registry.example.com'),
    hubHosts: lists.hubHosts ?? parseHostRules('huggingface.co'),
    hubRedirectHosts: [],
  });

const nothingDone = { finalizing: false, resolving: false, gating: false, listing: false, converging: false };
const input = (over: Partial<PhaseInput>): PhaseInput => ({
  object: sm(ARCHIVE),
  behind: false,
  policy: {
    managerHosts: [],
    endpointHosts: parseHostRules('198.18.0.0/16', 'any'),
    storageHosts: defaultStorageHosts(),
  },
  sources: sourcesWith(),
  drivers,
  done: nothingDone,
  ...over,
});
const kind = (over: Partial<PhaseInput>) => servedModelPhase(input(over)).kind;
const deleted = { deletionTimestamp: '2026-11-27T12:00:00Z' };

describe('servedModelPhase: what stops a pass', () => {
  it('gone: no object in the cache', () => {
    expect(kind({ object: undefined })).toBe('gone');
  });

  it('cacheBehind: the cache holds a version our last write replaced, whatever the object says', () => {
    expect(kind({ behind: true })).toBe('cacheBehind');
    expect(kind({ behind: true, object: sm({ modelName: 1 }) })).toBe('cacheBehind');
  });

  it('invalid: the spec does not parse, naming the field (deleted or not)', () => {
    const phase = servedModelPhase(input({ object: sm({ ...ARCHIVE, modelName: undefined }) }));
    expect(phase).toMatchObject({ kind: 'invalid', message: expect.stringMatching(/^spec\.modelName: /) });
    expect(kind({ object: sm({ ...ARCHIVE, modelName: undefined }, deleted) })).toBe('invalid');
  });

  it('refused: static endpoints outside the allowed hosts, before any driver or deletion', () => {
    const spec = { ...ARCHIVE, modelServer: { endpoints: ['http://10.1.2.3:8081'], driver: 'archives' } };
    const phase = servedModelPhase(input({ object: sm(spec, deleted) }));
    expect(phase).toMatchObject({ kind: 'refused', message: expect.stringContaining('10.1.2.3') });
    const allowed = { ...spec, modelServer: { ...spec.modelServer, endpoints: ['http://198.18.0.1:8081'] } };
    expect(kind({ object: sm(allowed) })).toBe('gating');
  });

  it('refused: a preheat store outside --allowed-storage-hosts, except while deleting (unregistering needs no store)', () => {
    const storage = {
      type: 's3',
      bucket: 'w',
      endpoint: 'http://evil.example:9000',
      credentialsSecretRef: { name: 's3' },
    };
    const spec = { ...DIRECTORY, preheat: { ...DIRECTORY.preheat, objectStorage: storage } };
    const phase = servedModelPhase(input({ object: sm(spec) }));
    expect(phase).toMatchObject({
      kind: 'refused',
      reason: 'StorageEndpointNotAllowed',
      message: expect.stringContaining('evil.example:9000'),
    });
    expect(kind({ object: sm(spec, deleted) })).toBe('deleting');
    expect(kind({ object: sm(DIRECTORY) })).not.toBe('refused');
  });

  it('refused: a source with credentials whose registry is not in --allowed-registry-hosts (anonymous is not)', () => {
    const phase = servedModelPhase(input({ object: sm(withCredentials('evil.example.com/m:v1')) }));
    expect(phase).toMatchObject({
      kind: 'refused',
      reason: 'RegistryNotAllowed',
      message: expect.stringContaining(
        "registry evil.example.com is not in the operator's --allowed-registry-hosts (registry.example.com), so the credentials of spec.source.oci.credentialsSecretRef are not read nor sent",
      ),
    });
    expect(kind({ object: sm(withCredentials('evil.example.com/m:v1'), deleted) })).toBe('deleting');
    expect(kind({ object: sm(withCredentials('registry.example.com/m:v1')) })).toBe('resolving');
    expect(kind({ object: sm({ ...SOURCE, source: { oci: { reference: 'evil.example.com/m:v1' } } }) })).toBe(
      'resolving',
    );
    // Another host under the allowed one's domain is not the allowed host.
    expect(kind({ object: sm(withCredentials('registry.example.com.evil.example/m:v1')) })).toBe('refused');
  });

  it('refused: a Hub source whose token would go outside --allowed-hub-hosts (not a public one, not while deleting)', () => {
    const hub = (huggingface: object) => ({
      modelName: 'tiny',
      source: { huggingface: { repo: 'org/tiny', ...huggingface } },
      modelServer: SOURCE.modelServer,
    });
    const token = { tokenSecretRef: { name: 'hf', key: 'token' } };
    const mirror = hub({ ...token, endpoint: 'http://mirror.example:8080' });
    expect(servedModelPhase(input({ object: sm(mirror) }))).toEqual({
      kind: 'refused',
      reason: 'HubNotAllowed',
      message:
        "spec.source.huggingface.endpoint: host mirror.example:8080 is not in the operator's --allowed-hub-hosts (huggingface.co), so the token of tokenSecretRef is not read nor sent; remove the endpoint to use huggingface.co, remove tokenSecretRef for a public repository, or ask an admin to allow the host",
    });
    expect(kind({ object: sm(mirror, deleted) })).toBe('deleting');
    expect(kind({ object: sm(hub(token)) })).toBe('resolving');
    expect(kind({ object: sm(hub({ endpoint: 'http://mirror.example:8080' })) })).toBe('resolving');
    const none = { ...input({ object: sm(hub(token)) }), sources: sourcesWith({ hubHosts: [] }) };
    expect(servedModelPhase(none)).toMatchObject({ kind: 'refused', reason: 'HubNotAllowed' });
  });

  it('refused: a token toward the allowed Hub over plain HTTP (it would cross the network in clear)', () => {
    const spec = {
      modelName: 'tiny',
      source: {
        huggingface: {
          repo: 'org/tiny',
          endpoint: 'http://huggingface.co',
          tokenSecretRef: { name: 'hf', key: 'token' },
        },
      },
      modelServer: SOURCE.modelServer,
    };
    expect(servedModelPhase(input({ object: sm(spec) }))).toEqual({
      kind: 'refused',
      reason: 'HubNotAllowed',
      message:
        "spec.source.huggingface.endpoint: http://huggingface.co is plain HTTP: the operator's --allowed-hub-hosts allows huggingface.co over https only, so the credentials would cross the network in clear (use https://huggingface.co, or an admin adds http://huggingface.co to the list), so the token of tokenSecretRef is not read nor sent; remove the endpoint to use huggingface.co, remove tokenSecretRef for a public repository, or ask an admin to allow the host",
    });
    const plainAllowed = {
      ...input({ object: sm(spec) }),
      sources: sourcesWith({ hubHosts: parseHostRules('http://huggingface.co') }),
    };
    expect(servedModelPhase(plainAllowed).kind).not.toBe('refused');
  });

  it('a Hub source is a directory, resolved (listed at its commit) before the gate: its owned preheat warms what the listing found', () => {
    const spec = {
      modelName: 'tiny',
      source: { huggingface: { repo: 'org/tiny' } },
      modelServer: SOURCE.modelServer,
      preheat: { create: true },
    };
    const none = nothingDone;
    expect(kind({ object: sm(spec), done: none })).toBe('resolving');
    expect(kind({ object: sm(spec), done: { ...none, resolving: true } })).toBe('gating');
    expect(kind({ object: sm(spec), done: { ...none, resolving: true, gating: true } })).toBe('converging');
    // A bucket directory is still gated first: its listing reads the preheat's task identity.
    const gatedFirst = { ...none };
    expect(kind({ object: sm(DIRECTORY), done: gatedFirst })).toBe('gating');
    // A driver that loads archives only cannot take a source: the spec's own rule says so.
    const archives = { ...spec, modelServer: { service: { name: 'ts' }, driver: 'torchserve' } };
    expect(kind({ object: sm(archives) })).toBe('invalid');
  });

  it('unknownDriver: naming the field and the drivers the operator has (deleted or not)', () => {
    const spec = { ...ARCHIVE, modelServer: { service: { name: 'ts' }, driver: 'tritonn' } };
    expect(servedModelPhase(input({ object: sm(spec) }))).toEqual({
      kind: 'unknownDriver',
      message:
        'spec.modelServer.driver: the operator has no model-server driver named tritonn; use one of archives, staging, probing, dirs, triton',
    });
    expect(kind({ object: sm(spec, deleted) })).toBe('unknownDriver');
  });

  it('deleting: a valid spec with a driver, being deleted (even a layout the driver cannot load)', () => {
    expect(servedModelPhase(input({ object: sm(ARCHIVE, deleted) }))).toMatchObject({
      kind: 'deleting',
      spec: { modelName: 'resnet' },
    });
    expect(
      kind({
        object: sm({ ...DIRECTORY, modelServer: { service: { name: 'ts' }, driver: 'archives' } }, deleted),
      }),
    ).toBe('deleting');
  });

  it('invalid: a Staged rollout with a driver that cannot stage (not deleting, which unregisters as ever)', () => {
    const staged = { ...ARCHIVE, version: '2', rollout: { strategy: 'Staged' } };
    expect(servedModelPhase(input({ object: sm(staged) }))).toEqual({
      kind: 'invalid',
      message: expect.stringMatching(
        /^spec\.rollout\.strategy: the archives model server .*set spec\.rollout\.strategy to Rolling$/,
      ),
    });
    expect(kind({ object: sm(staged, deleted) })).toBe('deleting');
    const stages = { ...staged, modelServer: { service: { name: 'ts' }, driver: 'staging' } };
    expect(kind({ object: sm(stages) })).toBe('gating');
  });

  it('invalid: a canary probe with a driver that sends none; a canary without probe needs none', () => {
    const canary = (driver: string, probe?: object) =>
      sm({
        ...ARCHIVE,
        version: '2',
        modelServer: { service: { name: 'ts' }, driver },
        rollout: { strategy: 'Staged', canary: { replicas: 1, ...(probe ? { probe } : {}) } },
      });
    const probe = { port: 8080, body: '{}' };
    expect(servedModelPhase(input({ object: canary('staging', probe) }))).toEqual({
      kind: 'invalid',
      message: expect.stringMatching(
        /^spec\.rollout\.canary\.probe: the staging driver sends no inference probe/,
      ),
    });
    expect(kind({ object: canary('staging') })).toBe('gating');
    expect(kind({ object: canary('probing', probe) })).toBe('gating');
  });

  it('unsupportedLayout: a directory for a driver of archives, and an archive for one of directories', () => {
    const dir = servedModelPhase(
      input({ object: sm({ ...DIRECTORY, modelServer: { service: { name: 'ts' }, driver: 'archives' } }) }),
    );
    expect(dir).toMatchObject({
      kind: 'unsupportedLayout',
      message: expect.stringContaining('not a directory'),
    });
    const archive = { ...ARCHIVE, modelServer: { service: { name: 'ts' }, driver: 'dirs' } };
    expect(kind({ object: sm(archive) })).toBe('unsupportedLayout');
  });
});

describe('servedModelPhase: the steps of a pass that serves the model', () => {
  it('finalizing: our finalizer is not on the object yet', () => {
    expect(kind({ object: sm(ARCHIVE, { finalizers: [] }) })).toBe('finalizing');
    expect(kind({ object: sm(ARCHIVE, { finalizers: ['someone.else/f'] }) })).toBe('finalizing');
    // Once a pass: an answer to the patch without the finalizer does not loop.
    expect(
      kind({ object: sm(ARCHIVE, { finalizers: [] }), done: { ...nothingDone, finalizing: true } }),
    ).toBe('gating');
  });

  it('an archive: gating, converging, reporting (no listing)', () => {
    expect(kind({})).toBe('gating');
    expect(kind({ done: { ...nothingDone, gating: true } })).toBe('converging');
    expect(kind({ done: { ...nothingDone, gating: true, converging: true } })).toBe('reporting');
  });

  it('a source: resolving before gating (the owned preheat is of the resolved digest), no listing', () => {
    const object = sm(SOURCE);
    expect(kind({ object })).toBe('resolving');
    expect(kind({ object, done: { ...nothingDone, resolving: true } })).toBe('gating');
    expect(kind({ object, done: { ...nothingDone, resolving: true, gating: true } })).toBe('converging');
    expect(kind({ object, done: { ...nothingDone, resolving: true, gating: true, converging: true } })).toBe(
      'reporting',
    );
    expect(kind({ object: sm(SOURCE, { finalizers: [] }) })).toBe('finalizing');
  });

  it('a source for a driver of archives is an invalid spec (the schema asks for a directory driver)', () => {
    const spec = { ...SOURCE, modelServer: { ...SOURCE.modelServer, driver: 'torchserve' } };
    expect(servedModelPhase(input({ object: sm(spec) }))).toMatchObject({
      kind: 'invalid',
      message: expect.stringContaining('spec.source: source places a directory through the peerload agent'),
    });
  });

  it('a directory: gating, listing, converging, reporting', () => {
    const object = sm(DIRECTORY);
    expect(kind({ object })).toBe('gating');
    expect(kind({ object, done: { ...nothingDone, gating: true } })).toBe('listing');
    expect(kind({ object, done: { ...nothingDone, gating: true, listing: true } })).toBe('converging');
    expect(kind({ object, done: { ...nothingDone, gating: true, listing: true, converging: true } })).toBe(
      'reporting',
    );
  });
});
