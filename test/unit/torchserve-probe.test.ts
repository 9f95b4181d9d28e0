/**
 * The TorchServe driver's canary probe (ReplicaServer.probe): the predictions API of one version on the inference
 * port, against the emulator's inference API; what probeOnce (canary.ts) makes of its answers, a refusal and no
 * answer at all; the answer's size bound.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { probeOnce } from '../../src/controllers/servedmodel/canary.ts';
import { createModelServerPool } from '../../src/servers/pools.ts';
import { ModelServerClient } from '../../src/servers/torchserve/client.ts';
import { TorchServeDriver, TorchServeReplica } from '../../src/servers/torchserve/driver.ts';
import { startModelServerEmulator, type ModelServerEmulator } from '../support/modelserver-emulator.ts';

const agent = createModelServerPool();
const started: ModelServerEmulator[] = [];
afterAll(async () => {
  for (const e of started) await e.close();
  await agent.close();
});

async function replica(predict?: (m: string, v: string, input: unknown) => unknown) {
  const emu = await startModelServerEmulator({
    modelVersion: (f) => /-v(\d+)\.mar$/.exec(f)?.[1] ?? '0',
    workerStartMs: 0,
    inferencePort: 0,
    ...(predict ? { predict } : {}),
  });
  started.push(emu);
  const client = new ModelServerClient({ baseURL: emu.url, dispatcher: agent, timeoutMs: 5_000 });
  const server = new TorchServeReplica(client);
  for (const v of ['1', '2']) {
    await client.register({ fileName: `m-v${v}.mar`, modelName: 'm', initialWorkers: 0 });
    await client.scale('m', v, { minWorker: 1, maxWorker: 1, synchronous: true });
  }
  return { emu, server };
}

const driver = new TorchServeDriver({ secret: async () => 'x' });
const target = (server: TorchServeReplica, version = '2') => ({
  server,
  model: 'm',
  version,
  signal: new AbortController().signal,
  failure: (e: unknown) => driver.failure(e),
});

describe('the TorchServe probe', () => {
  it('asks the named version on the inference port, never the default, and passes on the expected answer', async () => {
    const { emu, server } = await replica((_m, v, input) => ({ version: v, echo: input }));
    const answer = await server.probe(
      'm',
      '2',
      { body: '{"data":[1]}', port: emu.inferencePort, maxBytes: 1024 },
      {},
    );
    expect(answer).toEqual({ status: 200, json: { version: '2', echo: { data: [1] } } });
    expect(emu.defaultVersion('m')).toBe('1');
    expect(emu.stats.predictions).toEqual({ 'm/2': 1 });
    const probe = (fields: { path: string; equals: string }[]) => ({
      port: emu.inferencePort,
      body: '{"data":[7]}',
      expect: { status: 200, fields },
    });
    expect(await probeOnce(target(server), probe([{ path: 'echo.data.0', equals: '7' }]))).toBeUndefined();
    expect(await probeOnce(target(server), probe([{ path: 'version', equals: '1' }]))).toBe(
      'got version = "2", expected "1"',
    );
  });

  it("reads TorchServe's refusals as answers: a version not registered is a 404", async () => {
    const { emu, server } = await replica();
    const probe = { port: emu.inferencePort, body: '{}', expect: { status: 200 } };
    expect(await probeOnce(target(server, '3'), probe)).toBe('got HTTP 404, expected 200');
  });

  it('fails without holding an answer past its bound, and says so when nothing answers', async () => {
    const { emu, server } = await replica(() => ({ big: 'x'.repeat(400_000) }));
    const probe = { port: emu.inferencePort, body: '{}', expect: { status: 200 } };
    expect(await probeOnce(target(server), probe)).toMatch(/^no answer: .*larger than 262144 bytes/);
    // A port where nothing listens: no answer, the transport's words.
    const closed = { ...probe, port: 1 };
    expect(await probeOnce(target(server), closed)).toMatch(/^no answer: /);
  });
});
