/**
 * The OIP emulator replayed against the real servers' recorded answers (test/fixtures/oip/, written by
 * scripts/record-oip-exchanges.ts from the scripts in test/support/oip-exchanges.ts): Triton 2.51.0 and MLServer
 * 1.7.1. Every recorded exchange is one test: the same status and content type, the same error text, the same
 * index (entries, versions, states, reasons), and for Triton's model config the fields the driver reads and edits
 * (name, version policy, instance counts, parameters): the emulator does not invent the rest of a real config.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOipEmulator, type OipEmulator, type OipFlavour } from '../support/oip-emulator.ts';
import {
  MLSERVER_SCRIPT,
  TRITON_SCRIPT,
  runExchanges,
  type OipExchange,
  type OipFixture,
  type OipStep,
} from '../support/oip-exchanges.ts';

const fixture = (name: string) =>
  JSON.parse(
    readFileSync(resolve(import.meta.dirname, `../fixtures/oip/${name}.json`), 'utf8'),
  ) as OipFixture;

/** What of a Triton config the driver reads and edits. */
function configFields(text: string) {
  const c = JSON.parse(text) as {
    name?: string;
    version_policy?: unknown;
    instance_group?: { count?: number }[];
    parameters?: unknown;
  };
  return {
    name: c.name,
    version_policy: c.version_policy,
    counts: (c.instance_group ?? []).map((g) => g.count),
    parameters: c.parameters,
  };
}

function comparable(e: OipExchange) {
  const { status, contentType, body } = e.response;
  let shown: unknown = body;
  if (status === 200 && e.request.path.endsWith('/config')) shown = configFields(body);
  else if (body.startsWith('[') || body.startsWith('{')) shown = JSON.parse(body);
  return { status, contentType, body: shown };
}

function replay(flavour: OipFlavour, name: string, script: OipStep[]) {
  describe(`${name}: the emulator answers as the real server did`, () => {
    const recorded = fixture(name);
    let repo: string;
    let emulator: OipEmulator;
    let answers: OipExchange[];

    beforeAll(async () => {
      repo = await mkdtemp(join(tmpdir(), `oip-replay-${flavour}-`));
      emulator = await startOipEmulator(flavour, repo);
      const sklearnModel = (path: string) => writeFile(path, 'not a real joblib: the emulator runs no model');
      answers = await runExchanges(emulator.url, { repo, sklearnModel }, script, emulator);
    });
    afterAll(async () => {
      await emulator.close();
      await rm(repo, { recursive: true, force: true });
    });

    it('runs the recorded script', () => {
      expect(recorded.exchanges.map((e) => e.name)).toEqual(script.map((s) => s.name));
    });

    for (const [i, exchange] of recorded.exchanges.entries())
      it(`${i + 1}. ${exchange.name} (${exchange.request.method} ${exchange.request.path})`, () => {
        expect(comparable(answers[i]!)).toEqual(comparable(exchange));
      });
  });
}

replay('triton', 'triton-2.51.0', TRITON_SCRIPT);
replay('mlserver', 'mlserver-1.7.1', MLSERVER_SCRIPT);
