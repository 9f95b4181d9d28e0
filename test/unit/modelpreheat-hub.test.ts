/**
 * A ModelPreheat's spec.source.huggingface: the schema (what it takes, with which defaults), and the spec -> job
 * mapping against the Hub emulator: the job a ModelPreheat of a repository creates is the one a ServedModel's owned
 * preheat of the same source makes (same URLs, filter, no tag, no headers, same task ids), the token never in the
 * job; the refresh annotation, the content key with the commit, and how the Hub's refusals read as failures.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from 'undici';
import { ModelPreheatSpec, ownedPreheatSpec, type ModelPreheat } from '../../src/api/index.ts';
import { HubSources } from '../../src/sources/huggingface.ts';
import { modelSources, sourceOwner } from '../../src/sources/index.ts';
import {
  SourcePreheats,
  SourceJobError,
  sourceRefreshed,
} from '../../src/controllers/modelpreheat/source.ts';
import { nextStep } from '../../src/controllers/modelpreheat/decide.ts';
import { describeFailure } from '../../src/controllers/modelpreheat/failures.ts';
import { planPreheat } from '../../src/controllers/modelpreheat/request.ts';
import { contentKey } from '../../src/controllers/modelpreheat/targets.ts';
import type { SecretReader } from '../../src/controllers/secrets.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { forgetSecrets } from '../../src/redact.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import { hubServedModel } from '../support/hub-served-model.ts';

const TOKEN = 'hf_modelPreheatUnitToken0123456789abc';
const big = Buffer.alloc(5 * 1024 * 1024, 4);
const small = Buffer.alloc(1024, 5);
const tree = {
  'config.json': '{"a":1}',
  'model.safetensors': { content: big, lfs: true },
  'extra.bin': { content: small, lfs: true },
  'tokenizer/vocab.txt': 'a b c',
};

let hub: HubEmulator;
const dispatcher = new Agent();
const tokenHosts = parseHostRules('http://127.0.0.1');
const reads: string[] = [];
const secrets = {
  value: async (_ns: string, ref: { name: string; key: string }) => {
    reads.push(ref.name);
    return TOKEN;
  },
} as unknown as SecretReader;

const preheatSpec = (huggingface: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
  ModelPreheatSpec.parse({ source: { huggingface: { endpoint: hub.url, ...huggingface } }, ...extra });

const preheat = (spec: ModelPreheatSpec, meta: Partial<ModelPreheat['metadata']> = {}, status?: object) =>
  ({
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ModelPreheat',
    metadata: { name: 'p', namespace: 'ns', uid: 'u1', generation: 1, ...meta },
    spec,
    ...(status ? { status } : {}),
  }) as ModelPreheat;

beforeAll(async () => {
  hub = await startHubEmulator({
    repos: [
      { id: 'org/tiny', commits: [tree] },
      { id: 'org/private', commits: [tree], private: true },
      { id: 'org/gitonly', commits: [{ 'config.json': '{}' }], private: true },
    ],
    tokens: { [TOKEN]: ['org/private', 'org/gitonly'] },
  });
});
afterAll(async () => {
  await hub.close();
  await dispatcher.close();
  forgetSecrets();
});

describe('spec.source.huggingface of a ModelPreheat', () => {
  it('takes a repository with the ServedModel source fields, and the targeting options', () => {
    const spec = ModelPreheatSpec.parse({
      source: {
        huggingface: {
          repo: 'org/tiny',
          include: ['*.safetensors'],
          exclude: ['original/**'],
          maxFiles: 10,
          maxBytes: 1024 ** 3,
          tokenSecretRef: { name: 'hf', key: 'token' },
          endpoint: 'https://hub.example.com',
        },
      },
      scope: 'all_peers',
      targets: { ips: ['10.0.0.1'] },
    });
    expect(spec.source!.huggingface).toMatchObject({ repo: 'org/tiny', revision: 'main' });
    expect(spec.type).toBe('file');
  });
});

/** The ModelPreheat controller's source jobs, with the Hub kind reaching the emulator. */
const sourcePreheats = () =>
  new SourcePreheats(
    modelSources({
      secretData: () => Promise.reject(new Error('no registry Secret in these cases')),
      secretValue: secrets.value.bind(secrets),
      registryHosts: [],
      hubHosts: tokenHosts,
      hubRedirectHosts: tokenHosts,
      hubDispatcher: dispatcher,
    }),
    secrets,
  );

