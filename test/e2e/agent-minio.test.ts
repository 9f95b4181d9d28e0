/**
 * A model directory from MinIO to a pod's model root, the whole path short of the real P2P network: the prefix is
 * listed (S3 ListObjectsV2), selected and planned into one preheat job; the peer (the emulator) preheats every
 * signed URL with the s3 default filter; then the agent, given only the object keys, signs each itself with the
 * mounted credentials and downloads through the peer: every file is a local hit with the preheat's task id, MinIO
 * is not read again, and the directory appears whole.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { credentialsDir } from '../../src/agent/credentials.ts';
import { DEFAULT_LIMITS } from '../../src/place/placer.ts';
import { tokenFile } from '../../src/agent/auth.ts';
import { startAgentServer, type AgentServer } from '../../src/agent/server.ts';
import { fileSetEntries, planPreheatJobs, selectFiles } from '../../src/storage/fileset.ts';
import { listPrefix } from '../../src/storage/list.ts';
import { effectiveFilter, type StorageLocation } from '../../src/storage/objecturl.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { startMinIO, type MinIO } from '../support/minio.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { parseHostRules } from '../../src/policy/reach.ts';

const TOKEN = 'e2e-agent-token-0123456789';
const SHARDS = {
  'models/tiny/config.json': Buffer.from('{"model_type":"tiny"}'),
  'models/tiny/model-00001-of-00003.safetensors': randomBytes(700_000),
  'models/tiny/model-00002-of-00003.safetensors': randomBytes(600_000),
  'models/tiny/model-00003-of-00003.safetensors': randomBytes(500_000),
  'models/tiny/tokenizer/tokenizer.json': Buffer.from('{"vocab":{}}'),
  'models/tiny/README.md': Buffer.from('# tiny'),
};

describe('the agent places a MinIO directory through the peer proxy', () => {
  let minio: MinIO;
  let peer: PeerProxy;
  let dispatcher: Agent;
  let dir: string;
  let agent: AgentServer;
  let location: StorageLocation;

  beforeAll(async () => {
    minio = await startMinIO();
    await minio.createBucket('weights');
    for (const [key, body] of Object.entries(SHARDS)) await minio.putObject('weights', key, body);
    location = minio.location('weights');
    peer = await startPeerProxy();
    dispatcher = new Agent();
    dir = await mkdtemp(join(tmpdir(), 'agent-e2e-'));
    await writeFile(join(dir, 'token'), TOKEN);
    // The storage Secret as the kubelet mounts it: one file per key.
    await mkdir(join(dir, 'creds'));
    await writeFile(join(dir, 'creds', 'access_key'), minio.accessKey);
    await writeFile(join(dir, 'creds', 'secret_key'), minio.secretKey);
    await mkdir(join(dir, 'models'));
    agent = await startAgentServer({
      root: join(dir, 'models'),
      proxy: peer.url,
      dispatcher,
      limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
      token: tokenFile(join(dir, 'token')),
      credentials: credentialsDir(join(dir, 'creds')),
      // MinIO listens on loopback: the pod owner's list names it.
      storageHosts: parseHostRules('http://127.0.0.0/8'),
    });
  });
  afterAll(async () => {
    await agent?.close();
    await dispatcher?.close();
    await peer?.close();
    await minio?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('lists, preheats in one job, and downloads every file as a local hit', async () => {
    const listed = await listPrefix(location, minio.credentials(), 'models/tiny/');
    const files = selectFiles({ prefix: 'models/tiny/', exclude: ['*.md'] }, listed);
    expect(files.map((f) => f.path)).toEqual([
      'config.json',
      'model-00001-of-00003.safetensors',
      'model-00002-of-00003.safetensors',
      'model-00003-of-00003.safetensors',
      'tokenizer/tokenizer.json',
    ]);
    // The tag the storage credentials give these private objects: the operator's ids, and the agent's downloads.
    const tag = credentialTag(location, minio.credentials());
    const entries = fileSetEntries(location, files, { tag });
    const jobs = planPreheatJobs(entries);
    expect(jobs).toHaveLength(1);

    // The seed peer's preheat of the job's URLs, signed by the operator.
    const filter = effectiveFilter(location);
    for (const e of jobs[0]!) {
      const signed = await signObjectURL(location, e.key, minio.credentials(), { expiresSeconds: 600 });
      const { taskID } = await peer.preheat(signed.url, { filter, tag });
      expect(taskID).toBe(e.taskID);
    }
    const originBytes = peer.stats.originBytes;

    const res = await fetch(`${agent.url}/v1/models/tiny`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        version: '1',
        storage: {
          type: 's3',
          bucket: 'weights',
          endpoint: minio.endpoint,
          pathStyle: true,
          region: minio.region,
        },
        files: entries.map((e) => ({ path: e.path, key: e.key, size: e.size })),
      }),
    });
    expect(res.status).toBe(202);
    await agent.idle();

    const status = (await (
      await fetch(`${agent.url}/v1/models/tiny`, { headers: { authorization: `Bearer ${TOKEN}` } })
    ).json()) as {
      versions: { state: string; localHits: number; files: { taskID: string; path: string }[] }[];
    };
    const [v] = status.versions;
    expect(v!.state).toBe('Ready');
    expect(v!.localHits).toBe(5);
    expect(v!.files.map((f) => f.taskID)).toEqual(entries.map((e) => e.taskID));
    // Nothing more came from MinIO: the body bytes of every file were the peer's.
    expect(peer.stats.originBytes).toBe(originBytes);
    for (const e of entries) {
      expect(await readFile(join(dir, 'models', 'tiny', '1', e.path))).toEqual(
        SHARDS[e.key as keyof typeof SHARDS],
      );
    }
    expect(await readdir(join(dir, 'models', 'tiny'))).toEqual(['1']);
  });
});
