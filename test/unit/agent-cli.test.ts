/**
 * `peerload fetch` and `peerload agent` as processes, against the peer-proxy emulator and an origin: exit codes,
 * the one-line summary, and the agent serving its API until SIGTERM.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runPeerload } from '../support/process.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { freePort } from '../support/ports.ts';

const BIN = join(import.meta.dirname, '../../bin/peerload.js');
const SIGNATURE = 'cli-signature-value-never-shown';

let origin: Origin;
let peer: PeerProxy;
let dir: string;

beforeAll(async () => {
  origin = await startOrigin({ '/b/m/a.json': '{"a":1}', '/b/m/w/x.bin': Buffer.alloc(4096, 7) });
  peer = await startPeerProxy();
  dir = await mkdtemp(join(tmpdir(), 'agent-cli-'));
});
afterAll(async () => {
  await peer.close();
  await origin.close();
  await rm(dir, { recursive: true, force: true });
});

const run = (args: string[]) => runPeerload(args);

const url = (p: string) => `${origin.url}${p}?X-Amz-Signature=${SIGNATURE}`;
/** `peerload fetch` of model `m` as `spec` says, into `root`. */
const fetchInto = (spec: string, root: string) => ['fetch', '--name', 'm', '--spec', spec, '--root', root];

describe('peerload fetch', () => {
  it('downloads a version and prints one line; a second run finds it in place', async () => {
    const spec = join(dir, 'spec.json');
    await writeFile(
      spec,
      JSON.stringify({
        version: '3',
        files: [
          { path: 'a.json', url: url('/b/m/a.json') },
          { path: 'w/x.bin', url: url('/b/m/w/x.bin'), size: 4096 },
        ],
      }),
    );
    const root = join(dir, 'root');
    const args = [...fetchInto(spec, root), '--proxy', peer.url, '--min-free-bytes', '0'];
    const r = await run(args);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(
        `^fetched m version 3: 2 files, 4103 bytes into ${root}/m/3 in [0-9.]+ s \\(0 local hits, 0 hard links\\)\\n$`,
      ),
    );
    expect(await readFile(join(root, 'm', '3', 'a.json'), 'utf8')).toBe('{"a":1}');
    const again = await run(args);
    expect(again).toMatchObject({ code: 0, stdout: `m version 3 is already in ${root}/m/3\n` });
  });

  it('exits 1 with the reason when a file fails, without the signature', async () => {
    const spec = join(dir, 'bad.json');
    await writeFile(spec, JSON.stringify({ version: '1', files: [{ path: 'gone', url: url('/b/m/gone') }] }));
    const r = await run([...fetchInto(spec, join(dir, 'r2')), '--proxy', peer.url]);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(
      'peerload fetch: DownloadFailed: download of m/1/gone through the peer proxy failed: HTTP 404',
    );
    expect(r.stderr + r.stdout).not.toContain(SIGNATURE);
  });

  it('exits 2 on bad input, naming the flag or field', async () => {
    const spec = join(dir, 'invalid.json');
    await writeFile(spec, JSON.stringify({ version: '1', files: [] }));
    const r = await run(fetchInto(spec, dir));
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--spec: files:');
    expect((await run(['fetch', '--name', 'm', '--spec', spec])).stderr).toContain('--root is required');
    const cap = await run([...fetchInto(spec, dir), '--max-bytes', 'lots']);
    expect(cap.stderr).toContain('--max-bytes: must be a byte count such as 500Gi or 1Ti, got "lots"');
    const hosts = ['--allowed-storage-hosts', 'minio.svc,ftp://x'];
    const bad = await run([...fetchInto(spec, dir), ...hosts]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--allowed-storage-hosts: "ftp://x": the scheme may be http://');
    const uid = await run([...fetchInto(spec, dir), '--server-uid', 'triton']);
    expect(uid.code).toBe(2);
    expect(uid.stderr).toContain(
      `--server-uid: must be a uid such as 1000 (the model server's runAsUser), got "triton"`,
    );
  });
});

describe('peerload agent', () => {
  it('serves the API with the token from its file until SIGTERM', async () => {
    const port = await freePort();
    await writeFile(join(dir, 'token'), 'cli-agent-token-123456');
    const root = join(dir, 'agent-root');
    const child = spawn(
      process.execPath,
      [
        BIN,
        'agent',
        '--root',
        root,
        '--token-file',
        join(dir, 'token'),
        '--address',
        `127.0.0.1:${port}`,
      ].concat(['--proxy', peer.url, '--min-free-bytes', '0']),
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    try {
      const base = `http://127.0.0.1:${port}`;
      for (let i = 0; i < 100 && !out.includes('agent listening'); i++)
        await new Promise((r) => setTimeout(r, 100));
      const headers = { authorization: 'Bearer cli-agent-token-123456', 'content-type': 'application/json' };
      expect((await fetch(`${base}/v1/models/m`, { headers: {} })).status).toBe(401);
      const put = await fetch(`${base}/v1/models/m`, {
        method: 'PUT',
        headers,
        body: JSON.stringify({ version: '1', files: [{ path: 'a.json', url: url('/b/m/a.json') }] }),
      });
      expect(put.status).toBe(202);
      let state = '';
      for (let i = 0; i < 50 && state !== 'Ready'; i++) {
        const body = (await (await fetch(`${base}/v1/models/m`, { headers })).json()) as {
          versions: { state: string }[];
        };
        state = body.versions[0]!.state;
        if (state !== 'Ready') await new Promise((r) => setTimeout(r, 100));
      }
      expect(state).toBe('Ready');
      expect(await readFile(join(root, 'm', '1', 'a.json'), 'utf8')).toBe('{"a":1}');
    } finally {
      child.kill('SIGTERM');
      const code = await new Promise<number | null>((r) => child.once('exit', r));
      expect(code).toBe(0);
    }
    expect(out).toContain('"msg":"download started"');
    expect(out).not.toContain(SIGNATURE);
  });
});

describe('--deadline of the agent and fetch', () => {
  it('is bounded: beyond 24h, or beyond what a timer can hold, is refused naming the flag and the bound', async () => {
    const { downloaderConfig, MAX_DEADLINE_MS } = await import('../../src/cli/agent.ts');
    const base = {
      root: '/tmp/x',
      proxy: 'http://127.0.0.1:4001',
      concurrency: '4',
      'daemon-version': 'v1.4.2',
    };
    const flags = { ...base, 'max-bytes': '1Ti', 'min-free-bytes': '1Gi', 'log-level': 'info' };
    expect(downloaderConfig({ ...flags, deadline: '24h' }).limits.deadlineMs).toBe(MAX_DEADLINE_MS);
    for (const deadline of ['25h', '10000h', '1000000000h'])
      expect(() => downloaderConfig({ ...flags, deadline })).toThrow(
        new RegExp(`^--deadline: at most 24h .*got "${deadline}"$`),
      );
    expect(() => downloaderConfig({ ...flags, deadline: '0s' })).toThrow(/must be a positive duration/);
  });
});
