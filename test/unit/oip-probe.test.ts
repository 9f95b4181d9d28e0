/**
 * The Open Inference Protocol drivers' canary probe (OipReplica.probe): the infer of one named version on the
 * replica's endpoint, against the OIP emulator as Triton and as MLServer; what probeOnce (canary.ts) makes of a
 * right answer, a wrong one, a version that does not serve, and an answer past its bound.
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { probeOnce } from '../../src/controllers/servedmodel/canary.ts';
import { OipDriver, type OipFlavour } from '../../src/servers/oip/driver.ts';
import { startOipEmulator, type OipEmulator } from '../support/oip-emulator.ts';

let dir = '';
let emulator: OipEmulator | undefined;
afterEach(async () => {
  await emulator?.close();
  await rm(dir, { recursive: true, force: true });
});

/** A repository with versions 1 and 2 of `m`, both loaded. */
async function serving(flavour: OipFlavour) {
  dir = await mkdtemp(join(tmpdir(), 'oip-probe-'));
  for (const v of ['1', '2']) {
    const d = join(dir, 'm', v);
    await mkdir(d, { recursive: true });
    if (flavour === 'mlserver') {
      await writeFile(join(d, 'model.joblib'), 'x');
      await writeFile(
        join(d, 'model-settings.json'),
        JSON.stringify({ name: 'm', parameters: { uri: './model.joblib', version: v } }),
      );
    }
  }
  emulator = await startOipEmulator(flavour, dir);
  const config = { version_policy: { specific: { versions: [1, 2] } } };
  const res = await fetch(`${emulator.url}/v2/repository/models/m/load`, {
    method: 'POST',
    body: JSON.stringify(flavour === 'triton' ? { parameters: { config: JSON.stringify(config) } } : {}),
  });
  expect(res.status).toBe(200);
  const driver = new OipDriver(flavour, { secret: () => Promise.resolve('t') });
  const server = driver.replica({ uid: 'u', namespace: 'ml' }, {}, { endpoint: emulator.url, pod: 'p-0' });
  const target = (version: string) => ({
    server,
    model: 'm',
    version,
    signal: new AbortController().signal,
    failure: (e: unknown) => driver.failure(e),
  });
  return { emulator, server, target };
}

const body = JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 2], data: [3, 4] }] });
const probe = (fields: { path: string; equals: string }[] = [], status = 200) => ({
  body,
  expect: { status, fields },
});

describe.each(['triton', 'mlserver'] as const)('the %s probe', (flavour) => {
  it('asks the named version on the endpoint and matches its answer', async () => {
    const { emulator, server, target } = await serving(flavour);
    const answer = await server.probe!('m', '2', { body, maxBytes: 4096 }, {});
    expect(answer.status).toBe(200);
    expect(answer.json).toMatchObject({ model_version: '2', outputs: [{ name: 'OUTPUT0', data: [3, 4] }] });
    expect(emulator.requests).toContain('POST /v2/models/m/versions/2/infer');
    const right = probe([
      { path: 'outputs.0.data', equals: '[3,4]' },
      { path: 'model_version', equals: '2' },
    ]);
    expect(await probeOnce(target('2'), right)).toBeUndefined();
  });

  it('says what a version answering wrongly got, and reads a version that does not serve as an answer', async () => {
    const { emulator, target } = await serving(flavour);
    emulator.answerWith('m', '2', { outputs: [{ name: 'OUTPUT0', data: [0, 0] }] });
    expect(await probeOnce(target('2'), probe([{ path: 'outputs.0.data.0', equals: '3' }]))).toBe(
      'got outputs.0.data.0 = "0", expected "3"',
    );
    // Version 1 still answers as the identity.
    expect(await probeOnce(target('1'), probe([{ path: 'outputs.0.data.0', equals: '3' }]))).toBeUndefined();
    expect(await probeOnce(target('3'), probe())).toBe(
      `got HTTP ${flavour === 'triton' ? 400 : 404}, expected 200`,
    );
  });

  it('fails without holding an answer past its bound', async () => {
    const { emulator, server } = await serving(flavour);
    emulator.answerWith('m', '2', { big: 'x'.repeat(10_000) });
    const err = await server.probe!('m', '2', { body, maxBytes: 1024 }, {}).catch((e: unknown) => e);
    expect(String(err)).toMatch(/larger than 1024 bytes/);
  });
});
