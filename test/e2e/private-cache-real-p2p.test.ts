/**
 * A private object in the REAL Dragonfly network's caches (manager and scheduler v2.5.1, dfdaemon 1.4.2: the run's
 * shared one, test/support/shared-dragonfly.ts), MinIO as the origin (a private bucket: 403 without a signature)
 * behind a counting proxy. Every origin here (MinIO's proxy, the registry, the Hub) listens on a port of its own: its
 * URLs, so its task ids, bare or tagged, are this file's alone on the shared network.
 *
 * Confidentiality: the object is preheated with credentials onto both node peers (the operator's own request,
 * src/controllers/modelpreheat/request.ts, sent to the real manager: scope all_peers, the peers' ips), so its task
 * id carries the credentials' tag (src/storage/credential-tag.ts). Through a node peer's proxy that holds the task:
 *   - a bare GET of the object's URL (no signature) is not served its bytes: another task, whose probe goes to
 *     the origin and is refused;
 *   - nor a GET with a wrong signature, with no tag or with the tag its wrong secret gives;
 *   - the credentialed download (signed, the credentials' tag: what the agent and the plugin send) is the
 *     preheated task itself, a local hit, and the origin sent the object's body once in all.
 *
 * The same for the other private sources, each placed by `peerload fetch` on node peer 0 (its tasks then held
 * there), each task carrying its credential's tag (src/storage/credential-tag.ts):
 *   - a private OCI blob (the real registry, Distribution v3 with token auth, modctl's push): a bare GET of its
 *     blob URL through the peer that holds it gets the registry's 401 and none of its bytes; the GET with a bearer
 *     token and the registry credentials' tag (what the agents send) is a local hit of that task;
 *   - a gated Hub repository (the Hub emulator: its git files refused without the token, its LFS files at signed
 *     CDN URLs): a bare GET of the LFS object's CDN path (its sha256 is public) or of a git file's resolve URL
 *     gets the CDN's 403 or the Hub's 401 and none of the bytes; the GET with the token's tag is a local hit.
 *
 * Integrity: the agent places the object as a hard link of the daemon's file only for a model server that can
 * neither write it nor make it writable (--server-uid); a real process running as that uid tries to write its model
 * file and fails. For a root server (Triton's image runs as root) the agent copies: a root process writes its copy,
 * and the daemon's file, the one the network serves, keeps its bytes.
 */
import { parseHostRules } from '../../src/policy/reach.ts';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ProxyAgent, request, Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { tokenFile } from '../../src/agent/auth.ts';
import { DEFAULT_LIMITS, type VersionProgress } from '../../src/place/placer.ts';
import { startAgentServer, type AgentServer } from '../../src/agent/server.ts';
import { ModelPreheatSpec } from '../../src/api/index.ts';
import { planObjects } from '../../src/controllers/modelpreheat/request.ts';
import { ManagerClient } from '../../src/manager/client.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { objectURL } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { filterHeaders, TAG_HEADER, taskID } from '../../src/storage/taskid.ts';
import { hubTokenTag, registryCredentialTag } from '../../src/storage/credential-tag.ts';
import { RegistryClient } from '../../src/oci/client.ts';
import type { PlaceResult } from '../../src/cli/fetch-oci-place.ts';
import { forgetSecrets } from '../../src/redact.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import { modctl, nodePlacementArgs, peerloadFetch, pushTritonModel } from '../support/modctl.ts';
import { startTokenServer, type TokenServer } from '../support/registry-token.ts';
import { startRegistry, type Registry } from '../support/registry.ts';
import { startCountingProxy, type CountingProxy } from '../support/counting-proxy.ts';
import { ROOT_USER, type DragonflyPeerView, type DragonflyView } from '../support/dragonfly.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { waitFor } from '../support/process.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';

