/**
 * A ServedModel's Hugging Face source (hub-source.ts) against the Hub emulator: the revision resolved once per
 * generation and kept through an operator restart by status.source, followed on purpose by the refresh annotation;
 * the files as the agent receives them (git files at the commit with the token, LFS files at the CDN with their
 * sha256 and the CDN's query parameters filtered); every refusal as a reason and a message naming the field, never
 * the token.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Agent } from 'undici';
import {
  ModelPreheatSpec,
  ownedPreheatSpec,
  ServedModelSpec,
  type ServedModel,
  type SourcePreheat,
} from '../../src/api/index.ts';
import { RELOCATE_AFTER_MS } from '../../src/sources/hub-resolution.ts';
import { HubSources } from '../../src/sources/huggingface.ts';
import { sourceOwner } from '../../src/sources/index.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { forgetSecrets } from '../../src/redact.ts';
import { hubTokenTag } from '../../src/storage/credential-tag.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import { hubServedModel } from '../support/hub-served-model.ts';

const TOKEN = 'hf_hubSourceGranted0123456789abcdefgh';
const OTHER = 'hf_hubSourceOther0123456789abcdefghij';
const big = Buffer.alloc(5 * 1024 * 1024, 3);
const tree = {
  'config.json': '{"a":1}',
  '1/model.onnx': { content: big, lfs: true },
  'tokenizer/vocab.txt': 'a b c',
};

let hub: HubEmulator;
const dispatcher = new Agent();
let clock = 0;
const secrets = new Map<string, string>();
const sources = () =>
  new HubSources({
    secretValue: async (_ns, ref) => {
      const v = secrets.get(ref.name);
      if (v === undefined) throw new Error(`Secret ns/${ref.name} not found`);
      return v;
    },
    tokenHosts: parseHostRules('http://127.0.0.1'),
    redirectHosts: parseHostRules('http://127.0.0.1'),
    dispatcher,
    now: () => clock,
  });

/** The owned preheat of a source without a token: its files' URLs. */
const urlsOf = (p: SourcePreheat | undefined) => {
  if (!p || !('urls' in p)) throw new Error(`not a preheat of URLs: ${JSON.stringify(p)}`);
  return p;
};

const served = (huggingface: object, meta: Partial<ServedModel['metadata']> = {}, status?: object) =>
  hubServedModel(hub.url, huggingface, meta, status);
const of = (s: HubSources, sm: ServedModel) =>
  s.files({ ...sourceOwner(sm), key: 'ns/m' }, sm.spec.source!.huggingface!, 'spec.source.huggingface');

beforeAll(async () => {
  hub = await startHubEmulator({
    repos: [
      { id: 'org/tiny', commits: [tree, { ...tree, 'config.json': '{"a":2}' }], refs: { main: 0 } },
      { id: 'org/private', commits: [tree], private: true },
      { id: 'org/gated', commits: [tree], gated: true },
      { id: 'org/empty', commits: [{}] },
    ],
    tokens: { [TOKEN]: ['org/private', 'org/gated'], [OTHER]: [] },
    renamed: { 'old-org/tiny-v0': 'org/tiny' },
  });
  secrets.set('hf', TOKEN);
  secrets.set('other', OTHER);
});
afterAll(async () => {
  await hub.close();
  await dispatcher.close();
  forgetSecrets();
});

