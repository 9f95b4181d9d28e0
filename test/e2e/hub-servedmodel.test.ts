/**
 * A Triton ServedModel whose model is a Hugging Face repository (spec.source.huggingface), through the OPERATOR,
 * on the REAL Dragonfly network (manager and scheduler v2.5.1, dfdaemon 1.4.2: the run's shared one,
 * test/support/shared-dragonfly.ts, its seed peer and two of its node peers), from the Hub emulator (a gated
 * repository: the token is needed; its LFS files redirect to the signed CDN; its own port, so its URLs and task ids
 * are this file's alone). Two real Triton 2.51.0 replicas, each with a real `peerload agent` beside it, found
 * through the EndpointSlices of a Service: the operator resolves `main` to its commit (status.source), lists the
 * files at it and hands each agent every file (git files at their `resolve` URL at the commit with the token, LFS
 * files at the CDN with the CDN's query left out of the task id, and their sha256); the agents place the version
 * through their node's peer and Triton loads it: Ready 2/2, the LFS object above 4 MiB read from the CDN once in
 * all, every file as the Hub's sha256 says, the token never sent to the CDN.
 */
import * as k8s from '@kubernetes/client-node';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { forgetSecrets } from '../../src/redact.ts';
import type { DragonflyView } from '../support/dragonfly.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';

import { ECHO_MODEL_PY } from '../support/oip-exchanges.ts';
import { startTritonFleet, type TritonFleet } from '../support/triton-fleet.ts';
import { type OipServer } from '../support/oip-servers.ts';
import { sharedDragonfly } from '../support/shared-dragonfly.ts';
import { testNamespace, type PeerloadNamespace } from '../support/resources.ts';

const AGENT_TOKEN = 'hub-sm-agent-token-0123456789abcd';
const HF_TOKEN = 'hf_hubServedModelToken0123456789abcd';
const WEIGHTS = randomBytes(5 * 1024 * 1024 + 321);
const TREE = {
  'model.py': ECHO_MODEL_PY,
  'offset.json': JSON.stringify({ offset: 3 }),
  'weights.bin': { content: WEIGHTS, lfs: true },
  'extra/notes/readme.txt': 'nested',
};
const WARM = randomBytes(5 * 1024 * 1024 + 654);
const WARM_TREE = {
  ...TREE,
  'offset.json': JSON.stringify({ offset: 5 }),
  'weights.bin': { content: WARM, lfs: true },
};
const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

let kc: k8s.KubeConfig;
let core: k8s.CoreV1Api;
let ns: string;
let peerload: PeerloadNamespace;
let work: string;
let network: DragonflyView;
let fleet: TritonFleet;
let hub: HubEmulator;

beforeAll(async () => {
  ({ kc, ns, core, peerload } = await testNamespace('hub-sm'));
  work = await mkdtemp(join(tmpdir(), 'peerload-hub-sm-'));
  network = await sharedDragonfly(inject('dragonflyService'), 2);
  hub = await startHubEmulator({
    repos: [
      { id: 'org/echo', commits: [TREE], gated: true },
      { id: 'org/warm', commits: [WARM_TREE] },
    ],
    tokens: { [HF_TOKEN]: ['org/echo'] },
  });
  fleet = await startTritonFleet({
    kc,
    core,
    ns,
    work,
    network,
    agentToken: AGENT_TOKEN,
    models: ['echo', 'warm'],
    secrets: { hf: { token: HF_TOKEN } },
    // The emulated Hub listens on loopback: the admin allows the token to go there.
    flags: ['--allowed-hub-hosts', 'http://127.0.0.1', '--allowed-hub-redirect-hosts', 'http://127.0.0.1'],
  });
  await network.preheatable;
}, 1_800_000);

afterAll(async () => {
  await fleet?.stop();
  await hub?.close();
  if (work) await rm(work, { recursive: true, force: true });
  forgetSecrets();
});

/** The Triton replicas behind Service `triton`, each with its agent. */
const tritonServer = () => ({
  driver: 'triton',
  service: { name: 'triton' },
  agent: { port: fleet.agentPort, tokenSecretRef: { name: 'agent-token', key: 'token' } },
});

