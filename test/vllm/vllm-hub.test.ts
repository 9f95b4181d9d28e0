/**
 * vLLM (CPU) on a base model from a Hugging Face Hub repository, placed by deploy/examples/vllm-hub's init container
 * on the REAL Dragonfly network (one node peer, dfdaemon 1.4.2, as the suite's node bed). The Hub emulator
 * (test/support/hub-emulator.ts) serves the suite's tiny base model as a private repository: its config and
 * tokenizer files as git files (one nested), the weights and tokenizer.json in LFS, redirected to the signed CDN.
 * The init container's command, arguments and environment are read from the rendered example and run as a process
 * for two pods on the node (the downward API's status.hostIP is the peer's address; the proxy port, 4001 in a
 * cluster, the test peer's own; the pod's volume mounts are directories here; the Hub is the emulator, named by
 * $HF_ENDPOINT, and the token may go to its host only):
 *   - the first pod places the repository at `@main` where the example's vLLM starts, every file byte-identical to
 *     the Hub's (an LFS file's sha256 its oid); an empty token Secret gets the Hub's refusal of a private repository;
 *   - the branch moves; the second pod, pinned to the first pod's commit, gets that commit, every file a local hit
 *     of the node's peer: the CDN served each LFS object once in all and never the moved branch's;
 *   - the token appears in no fetch's output and never reaches the CDN;
 *   - vLLM started with the example's `--model` on the placed directory answers a completion.
 * Opt-in (`npm run test:vllm`): its set-up is scripts/setup-vllm.sh, about 6 GB.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseHubURI } from '../../src/api/hub-reference.ts';
import { startDragonfly, type Dragonfly, type DragonflyPeer } from '../support/dragonfly.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import type { HubCommit } from '../support/hub-emulator-repo.ts';
import { REPO_ROOT } from '../support/kube.ts';
import { freePort } from '../support/ports.ts';
import { kustomize } from '../support/runtime-deploy.ts';
import { complete, models } from '../support/vllm-node.ts';
import { fixtureFiles, startVllm, vllmSetup, type VllmServer, type VllmSetup } from '../support/vllm.ts';

const REPO = 'peerload-tests/tiny-llama';
const TOKEN = 'hf_vllmSuitePrivateRepoToken0123456789ab';
/** What the repository's .gitattributes keeps in LFS, as the Hub's default one and tokenizer.json added. */
const GITATTRIBUTES =
  '*.safetensors filter=lfs diff=lfs merge=lfs -text\ntokenizer.json filter=lfs diff=lfs merge=lfs -text\n';
const inLFS = (path: string) => path.endsWith('.safetensors') || path === 'tokenizer.json';
const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

type Container = {
  name: string;
  command: string[];
  args: string[];
  env?: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
  volumeMounts: { name: string; mountPath: string }[];
};
const deployment = kustomize(join(REPO_ROOT, 'deploy/examples/vllm-hub')).find(
  (m) => m.kind === 'Deployment',
) as unknown as {
  spec: { template: { spec: { initContainers: Container[]; containers: Container[] } } };
};
const podSpec = deployment.spec.template.spec;
const init = podSpec.initContainers.find((c) => c.name === 'fetch-base-model')!;
const vllmContainer = podSpec.containers.find((c) => c.name === 'vllm')!;
const exampleRef = parseHubURI(init.args.find((a) => a.startsWith('hf://'))!);
const flag = (c: Container, name: string) =>
  c.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);

let setup: VllmSetup;
let network: Dragonfly;
let peer: DragonflyPeer;
let hub: HubEmulator;
let work: string;
let vllm: VllmServer | undefined;
const commits: HubCommit[] = [];

/** The tiny base model as a Hub repository: commit 0 the fixture, commit 1 other weights and model card. */
async function repository(): Promise<Record<string, { content: Buffer; lfs: boolean }>[]> {
  const base = join(setup.fixtures, 'base');
  const tree: Record<string, { content: Buffer; lfs: boolean }> = {};
  for (const path of await fixtureFiles(base))
    tree[path] = { content: await readFile(join(base, path)), lfs: inLFS(path) };
  const config = JSON.parse(tree['config.json']!.content.toString()) as Record<string, number>;
  const git = (text: string) => ({ content: Buffer.from(text), lfs: false });
  // Meta's layout beside the transformers one: a nested config file vLLM does not read, placed all the same.
  tree['original/params.json'] = git(
    JSON.stringify({
      dim: config['hidden_size'],
      n_layers: config['num_hidden_layers'],
      vocab_size: config['vocab_size'],
    }),
  );
  tree['.gitattributes'] = git(GITATTRIBUTES);
  tree['README.md'] = git(
    '---\nlicense: apache-2.0\n---\n# tiny-llama\nA random Llama-style model for tests.\n',
  );
  const weights = Buffer.from(tree['model.safetensors']!.content);
  weights[weights.length - 1] = weights.at(-1)! ^ 0xff; // another last weight: another LFS object
  const moved = {
    ...tree,
    'model.safetensors': { content: weights, lfs: true },
    'README.md': git('# tiny-llama v2\n'),
  };
  return [tree, moved];
}

