/**
 * A poisoned task heals on the REAL Dragonfly network (dfdaemon 1.4.2, test/support/real-network-bed.ts): a
 * tampering proxy in front of the origin (MinIO) flips one bit of a 5 MiB model file, which has a published sha256.
 *   - The agent on node A refuses it: ChecksumMismatch naming the file and both digests, nothing placed, no model
 *     directory left.
 *   - The bad bytes now sit in the network under the file's task: once the origin is honest again, a request for
 *     that task through node B's daemon still gets them (what every retry of the agent used to ask for).
 *   - The agent's retry asks under a fresh task identity and places the published bytes; node B's agent, whose
 *     first attempt meets the poisoned task too, retries under the same fresh task and is served it by the network.
 */
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Agent, ProxyAgent, request } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import {
  DEFAULT_LIMITS,
  downloadVersion,
  identityHeaders,
  newProgress,
  preflight,
  type DownloaderConfig,
} from '../../src/place/placer.ts';
import { ModelVersionSpecSchema } from '../../src/place/spec.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { signObjectURL } from '../../src/storage/sign.ts';
import { TAG_HEADER, USE_P2P_HEADER } from '../../src/storage/taskid.ts';
import { startRealNetworkBed, type RealNetworkBed } from '../support/real-network-bed.ts';
import { sharedDragonfly, fileBucket } from '../support/shared-dragonfly.ts';

const BUCKET = fileBucket('integrity');
const KEY = 'resnet/1/model.onnx';
const BODY = randomBytes(5 << 20);
const SHA = createHash('sha256').update(BODY).digest('hex');
const hex = (b: Buffer) => createHash('sha256').update(b).digest('hex');

let bed: RealNetworkBed;
let dispatcher: Agent;

beforeAll(async () => {
  bed = await startRealNetworkBed({
    prefix: 'integrity',
    bucket: BUCKET,
    network: await sharedDragonfly(inject('dragonflyService'), 2),
  });
  await bed.minio.putObject(BUCKET, KEY, BODY);
  dispatcher = new Agent();
  await bed.network.preheatable;
}, 1_800_000);
afterAll(async () => {
  await dispatcher?.close();
  await bed?.stop();
});

/** The agent of node `i`'s replica: its own model root, node i's daemon. */
async function agentOf(i: number): Promise<DownloaderConfig> {
  const root = join(bed.work, `node-${i}`, 'models');
  await mkdir(root, { recursive: true });
  return {
    root,
    proxy: bed.network.peers[i]!.proxyURL,
    dispatcher,
    storageHosts: parseHostRules('http://127.0.0.0/8'),
    credentials: async () => bed.minio.credentials(),
    limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
  };
}

/** The version the operator asks each agent for: the file by its key in the bucket, with its published sha256. */
const specOf = () =>
  ModelVersionSpecSchema.parse({
    version: '1',
    storage: { ...bed.location, expiresSeconds: 600 },
    files: [{ path: 'model.onnx', key: KEY, size: BODY.length, sha256: SHA }],
  });

async function place(config: DownloaderConfig) {
  const spec = specOf();
  await preflight('resnet', spec, config);
  return downloadVersion('resnet', spec, config, newProgress('resnet', spec));
}

describe('a tampered file on the real network', () => {
  it('is refused, stays poisoned under its task, and heals under a fresh task on both nodes', async () => {
    const [a, b] = [await agentOf(0), await agentOf(1)];
    bed.origin.tamper({ pathPart: KEY, offset: 3 << 20 });
    const refused = await place(a);
    expect(refused).toMatchObject({ state: 'Failed', reason: 'ChecksumMismatch' });
    expect(refused.error).toMatch(
      new RegExp(
        `^resnet/1/model\\.onnx: its bytes hash to sha256 [0-9a-f]{64}, not the ${SHA} its source publishes$`,
      ),
    );
    expect(refused.error).not.toMatch(/network/);
    expect(existsSync(join(a.root, 'resnet'))).toBe(false);
    const poisoned = refused.files[0]!.taskID!;
    expect(poisoned).toMatch(/^[0-9a-f]{64}$/);

    // The origin is honest again, but the network holds the tampered bytes under the file's task: node B's daemon,
    // asked for that task, serves them (the task's id, the URL signed anew and the credentials' tag, is the agent's).
    bed.origin.tamper(undefined);
    const signed = await signObjectURL(bed.location, KEY, bed.minio.credentials(), { expiresSeconds: 600 });
    const proxy = new ProxyAgent(bed.network.peers[1]!.proxyURL);
    try {
      const res = await request(signed.url, {
        dispatcher: proxy,
        // The agent's identity headers (its filter) and the credentials' tag: the same task id as its download.
        headers: { ...identityHeaders(specOf()), [USE_P2P_HEADER]: 'true', [TAG_HEADER]: bed.tag },
      });
      const body = Buffer.from(await res.body.arrayBuffer());
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-dragonfly-task-id']).toBe(poisoned);
      expect(body.length).toBe(BODY.length);
      expect(hex(body)).not.toBe(SHA);
    } finally {
      await proxy.close();
    }

    // Node A's retry: a fresh task, read from the now honest origin, placed.
    const healed = await place(a);
    expect(healed.state).toBe('Ready');
    expect(await readFile(join(a.root, 'resnet', '1', 'model.onnx'))).toEqual(BODY);
    const fresh = healed.files[0]!.taskID!;
    expect(fresh).not.toBe(poisoned);

    // Node B's agent meets the poisoned task once, then asks for the same fresh task: the network serves it.
    const first = await place(b);
    expect(first).toMatchObject({ state: 'Failed', reason: 'ChecksumMismatch' });
    const originBefore = bed.origin.bytesServed(KEY);
    const second = await place(b);
    expect(second.state).toBe('Ready');
    expect(second.files[0]!.taskID).toBe(fresh);
    expect(await readFile(join(b.root, 'resnet', '1', 'model.onnx'))).toEqual(BODY);
    // From the peers, not the origin (a probe or two of the daemon's may read a few bytes).
    expect(bed.origin.bytesServed(KEY) - originBefore).toBeLessThan(BODY.length);
  });
});