async function infer(server: OipServer, data: number[]) {
  const res = await fetch(`${server.url}/v2/models/echo/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [data.length], data }] }),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { model_version: string; outputs: { data: number[] }[] };
}

describe('a Triton ServedModel from a Hugging Face repository, on the real network', () => {
  it('is Ready on 2 replicas with the commit in status; the CDN read once for the LFS file; files as the Hub says', async () => {
    const commit = hub.repos.get('org/echo')!.commits[0]!;
    await peerload.createServedModel('echo', {
      modelName: 'echo',
      version: '1',
      source: {
        huggingface: { repo: 'org/echo', endpoint: hub.url, tokenSecretRef: { name: 'hf', key: 'token' } },
      },
      modelServer: tritonServer(),
    });
    const sm = await peerload.untilReadyOn('echo', '2/2', { timeoutMs: 300_000, intervalMs: 1000 });
    console.log(`echo Ready: ${JSON.stringify(sm.status?.replicas)}`);
    expect(sm.status!.source).toEqual({
      huggingface: { repo: 'org/echo', revision: 'main', commit: commit.sha },
      observedGeneration: sm.metadata.generation,
    });
    for (const r of fleet.replicas) {
      for (const [path, file] of commit.files)
        expect(sha256(await readFile(join(r.root, 'echo/1', path))), `${r.peer.name} ${path}`).toBe(
          file.sha256,
        );
      const answer = await infer(r.server, [1, 2]);
      expect(answer).toMatchObject({ model_version: '1', outputs: [{ data: [4, 5] }] });
    }
    // The LFS object above the daemon's 4 MiB minimum piece length crossed from the CDN once in all (the daemon's
    // 1-byte probes aside): one task for both replicas though each placement had its own signature.
    const weights = commit.files.get('weights.bin')!;
    const reads = hub.cdnRequests.filter((r) => r.method === 'GET' && r.url.includes(`/${weights.sha256}?`));
    expect(reads.filter((r) => r.range === 'bytes=0-0').every((r) => r.bytes <= 1)).toBe(true);
    const body = reads.filter((r) => r.range !== 'bytes=0-0').reduce((s, r) => s + r.bytes, 0);
    console.log(
      `[hub-sm] weights.bin (${WEIGHTS.length} bytes): CDN body ${body} bytes in ${reads.length} GETs`,
    );
    expect(body).toBe(WEIGHTS.length);
    // The token went to the Hub (the listing, the git files), never to the CDN nor into status.
    expect(hub.hubRequests.some((r) => r.authorized && r.url.includes('/org/echo/resolve/'))).toBe(true);
    expect(hub.cdnRequests.every((r) => !r.authorized)).toBe(true);
    expect(JSON.stringify(sm)).not.toContain(HF_TOKEN);
  });

  it('preheat.create: the owned ModelPreheat warms the files on both nodes; the agents join its tasks, the CDN read once', async () => {
    const commit = hub.repos.get('org/warm')!.commits[0]!;
    await peerload.createServedModel('warm', {
      modelName: 'warm',
      version: '1',
      source: { huggingface: { repo: 'org/warm', endpoint: hub.url } },
      modelServer: tritonServer(),
      preheat: {
        create: true,
        manager: { url: network.managerURL, signInSecretRef: { name: 'manager-user' } },
      },
    });
    await peerload.untilReadyOn('warm', '2/2', { timeoutMs: 300_000, intervalMs: 1000 });
    const preheat = await peerload.untilState('warm-preheat', 'SUCCESS', {
      timeoutMs: 180_000,
      intervalMs: 1000,
    });
    const weights = commit.files.get('weights.bin')!;
    expect(preheat.spec.targets?.ips?.slice().sort()).toEqual(network.peers.map((p) => p.ip).sort());
    const task = preheat.status!.tasks!.find((t) => t.url.includes(`/${weights.sha256}?`));
    expect(task, JSON.stringify(preheat.status?.tasks)).toBeDefined();
    for (const r of fleet.replicas) {
      for (const [path, file] of commit.files)
        expect(sha256(await readFile(join(r.root, 'warm/1', path))), `${r.peer.name} ${path}`).toBe(
          file.sha256,
        );
      // The agent's download of the LFS file was the preheat's task on its node's peer.
      const lines = (await r.peer.logs()).split('\n').filter((l) => l.includes(task!.taskID));
      expect(lines.length, r.peer.name).toBeGreaterThan(0);
    }
    const reads = hub.cdnRequests.filter((r) => r.method === 'GET' && r.url.includes(`/${weights.sha256}?`));
    const body = reads.filter((r) => r.range !== 'bytes=0-0').reduce((s, r) => s + r.bytes, 0);
    console.log(
      `[hub-sm] warm weights.bin (${WARM.length} bytes): CDN body ${body} bytes in ${reads.length} GETs`,
    );
    expect(body).toBe(WARM.length);
  });
});