const BUCKET = fileBucket('private-models');
const KEY = 'tenant-b/secret-weights.bin';
// Above the daemon's 4 MiB minimum piece length: the content travels between peers.
const BODY = randomBytes(6 << 20);
const TOKEN = 'private-cache-agent-token-0123';
/** The registry's user and the Hub's token: what the placements hold and the bare GETs do not. */
const REGISTRY_PASSWORD = 'private-cache-registry-password-42';
const HF_TOKEN = 'hf_privateCacheGrantedToken0123456789';
const OCI_WEIGHTS = randomBytes(5 * 1024 * 1024 + 101);
const HUB_WEIGHTS = randomBytes(5 * 1024 * 1024 + 202);
const HUB_CONFIG = '{"model_type":"llama","private":true}';
/** The model server's uid for the linked case: not root, not the daemon's (root here). */
const SERVER_UID = 1000;

let network: DragonflyView;
let minio: MinIO;
let origin: CountingProxy;
let manager: ManagerClient;
let dir: string;
let preheatedID: string;
let tag: string;
let tokens: TokenServer;
let registry: Registry;
let hub: HubEmulator;

const location = () => ({ ...minio.location(BUCKET), endpoint: origin.url });
const peer = (i: number): DragonflyPeerView => network.peers[i]!;

