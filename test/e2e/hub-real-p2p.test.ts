/**
 * A Hugging Face repository on the REAL Dragonfly network (dfdaemon 1.4.2, the run's shared one:
 * test/support/shared-dragonfly.ts), from the Hub emulator (a gated repository, so a token is needed; its LFS files
 * redirect to the signed CDN; its own port, so its URLs and task ids are this file's alone, and its tokens no other
 * file's, so the daemons' lines naming them are this file's):
 *   - what the daemon does with the Hub's 302: its proxy passes a plain request's redirect back to the client; a P2P
 *     request (back-to-source) follows it to the CDN with the task keyed on the `resolve` URL, drops the token on
 *     the way to the CDN, and writes the request, token included, into its log;
 *   - `peerload fetch hf://org/name@main` on two replicas, each through its own node peer: nested paths, an LFS
 *     file above 4 MiB, small files; the commit sha reported; every file one task with the same id on both
 *     replicas (a git file's `resolve` URL at the commit; an LFS file's CDN URL without its query, though each
 *     replica got its own signature); the LFS object above 4 MiB read from the CDN once in all; every file matching
 *     the Hub's sha256; the token never sent with a CDN URL;
 *   - a ModelPreheat of another gated repository (spec.source.huggingface, the operator in process against the
 *     control plane of the global set-up) reaching SUCCESS on the real manager, its status.tasks the task the
 *     following `peerload fetch hf://` on a node peer joins, the CDN serving the LFS object's body once in all.
 */
