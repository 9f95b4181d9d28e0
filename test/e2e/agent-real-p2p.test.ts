/**
 * The agent on the REAL Dragonfly network (dfdaemon 1.4.2, the run's shared one: test/support/shared-dragonfly.ts):
 * a directory of three files (one above the daemon's 4 MiB minimum piece length) downloaded through a node peer's
 * proxy into the model root, which is on the same file system as the peer's storage.
 *   - cold: every file through the daemon, each with the task id the agent expects (the daemon's own
 *     X-Dragonfly-Task-ID), placed as a hard link of the file the daemon fills (the body read and checked, not
 *     written), the directory renamed into place whole;
 *   - warm (the next version of the same files): every file a local hit placed as a hard link of the daemon's
 *     copy (its link count shows it), and the origin sends no body byte.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { tokenFile } from '../../src/agent/auth.ts';
import { DEFAULT_LIMITS, type VersionProgress } from '../../src/place/placer.ts';
import { startAgentServer, type AgentServer } from '../../src/agent/server.ts';
import type { DragonflyView } from '../support/dragonfly.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import { sharedDragonfly } from '../support/shared-dragonfly.ts';

const TOKEN = 'real-p2p-agent-token-0123';
const FILES: Record<string, Buffer> = {
  '/repo/m/config.json': Buffer.from('{"name":"m"}'),
  '/repo/m/weights.bin': randomBytes(6 * 1024 * 1024),
  '/repo/m/vocab/vocab.txt': randomBytes(100_000),
};

describe('the agent on the real Dragonfly network', () => {
  let network: DragonflyView;
  let origin: Origin;
  let dispatcher: Agent;
  let dir: string;
  let root: string;
  let agent: AgentServer;

  beforeAll(async () => {
    network = await sharedDragonfly(inject('dragonflyService'), 1);
    // Its own port: its URLs, so its task ids, are this file's alone on the shared network.
    origin = await startOrigin(FILES);
    dispatcher = new Agent();
    dir = await mkdtemp(join(tmpdir(), 'agent-real-'));
    root = join(dir, 'models');
    await mkdir(root);
    await writeFile(join(dir, 'token'), TOKEN);
    agent = await startAgentServer({
      root,
      proxy: network.peers[0]!.proxyURL,
      dispatcher,
      // One file system and one path for both: the daemon runs on this host.
      hardLinkRoot: root,
      // A model server's uid other than the daemon's (root here): the links, root's and 0644, are read-only for it.
      // A server that writes its model file: test/e2e/private-cache-real-p2p.test.ts.
      serverUid: 1000,
      limits: { ...DEFAULT_LIMITS, minFreeBytes: 0 },
      token: tokenFile(join(dir, 'token')),
    });
    await network.preheatable;
  });
  afterAll(async () => {
    await agent?.close();
    await dispatcher?.close();
    await origin?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  async function place(version: string): Promise<VersionProgress> {
    const res = await fetch(`${agent.url}/v1/models/m`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        version,
        tag: 'agent-e2e',
        files: Object.entries(FILES).map(([p, b]) => ({
          path: p.replace('/repo/m/', ''),
          url: `${origin.url}${p}?Expires=1&Signature=changes-every-time-${version}`,
          size: b.length,
        })),
      }),
    });
    expect(res.status).toBe(202);
    await agent.idle();
    const body = (await (
      await fetch(`${agent.url}/v1/models/m`, { headers: { authorization: `Bearer ${TOKEN}` } })
    ).json()) as { versions: VersionProgress[] };
    return body.versions.find((v) => v.version === version)!;
  }

  it('links the files of a cold directory as the daemon fills them, then hard-links every file of the next version', async () => {
    const cold = await place('1');
    expect(cold.error).toBeUndefined();
    expect(cold).toMatchObject({ state: 'Ready', filesDone: 3, localHits: 0, hardLinks: 3 });
    for (const f of cold.files) {
      // The daemon's own id, under its default filter (no filter header was sent): the id the agent expected.
      expect(f.taskID).toBe(f.expectedTaskID);
      expect(f, JSON.stringify(f)).toMatchObject({ hardLink: true, localHit: false });
    }
    for (const [p, b] of Object.entries(FILES)) {
      const path = join(root, 'm', '1', p.replace('/repo/m/', ''));
      expect(await readFile(path)).toEqual(b);
      expect((await stat(path)).nlink).toBeGreaterThanOrEqual(2);
    }
    expect((await readdir(join(root, 'm'))).sort()).toEqual(['1']);

    const originBytes = origin.stats.bytes;
    const warm = await place('2');
    expect(warm).toMatchObject({ state: 'Ready', filesDone: 3, localHits: 3, hardLinks: 3 });
    for (const [p, b] of Object.entries(FILES)) {
      const path = join(root, 'm', '2', p.replace('/repo/m/', ''));
      expect(await readFile(path)).toEqual(b);
      // A hard link of the daemon's task file: two names for one inode.
      expect((await stat(path)).nlink).toBeGreaterThanOrEqual(2);
    }
    expect(origin.stats.bytes).toBe(originBytes);
  });
});
