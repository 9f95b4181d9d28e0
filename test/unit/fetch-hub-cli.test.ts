/**
 * `peerload fetch hf://...` in process, against the Hub emulator and the peer-proxy emulator (whose back-to-source
 * follows redirects as the real daemon's does; the real network's behaviour is test/e2e/hub-real-p2p.test.ts):
 * the repository at the resolved commit placed whole, LFS files checked against their sha256, the token kept to
 * allowed hosts and out of every message, and each refusal an exit status with the Hub's reason.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { run } from '../../src/cli/fetch.ts';
import { CliError } from '../../src/cli/errors.ts';
import { DEFAULT_HUB_REDIRECT_HOSTS } from '../../src/huggingface/endpoint.ts';
import { forgetSecrets } from '../../src/redact.ts';
import { hubTokenTag } from '../../src/storage/credential-tag.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';

const TOKEN = 'hf_cliGrantedToken0123456789abcdefgh';
const big = Buffer.alloc(300_000, 3);
const files = {
  'config.json': '{"model_type":"llama"}',
  'model.safetensors': { content: big, lfs: true },
  'tokenizer/tokenizer.json': '{"v":1}',
};

describe('peerload fetch hf://', () => {
  let hub: HubEmulator;
  let peer: PeerProxy;
  let dir: string;
  let n = 0;
  const fetchHub = async (args: string[], env: Record<string, string> = {}) => {
    const out: string[] = [];
    const err: string[] = [];
    const saved = { HF_TOKEN: process.env.HF_TOKEN, HF_ENDPOINT: process.env.HF_ENDPOINT };
    Object.assign(process.env, { HF_ENDPOINT: hub.url }, env);
    if (!('HF_TOKEN' in env)) delete process.env.HF_TOKEN;
    const dest = join(dir, `dest-${n++}`);
    try {
      const code = await run(
        [
          ...args.slice(0, 1),
          dest,
          '--proxy',
          peer.url,
          '--min-free-bytes',
          '0',
          '--token-hosts',
          'http://127.0.0.1',
          '--allowed-hub-redirect-hosts',
          'http://127.0.0.1',
          '--log-level',
          'error',
          ...args.slice(1),
        ],
        { out: (l) => out.push(l), err: (l) => err.push(l) },
      );
      return { code, out: out.join('\n'), err: err.join('\n'), dest };
    } finally {
      for (const [k, v] of Object.entries(saved))
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
    }
  };

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fetch-hub-'));
    hub = await startHubEmulator({
      repos: [
        { id: 'org/model', commits: [files] },
        { id: 'org/gated', commits: [files], gated: true },
        { id: 'org/corrupt', commits: [{ 'w.bin': { content: Buffer.alloc(5000, 9), lfs: true } }] },
      ],
      tokens: { [TOKEN]: ['org/gated'] },
      renamed: { 'org/gated-old-name': 'org/gated' },
    });
    peer = await startPeerProxy();
  });
  afterAll(async () => {
    await peer?.close();
    await hub?.close();
    await rm(dir, { recursive: true, force: true });
    forgetSecrets();
  });

  it('places the repository at its commit, every file through the peer, the LFS one from the CDN once', async () => {
    const sha = hub.repos.get('org/model')!.commits[0]!.sha;
    const r = await fetchHub(['hf://org/model']);
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    const target = join(r.dest, 'org', 'model', sha);
    expect(r.out).toMatch(
      new RegExp(
        `^fetched hf://org/model@main \\(commit ${sha}\\): 3 files, ${big.length + 29} bytes into ${target} in `,
      ),
    );
    expect(Buffer.compare(await readFile(join(target, 'model.safetensors')), big)).toBe(0);
    expect(await readFile(join(target, 'tokenizer', 'tokenizer.json'), 'utf8')).toBe('{"v":1}');
    const lfs = createHash('sha256').update(big).digest('hex');
    expect(hub.cdnBytes(lfs)).toBe(big.length);
    // A second replica on the same peer: every file a hit of the same task, the CDN not read again.
    const again = await fetchHub(['hf://org/model@' + sha]);
    expect(again.code).toBe(0);
    expect(hub.cdnBytes(lfs)).toBe(big.length);
    expect(again.out).toContain('(3 local hits');
  });

  it('a gated repository without a token: exit 2 with HubTokenRequired and nothing placed', async () => {
    const r = await fetchHub(['hf://org/gated']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^peerload fetch: HubTokenRequired: .*org\/gated is gated/);
    await expect(stat(join(r.dest, 'org', 'gated'))).rejects.toThrow();
  });

  it('a gated repository with the token from $HF_TOKEN or --token-file; the CDN never sees it', async () => {
    const before = hub.cdnRequests.length;
    const r = await fetchHub(['hf://org/gated'], { HF_TOKEN: TOKEN });
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(hub.hubRequests.some((q) => q.authorized && q.url.includes('/org/gated/resolve/'))).toBe(true);
    expect(hub.cdnRequests.slice(before).every((q) => !q.authorized)).toBe(true);
    // The peer proxy got the token with the Hub's URLs only, never with a CDN URL.
    const cdnViaPeer = peer.requests.filter((q) => q.url.startsWith(hub.cdnURL));
    expect(cdnViaPeer.length).toBeGreaterThan(0);
    expect(cdnViaPeer.every((q) => q.headers.authorization === undefined)).toBe(true);
    const file = join(dir, 'token');
    await writeFile(file, `${TOKEN}\n`);
    expect((await fetchHub(['hf://org/gated', '--token-file', file])).code).toBe(0);
  });

  it("a renamed repository: the Hub's 307 to the new name is followed, the files fetched at the new name", async () => {
    const sha = hub.repos.get('org/gated')!.commits[0]!.sha;
    const before = peer.requests.length;
    const r = await fetchHub(['hf://org/gated-old-name'], { HF_TOKEN: TOKEN });
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toContain(`fetched hf://org/gated-old-name@main (commit ${sha}): 3 files`);
    // It lands under the name asked for; the peer fetched the Hub's files at the new name, without a redirect.
    const target = join(r.dest, 'org', 'gated-old-name', sha);
    expect(await readFile(join(target, 'config.json'), 'utf8')).toBe(files['config.json']);
    const atHub = peer.requests.slice(before).filter((q) => q.url.startsWith(hub.url));
    expect(atHub.map((q) => new URL(q.url).pathname)).toEqual(
      expect.arrayContaining([`/org/gated/resolve/${sha}/config.json`]),
    );
    expect(atHub.every((q) => !q.url.includes('gated-old-name'))).toBe(true);
  });

  it('a token for a host outside --token-hosts is refused before any request', async () => {
    const before = hub.hubRequests.length;
    const e = await fetchHub(['hf://org/gated', '--token-hosts', 'huggingface.co'], {
      HF_TOKEN: TOKEN,
    }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CliError);
    expect((e as CliError).exitCode).toBe(2);
    const m = (e as Error).message;
    expect(m).toMatch(
      /^HubTokenNotAllowed: HF_ENDPOINT names 127\.0\.0\.1:\d+, which is not in --allowed-hub-hosts \(huggingface\.co\)/,
    );
    expect(m).not.toContain(TOKEN);
    expect(hub.hubRequests.length).toBe(before);
  });

  it("a redirect outside --allowed-hub-redirect-hosts (the public Hub's CDNs by default): exit 2 naming the file and the flag, nothing fetched", async () => {
    const before = peer.requests.length;
    const r = await fetchHub(['hf://org/model', '--allowed-hub-redirect-hosts', DEFAULT_HUB_REDIRECT_HOSTS]);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(
      /^peerload fetch: HubRedirectNotAllowed: .*the Hub redirects model\.safetensors to http:\/\/127\.0\.0\.1:\d+, which is not in --allowed-hub-redirect-hosts \(cdn-lfs\.hf\.co, /,
    );
    expect(r.err).not.toContain('X-Amz-Signature');
    // The node's proxy was asked for nothing: no agent or daemon is told about the target.
    expect(peer.requests.length).toBe(before);
    await expect(stat(join(r.dest, 'org', 'model'))).rejects.toThrow();
  });

  it("with a token, every file carries the token's task tag; without one, none", async () => {
    const tagged = (from: number) =>
      peer.requests.slice(from).map((q) => q.headers['x-dragonfly-tag'] as string | undefined);
    const before = peer.requests.length;
    expect((await fetchHub(['hf://org/gated'], { HF_TOKEN: TOKEN })).code).toBe(0);
    const tags = tagged(before);
    expect(tags.length).toBeGreaterThan(0);
    expect(new Set(tags)).toEqual(new Set([hubTokenTag(hub.url, 'org/gated', TOKEN)]));
    const mid = peer.requests.length;
    expect((await fetchHub(['hf://org/model'])).code).toBe(0);
    expect(tagged(mid).every((t) => t === undefined)).toBe(true);
  });

  it('an unknown revision: exit 2 with HubRevisionNotFound', async () => {
    const r = await fetchHub(['hf://org/model@nope']);
    expect(r.code).toBe(2);
    expect(r.err).toContain('HubRevisionNotFound');
  });

  it('an LFS file whose bytes do not hash to the listed sha256 fails the version: ChecksumMismatch, nothing placed', async () => {
    // The CDN now serves other bytes than the tree's sha256 says.
    const f = hub.repos.get('org/corrupt')!.commits[0]!.files.get('w.bin')!;
    f.content = Buffer.alloc(5000, 8);
    const r = await fetchHub(['hf://org/corrupt']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/^peerload fetch: ChecksumMismatch: .*w\.bin: its bytes hash to sha256 /);
    await expect(
      stat(join(r.dest, 'org', 'corrupt', hub.repos.get('org/corrupt')!.commits[0]!.sha)),
    ).rejects.toThrow();
  });

  it('bad input is a CLI error naming the fix', async () => {
    await expect(fetchHub(['hf://just-a-name'])).rejects.toThrow(CliError);
    await expect(fetchHub(['hf://org/model', '--max-files', '0'])).rejects.toThrow(/--max-files/);
    await expect(fetchHub(['hf://org/model', '--listing-timeout', 'soon'])).rejects.toThrow(
      /--listing-timeout/,
    );
    await expect(fetchHub(['hf://org/model', '--endpoint', 'ftp://x'])).rejects.toThrow(/http\(s\) URL/);
    await expect(fetchHub(['hf://org/model', '--version', '../up'])).rejects.toThrow(
      /--version: must be one path segment/,
    );
  });

  it('--version names the directory a server starts on; the line still says the commit', async () => {
    const sha = hub.repos.get('org/model')!.commits[0]!.sha;
    const r = await fetchHub(['hf://org/model', '--version', 'base']);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`(commit ${sha})`);
    expect(
      Buffer.compare(await readFile(join(r.dest, 'org', 'model', 'base', 'model.safetensors')), big),
    ).toBe(0);
  });

  it("the peer-proxy emulator follows an LFS file's redirect to the CDN as the daemon does, leaving the token", async () => {
    const { Agent } = await import('undici');
    const agent = new Agent();
    try {
      const repo = hub.repos.get('org/gated')!.commits[0]!;
      const url = `${hub.url}/org/gated/resolve/${repo.sha}/model.safetensors`;
      const before = hub.cdnRequests.length;
      const res = await agent.request({
        origin: peer.url,
        method: 'GET',
        path: url,
        headers: { host: new URL(url).host, 'x-dragonfly-use-p2p': 'true', authorization: `Bearer ${TOKEN}` },
      });
      expect(res.statusCode).toBe(200);
      expect(Buffer.compare(Buffer.from(await res.body.arrayBuffer()), big)).toBe(0);
      const cdn = hub.cdnRequests.slice(before);
      expect(cdn.length).toBeGreaterThan(0);
      expect(cdn.every((q) => !q.authorized)).toBe(true);
    } finally {
      await agent.close();
    }
  });
});
