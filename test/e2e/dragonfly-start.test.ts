/**
 * A start of the Dragonfly harness that fails stops what it had started: MariaDB's bootstrap fails (a
 * `mariadb-install-db` that exits 1 comes first on PATH) while Redis, started beside it, is already up; the start
 * rejects with the failure and leaves no Redis behind.
 *
 * Its own start, not the run's shared network (test/support/shared-dragonfly.ts): the start itself is what fails.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startDragonfly } from '../support/dragonfly.ts';

let shims: string;
const saved = { path: process.env['PATH'], bin: process.env['PEERLOAD_DRAGONFLY_BIN'] };

beforeAll(async () => {
  shims = await mkdtemp(join(tmpdir(), 'peerload-dragonfly-start-'));
  await writeFile(join(shims, 'mariadb-install-db'), '#!/bin/sh\necho "bootstrap refused" >&2\nexit 1\n');
  await chmod(join(shims, 'mariadb-install-db'), 0o755);
  process.env['PATH'] = `${shims}:${saved.path}`;
  // The stores fail before any Dragonfly binary is needed.
  process.env['PEERLOAD_DRAGONFLY_BIN'] = shims;
});

afterAll(async () => {
  process.env['PATH'] = saved.path;
  if (saved.bin === undefined) delete process.env['PEERLOAD_DRAGONFLY_BIN'];
  else process.env['PEERLOAD_DRAGONFLY_BIN'] = saved.bin;
  await rm(shims, { recursive: true, force: true });
});

/** The commands of this process's children (from /proc). */
async function children(): Promise<string[]> {
  const out: string[] = [];
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    // pid (comm) state ppid ...: comm may hold spaces, so split after its closing parenthesis.
    const [comm, rest] = [
      stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')),
      stat.slice(stat.lastIndexOf(')') + 2),
    ];
    if (Number(rest.split(' ')[1]) === process.pid) out.push(comm);
  }
  return out;
}

describe('the Dragonfly harness start', () => {
  it('a failed MariaDB bootstrap stops the Redis already started', async () => {
    await expect(startDragonfly({ nodePeers: 1 })).rejects.toThrow(/mariadb-install-db|bootstrap refused/);
    expect(await children()).not.toContain('redis-server');
  });
});