beforeAll(async () => {
  network = await sharedDragonfly(inject('dragonflyService'), 2);
  minio = await startMinIO();
  await minio.createBucket(BUCKET);
  await minio.putObject(BUCKET, KEY, BODY);
  origin = await startCountingProxy(minio.endpoint);
  manager = new ManagerClient({
    baseURL: network.managerURL,
    auth: { type: 'signIn', username: ROOT_USER.name, password: ROOT_USER.password },
  });
  dir = await mkdtemp(join(tmpdir(), 'private-cache-'));
  // The model server's uid must reach its model root (mkdtemp makes it 0700).
  await chmod(dir, 0o755);
  tag = credentialTag(location(), minio.credentials());
  tokens = await startTokenServer({ users: { alice: REGISTRY_PASSWORD } });
  registry = await startRegistry({ tokens });
  const tool = await modctl(join(dir, 'modctl'));
  await tool(
    [
      'login',
      '-u',
      'alice',
      '-p',
      REGISTRY_PASSWORD,
      '--password-stdin=false',
      '--plain-http',
      registry.host,
    ],
    dir,
  );
  await pushTritonModel(tool, join(dir, 'oci-src'), `${registry.host}/tenant-b/private:v1`, {
    config: 'name: "private"\n',
    weights: OCI_WEIGHTS,
    code: 'def execute(r):\n    return r\n',
  });
  hub = await startHubEmulator({
    repos: [
      {
        id: 'tenant-b/gated',
        commits: [{ 'config.json': HUB_CONFIG, 'model.safetensors': { content: HUB_WEIGHTS, lfs: true } }],
        gated: true,
      },
    ],
    tokens: { [HF_TOKEN]: ['tenant-b/gated'] },
  });
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await hub?.close();
  await registry?.stop();
  await tokens?.close();
  forgetSecrets();
  await manager?.close();
  await origin?.close();
  await minio?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The daemon's own copy of a task: the file named by the task id under its storage directory. */
async function taskFile(p: DragonflyPeerView, taskID: string): Promise<string | undefined> {
  const entries = await readdir(p.storageDir, { recursive: true, withFileTypes: true });
  const e = entries.find((x) => x.isFile() && x.name === taskID);
  return e ? join(e.parentPath, e.name) : undefined;
}

/** A GET through a peer's proxy (absolute-form, as the agent and the plugin send it), the body read. */
async function viaProxy(p: DragonflyPeerView, url: string, headers: Record<string, string> = {}) {
  const agent = new ProxyAgent(p.proxyURL);
  try {
    const res = await request(url, {
      dispatcher: agent,
      headers: { 'X-Dragonfly-Use-P2P': 'true', ...headers },
    });
    const body = Buffer.from(await res.body.arrayBuffer());
    return {
      status: res.statusCode,
      taskID: res.headers['x-dragonfly-task-id'] as string | undefined,
      localHit: res.headers['x-dragonfly-task-download-finished'] === 'true',
      body,
    };
  } finally {
    await agent.close();
  }
}

/** Body bytes the origin sent for the object, and its answers to requests for it. */
const originBytes = () => origin.bytesServed(`/${BUCKET}/${KEY}`);
const originAnswers = () =>
  origin.requests.filter((r) => r.url.startsWith(`/${BUCKET}/${KEY}`)).map((r) => r.status);

describe('a private object preheated with credentials onto node peers', () => {
  it('is a task only holders of the credentials name: a bare GET or a wrong signature gets none of its bytes', async () => {
    // The origin refuses the object without a signature.
    const bare = objectURL(location(), KEY);
    expect((await fetch(bare)).status).toBe(403);

    const spec = ModelPreheatSpec.parse({
      objectStorage: { ...location(), keys: [KEY], credentialsSecretRef: { name: 'tenant-b-storage' } },
      scope: 'all_peers',
      targets: { ips: [peer(0).ip, peer(1).ip] },
    });
    const plan = await planObjects(spec, [KEY], minio.credentials(), {
      bio: 'private-cache e2e',
      rule: '1.4',
    });
    expect(plan.request).toMatchObject({ tag, scope: 'all_peers', ips: [peer(0).ip, peer(1).ip] });
    const job = await manager.createPreheatJob(plan.request);
    const done = await waitFor(
      `preheat job ${job.id} ended`,
      async () => {
        const j = await manager.getJob(job.id);
        return j.state === 'SUCCESS' || j.state === 'FAILURE' ? j : undefined;
      },
      { timeoutMs: 300_000, intervalMs: 1000 },
    );
    expect(done.state).toBe('SUCCESS');
    preheatedID = plan.tasks[0]!.taskID;
    for (const p of [peer(0), peer(1)])
      expect(await taskFile(p, preheatedID), `${p.name} holds ${preheatedID}`).toBeDefined();
    const preheatBytes = originBytes();
    expect(preheatBytes).toBeGreaterThanOrEqual(BODY.length);

    // A bare GET through a node peer that holds the task: not the preheated task, so the daemon asks the origin,
    // which refuses it. None of the object's bytes come back.
    const wrongSecret = { ...minio.credentials(), secretAccessKey: 'not-the-secret-key' };
    const { url: wronglySigned } = await signObjectURL(location(), KEY, wrongSecret, { expiresSeconds: 600 });
    const attempts: { what: string; url: string; headers: Record<string, string> }[] = [
      { what: 'a bare GET', url: bare, headers: {} },
      { what: 'a wrong signature', url: wronglySigned, headers: {} },
      {
        what: 'a wrong signature with the tag its wrong secret gives',
        url: wronglySigned,
        headers: { [TAG_HEADER]: credentialTag(location(), wrongSecret) },
      },
    ];
    for (const a of attempts) {
      const answersBefore = originAnswers().length;
      const got = await viaProxy(peer(0), a.url, a.headers);
      expect(got.status, a.what).not.toBe(200);
      expect(got.body.includes(BODY.subarray(0, 64)), a.what).toBe(false);
      expect(got.taskID ?? '', a.what).not.toBe(preheatedID);
      // The daemon asked the origin (a task of its own), and the origin said no.
      expect(originAnswers().slice(answersBefore), a.what).toContain(403);
    }
    // What the origin sent for them is its 403 error bodies (XML of a few hundred bytes each), none of the object.
    const refusedBytes = originBytes();
    expect(refusedBytes - preheatBytes).toBeLessThan(4096);

    // The credentialed download, as the agent and the plugin make it (signed now, the credentials' tag), through
    // the other node peer: the preheated task, a local hit; the origin sent the body once in all.
    const { url } = await signObjectURL(location(), KEY, minio.credentials(), { expiresSeconds: 600 });
    const mine = await viaProxy(peer(1), url, { [TAG_HEADER]: tag });
    expect(mine).toMatchObject({ status: 200, taskID: preheatedID, localHit: true });
    expect(mine.body.equals(BODY)).toBe(true);
    expect(originBytes()).toBe(refusedBytes);
    expect(originBytes()).toBeLessThan(2 * BODY.length);

    // What remains (docs/security.md): the tag, not the signature, is what names the task. Whoever knows it (a
    // holder of the secret can compute it) reads the cached object without signing anything.
    const withTag = await viaProxy(peer(0), bare, { [TAG_HEADER]: tag });
    expect(withTag).toMatchObject({ status: 200, taskID: preheatedID });
    expect(withTag.body.equals(BODY)).toBe(true);
    console.log(
      `private object: origin sent ${originBytes()} body bytes for ${BODY.length}; origin answers ${originAnswers().join(',')}`,
    );
  });
});

describe('a private OCI blob and a gated Hub file, placed on a node peer with their credentials', () => {
  const registryCredentials = () => ({ username: 'alice', password: REGISTRY_PASSWORD });

  it("a private OCI blob: a bare GET through the peer holding it gets the registry's 401, the credentialed GET its task", async () => {
    const root = join(dir, 'oci-node0');
    await mkdir(root, { recursive: true });
    Object.assign(process.env, {
      PEERLOAD_REGISTRY_USERNAME: 'alice',
      PEERLOAD_REGISTRY_PASSWORD: REGISTRY_PASSWORD,
    });
    let r;
    try {
      r = await peerloadFetch([
        `oci://${registry.host}/tenant-b/private:v1`,
        join(root, '1'),
        ...nodePlacementArgs(peer(0).proxyURL, root),
        '--plain-http',
        '--allowed-registry-hosts',
        'http://127.0.0.1',
        '--json',
      ]);
    } finally {
      delete process.env['PEERLOAD_REGISTRY_USERNAME'];
      delete process.env['PEERLOAD_REGISTRY_PASSWORD'];
    }
    expect(r.err).toEqual([]);
    expect(r.code).toBe(0);
    const weights = (JSON.parse(r.out[0]!) as PlaceResult).layers.find(
      (l) => l.filepath === '1/weights.bin',
    )!;
    expect((await readFile(join(root, '1', '1', 'weights.bin'))).equals(OCI_WEIGHTS)).toBe(true);
    const blobURL = `${registry.url}/v2/tenant-b/private/blobs/${weights.digest}`;
    const ociTag = registryCredentialTag(registry.url, 'tenant-b/private', registryCredentials());
    const id = taskID({ url: blobURL, tag: ociTag, rule: '1.4' });
    // The placement's task carries the credentials' tag, and node peer 0 holds it.
    expect(weights.taskID).toBe(id);
    expect(await taskFile(peer(0), id), `${peer(0).name} holds ${id}`).toBeDefined();
    // The registry refuses the blob without a token.
    expect((await fetch(blobURL)).status).toBe(401);

    // A bare GET through the peer that holds the blob: another task, asked of the registry, which says no.
    const bare = await viaProxy(peer(0), blobURL);
    expect(bare.status).not.toBe(200);
    expect(bare.body.includes(OCI_WEIGHTS.subarray(0, 64))).toBe(false);
    expect(bare.taskID ?? '').not.toBe(id);

    // The credentialed GET, as the agents send it (a bearer token, the credentials' tag): the held task, a hit.
    const dispatcher = new Agent();
    try {
      const client = new RegistryClient(registry.host, {
        dispatcher,
        plainHTTP: true,
        credentials: registryCredentials(),
        allowedHosts: parseHostRules('http://127.0.0.1'),
      });
      const authorization = (await client.pullAuthorization('tenant-b/private'))!;
      const mine = await viaProxy(peer(0), blobURL, { authorization, [TAG_HEADER]: ociTag });
      expect(mine).toMatchObject({ status: 200, taskID: id, localHit: true });
      expect(mine.body.equals(OCI_WEIGHTS)).toBe(true);
    } finally {
      await dispatcher.close();
    }
  });

  it("a gated Hub file: a bare GET of its CDN path or resolve URL gets the origin's refusal, the token's tag its task", async () => {
    const root = join(dir, 'hub-node0');
    await mkdir(root, { recursive: true });
    const tokenPath = join(dir, 'hf-token');
    await writeFile(tokenPath, HF_TOKEN);
    const r = await peerloadFetch([
      'hf://tenant-b/gated@main',
      root,
      '--endpoint',
      hub.url,
      '--allowed-hub-hosts',
      'http://127.0.0.1',
      '--allowed-hub-redirect-hosts',
      'http://127.0.0.1',
      '--token-file',
      tokenPath,
      ...nodePlacementArgs(peer(0).proxyURL, root),
    ]);
    expect(r.err).toEqual([]);
    expect(r.code).toBe(0);
    const commit = hub.repos.get('tenant-b/gated')!.commits[0]!;
    const lfs = commit.files.get('model.safetensors')!;
    expect(
      (await readFile(join(root, 'tenant-b', 'gated', commit.sha, 'model.safetensors'))).equals(HUB_WEIGHTS),
    ).toBe(true);
    const hfTag = hubTokenTag(hub.url, 'tenant-b/gated', HF_TOKEN);
    // The CDN path names the object by its sha256, which a gated repository's listing shows to anyone.
    const cdnPath = `${hub.cdnURL}/repos/${lfs.sha256.slice(0, 2)}/${lfs.sha256.slice(2, 4)}/${lfs.sha256}`;
    const id = taskID({ url: cdnPath, tag: hfTag, rule: '1.4' });
    expect(await taskFile(peer(0), id), `${peer(0).name} holds ${id}`).toBeDefined();

    const cdnBefore = hub.cdnRequests.length;
    const bare = await viaProxy(peer(0), cdnPath);
    expect(bare.status).not.toBe(200);
    expect(bare.body.includes(HUB_WEIGHTS.subarray(0, 64))).toBe(false);
    expect(bare.taskID ?? '').not.toBe(id);
    // The daemon asked the CDN (a task of its own), which refused the unsigned path.
    expect(hub.cdnRequests.slice(cdnBefore).map((q) => q.status)).toContain(403);
    const git = await viaProxy(peer(0), `${hub.url}/tenant-b/gated/resolve/${commit.sha}/config.json`);
    expect(git.status).not.toBe(200);
    expect(git.body.toString('utf8')).not.toContain(HUB_CONFIG);

    // The token's holder, as the agents send it (a CDN URL signed now, its query filtered, the token's tag).
    const signed = hub.signedCDNURL(lfs);
    const mine = await viaProxy(peer(0), signed, {
      ...filterHeaders([...new URL(signed).searchParams.keys()]),
      [TAG_HEADER]: hfTag,
    });
    expect(mine).toMatchObject({ status: 200, taskID: id, localHit: true });
    expect(mine.body.equals(HUB_WEIGHTS)).toBe(true);
  });
});

describe("a model server's writes to its model file", () => {
  const run = promisify(execFile);
  const agents: AgentServer[] = [];
  const dispatcher = new Agent();
  afterAll(async () => {
    for (const a of agents) await a.close();
    await dispatcher.close();
  });

  /** An agent beside peer 0 whose model server runs as `serverUid`, placing `version` of the private object. */
  async function place(name: string, version: string, serverUid: number | undefined) {
    const root = join(dir, name);
    await mkdir(root, { recursive: true });
    await writeFile(join(dir, `${name}.token`), TOKEN);
    const agent = await startAgentServer({
      root,
      proxy: peer(0).proxyURL,
      dispatcher,
      // The daemon runs on this host: the model root is on its file system, at the same path.
      hardLinkRoot: root,
      serverUid,
      // MinIO on loopback, as the admin names it in the agent's --allowed-storage-hosts.
      storageHosts: parseHostRules('http://127.0.0.0/8'),
      limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
      token: tokenFile(join(dir, `${name}.token`)),
      credentials: async () => minio.credentials(),
    });
    agents.push(agent);
    const res = await fetch(`${agent.url}/v1/models/m`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        version,
        storage: { ...location(), expiresSeconds: 600 },
        files: [{ path: 'weights.bin', key: KEY, size: BODY.length }],
      }),
    });
    expect(res.status).toBe(202);
    await agent.idle();
    const body = (await (
      await fetch(`${agent.url}/v1/models/m`, { headers: { authorization: `Bearer ${TOKEN}` } })
    ).json()) as { versions: VersionProgress[] };
    const v = body.versions.find((x) => x.version === version)!;
    expect(v.error).toBeUndefined();
    return { v, file: join(root, 'm', version, 'weights.bin') };
  }

  /** `sh -c script file` as `uid` without any capability (a restricted container), or as root when undefined. */
  const writer = (uid: number | undefined, script: string, file: string) => {
    const sh = ['/bin/sh', '-c', script, 'server', file];
    const argv =
      uid === undefined
        ? sh
        : [
            `--reuid=${uid}`,
            `--regid=${uid}`,
            '--clear-groups',
            '--inh-caps=-all',
            '--bounding-set=-all',
            '--no-new-privs',
            ...sh,
          ];
    return run(uid === undefined ? argv[0]! : 'setpriv', uid === undefined ? argv.slice(1) : argv).then(
      (r) => ({ ok: true, out: r.stdout + r.stderr }),
      (e: { stdout: string; stderr: string }) => ({ ok: false, out: e.stdout + e.stderr }),
    );
  };

  it('a non-root server gets the daemon file read-only: its writes fail and the network keeps serving the object', async () => {
    expect(process.getuid?.(), 'switching to the server uid needs root').toBe(0);
    const daemonFile = (await taskFile(peer(0), preheatedID))!;
    expect(daemonFile).toBeDefined();
    const { v, file } = await place('nonroot', '1', SERVER_UID);
    // The agent signed the key itself and sent the credentials' tag: the preheated task, a local hit, linked.
    expect(v.files[0]).toMatchObject({
      taskID: preheatedID,
      expectedTaskID: preheatedID,
      localHit: true,
      hardLink: true,
    });
    expect((await stat(file)).ino).toBe((await stat(daemonFile)).ino);

    // The server (uid 1000, no capabilities) reads its model file, and cannot write it, truncate it or chmod it.
    const read = await writer(SERVER_UID, 'cmp -s "$1" "$1" && head -c 16 "$1" | od -An -tx1', file);
    expect(read.ok, read.out).toBe(true);
    expect(read.out.replace(/\s+/g, '')).toBe(BODY.subarray(0, 16).toString('hex'));
    for (const script of [
      'printf poisoned >> "$1"',
      'printf poisoned 1<> "$1"',
      ': > "$1"',
      'chmod a+w "$1"',
    ]) {
      const w = await writer(SERVER_UID, script, file);
      expect(w.ok, `${script}: ${w.out}`).toBe(false);
      expect(w.out, script).toMatch(/Permission denied|Operation not permitted/);
    }
    expect((await readFile(daemonFile)).equals(BODY)).toBe(true);
    const { url } = await signObjectURL(location(), KEY, minio.credentials(), { expiresSeconds: 600 });
    const again = await viaProxy(peer(1), url, { [TAG_HEADER]: tag });
    expect(again.body.equals(BODY)).toBe(true);
  });

  it("a root server's model file is a copy: its write changes that copy, never the daemon's file", async () => {
    const daemonFile = (await taskFile(peer(0), preheatedID))!;
    const linksBefore = (await stat(daemonFile)).nlink;
    const { v, file } = await place('root', '2', undefined);
    expect(v.files[0]).toMatchObject({ taskID: preheatedID, localHit: true, hardLink: false });
    expect(v.files[0]!.hardLinkFallback).toContain("the model server's uid is not known");
    expect((await stat(file)).nlink).toBe(1);
    expect((await stat(daemonFile)).nlink).toBe(linksBefore);

    // Root writes its model file (as Triton's image would): the copy changes.
    const w = await writer(undefined, 'printf poisoned 1<> "$1"', file);
    expect(w.ok, w.out).toBe(true);
    expect((await readFile(file)).subarray(0, 8).toString()).toBe('poisoned');
    // The daemon's file, and what the network serves, are the object's bytes.
    expect((await readFile(daemonFile)).equals(BODY)).toBe(true);
    const { url } = await signObjectURL(location(), KEY, minio.credentials(), { expiresSeconds: 600 });
    for (const p of [peer(0), peer(1)]) {
      const got = await viaProxy(p, url, { [TAG_HEADER]: tag });
      expect(got).toMatchObject({ status: 200, taskID: preheatedID });
      expect(got.body.equals(BODY), p.name).toBe(true);
    }
  });
});
