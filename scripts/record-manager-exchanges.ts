/**
 * Records the real Dragonfly manager's answers to test/support/manager-exchanges.ts's script, into
 * test/fixtures/dragonfly/manager-<version>.json, which test/unit/manager-replay.test.ts replays against the
 * emulator. Run it again when the Dragonfly version changes:
 *
 *   node scripts/record-manager-exchanges.ts
 *
 * It starts the real network (test/support/dragonfly.ts: MariaDB, Redis, manager, scheduler, seed peer) and an
 * origin on loopback, and takes a few minutes: the manager polls its preheat workers every 30 s.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { DRAGONFLY_CLIENT_VERSION, DRAGONFLY_VERSION, startDragonfly } from '../test/support/dragonfly.ts';
import { runExchanges, type ExchangeFixture } from '../test/support/manager-exchanges.ts';
import { startOrigin } from '../test/support/origin.ts';

const REPO_ROOT = resolve(import.meta.dirname, '..');
const network = await startDragonfly({ nodePeers: 0 });
const origin = await startOrigin({ '/model.bin': Buffer.alloc(1 << 20, 7) });
try {
  const jwt = await network.signIn();
  const pat = await network.createPersonalAccessToken('peerload-recorder', ['job', 'cluster']);
  const started = Date.now();
  const exchanges = await runExchanges({ baseURL: network.managerURL, jwt, pat, origin: origin.url });
  // Nothing run-specific or secret in the fixture: the origin's address, tokens and password hashes go.
  for (const e of exchanges) {
    e.response.body = e.response.body
      .replaceAll(origin.url, '{origin}')
      .replace(/"token":"[^"]+"/g, '"token":"<token>"')
      .replace(/\$2[aby]\$[0-9]{2}\$[./A-Za-z0-9]{53}/g, '<bcrypt>');
  }
  const terminal = exchanges.find((e) => e.name === 'preheat, terminal');
  const fixture: ExchangeFixture = {
    manager: DRAGONFLY_VERSION,
    client: DRAGONFLY_CLIENT_VERSION,
    recordedAt: new Date().toISOString(),
    jobSeconds: terminal ? Math.round((Date.now() - started) / 1000) : 0,
    exchanges,
  };
  const dir = join(REPO_ROOT, 'test/fixtures/dragonfly');
  await mkdir(dir, { recursive: true });
  const path = join(dir, `manager-${DRAGONFLY_VERSION}.json`);
  await writeFile(path, JSON.stringify(fixture, null, 2) + '\n');
  console.log(`wrote ${exchanges.length} exchanges to ${path}`);
} finally {
  await origin.close();
  await network.stop();
}
