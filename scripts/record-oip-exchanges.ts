/**
 * Records the real Triton's and MLServer's answers to the scripts of test/support/oip-exchanges.ts into
 * test/fixtures/oip/<server>.json, which test/unit/oip-replay.test.ts replays against the OIP emulator. Run it
 * again when a server's version changes (the set-up scripts install them first):
 *
 *   node scripts/record-oip-exchanges.ts
 */
import { mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import {
  MLSERVER_SCRIPT,
  TRITON_SCRIPT,
  runExchanges,
  type OipFixture,
  type OipStep,
} from '../test/support/oip-exchanges.ts';
import {
  startMLServer,
  startTriton,
  writeSklearnModel,
  type OipServer,
} from '../test/support/oip-servers.ts';

const REPO_ROOT = resolve(import.meta.dirname, '..');
const OUT = join(REPO_ROOT, 'test/fixtures/oip');

async function record(
  label: string,
  start: (opts: { repository: string }) => Promise<OipServer>,
  script: OipStep[],
) {
  const repo = await mkdtemp(join(tmpdir(), `${label}-repo-`));
  const server = await start({ repository: repo });
  try {
    const exchanges = await runExchanges(server.url, { repo, sklearnModel: writeSklearnModel }, script);
    const fixture: OipFixture = { server: label, recordedAt: new Date().toISOString(), exchanges };
    await writeFile(join(OUT, `${label}.json`), `${JSON.stringify(fixture, null, 2)}\n`);
    console.log(`${label}: ${exchanges.length} exchanges`);
  } finally {
    await server.stop();
  }
}

await mkdir(OUT, { recursive: true });
await record('triton-2.51.0', startTriton, TRITON_SCRIPT);
await record('mlserver-1.7.1', startMLServer, MLSERVER_SCRIPT);
