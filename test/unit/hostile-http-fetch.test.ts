/**
 * A plain http(s) source (`peerload fetch https://… DEST`, KServe's form) whose server is hostile: a body that never
 * ends, a size it announces past the cap, an answer that drips, headers larger than any server needs. Each ends with
 * its reason and an exit status, within the byte cap and the deadline, DEST left empty; and the endless body is
 * streamed to disk, never held (a process under a 48 MiB heap survives 64 MiB of it).
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runKServe } from '../../src/cli/fetch-kserve.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';

const MiB = 1024 * 1024;
const BIN = join(import.meta.dirname, '../../bin/peerload.js');
const NODE = process.execPath;

let server: Server;
let url: string;
let peer: PeerProxy;
let dir: string;
const sockets = new Set<Socket>();
const timers = new Set<NodeJS.Timeout>();
let sent = 0;

/**
 * Writes chunks as fast as the client reads: without end as far as the fetch can tell (far past every cap here),
 * but ending at 256 MiB so that a peer that keeps a task going after its client left (as a daemon does) stops.
 */
function endless(res: ServerResponse) {
  const chunk = Buffer.alloc(64 * 1024, 1);
  let left = 256 * MiB;
  const more = () => {
    while (!res.destroyed && left > 0 && res.write(chunk)) {
      sent += chunk.length;
      left -= chunk.length;
    }
    if (left <= 0 && !res.destroyed) res.end();
  };
  res.on('drain', more);
  more();
}

beforeAll(async () => {
  server = createServer((req, res) => {
    if (req.url?.startsWith('/endless')) {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      return endless(res);
    }
    if (req.url === '/huge.bin') {
      res.writeHead(200, { 'content-length': String(64 * 1024 * MiB) });
      return endless(res);
    }
    if (req.url === '/drip.bin') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const t = setInterval(() => res.write('x'), 200);
      timers.add(t);
      res.on('close', () => clearInterval(t));
      return;
    }
    if (req.url === '/headers.bin') {
      res.writeHead(200, { 'x-filler': 'f'.repeat(256 * 1024) });
      return res.end('x');
    }
    res.writeHead(404).end();
  });
  server.maxHeadersCount = 0;
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  peer = await startPeerProxy();
  dir = await mkdtemp(join(tmpdir(), 'hostile-http-'));
});

afterAll(async () => {
  for (const t of timers) clearInterval(t);
  for (const s of sockets) s.destroy();
  await new Promise<void>((r) => server.close(() => r()));
  await peer?.close();
  await rm(dir, { recursive: true, force: true });
});

let n = 0;
async function fetchFile(path: string, extra: string[] = []) {
  const dest = join(dir, `mnt-${n++}`);
  await mkdir(dest, { recursive: true });
  const out: string[] = [];
  const err: string[] = [];
  const started = Date.now();
  const code = await runKServe(
    ['--proxy', peer.url, '--min-free-bytes', '0', '--log-level', 'error', ...extra, `${url}${path}`, dest],
    { out: (l) => out.push(l), err: (l) => err.push(l) },
    {},
  ).catch((e: unknown) => (e as { exitCode?: number }).exitCode ?? -1);
  return { code, err: err.join('\n'), dest, ms: Date.now() - started };
}

describe('a hostile http(s) source', () => {
  it('a body that never ends stops at --max-bytes, naming the file; nothing is left', async () => {
    const r = await fetchFile('/endless.bin', ['--max-bytes', String(8 * MiB)]);
    expect(r.code).toBeGreaterThan(0);
    expect(r.err).toMatch(/endless\.bin/);
    expect(r.err).toMatch(/LimitExceeded|DiskBudgetExceeded|more than \d+ bytes/);
    expect(await readdir(r.dest)).toEqual([]);
  });

  it('a size announced past the cap is refused before its body is read', async () => {
    const before = sent;
    const r = await fetchFile('/huge.bin', ['--max-bytes', String(8 * MiB)]);
    expect(r.code).toBeGreaterThan(0);
    expect(r.err).toMatch(/huge\.bin/);
    expect(await readdir(r.dest)).toEqual([]);
    // What the server could push before the refusal: a few socket buffers, not the cap.
    expect(sent - before).toBeLessThan(8 * MiB);
  });

  it('an answer that drips ends at --deadline, tried again later (exit 1)', async () => {
    const r = await fetchFile('/drip.bin', ['--deadline', '2s']);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/drip\.bin/);
    expect(r.ms).toBeLessThan(15_000);
    expect(await readdir(r.dest)).toEqual([]);
  });

  it('headers larger than any server needs are refused, not held', async () => {
    const r = await fetchFile('/headers.bin');
    expect(r.code).toBeGreaterThan(0);
    expect(r.err).not.toContain('f'.repeat(1000));
    expect(await readdir(r.dest)).toEqual([]);
  });

  it('the endless body is streamed, not held: a process under a 48 MiB heap reads 64 MiB of it and ends cleanly', async () => {
    const dest = join(dir, 'child');
    await mkdir(dest, { recursive: true });
    const child = spawn(
      NODE,
      [
        '--max-old-space-size=48',
        BIN,
        'fetch',
        '--proxy',
        peer.url,
        '--min-free-bytes',
        '0',
        '--max-bytes',
        String(64 * MiB),
        `${url}/endless-child.bin`,
        dest,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
    const code = await new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    clearTimeout(killer);
    expect(stderr).not.toMatch(/heap out of memory|FATAL ERROR/);
    expect(code).toBeGreaterThan(0);
    expect(stderr).toMatch(/endless-child\.bin/);
    expect(await readdir(dest)).toEqual([]);
  }, 60_000);
});
