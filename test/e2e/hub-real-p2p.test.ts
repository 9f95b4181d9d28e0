/**
 * A Hugging Face repository on the REAL Dragonfly network (dfdaemon 1.4.2, test/support/dragonfly.ts), from the
 * Hub emulator (a gated repository, so a token is needed; its LFS files redirect to the signed CDN):
 *   - what the daemon does with the Hub's 302: its proxy passes a plain request's redirect back to the client, and
 *     a P2P request (back-to-source) follows it to the CDN, with the task keyed on the `resolve` URL and the token
 *     left behind at the Hub;
 *   - `peerload fetch hf://org/name@main` on two replicas, each through its own node peer: nested paths, an LFS
 *     file above 4 MiB, small files; the commit sha reported; every file one task with the same id on both
 *     replicas (the id of its `resolve` URL at the commit); the LFS object above 4 MiB read from the CDN once in
 *     all; every file matching the Hub's sha256; the token at the Hub only, in no daemon log.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readRecord } from '../../src/agent/record.ts';
import { run } from '../../src/cli/fetch.ts';
import { forgetSecrets } from '../../src/redact.ts';
import {
  DEFAULT_FILTERED_QUERY_PARAMS,
  TASK_ID_HEADER,
  USE_P2P_HEADER,
  taskID,
} from '../../src/storage/taskid.ts';
import { startDragonfly, type Dragonfly } from '../support/dragonfly.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';

const TOKEN = 'hf_realP2PGrantedToken0123456789abcd';
const big = randomBytes(6 * 1024 * 1024 + 4321);
const shard = randomBytes(200_000);
const FILES = {
  'config.json': '{"model_type":"llama","hidden_size":64}',
  'generation_config.json': '{"do_sample":false}',
  'model.safetensors': { content: big, lfs: true },
  'extra/shard-small.bin': { content: shard, lfs: true },
  'tokenizer/tokenizer.json': '{"version":"1.0","model":{"type":"BPE"}}',
  'tokenizer/special/tokens_map.json': '{"bos_token":"<s>"}',
};
const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');
const bytesOf = (f: (typeof FILES)[keyof typeof FILES]) =>
  typeof f === 'string' ? Buffer.from(f) : f.content;

interface RecordedFile {
  path: string;
  taskID?: string;
  expectedTaskID?: string;
  localHit?: boolean;
  hardLink?: boolean;
}

describe('a Hub repository on the real Dragonfly network', () => {
  let network: Dragonfly;
  let hub: HubEmulator;
  let dir: string;
  let tokenFile: string;
  const dispatcher = new Agent();

  beforeAll(async () => {
    network = await startDragonfly({ nodePeers: 2 });
    hub = await startHubEmulator({
      repos: [
        { id: 'org/model', commits: [FILES], gated: true },
        { id: 'org/probe', commits: [{ 'probe.bin': { content: randomBytes(5 * 1024 * 1024), lfs: true } }] },
      ],
      tokens: { [TOKEN]: ['org/model'] },
    });
    dir = await mkdtemp(join(tmpdir(), 'hub-real-'));
    tokenFile = join(dir, 'token');
    await writeFile(tokenFile, TOKEN);
  });
  afterAll(async () => {
    await dispatcher.close();
    await hub?.close();
    await network?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
    forgetSecrets();
  });

  /** An absolute-form GET through a peer's proxy, as a forward proxy's client sends it. */
  async function viaProxy(proxy: string, url: string, headers: Record<string, string>) {
    const res = await dispatcher.request({
      origin: proxy,
      method: 'GET',
      path: url,
      headers: { host: new URL(url).host, ...headers },
    });
    const body = Buffer.from(await res.body.arrayBuffer());
    return { status: res.statusCode, headers: res.headers, body };
  }

  it('the daemon: a plain proxied request gets the 302; a P2P one follows it, keyed on the resolve URL', async () => {
    const probe = hub.repos.get('org/probe')!.commits[0]!;
    const file = probe.files.get('probe.bin')!;
    const url = `${hub.url}/org/probe/resolve/${probe.sha}/probe.bin`;
    const proxy = network.peers[0]!.proxyURL;

    const plain = await viaProxy(proxy, url, {});
    expect(plain.status).toBe(302);
    expect(String(plain.headers.location)).toContain(`${hub.cdnURL}/repos/`);
    expect(hub.cdnBytes(file.sha256)).toBe(0);

    const p2p = await viaProxy(proxy, url, { [USE_P2P_HEADER]: 'true' });
    expect(p2p.status).toBe(200);
    expect(sha256(p2p.body)).toBe(file.sha256);
    expect(p2p.headers[TASK_ID_HEADER.toLowerCase()]).toBe(
      taskID({ url, filter: DEFAULT_FILTERED_QUERY_PARAMS, rule: '1.4' }),
    );
    // The CDN was read for the task, each signed URL a fresh one from a redirect of the Hub.
    const cdn = hub.cdnRequests.filter((r) => r.url.includes(file.sha256));
    expect(cdn.length).toBeGreaterThan(0);
    expect(cdn.every((r) => r.status === 200 || r.status === 206)).toBe(true);
  });

  it('two replicas fetch the repository at its commit: one task per file, the CDN read once per LFS file', async () => {
    const sha = hub.repos.get('org/model')!.commits[0]!.sha;
    const fetchOn = async (i: number) => {
      const root = join(dir, `replica-${i}`);
      await mkdir(root);
      const out: string[] = [];
      const err: string[] = [];
      const code = await run(
        [
          'hf://org/model@main',
          root,
          '--endpoint',
          hub.url,
          '--token-hosts',
          '127.0.0.1',
          '--token-file',
          tokenFile,
          '--proxy',
          network.peers[i]!.proxyURL,
          '--hard-link-root',
          root,
          '--min-free-bytes',
          '0',
          '--log-level',
          'warn',
        ],
        { out: (l) => out.push(l), err: (l) => err.push(l) },
      );
      expect(err.join('\n')).toBe('');
      expect(code).toBe(0);
      expect(out.join('\n')).toContain(`(commit ${sha}): 6 files`);
      const record = await readRecord(root, 'org/model', sha);
      expect(record).toBeDefined();
      return { root, files: record!.files as RecordedFile[] };
    };

    const first = await fetchOn(0);
    const second = await fetchOn(1);
    for (const [path, f] of Object.entries(FILES)) {
      for (const r of [first, second]) {
        const placed = await readFile(join(r.root, 'org', 'model', sha, path));
        expect(sha256(placed), path).toBe(sha256(bytesOf(f)));
      }
      const a = first.files.find((x) => x.path === path)!;
      const b = second.files.find((x) => x.path === path)!;
      // One task per file: the daemon's id is the one of the resolve URL at the commit, the same on both nodes.
      expect(a.taskID, path).toBe(a.expectedTaskID);
      expect(b.taskID, path).toBe(a.taskID);
      expect(a.expectedTaskID).toBe(
        taskID({
          url: `${hub.url}/org/model/resolve/${sha}/${path}`,
          filter: DEFAULT_FILTERED_QUERY_PARAMS,
          rule: '1.4',
        }),
      );
    }
    // The LFS object above the daemon's 4 MiB minimum piece length crossed from the CDN once in all (the daemon's
    // 1-byte probes aside); one at most 4 MiB is fetched from the origin by each peer itself (docs/dragonfly.md).
    const cdnBody = (f: Buffer) => {
      const reads = hub.cdnRequests.filter((r) => r.method === 'GET' && r.url.includes(`/${sha256(f)}?`));
      expect(reads.filter((r) => r.range === 'bytes=0-0').every((r) => r.bytes <= 1)).toBe(true);
      return reads.filter((r) => r.range !== 'bytes=0-0').reduce((s, r) => s + r.bytes, 0);
    };
    expect(cdnBody(big), `CDN body bytes of the ${big.length}-byte object`).toBe(big.length);
    const small = cdnBody(shard);
    expect(small).toBeGreaterThanOrEqual(shard.length);
    expect(small).toBeLessThanOrEqual(2 * shard.length);
    // Every request the Hub saw for the big file went to its resolve URL at the commit (each then redirected).
    const resolves = hub.hubRequests.filter((r) => r.url.endsWith('/model.safetensors'));
    expect(
      resolves.every((r) => r.url === `/org/model/resolve/${sha}/model.safetensors` && r.status === 302),
    ).toBe(true);
    console.log(
      `[hub] model.safetensors (${big.length} bytes): ${resolves.length} resolve requests, CDN body ${cdnBody(big)} bytes; ` +
        `extra/shard-small.bin (${shard.length} bytes): CDN body ${small} bytes`,
    );
    // The token went to the Hub, never to the CDN.
    expect(hub.hubRequests.some((r) => r.authorized && r.url.includes('/org/model/resolve/'))).toBe(true);
    expect(hub.cdnRequests.every((r) => !r.authorized)).toBe(true);
    // No daemon log holds the token.
    for (const p of [network.seedPeer!, ...network.peers]) expect(await p.logs()).not.toContain(TOKEN);
  });
});
