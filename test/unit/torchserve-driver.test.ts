/**
 * The TorchServe driver against the model-server emulator: descriptions as the driver interface gives them, a
 * repeated registration read as a conflict, a server error read as a failure kind, and the deletion's order
 * (non-default versions first, as TorchServe refuses to drop a default that has siblings).
 */
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createModelServerPool } from '../../src/servers/pools.ts';
import { TorchServeDriver } from '../../src/servers/torchserve/driver.ts';
import {
  startModelServerEmulator,
  type ModelServerEmulator,
  type ModelServerEmulatorOptions,
} from '../support/modelserver-emulator.ts';
import { acrossRestart, expectNoFlip } from '../support/restart.ts';

const agent = createModelServerPool({ connections: 2 });
const started: ModelServerEmulator[] = [];
afterEach(async () => {
  await Promise.all(started.splice(0).map((s) => s.close()));
});
afterAll(() => agent.close());

async function replica(opts: ModelServerEmulatorOptions = {}) {
  const emu = await startModelServerEmulator({ workerStartMs: 0, ...opts });
  started.push(emu);
  const driver = new TorchServeDriver({ secret: async () => 'unused', dispatcher: agent });
  const server = driver.replica({ uid: 'u', namespace: 'ns' }, { pluginPath: 'p2p' }, { endpoint: emu.url });
  return { emu, driver, server };
}
const call = { signal: new AbortController().signal };
const reg = (fileName: string) => ({ fileName, modelName: 'bert', options: { batchSize: 2 } });

describe('TorchServeDriver', () => {
  it('registers through the plugin, scales, and describes versions with their ready workers', async () => {
    const { server } = await replica();
    expect(await server.describe('bert', undefined, call)).toBeUndefined();
    expect(await server.versions('bert', call)).toEqual([]);
    const progress: string[] = [];
    expect(await server.register(reg('bert.mar'), { ...call, progress: (m) => progress.push(m) })).toEqual({
      version: '1.0',
      localHit: undefined,
    });
    expect(progress).toEqual(["the model server's plugin downloads bert.mar"]);
    expect(await server.describe('bert', '1.0', call)).toEqual({
      version: '1.0',
      minWorkers: 0,
      maxWorkers: 0,
      readyWorkers: 0,
    });
    await server.scale('bert', '1.0', { min: 1, max: 2 }, call);
    await expect.poll(async () => (await server.describe('bert', undefined, call))?.readyWorkers).toBe(1);
    expect(await server.describe('bert', undefined, call)).toMatchObject({ minWorkers: 1, maxWorkers: 2 });
  });

  it('a registration the server holds already is a conflict; a server error reads by its kind', async () => {
    const { emu, driver, server } = await replica();
    await server.register(reg('bert.mar'), call);
    const again = await server.register(reg('bert.mar'), call).catch((e: unknown) => e);
    expect(driver.failure(again)).toMatchObject({ kind: 'conflict', retryable: false });
    await emu.inject({ mode: 'error', status: 503, message: 'busy' });
    const busy = await server.describe('bert', undefined, call).catch((e: unknown) => e);
    expect(driver.failure(busy)).toMatchObject({ kind: 'retryable', retryable: true });
    expect(driver.failure(new Error('not the server'))).toBeUndefined();
  });

  it('unregisterAll removes every version, the default last; an absent model is fine', async () => {
    const { emu, server } = await replica({ modelVersion: (f) => (f.includes('v2') ? '2.0' : '1.0') });
    await server.register(reg('bert.mar'), call);
    await server.register(reg('bert-v2.mar'), call);
    await server.setDefault!('bert', '2.0', call);
    await server.unregisterAll('bert', call);
    expect(await server.versions('bert', call)).toEqual([]);
    expect(emu.stats.unregistrations).toBe(2);
    await server.unregisterAll('bert', call);
  });
});

describe('an operator restart', () => {
  it('keeps a Ready replica Ready: no Event, no registration again (the counts are read from TorchServe)', async () => {
    const { emu } = await replica();
    const driver = () => new TorchServeDriver({ secret: async () => 'unused', dispatcher: agent });
    const r = await acrossRestart(driver(), driver(), {
      owner: { uid: 'u', namespace: 'ns' },
      access: { pluginPath: 'p2p' },
      replica: { endpoint: emu.url },
      goal: { modelName: 'bert', fileName: 'bert.mar', minWorkers: 2, maxWorkers: 3, options: {} },
    });
    expectNoFlip(r);
    expect(r.outcome.status.readyWorkers).toBe(2);
    expect(emu.stats.registrations).toBe(1);
  });
});
