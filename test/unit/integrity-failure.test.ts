/**
 * How an agent's integrity failure reads, from its answer to the conditions: a layer whose bytes are not its digest
 * (`ChecksumMismatch`) and an archive entry that would leave the directory (`UnsafeTarEntry`) are their own reasons,
 * `ChecksumMismatch` and `UnsafeArchive`, not a model server's nor a network error; the message is the agent's (the
 * layer, both digests) after `reported by the agent`; a mismatch is retried (Reconciling), an unsafe archive is not
 * (Stalled).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { servedModelConditions } from '../../src/controllers/servedmodel/conditions.ts';
import { convergeReplica } from '../../src/controllers/servedmodel/replica.ts';
import type { ReplicaServer } from '../../src/servers/driver.ts';
import { AgentClient, integrityOf } from '../../src/servers/agent-client.ts';
import { OipDriver } from '../../src/servers/oip/driver.ts';

const DIGEST = 'a'.repeat(64);
const GOT = 'b'.repeat(64);
const ANSWERS: Record<string, { reason: string; error: string }> = {
  tampered: {
    reason: 'ChecksumMismatch',
    error: `layer 1 (sha256:aaaaaaaaaaaa, b.bin): its bytes hash to sha256 ${GOT}, not the ${DIGEST} its source publishes`,
  },
  escape: {
    reason: 'UnsafeTarEntry',
    error:
      'layer 1 (sha256:cccccccccccc, code): the tar entry "../../escaped.txt" is refused: it leaves the directory',
  },
  cut: { reason: 'DownloadFailed', error: 'w.bin: the peer daemon answered 502' },
};

let agent: Server;
let dispatcher: Agent;
let client: AgentClient;
beforeAll(async () => {
  // The agent's answers to a placement whose download failed: PUT 202, then the version Failed with its reason.
  agent = createServer((req, res) => {
    const name = decodeURIComponent(req.url!.split('/')[3]!);
    res.writeHead(req.method === 'PUT' ? 202 : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ name, versions: [{ version: '1', state: 'Failed', ...ANSWERS[name] }] }));
  });
  await new Promise<void>((r) => agent.listen(0, '127.0.0.1', r));
  dispatcher = new Agent();
  client = new AgentClient({
    baseURL: `http://127.0.0.1:${(agent.address() as AddressInfo).port}`,
    dispatcher,
    token: () => Promise.resolve('agent-token-integrity-01'),
    pollMs: 10,
  });
});
afterAll(async () => {
  await dispatcher.close();
  await new Promise((r) => agent.close(r));
});

const driver = new OipDriver('triton', { secret: (() => Promise.reject(new Error('unused'))) as never });
const placeError = (name: string) =>
  client.place(name, '1', { files: [], directory: name } as never, {}).then(
    () => undefined,
    (e: unknown) => e,
  );

/** The replica's outcome of a pass that finds its registration ended with `err`. */
async function outcomeOf(err: unknown) {
  const server = { describe: () => Promise.resolve(undefined) } as unknown as ReplicaServer;
  const failed = { state: 'failed' as const, since: Date.now(), error: err };
  return convergeReplica(
    server,
    { endpoint: 'http://198.18.0.7:8000', pod: 'triton-0' },
    { modelName: 'm', version: '1', fileName: 'm/', minWorkers: 1, maxWorkers: 1, options: {} },
    undefined,
    {
      mayRegister: true,
      signal: new AbortController().signal,
      registration: { peek: () => failed, start: () => failed },
      failure: (e) => driver.failure(e),
    },
  );
}

describe('an integrity failure of the agent', () => {
  it('a checksum mismatch: its own retryable failure, the layer and both digests, no network error', async () => {
    const err = (await placeError('tampered')) as Error;
    expect(err.message).toContain(
      'failed (reported by the agent): ChecksumMismatch: layer 1 (sha256:aaaaaaaaaaaa',
    );
    expect(err.message).toContain(`its bytes hash to sha256 ${GOT}, not the ${DIGEST}`);
    expect(err.message).not.toMatch(/network/);
    expect(driver.failure(err)).toMatchObject({ integrity: 'ChecksumMismatch', retryable: true });
    const o = await outcomeOf(err);
    expect(o.failure).toEqual({ reason: 'ChecksumMismatch', retryable: true, kind: undefined });
    expect(o.status).toMatchObject({ phase: 'Failed', ready: false });
    expect(o.status.message).toContain(DIGEST);
  });

  it('an unsafe archive entry: UnsafeArchive, not retried', async () => {
    const err = (await placeError('escape')) as Error;
    expect(err.message).toContain('failed (reported by the agent): UnsafeTarEntry: layer 1');
    expect(driver.failure(err)).toMatchObject({ integrity: 'UnsafeArchive', retryable: false });
    expect((await outcomeOf(err)).failure).toMatchObject({ reason: 'UnsafeArchive', retryable: false });
  });

  it('a download the peer cut stays ModelServerUnavailable, but says the agent reported it', async () => {
    const err = (await placeError('cut')) as Error;
    expect(err.message).toContain('failed (reported by the agent): DownloadFailed');
    expect(driver.failure(err)?.integrity).toBeUndefined();
    expect((await outcomeOf(err)).failure).toMatchObject({
      reason: 'ModelServerUnavailable',
      retryable: true,
    });
    expect(integrityOf(undefined)).toBeUndefined();
    expect(integrityOf('toString')).toBeUndefined();
  });
});

describe('the conditions of an integrity failure', () => {
  const conditions = (reason: 'ChecksumMismatch' | 'UnsafeArchive', retryable: boolean) =>
    servedModelConditions({
      modelName: 'm',
      serviceFound: true,
      gate: { state: 'none' },
      ready: 0,
      desired: 2,
      failures: ['triton-0', 'triton-1'].map((replica) => ({
        replica,
        reason,
        message: 'layer 1 …',
        retryable,
      })),
    });
  const find = (cs: ReturnType<typeof conditions>, type: string) => cs.find((c) => c.type === type);

  it('ChecksumMismatch: Ready False and Reconciling True with that reason (it is retried), not Stalled', () => {
    const cs = conditions('ChecksumMismatch', true);
    expect(find(cs, 'Ready')).toMatchObject({ status: 'False', reason: 'ChecksumMismatch' });
    expect(find(cs, 'Reconciling')).toMatchObject({ status: 'True', reason: 'ChecksumMismatch' });
    expect(find(cs, 'Degraded')).toMatchObject({ status: 'True', reason: 'ChecksumMismatch' });
    expect(find(cs, 'Stalled')).toEqual({ type: 'Stalled', absent: true });
  });

  it('UnsafeArchive: Stalled with that reason', () => {
    const cs = conditions('UnsafeArchive', false);
    expect(find(cs, 'Ready')).toMatchObject({ status: 'False', reason: 'UnsafeArchive' });
    expect(find(cs, 'Stalled')).toMatchObject({ status: 'True', reason: 'UnsafeArchive' });
  });
});