beforeAll(async () => {
  setup = await vllmSetup();
  work = await mkdtemp(join(tmpdir(), 'peerload-vllm-hub-'));
  network = await startDragonfly({ nodePeers: 1 });
  peer = network.peers[0]!;
  hub = await startHubEmulator({
    repos: [{ id: REPO, private: true, commits: await repository(), refs: { main: 0 } }],
    tokens: { [TOKEN]: [REPO] },
    hubHost: '127.0.0.1',
    cdnHost: '127.0.0.2',
  });
  commits.push(...hub.repos.get(REPO)!.commits);
}, 3_600_000);

afterAll(async () => {
  await vllm?.stop();
  await hub?.close();
  await network?.stop();
  if (work && !process.env['PEERLOAD_KEEP_VLLM']) await rm(work, { recursive: true, force: true });
}, 120_000);

interface PodRun {
  code: number;
  stdout: string;
  stderr: string;
  /** The pod's `models` volume. */
  root: string;
}

/** A pod's directory standing for the volume mounted at `mountPath`. */
const volumeDir = (pod: string, mountPath: string) => join(work, pod, mountPath.replace(/^\//, ''));

/**
 * The example's init container run as a process for pod `pod` on the node: its command, arguments and environment,
 * the kubelet's `$(VAR)` expansion, the volume mounts as directories, the repository the emulator's (at `revision`,
 * default the example's), the Hub the emulator ($HF_ENDPOINT) and its host the only one the token may go to.
 */
async function runInitContainer(pod: string, token: string, revision = exampleRef.revision): Promise<PodRun> {
  const env: Record<string, string> = { HF_ENDPOINT: hub.url };
  for (const e of init.env ?? []) {
    if (e.value !== undefined) env[e.name] = e.value;
    else if (e.valueFrom?.fieldRef?.fieldPath === 'status.hostIP') env[e.name] = peer.ip;
    else throw new Error(`env ${e.name}: a source this harness does not resolve`);
  }
  const mounts = init.volumeMounts.map((m) => [m.mountPath, volumeDir(pod, m.mountPath)] as const);
  for (const [, dir] of mounts) await mkdir(dir, { recursive: true });
  const tokenMount = init.volumeMounts.find((m) => m.name === 'hf-token')!.mountPath;
  await writeFile(join(volumeDir(pod, tokenMount), 'token'), token);
  const port = new URL(peer.proxyURL).port;
  const argv = [...init.command.slice(1), ...init.args].map((a) => {
    if (a.startsWith('hf://')) return `hf://${REPO}@${revision}`;
    let arg = a
      .replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (_, v: string) => env[v] ?? '')
      .replace(/:4001$/, `:${port}`);
    for (const [path, dir] of mounts) arg = arg.replace(new RegExp(`(^|=)${path}(?=/|$)`), `$1${dir}`);
    return arg;
  });
  const extra = [
    `--token-hosts=http://${new URL(hub.url).host}`,
    `--allowed-hub-redirect-hosts=http://${new URL(hub.cdnURL).hostname}`,
    '--min-free-bytes=0',
  ];
  const root = volumeDir(pod, init.volumeMounts.find((m) => m.name === 'models')!.mountPath);
  try {
    const { stdout, stderr } = await promisify(execFile)(
      process.execPath,
      [join(REPO_ROOT, 'bin/peerload.js'), ...argv, ...extra],
      { env: { PATH: process.env['PATH'], ...env }, maxBuffer: 16 << 20 },
    );
    return { code: 0, stdout, stderr, root };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    if (typeof err.code !== 'number') throw e;
    return { code: err.code, stdout: err.stdout ?? '', stderr: err.stderr ?? '', root };
  }
}

/** Where the example's vLLM starts, in pod `root`: its `--model`, the example's repository ours. */
const modelDir = (root: string) =>
  flag(vllmContainer, 'model')!
    .replace(`/${exampleRef.repo}/`, `/${REPO}/`)
    .replace(vllmContainer.volumeMounts.find((m) => m.name === 'models')!.mountPath, root);

/** Every file of `commit` in `dir`, byte for byte (an LFS file's sha256 is its oid), and nothing else. */
async function expectCommitPlaced(dir: string, commit: HubCommit): Promise<void> {
  const placed = (await readdir(dir, { recursive: true, withFileTypes: true }))
    .filter((e) => e.isFile())
    .map((e) => relative(dir, join(e.parentPath, e.name)));
  expect(placed.sort()).toEqual([...commit.files.keys()].sort());
  for (const f of commit.files.values())
    expect(sha256(await readFile(join(dir, f.path))), f.path).toBe(f.sha256);
}

/** Body bytes the CDN sent for LFS object `oid`, the daemon's 1-byte probes left out (each checked to be one). */
function cdnBody(oid: string): number {
  const reads = hub.cdnRequests.filter((r) => r.method === 'GET' && r.url.includes(`/${oid}?`));
  expect(reads.filter((r) => r.range === 'bytes=0-0').every((r) => r.bytes <= 1)).toBe(true);
  return reads.filter((r) => r.range !== 'bytes=0-0').reduce((s, r) => s + r.bytes, 0);
}

const outputs: PodRun[] = [];
/** The pod whose volume vLLM starts on: the first, fetched exactly as the example says. */
let served: PodRun;

describe('vLLM on a base model the example init container fetched from the Hub through the node peer', () => {
  it('places the private repository at @main where the example vLLM starts; an empty token Secret is refused', async () => {
    const started = Date.now();
    const first = await runInitContainer('pod-0', TOKEN);
    outputs.push(first);
    served = first;
    console.log(
      `[vllm-hub] pod-0 @main (${((Date.now() - started) / 1000).toFixed(1)} s): ${first.stdout.trim()}`,
    );
    expect(first.code).toBe(0);
    expect(first.stdout).toContain(
      `hf://${REPO}@main (commit ${commits[0]!.sha}): ${commits[0]!.files.size} files`,
    );
    await expectCommitPlaced(modelDir(first.root), commits[0]!);

    const cdnBefore = hub.cdnRequests.length;
    const refused = await runInitContainer('pod-empty-token', '');
    outputs.push(refused);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(
      /HubTokenRequired: .*peerload-tests\/tiny-llama is private or does not exist \(Repository not found\): give a token that can read it/,
    );
    expect(hub.cdnRequests.length).toBe(cdnBefore);
  });

  it('a second pod pinned to that commit gets it after the branch moved, every file a local hit of the node peer', async () => {
    hub.setRef(REPO, 'main', 1);
    const info = await fetch(`${hub.url}/api/models/${REPO}/revision/main`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    expect(((await info.json()) as { sha: string }).sha).toBe(commits[1]!.sha);

    const pinned = commits[0]!.sha;
    const second = await runInitContainer('pod-1', TOKEN, pinned);
    outputs.push(second);
    console.log(`[vllm-hub] pod-1 @${pinned}: ${second.stdout.trim()}`);
    expect(second.code).toBe(0);
    expect(second.stdout).toContain(`(commit ${pinned}): ${commits[0]!.files.size} files`);
    expect(second.stdout).toContain(`(${commits[0]!.files.size} local hits`);
    await expectCommitPlaced(modelDir(second.root), commits[0]!);

    // The CDN: each LFS object of the commit once over both pods, the moved branch's weights never.
    for (const f of commits[0]!.files.values())
      if (f.lfs) expect(cdnBody(f.sha256), f.path).toBe(f.content.length);
    const movedWeights = commits[1]!.files.get('model.safetensors')!;
    expect(hub.cdnRequests.filter((r) => r.url.includes(movedWeights.sha256))).toEqual([]);
    // The Hub: each git file's bytes once over both pods, at the commit.
    for (const f of commits[0]!.files.values()) {
      if (f.lfs) continue;
      const reads = hub.hubRequests.filter(
        (r) =>
          r.method === 'GET' && r.url === `/${REPO}/resolve/${pinned}/${f.path}` && r.range !== 'bytes=0-0',
      );
      expect(
        reads.reduce((s, r) => s + r.bytes, 0),
        f.path,
      ).toBe(f.content.length);
    }
  });

  it('keeps the token out of every fetch output and away from the CDN', () => {
    expect(outputs).toHaveLength(3);
    for (const o of outputs) expect(`${o.stdout}\n${o.stderr}`).not.toContain(TOKEN);
    expect(hub.hubRequests.some((r) => r.authorized && r.url.startsWith(`/${REPO}/resolve/`))).toBe(true);
    expect(hub.cdnRequests.length).toBeGreaterThan(0);
    expect(hub.cdnRequests.every((r) => !r.authorized)).toBe(true);
  });

  it('vLLM started with the example --model on the placed directory answers a completion', async () => {
    const started = Date.now();
    vllm = await startVllm({
      bin: setup.bin,
      model: modelDir(served.root),
      servedName: 'tiny-llama',
      host: '127.0.0.1',
      port: await freePort('127.0.0.1'),
      logPath: join(work, 'vllm.log'),
    });
    console.log(`[vllm-hub] vLLM ready in ${((Date.now() - started) / 1000).toFixed(1)} s`);
    const server = { vllm };
    expect(await models(server)).toMatchObject([{ id: 'tiny-llama', root: modelDir(served.root) }]);
    const out = await complete(server, 'tiny-llama');
    expect(out.status).toBe(200);
    expect(out.text.length).toBeGreaterThan(0);
  });
});