import { createHash, randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import * as k8s from '@kubernetes/client-node';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { readRecord } from '../../src/place/record.ts';
import { run } from '../../src/cli/fetch.ts';
import { forgetSecrets } from '../../src/redact.ts';
import { hubTokenTag } from '../../src/storage/credential-tag.ts';
import {
  DEFAULT_FILTERED_QUERY_PARAMS,
  TASK_ID_HEADER,
  USE_P2P_HEADER,
  taskID,
} from '../../src/storage/taskid.ts';
import { ROOT_USER, type DragonflyView } from '../support/dragonfly.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import { createNamespace, kubeConfig } from '../support/kube.ts';
import { startRealNetworkOperator } from '../support/real-operator.ts';
import { conditionOf, peerloadNamespace } from '../support/resources.ts';
import type { RunningManager } from '../support/runtime-harness.ts';
import { sharedDragonfly } from '../support/shared-dragonfly.ts';

const TOKEN = 'hf_realP2PGrantedToken0123456789abcd';
/** A token of no account: what the daemon does with an Authorization header, shown without a real one. */
const PROBE_TOKEN = 'hf_probeTokenOfNoAccount0123456789';
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
/** The repository a ModelPreheat warms: one LFS object above the daemon's 4 MiB piece length, one git file. */
const warmBig = randomBytes(5 * 1024 * 1024 + 999);
const WARM = {
  'config.json': '{"model_type":"llama"}',
  'model.safetensors': { content: warmBig, lfs: true },
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
  let network: DragonflyView;
  let hub: HubEmulator;
  let dir: string;
  let tokenFile: string;
  let operator: RunningManager | undefined;
  const dispatcher = new Agent();

  beforeAll(async () => {
    network = await sharedDragonfly(inject('dragonflyService'), 2);
    hub = await startHubEmulator({
      repos: [
        { id: 'org/model', commits: [FILES], gated: true },
        { id: 'org/warm', commits: [WARM], gated: true },
        { id: 'org/probe', commits: [{ 'probe.bin': { content: randomBytes(5 * 1024 * 1024), lfs: true } }] },
      ],
      tokens: { [TOKEN]: ['org/model', 'org/warm'], [PROBE_TOKEN]: [] },
    });
    dir = await mkdtemp(join(tmpdir(), 'hub-real-'));
    tokenFile = join(dir, 'token');
    await writeFile(tokenFile, TOKEN);
    await network.preheatable;
  });
  afterAll(async () => {
    await operator?.stop();
    await dispatcher.close();
    await hub?.close();
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

  /** `peerload fetch hf://REPO@main` through node peer `i` into a root of its own; the placed version's record. */
  async function fetchOn(repo: string, i: number, count: number) {
    const sha = hub.repos.get(repo)!.commits[0]!.sha;
    const root = join(dir, `${repo.replace('/', '-')}-replica-${i}`);
    await mkdir(root);
    const out: string[] = [];
    const err: string[] = [];
    const code = await run(
      [
        `hf://${repo}@main`,
        root,
        '--endpoint',
        hub.url,
        '--token-hosts',
        'http://127.0.0.1',
        // The emulated CDN listens on loopback too: the admin lists it, as a mirror's CDN.
        '--allowed-hub-redirect-hosts',
        'http://127.0.0.1',
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
    expect(out.join('\n')).toContain(`(commit ${sha}): ${count} files`);
    const record = await readRecord(root, repo, sha);
    expect(record).toBeDefined();
    return { root, files: record!.files as RecordedFile[] };
  }

  /** Body bytes the CDN served of object `f` (the daemons' 1-byte probes aside, each checked to be one byte). */
  function cdnBody(f: Buffer) {
    const reads = hub.cdnRequests.filter((r) => r.method === 'GET' && r.url.includes(`/${sha256(f)}?`));
    expect(reads.filter((r) => r.range === 'bytes=0-0').every((r) => r.bytes <= 1)).toBe(true);
    return reads.filter((r) => r.range !== 'bytes=0-0').reduce((s, r) => s + r.bytes, 0);
  }

  it('the daemon: a plain proxied request gets the 302; a P2P one follows it, keyed on the resolve URL', async () => {
    const probe = hub.repos.get('org/probe')!.commits[0]!;
    const file = probe.files.get('probe.bin')!;
    const url = `${hub.url}/org/probe/resolve/${probe.sha}/probe.bin`;
    const peer = network.peers[0]!;

    const plain = await viaProxy(peer.proxyURL, url, {});
    expect(plain.status).toBe(302);
    expect(String(plain.headers.location)).toContain(`${hub.cdnURL}/repos/`);
    expect(hub.cdnBytes(file.sha256)).toBe(0);

    const p2p = await viaProxy(peer.proxyURL, url, {
      [USE_P2P_HEADER]: 'true',
      authorization: `Bearer ${PROBE_TOKEN}`,
    });
    expect(p2p.status).toBe(200);
    expect(sha256(p2p.body)).toBe(file.sha256);
    expect(p2p.headers[TASK_ID_HEADER.toLowerCase()]).toBe(
      taskID({ url, filter: DEFAULT_FILTERED_QUERY_PARAMS, rule: '1.4' }),
    );
    // The CDN served the object, each request a freshly signed redirect of the Hub's, never with the token...
    const cdn = hub.cdnRequests.filter((r) => r.url.includes(file.sha256));
    expect(cdn.length).toBeGreaterThan(0);
    expect(cdn.every((r) => (r.status === 200 || r.status === 206) && !r.authorized)).toBe(true);
    expect(hub.hubRequests.some((r) => r.authorized && r.url.includes('/org/probe/resolve/'))).toBe(true);
    // ...and the daemon logged the proxied request with its headers, the token among them.
    expect(await peer.logs()).toContain(PROBE_TOKEN);
  });

  it('two replicas fetch the repository at its commit: one task per file, the CDN read once per LFS file', async () => {
    const sha = hub.repos.get('org/model')!.commits[0]!.sha;
    const first = await fetchOn('org/model', 0, 6);
    const second = await fetchOn('org/model', 1, 6);
    for (const [path, f] of Object.entries(FILES)) {
      for (const r of [first, second]) {
        const placed = await readFile(join(r.root, 'org', 'model', sha, path));
        expect(sha256(placed), path).toBe(sha256(bytesOf(f)));
      }
      const a = first.files.find((x) => x.path === path)!;
      const b = second.files.find((x) => x.path === path)!;
      // One task per file: the daemon's id is the one the downloader expected, the same on both nodes.
      expect(a.taskID, path).toBe(a.expectedTaskID);
      expect(b.taskID, path).toBe(a.taskID);
      if (typeof f === 'string')
        expect(a.taskID, path).toBe(
          taskID({
            url: `${hub.url}/org/model/resolve/${sha}/${path}`,
            filter: DEFAULT_FILTERED_QUERY_PARAMS,
            // A gated repository read with the token: every file's task carries the token's tag.
            tag: hubTokenTag(hub.url, 'org/model', TOKEN),
            rule: '1.4',
          }),
        );
    }
    // The LFS object above the daemon's 4 MiB minimum piece length crossed from the CDN once in all (the daemon's
    // 1-byte probes aside); one at most 4 MiB is fetched from the origin by each peer itself (docs/dragonfly.md).
    expect(cdnBody(big), `CDN body bytes of the ${big.length}-byte object`).toBe(big.length);
    const small = cdnBody(shard);
    expect(small).toBeGreaterThanOrEqual(shard.length);
    expect(small).toBeLessThanOrEqual(2 * shard.length);
    // The Hub saw one HEAD of the big file per replica (its redirect read by the downloader); the daemons went to
    // the CDN URL themselves.
    const resolves = hub.hubRequests.filter((r) => r.url.endsWith('/model.safetensors'));
    expect(resolves.map((r) => `${r.method} ${r.url} ${r.status}`)).toEqual(
      Array(2).fill(`HEAD /org/model/resolve/${sha}/model.safetensors 302`),
    );
    console.log(
      `[hub] model.safetensors (${big.length} bytes): CDN body ${cdnBody(big)} bytes; ` +
        `extra/shard-small.bin (${shard.length} bytes): CDN body ${small} bytes`,
    );
    // The token went to the Hub, never to the CDN, and never through a peer with a CDN URL.
    expect(hub.hubRequests.some((r) => r.authorized && r.url.includes('/org/model/resolve/'))).toBe(true);
    expect(hub.cdnRequests.every((r) => !r.authorized)).toBe(true);
    for (const p of [network.seedPeer!, ...network.peers])
      for (const line of (await p.logs()).split('\n'))
        if (line.includes(TOKEN)) expect(line).toContain('/org/model/resolve/');
  });
  it('a ModelPreheat of the repository succeeds on the real manager; a fetch on a node peer joins its task', async () => {
    const kc = kubeConfig(inject('kubeconfigPath'));
    const ns = await createNamespace(kc, 'hub-mph');
    const core = kc.makeApiClient(k8s.CoreV1Api);
    await core.createNamespacedSecret({
      namespace: ns,
      body: { metadata: { name: 'hf' }, stringData: { token: TOKEN } },
    });
    await core.createNamespacedSecret({
      namespace: ns,
      body: {
        metadata: { name: 'manager-user' },
        stringData: { username: ROOT_USER.name, password: ROOT_USER.password },
      },
    });
    operator = await startRealNetworkOperator(kc, network.managerURL, [
      '--allowed-hub-hosts',
      'http://127.0.0.1',
      '--allowed-hub-redirect-hosts',
      'http://127.0.0.1',
    ]);
    const res = peerloadNamespace(kc, ns);
    await res.createModelPreheat('warm', {
      manager: { url: network.managerURL, signInSecretRef: { name: 'manager-user' } },
      source: {
        huggingface: { repo: 'org/warm', endpoint: hub.url, tokenSecretRef: { name: 'hf', key: 'token' } },
      },
    });
    const t0 = Date.now();
    const mph = await res
      .untilState('warm', 'SUCCESS', { timeoutMs: 180_000, intervalMs: 1000 })
      .catch(async (e: Error) => {
        throw new Error(
          `${e.message}; status: ${JSON.stringify((await res.getModelPreheat('warm')).status)}`,
        );
      });
    const sha = hub.repos.get('org/warm')!.commits[0]!.sha;
    expect(conditionOf(mph, 'Ready')?.status).toBe('True');
    // A gated repository: the LFS object alone is preheated (the git file would need the token in the job).
    expect(mph.status!.source).toMatchObject({ huggingface: { commit: sha }, files: 2, preheated: 1 });
    expect(mph.status!.tasks).toHaveLength(1);
    expect(mph.status!.successCount).toBeGreaterThan(0);
    // The seed peer read the object from the CDN with the job's signed URL.
    expect(cdnBody(warmBig)).toBe(warmBig.length);

    const fetched = await fetchOn('org/warm', 1, 2);
    const model = fetched.files.find((f) => f.path === 'model.safetensors')!;
    expect(model.taskID).toBe(model.expectedTaskID);
    expect(model.taskID).toBe(mph.status!.tasks![0]!.taskID);
    const placed = await readFile(join(fetched.root, 'org', 'warm', sha, 'model.safetensors'));
    expect(sha256(placed)).toBe(sha256(warmBig));
    // The node peer's download came from the peers: the CDN served the object's body once in all.
    expect(cdnBody(warmBig), `CDN body bytes of the ${warmBig.length}-byte object`).toBe(warmBig.length);
    console.log(
      `[hub] ModelPreheat SUCCESS in ${Math.round((Date.now() - t0) / 1000)} s (job ${mph.status!.jobID}); ` +
        `the fetch through ${network.peers[1]!.name} joined task ${model.taskID}; CDN body ${cdnBody(warmBig)} of ${warmBig.length} bytes`,
    );
    expect(JSON.stringify(mph)).not.toContain(TOKEN);
  });
});