describe('the job of a repository', () => {
  const plan = (spec: ModelPreheatSpec, obj = preheat(spec)) =>
    sourcePreheats().plan(obj, spec, 'bio', '1.4', contentKey);

  it("is the job a ServedModel's owned preheat of the same source makes: URLs, filter, no tag or headers, task ids", async () => {
    const spec = preheatSpec({ repo: 'org/tiny' }, { scope: 'all_peers', targets: { ips: ['10.0.0.1'] } });
    const mine = await plan(spec);

    const sm = hubServedModel(hub.url, { repo: 'org/tiny' }, { uid: 'u2' }, undefined, {
      preheat: { create: true, scope: 'all_peers', targetNodes: false },
    });
    const found = await new HubSources({
      secretValue: secrets.value.bind(secrets),
      tokenHosts,
      redirectHosts: tokenHosts,
      dispatcher,
    }).files(sourceOwner(sm), sm.spec.source!.huggingface!, 'spec.source.huggingface');
    if (!found.ok) throw new Error(found.message);
    const owned = ModelPreheatSpec.parse(ownedPreheatSpec(sm.spec, [], found.preheat));
    const theirs = await planPreheat(owned, 'ns', secrets, { bio: 'bio' }, new Date(), undefined, '1.4');

    const noQuery = (u: string) => u.split('?')[0];
    expect(mine.request.urls!.map(noQuery)).toEqual(theirs.request.urls!.map(noQuery));
    expect(mine.request.urls).toHaveLength(4);
    // The LFS files first, largest first, then the git files (a public repository).
    expect(mine.request.urls!.slice(0, 2).map((u) => u.startsWith(`${hub.cdnURL}/repos/`))).toEqual([
      true,
      true,
    ]);
    expect(mine.request.filteredQueryParams).toEqual(theirs.request.filteredQueryParams);
    expect(mine.request.filteredQueryParams).toEqual(expect.arrayContaining(['X-Amz-Signature']));
    expect(mine.request).toMatchObject({ type: 'file', scope: 'all_peers', ips: ['10.0.0.1'] });
    expect(mine.request.tag).toBeUndefined();
    expect(mine.request.headers).toBeUndefined();
    expect(mine.tasks).toEqual(theirs.tasks);
    expect(mine.source).toEqual({
      huggingface: { repo: 'org/tiny', revision: 'main', commit: hub.repos.get('org/tiny')!.commits[0]!.sha },
      observedGeneration: 1,
      files: 4,
      bytes: big.length + small.length + 7 + 5,
      preheated: 4,
    });
    expect(mine.contentKey).toBe(contentKey(spec, mine.source.huggingface!.commit));
    expect(mine.contentKey).not.toBe(contentKey(spec));
  });

  it('with a token: the LFS files alone, the token read for the Hub and nowhere in the job', async () => {
    reads.length = 0;
    const mine = await plan(
      preheatSpec({ repo: 'org/private', tokenSecretRef: { name: 'hf', key: 'token' } }),
    );
    expect(reads).toContain('hf');
    expect(mine.request.urls).toHaveLength(2);
    expect(mine.source.preheated).toBe(2);
    expect(JSON.stringify(mine)).not.toContain(TOKEN);
  });

  it('with a token and git files only: nothing to preheat, said naming tokenSecretRef', async () => {
    const err = await plan(
      preheatSpec({ repo: 'org/gitonly', tokenSecretRef: { name: 'hf', key: 'token' } }),
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SourceJobError);
    expect((err as SourceJobError).failure).toMatchObject({ final: true, reason: 'HubNoFiles' });
    expect((err as SourceJobError).message).toMatch(/^spec\.source\.huggingface\.tokenSecretRef: /);
    expect((err as SourceJobError).record({}).source).toMatchObject({ files: 1, preheated: 0 });
  });

  it('a private repository without a token: final, naming tokenSecretRef; read as a Stalled failure', async () => {
    const err = (await plan(preheatSpec({ repo: 'org/private' })).catch((e: unknown) => e)) as SourceJobError;
    expect(err).toBeInstanceOf(SourceJobError);
    const view = describeFailure(err, 'create the preheat job');
    expect(view).toMatchObject({ reason: 'HubTokenRequired', final: true, retry: { kind: 'none' } });
    expect(view.message).toMatch(/^spec\.source\.huggingface\.tokenSecretRef: org\/private@main: /);
    expect(err.record({}).source).toEqual({ observedGeneration: 1 });
  });

  it('a Hub that does not answer: tried again with backoff, Stalled meanwhile', async () => {
    const gone = await startHubEmulator({ repos: [] });
    await gone.close();
    const spec = ModelPreheatSpec.parse({
      source: { huggingface: { repo: 'org/tiny', endpoint: gone.url } },
    });
    const err = await plan(spec).catch((e: unknown) => e);
    const view = describeFailure(err, 'create the preheat job');
    expect(view).toMatchObject({
      reason: 'HubUnavailable',
      final: false,
      blocked: true,
      retry: { kind: 'backoff' },
    });
  });
});

describe('the refresh annotation', () => {
  const spec = () => preheatSpec({ repo: 'org/tiny' });
  const done = {
    source: { observedGeneration: 1, huggingface: { repo: 'org/tiny', revision: 'main', commit: 'c' } },
    jobGeneration: 1,
    state: 'SUCCESS',
  };

  it('a new value makes a new job of the same generation; the value answered makes none', () => {
    const annotated = { annotations: { 'peerload.io/refresh-source': 'x' } };
    expect(sourceRefreshed(preheat(spec(), {}, done), spec())).toBe(false);
    expect(nextStep(preheat(spec(), {}, done), spec(), 0)).toEqual({ kind: 'cache' });
    expect(sourceRefreshed(preheat(spec(), annotated, done), spec())).toBe(true);
    expect(nextStep(preheat(spec(), annotated, done), spec(), 0)).toEqual({ kind: 'create', attempt: 1 });
    const answered = { ...done, source: { ...done.source, refresh: 'x' } };
    expect(nextStep(preheat(spec(), annotated, answered), spec(), 0)).toEqual({ kind: 'cache' });
  });

  it('a failed resolution of a new value records it and no longer counts the job of the value before', async () => {
    const annotated = preheat(
      preheatSpec({ repo: 'org/private' }),
      { annotations: { 'peerload.io/refresh-source': 'x' } },
      done,
    );
    const err = (await sourcePreheats()
      .plan(annotated, annotated.spec, 'bio', '1.4', contentKey)
      .catch((e: unknown) => e)) as SourceJobError;
    const after = err.record(annotated.status as never);
    expect(after.source).toEqual({ observedGeneration: 1, refresh: 'x' });
    expect(after.jobGeneration).toBeUndefined();
    expect(after.state).toBeUndefined();
  });
});
