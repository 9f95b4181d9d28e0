/**
 * The Hub emulator held to the real client: huggingface_hub 2.4.0 (PyPI) with HF_ENDPOINT at the emulator.
 * snapshot_download of a branch fetches byte-identical files (nested paths, an LFS file above 4 MiB through the
 * signed CDN redirect, the tree listing paged), model_info reads the commit sha and the LFS sha256, and the
 * client's own exceptions come out of the emulator's errors: gated and private repositories without a token, a
 * token not granted, an unknown revision.
 */
import { randomBytes, createHash } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hfClient, hfHubPython } from '../support/hf-hub-client.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';

const TOKEN = 'hf_emulatorGrantedToken0123456789';
const OTHER = 'hf_emulatorOtherToken0123456789ab';
const big = randomBytes(5 * 1024 * 1024 + 123);
const v1 = {
  'config.json': '{"model_type":"llama"}',
  'model.safetensors': { content: big, lfs: true },
  'tokenizer/tokenizer.json': '{"version":"1.0"}',
  'tokenizer/special/tokens.txt': 'a\nb\n',
  'extra.bin': { content: randomBytes(3000), lfs: true },
};
const v2 = { ...v1, 'config.json': '{"model_type":"llama","v":2}' };

describe('the Hub emulator under the real huggingface_hub', () => {
  let hub: HubEmulator;
  let python: string;
  let dir: string;
  const call = (name: Parameters<typeof hfClient>[3], args: Record<string, unknown>) =>
    hfClient(python, hub.url, dir, name, args);

  beforeAll(async () => {
    python = await hfHubPython();
    dir = await mkdtemp(join(tmpdir(), 'hub-client-'));
    hub = await startHubEmulator({
      repos: [
        { id: 'org/model', commits: [v1, v2], refs: { main: 1, 'v1.0': 0 } },
        { id: 'org/gated', commits: [v1], gated: true },
        { id: 'org/private', commits: [v1], private: true },
      ],
      tokens: { [TOKEN]: ['org/gated', 'org/private'], [OTHER]: [] },
      // Pages of two entries: the client must follow the Link header through the whole tree.
      treePageSize: 2,
      renamed: { 'old-org/model-v0': 'org/model' },
    });
  });
  afterAll(async () => {
    await hub?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('snapshot_download of a branch gives byte-identical files, the LFS ones through the signed CDN', async () => {
    const local = join(dir, 'snap-main');
    const r = await call('snapshot_download', { repo: 'org/model', revision: 'main', local_dir: local });
    expect(r.error).toBeUndefined();
    expect(r.version).toBe('2.4.0');
    for (const [path, f] of Object.entries(v2)) {
      const want = Buffer.from(typeof f === 'string' ? f : f.content);
      expect(Buffer.compare(await readFile(join(local, path)), want), path).toBe(0);
    }
    // The big file's bytes came from the CDN, once, and the CDN never saw the token-less client's headers.
    const sha = createHash('sha256').update(big).digest('hex');
    expect(hub.cdnBytes(sha)).toBe(big.length);
    // Every file was asked for at the commit the branch resolved to.
    const commit = hub.repos.get('org/model')!.commits[1]!.sha;
    const resolves = hub.hubRequests.filter((q) => q.url.includes('/resolve/'));
    expect(resolves.length).toBeGreaterThanOrEqual(Object.keys(v2).length);
    for (const q of resolves) expect(q.url).toContain(`/resolve/${commit}/`);
    // The paged tree: more than one page was read.
    expect(
      hub.hubRequests.filter((q) => q.url.includes('/tree/') && q.url.includes('cursor=')).length,
    ).toBeGreaterThan(1);
  });

  it("a renamed repository: the client follows the Hub's relative 307 to the new name and gets its files", async () => {
    const before = hub.hubRequests.length;
    const local = join(dir, 'snap-renamed');
    const r = await call('snapshot_download', {
      repo: 'old-org/model-v0',
      revision: 'main',
      local_dir: local,
    });
    expect(r.error).toBeUndefined();
    for (const [path, f] of Object.entries(v2)) {
      const want = Buffer.from(typeof f === 'string' ? f : f.content);
      expect(Buffer.compare(await readFile(join(local, path)), want), path).toBe(0);
    }
    const asked = hub.hubRequests.slice(before);
    expect(asked.some((q) => q.status === 307 && q.url.startsWith('/api/models/old-org/model-v0/'))).toBe(
      true,
    );
  });

  it('model_info of a tag names its commit, with sizes and LFS sha256 from ?blobs=true', async () => {
    const r = await call('model_info', { repo: 'org/model', revision: 'v1.0', files_metadata: true });
    expect(r.sha).toBe(hub.repos.get('org/model')!.commits[0]!.sha);
    const siblings = r.siblings as { rfilename: string; size: number; lfs_sha256: string | null }[];
    const model = siblings.find((s) => s.rfilename === 'model.safetensors')!;
    expect(model.size).toBe(big.length);
    expect(model.lfs_sha256).toBe(createHash('sha256').update(big).digest('hex'));
    expect(siblings.find((s) => s.rfilename === 'config.json')!.lfs_sha256).toBeNull();
    expect(siblings.map((s) => s.rfilename).sort()).toEqual(Object.keys(v1).sort());
  });

  it('list_repo_tree lists nested files and directories across pages', async () => {
    const r = await call('list_repo_tree', { repo: 'org/model', revision: 'main' });
    const entries = r.entries as { path: string; type: string }[];
    expect(
      entries
        .filter((e) => e.type === 'RepoFile')
        .map((e) => e.path)
        .sort(),
    ).toEqual(Object.keys(v2).sort());
    expect(
      entries
        .filter((e) => e.type === 'RepoFolder')
        .map((e) => e.path)
        .sort(),
    ).toEqual(['tokenizer', 'tokenizer/special']);
  });

  it('a gated repository: GatedRepoError without a token or with one not granted, the files with a granted one', async () => {
    const none = await call('snapshot_download', { repo: 'org/gated', local_dir: join(dir, 'g0') });
    expect(none.error).toBe('GatedRepoError');
    const other = await call('snapshot_download', {
      repo: 'org/gated',
      local_dir: join(dir, 'g1'),
      token: OTHER,
    });
    expect(other.error).toBe('GatedRepoError');
    const before = hub.cdnRequests.length;
    const ok = await call('snapshot_download', {
      repo: 'org/gated',
      local_dir: join(dir, 'g2'),
      token: TOKEN,
    });
    expect(ok.error).toBeUndefined();
    expect(Buffer.compare(await readFile(join(dir, 'g2', 'model.safetensors')), big)).toBe(0);
    // The token went to the Hub, and the client dropped it on the way to the CDN.
    expect(hub.hubRequests.some((q) => q.authorized && q.url.includes('/org/gated/resolve/'))).toBe(true);
    expect(hub.cdnRequests.slice(before).every((q) => !q.authorized)).toBe(true);
  });

  it('a private repository is RepositoryNotFoundError without a token and readable with one', async () => {
    const none = await call('model_info', { repo: 'org/private' });
    expect(none.error).toBe('RepositoryNotFoundError');
    const ok = await call('model_info', { repo: 'org/private', token: TOKEN });
    expect(ok.sha).toBe(hub.repos.get('org/private')!.commits[0]!.sha);
  });

  it('an unknown revision is RevisionNotFoundError', async () => {
    const r = await call('snapshot_download', {
      repo: 'org/model',
      revision: 'nope',
      local_dir: join(dir, 'n'),
    });
    expect(r.error).toBe('RevisionNotFoundError');
  });
});