describe('a Hugging Face source', () => {
  it('resolves the revision to its commit and hands the agent each file: git at the commit, LFS at the CDN with its sha256', async () => {
    const [c0] = hub.repos.get('org/tiny')!.commits;
    const found = await of(sources(), served({ repo: 'org/tiny' }));
    if (!found.ok) throw new Error(found.message);
    expect(found.status).toEqual({
      huggingface: { repo: 'org/tiny', revision: 'main', commit: c0!.sha },
      observedGeneration: 1,
    });
    expect(found.count).toBe(3);
    expect(found.bytes).toBe(big.length + 7 + 5);
    const byPath = new Map(found.files.files.map((f) => [f.path, f]));
    expect(byPath.get('config.json')).toEqual({
      path: 'config.json',
      url: `${hub.url}/org/tiny/resolve/${c0!.sha}/config.json`,
      size: 7,
    });
    const lfs = byPath.get('1/model.onnx')!;
    expect(lfs.url!.startsWith(`${hub.cdnURL}/repos/`)).toBe(true);
    expect(lfs.sha256).toBe(c0!.files.get('1/model.onnx')!.sha256);
    expect(lfs.headers).toBeUndefined();
    expect(found.files.filter).toEqual(expect.arrayContaining(['X-Amz-Signature', 'X-Amz-Date']));
    expect(found.files).not.toHaveProperty('directory');
  });

  it("a renamed repository resolves through the Hub's redirect: status keeps the spec's name, the files use the new one", async () => {
    const [c0] = hub.repos.get('org/tiny')!.commits;
    const found = await of(sources(), served({ repo: 'old-org/tiny-v0' }));
    if (!found.ok) throw new Error(found.message);
    expect(found.status.huggingface).toEqual({ repo: 'old-org/tiny-v0', revision: 'main', commit: c0!.sha });
    const config = found.files.files.find((f) => f.path === 'config.json')!;
    expect(config.url).toBe(`${hub.url}/org/tiny/resolve/${c0!.sha}/config.json`);
  });

  it('a moved branch changes nothing for the generation, nor after a restart; a new refresh value follows it', async () => {
    const [c0, c1] = hub.repos.get('org/tiny')!.commits;
    const s = sources();
    const first = await of(s, served({ repo: 'org/tiny' }));
    if (!first.ok) throw new Error(first.message);
    hub.setRef('org/tiny', 'main', 1);
    try {
      const again = await of(s, served({ repo: 'org/tiny' }));
      expect(again.ok && again.status.huggingface!.commit).toBe(c0!.sha);
      // A restarted operator: nothing in memory, the commit recorded in status for this generation.
      const restarted = await of(sources(), served({ repo: 'org/tiny' }, {}, { source: first.status }));
      expect(restarted.ok && restarted.status.huggingface!.commit).toBe(c0!.sha);
      const refreshed = await of(
        s,
        served(
          { repo: 'org/tiny' },
          { annotations: { 'peerload.io/refresh-source': '1' } },
          { source: first.status },
        ),
      );
      expect(refreshed.ok && refreshed.status).toEqual({
        huggingface: { repo: 'org/tiny', revision: 'main', commit: c1!.sha },
        observedGeneration: 1,
        refresh: '1',
      });
      expect(refreshed.ok && refreshed.digest).not.toBe(first.digest);
      const edited = await of(
        sources(),
        served({ repo: 'org/tiny' }, { generation: 2 }, { source: first.status }),
      );
      expect(edited.ok && edited.status.huggingface!.commit).toBe(c1!.sha);
    } finally {
      hub.setRef('org/tiny', 'main', 0);
    }
  });

  it('asks for the CDN URLs again after 30 minutes, keeping the commit and the digest', async () => {
    const s = sources();
    clock = 0;
    const first = await of(s, served({ repo: 'org/tiny' }));
    const heads = () => hub.hubRequests.filter((r) => r.method === 'HEAD').length;
    const before = heads();
    clock = RELOCATE_AFTER_MS - 1;
    expect(await of(s, served({ repo: 'org/tiny' }))).toBe(first);
    expect(heads()).toBe(before);
    clock = RELOCATE_AFTER_MS;
    const later = await of(s, served({ repo: 'org/tiny' }));
    expect(heads()).toBe(before + 1);
    expect(later.ok && first.ok && later.digest === first.digest).toBe(true);
    clock = 0;
  });

  it("the owned preheat's content: the LFS files' CDN URLs first, git files only without a token, fixed per generation", async () => {
    const s = sources();
    clock = 0;
    const first = await of(s, served({ repo: 'org/tiny' }));
    if (!first.ok) throw new Error(first.message);
    const lfs = first.files.files.find((f) => f.path === '1/model.onnx')!.url!;
    const warm = urlsOf(first.preheat);
    expect(warm.urls[0]).toBe(lfs);
    expect(warm.urls).toHaveLength(3);
    expect(warm.filter).toEqual(first.files.filter);
    const owned = ModelPreheatSpec.parse(
      ownedPreheatSpec(
        ServedModelSpec.parse({ ...served({ repo: 'org/tiny' }).spec, preheat: { create: true } }),
        ['10.0.0.7'],
        first.preheat,
      ),
    );
    expect(owned).toMatchObject({
      urls: warm.urls,
      filteredQueryParams: warm.filter,
      scope: 'all_peers',
      targets: { ips: ['10.0.0.7'] },
    });
    expect(owned.objectStorage).toBeUndefined();
    // New signatures half an hour later: the agents get them, the preheat's spec stays as it was.
    clock = RELOCATE_AFTER_MS + 1000;
    await new Promise((r) => setTimeout(r, 1100)); // the CDN's signature names the second it was made
    const later = await of(s, served({ repo: 'org/tiny' }));
    if (!later.ok) throw new Error(later.message);
    expect(later.files.files.find((f) => f.path === '1/model.onnx')!.url).not.toBe(lfs);
    expect(later.preheat).toEqual(first.preheat);
    clock = 0;
    const priv = await of(
      sources(),
      served({ repo: 'org/private', tokenSecretRef: { name: 'hf', key: 't' } }),
    );
    if (!priv.ok) throw new Error(priv.message);
    // With a token the ModelPreheat resolves the repository itself, pinned to this commit, so the token's tag is
    // derived from the Secret when its job is planned and sits in no spec.
    const commit = priv.status.huggingface!.commit;
    expect(priv.preheat).toMatchObject({
      source: {
        huggingface: {
          repo: 'org/private',
          revision: commit,
          tokenSecretRef: { name: 'hf', key: 't' },
          endpoint: hub.url,
        },
      },
    });
    const ownedPrivate = ModelPreheatSpec.parse(
      ownedPreheatSpec(
        ServedModelSpec.parse({
          ...served({ repo: 'org/private', tokenSecretRef: { name: 'hf', key: 't' } }).spec,
          preheat: { create: true },
        }),
        [],
        priv.preheat,
      ),
    );
    expect(ownedPrivate.source?.huggingface).toMatchObject({ repo: 'org/private', revision: commit });
    expect(ownedPrivate.urls).toBeUndefined();
    expect(ownedPrivate.tag).toBeUndefined();
    expect(JSON.stringify(ownedPrivate)).not.toContain(TOKEN);
  });

  it("a private repository: its files with the token, once in the spec's hub header set each git file names", async () => {
    const found = await of(
      sources(),
      served({ repo: 'org/private', tokenSecretRef: { name: 'hf', key: 't' } }),
    );
    if (!found.ok) throw new Error(found.message);
    const git = found.files.files.find((f) => f.path === 'config.json')!;
    expect(git.headers).toBeUndefined();
    expect(git.headerSet).toBe('hub');
    expect(found.files.headerSets).toEqual({ hub: { authorization: `Bearer ${TOKEN}` } });
    expect(JSON.stringify(found.files).split(TOKEN)).toHaveLength(2);
    expect(found.files.headers).toBeUndefined();
    // Every file's task (git at the Hub, LFS at the CDN) carries the token's tag: a pod without the token names
    // none of them through a node's proxy.
    expect(found.files.tag).toBe(hubTokenTag(hub.url, 'org/private', TOKEN));
    const other = await of(
      sources(),
      served({ repo: 'org/gated', tokenSecretRef: { name: 'hf', key: 't' } }),
    );
    expect(other.ok && other.files.tag).toBe(hubTokenTag(hub.url, 'org/gated', TOKEN));
    // A public repository read without a token keeps no tag: its tasks are shared by every tenant.
    const pub = await of(sources(), served({ repo: 'org/tiny' }));
    expect(pub.ok && pub.files.tag).toBeUndefined();
    expect(JSON.stringify(found.status)).not.toContain(TOKEN);
  });

  it.each([
    [
      'a private repository without a token',
      { repo: 'org/private' },
      'HubTokenRequired',
      'spec.source.huggingface.tokenSecretRef: ',
      'private or does not exist',
    ],
    [
      'a gated repository without a token',
      { repo: 'org/gated' },
      'HubTokenRequired',
      'spec.source.huggingface.tokenSecretRef: ',
      'is gated',
    ],
    [
      'a gated repository with a token not granted',
      { repo: 'org/gated', tokenSecretRef: { name: 'other', key: 't' } },
      'HubForbidden',
      'spec.source.huggingface.tokenSecretRef: ',
      'request access',
    ],
    [
      'an unknown token',
      { repo: 'org/private', tokenSecretRef: { name: 'bad', key: 't' } },
      'HubTokenRejected',
      'spec.source.huggingface.tokenSecretRef: ',
      'rejected the token',
    ],
    [
      'a missing repository (with a token)',
      { repo: 'org/missing', tokenSecretRef: { name: 'other', key: 't' } },
      'HubRepoNotFound',
      'spec.source.huggingface.repo: ',
      'check the name',
    ],
    [
      'an unknown revision',
      { repo: 'org/tiny', revision: 'v9' },
      'HubRevisionNotFound',
      'spec.source.huggingface.revision: ',
      'has no revision "v9"',
    ],
    [
      'an empty repository',
      { repo: 'org/empty' },
      'HubNoFiles',
      'spec.source.huggingface.revision: ',
      'has no files',
    ],
    [
      'include keeping nothing',
      { repo: 'org/tiny', include: ['*.bin'] },
      'HubNoFiles',
      'spec.source.huggingface.include: ',
      '',
    ],
    [
      'more files than maxFiles',
      { repo: 'org/tiny', maxFiles: 2 },
      'HubTooLarge',
      'spec.source.huggingface.maxFiles: ',
      '',
    ],
    [
      'more bytes than maxBytes',
      { repo: 'org/tiny', maxBytes: 1024 },
      'HubTooLarge',
      'spec.source.huggingface.maxBytes: ',
      '',
    ],
  ])(
    '%s: Stalled with its reason, the field and the fix, never the token',
    async (_name, source, reason, field, words) => {
      secrets.set('bad', 'hf_notAKnownToken0123456789abcdefghij');
      const found = await of(sources(), served(source));
      expect(found).toMatchObject({ ok: false, final: true, reason });
      if (found.ok) return;
      expect(found.message.startsWith(field)).toBe(true);
      expect(found.message).toContain(words);
      for (const t of [TOKEN, OTHER, 'hf_notAKnownToken0123456789abcdefghij'])
        expect(found.message).not.toContain(t);
    },
  );

  it('a Hub that does not answer is tried again (not final)', async () => {
    const found = await of(sources(), served({ repo: 'org/tiny', endpoint: 'http://127.0.0.1:9' }));
    expect(found).toMatchObject({ ok: false, final: false, reason: 'HubUnavailable' });
  });

  it('a listing time-out is tried again', async () => {
    const s = new HubSources({
      secretValue: async () => '',
      tokenHosts: [],
      redirectHosts: [],
      dispatcher,
      limits: { timeoutMs: 1, maxEntries: 100 },
    });
    const found = await of(s, served({ repo: 'org/tiny' }));
    expect(found).toMatchObject({ ok: false, final: false, reason: 'SourceTimeout' });
  });
});
