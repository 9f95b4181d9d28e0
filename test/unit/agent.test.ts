/**
 * `peerload agent` against the peer-proxy emulator and a plain origin: the token, the download of a directory
 * through the proxy with the preheat's identity, the atomic placement, progress and local hits, the bounds
 * (bytes, free space, deadline), deletion, redaction, and the daemon's hard links (a small fake daemon here: the
 * emulator does not make links).
 */
import { existsSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { chmod, chown, link, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { credentialTag } from '../../src/storage/credential-tag.ts';
import { tokenMatches } from '../../src/agent/auth.ts';
import { DEFAULT_LIMITS, type AgentLimits } from '../../src/place/placer.ts';
import { CUT_RETRIES } from '../../src/place/proxy-fetch.ts';
import { startAgentServer, type AgentServer } from '../../src/agent/server.ts';
import { createLogger } from '../../src/runtime/logger.ts';
import { tokenFile } from '../../src/agent/auth.ts';
import { taskID } from '../../src/storage/taskid.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { startOrigin } from '../support/origin.ts';
import { peerBed } from '../support/peer-bed.ts';

const TOKEN = 'agent-token-0123456789abcdef';
const SIGNATURE = 'sig-value-that-must-never-leak-42';
const FILTER = ['X-Amz-Signature', 'X-Amz-Date'];
const FILES: Record<string, Buffer> = {
  '/weights/m/config.json': Buffer.from('{"layers":2}'),
  '/weights/m/model-1.safetensors': randomBytes(300_000),
  '/weights/m/sub/tokenizer.json': Buffer.from('{"v":1}'),
};

let dir: string;
let root: string;
let agent: AgentServer | undefined;
let logLines: string[];

const bed = peerBed('origin', () => startOrigin(FILES));
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'agent-test-'));
  root = join(dir, 'models');
  await mkdir(root);
  await writeFile(join(dir, 'token'), `${TOKEN}\n`);
  bed.peer.reset();
  logLines = [];
});
afterEach(async () => {
  await agent?.close();
  agent = undefined;
  await rm(dir, { recursive: true, force: true });
});

let credentialReads = 0;

async function start(
  opts: {
    limits?: Partial<AgentLimits>;
    proxy?: string;
    hardLinkRoot?: string;
    storageHosts?: string;
    serverUid?: number;
  } = {},
): Promise<AgentServer> {
  const sink = new Writable({
    write(chunk: Buffer, _enc, cb) {
      logLines.push(chunk.toString());
      cb();
    },
  });
  agent = await startAgentServer({
    root,
    proxy: opts.proxy ?? bed.peer.url,
    dispatcher: bed.dispatcher,
    hardLinkRoot: opts.hardLinkRoot,
    serverUid: opts.serverUid,
    limits: { ...DEFAULT_LIMITS, minFreeBytes: 0, ...opts.limits },
    token: tokenFile(join(dir, 'token')),
    // The default list (the storage services' hosts) unless the test names the origin's.
    ...(opts.storageHosts !== undefined ? { storageHosts: parseHostRules(opts.storageHosts) } : {}),
    credentials: async () => {
      credentialReads++;
      return {
        type: 's3',
        accessKeyID: 'AKIAEXAMPLE',
        secretAccessKey: 'secret-key-example-1',
      };
    },
    logger: createLogger('debug', sink),
  });
  return agent;
}

async function call(method: string, path: string, body?: unknown, token: string | null = TOKEN) {
  const res = await fetch(`${agent!.url}${path}`, {
    method,
    headers: {
      ...(token !== null ? { authorization: `Bearer ${token}` } : {}),
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, any> };
}

const signed = (path: string) =>
  `${bed.origin.url}${path}?X-Amz-Date=20260101T000000Z&X-Amz-Signature=${SIGNATURE}`;

function spec(over: Record<string, unknown> = {}) {
  return {
    version: '1',
    files: [
      {
        path: 'config.json',
        url: signed('/weights/m/config.json'),
        size: FILES['/weights/m/config.json']!.length,
      },
      { path: 'model-1.safetensors', url: signed('/weights/m/model-1.safetensors') },
      { path: 'sub/tokenizer.json', url: signed('/weights/m/sub/tokenizer.json') },
    ],
    filter: FILTER,
    tag: 'llama',
    ...over,
  };
}

describe('authentication', () => {
  it('answers 401 without a bearer token, 403 with another one, and serves the right one', async () => {
    await start();
    const none = await call('GET', '/v1/models/m', undefined, null);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer realm="peerload-agent"');
    expect(none.body).toEqual({
      error: {
        reason: 'Unauthenticated',
        message: 'send the operator\'s token as "Authorization: Bearer <token>"',
      },
    });
    const wrong = await call('PUT', '/v1/models/m', spec(), 'not-the-token');
    expect(wrong.status).toBe(403);
    expect(wrong.body.error.reason).toBe('Forbidden');
    expect(bed.peer.stats.requests).toBe(0);
    expect((await call('GET', '/v1/models/m')).status).toBe(404);
    expect((await fetch(`${agent!.url}/healthz`)).status).toBe(200);
  });

  it('reads a rotated token file, and refuses everything without one', async () => {
    await start();
    await writeFile(join(dir, 'token'), 'rotated-token-abcdefgh-longer');
    expect((await call('GET', '/v1/models/m')).status).toBe(403);
    expect((await call('GET', '/v1/models/m', undefined, 'rotated-token-abcdefgh-longer')).status).toBe(404);
    await writeFile(join(dir, 'token'), '');
    // No token to compare with: nothing is accepted, not even an empty bearer.
    const none = await call('GET', '/v1/models/m', undefined, 'rotated-token-abcdefgh-longer');
    expect(none.status).toBe(503);
    expect(none.body.error.reason).toBe('NoToken');
    expect((await call('GET', '/v1/models/m', undefined, '')).status).toBe(503);
  });

  it('compares tokens by value only', () => {
    expect(tokenMatches('abc', 'abc')).toBe(true);
    expect(tokenMatches('abd', 'abc')).toBe(false);
    expect(tokenMatches('abcd', 'abc')).toBe(false);
    expect(tokenMatches('', '')).toBe(false);
  });
});

describe('downloading a version', () => {
  it('downloads every file through the peer proxy with the identity, into <root>/<name>/<version>', async () => {
    await start();
    const put = await call('PUT', '/v1/models/m', spec());
    expect(put.status).toBe(202);
    expect(put.body).toMatchObject({ name: 'm', version: '1', state: 'Downloading', filesTotal: 3 });
    await agent!.idle();

    for (const [path, body] of Object.entries(FILES)) {
      const rel = path.replace('/weights/m/', '');
      expect(await readFile(join(root, 'm', '1', rel))).toEqual(body);
    }
    expect(await readdir(join(root, 'm'))).toEqual(['1']); // no temporary directory left
    expect(bed.peer.requests).toHaveLength(3);
    for (const r of bed.peer.requests) {
      expect(r.headers['x-dragonfly-use-p2p']).toBe('true');
      expect(r.headers['x-dragonfly-filtered-query-params']).toBe('X-Amz-Signature,X-Amz-Date');
      expect(r.headers['x-dragonfly-filter']).toBe('X-Amz-Signature&X-Amz-Date');
      expect(r.headers['x-dragonfly-tag']).toBe('llama');
    }

    const got = await call('GET', '/v1/models/m');
    expect(got.status).toBe(200);
    const [v] = got.body.versions;
    expect(v).toMatchObject({ state: 'Ready', filesDone: 3, filesTotal: 3, localHits: 0, hardLinks: 0 });
    const total = Object.values(FILES).reduce((s, b) => s + b.length, 0);
    expect(v.bytesDone).toBe(total);
    expect(v.bytesTotal).toBe(total);
    for (const f of v.files) {
      expect(f.state).toBe('Done');
      expect(f.localHit).toBe(false);
      expect(f.taskID).toBe(f.expectedTaskID);
    }
    expect(v.files[0].expectedTaskID).toBe(
      taskID({ url: `${bed.origin.url}/weights/m/config.json`, filter: [], tag: 'llama', rule: '1.4' }),
    );
    // Already in place: 200, nothing downloaded.
    const again = await call('PUT', '/v1/models/m', spec());
    expect(again.status).toBe(200);
    expect(again.body.state).toBe('Ready');
    expect(bed.peer.requests).toHaveLength(3);
  });

  it('reports local hits of preheated files, and the origin is not read again', async () => {
    await start();
    for (const path of Object.keys(FILES))
      await bed.peer.preheat(signed(path), { filter: FILTER, tag: 'llama' });
    const originRequests = bed.origin.stats.requests;
    expect((await call('PUT', '/v1/models/m', spec())).status).toBe(202);
    await agent!.idle();
    const [v] = (await call('GET', '/v1/models/m')).body.versions;
    expect(v).toMatchObject({ state: 'Ready', localHits: 3 });
    expect(v.files.map((f: { localHit: boolean }) => f.localHit)).toEqual([true, true, true]);
    expect(bed.origin.stats.requests).toBe(originRequests);
  });

  it('signs object keys itself with the mounted credentials, for a store in its --allowed-storage-hosts only', async () => {
    const body = {
      version: '2',
      storage: { type: 's3', bucket: 'weights', endpoint: bed.origin.url, pathStyle: true },
      files: [{ path: 'config.json', key: 'm/config.json' }],
    };
    // By default only the storage services' hosts: the origin on loopback is refused before a credential is read.
    await start();
    credentialReads = 0;
    const refused = await call('PUT', '/v1/models/m', body);
    expect(refused.status).toBe(422);
    expect(refused.body.error.reason).toBe('StorageEndpointNotAllowed');
    expect(refused.body.error.message).toContain(`storage.endpoint: host ${new URL(bed.origin.url).host}`);
    expect(refused.body.error.message).toContain(
      "not in the agent's --allowed-storage-hosts (s3.amazonaws.com",
    );
    expect(credentialReads).toBe(0);
    expect(bed.peer.requests).toEqual([]);
    await agent!.close();

    // The loopback range without a scheme allows it over https only: the origin speaks plain HTTP.
    await start({ storageHosts: '127.0.0.0/8' });
    const plain = await call('PUT', '/v1/models/m', body);
    expect(plain.status).toBe(422);
    expect(plain.body.error.message).toContain(
      `${bed.origin.url} is plain HTTP: the agent's --allowed-storage-hosts allows ${new URL(bed.origin.url).host} over https only`,
    );
    expect(credentialReads).toBe(0);
    await agent!.close();

    await start({ storageHosts: 'http://127.0.0.0/8' });
    expect((await call('PUT', '/v1/models/m', body)).status).toBe(202);
    // The download runs after the answer: its credential read is counted once it is idle.
    await agent!.idle();
    expect(credentialReads).toBe(1);
    expect(await readFile(join(root, 'm', '2', 'config.json'), 'utf8')).toBe('{"layers":2}');
    const [r] = bed.peer.requests;
    expect(r!.url).toContain('X-Amz-Signature=');
    // The s3 default filter goes with it, so the id is the preheat's of the bare object URL.
    expect(r!.headers['x-dragonfly-filtered-query-params']).toContain('X-Amz-Credential');
    // The credentials' tag, as the operator's preheat signed with the same secret sends it.
    const tag = credentialTag(
      { type: 's3', bucket: 'weights' },
      { type: 's3', accessKeyID: 'AKIAEXAMPLE', secretAccessKey: 'secret-key-example-1' },
    );
    expect(r!.headers['x-dragonfly-tag']).toBe(tag);
    const [v] = (await call('GET', '/v1/models/m')).body.versions;
    expect(v.files[0].taskID).toBe(v.files[0].expectedTaskID);
    // With the spec's own tag, both.
    bed.peer.requests.length = 0;
    expect((await call('PUT', '/v1/models/m', { ...body, version: '3', tag: 'llama' })).status).toBe(202);
    await agent!.idle();
    expect(bed.peer.requests[0]!.headers['x-dragonfly-tag']).toBe(`llama/${tag}`);
  });

  it('starts one download for two PUTs that arrive together', async () => {
    await start();
    const [a, b] = await Promise.all([
      call('PUT', '/v1/models/m', spec()),
      call('PUT', '/v1/models/m', spec()),
    ]);
    expect([a.status, b.status]).toEqual([202, 202]);
    await agent!.idle();
    expect(bed.peer.requests).toHaveLength(3);
    expect((await call('GET', '/v1/models/m')).body.versions[0].state).toBe('Ready');
  });

  it('answers 202 "in progress" to a second PUT while the first downloads', async () => {
    const gate = await gatedOrigin();
    try {
      await start();
      const body = spec({
        files: [{ path: 'a.bin', url: `${gate.url}/a.bin?X-Amz-Signature=${SIGNATURE}` }],
      });
      expect((await call('PUT', '/v1/models/m', body)).status).toBe(202);
      const second = await call('PUT', '/v1/models/m', body);
      expect(second.status).toBe(202);
      expect(second.body.message).toBe('a download of this version is in progress');
      gate.release();
      await agent!.idle();
      expect(gate.requests).toBe(1);
      expect((await call('GET', '/v1/models/m')).body.versions[0].state).toBe('Ready');
    } finally {
      gate.release();
      await gate.close();
    }
  });
});

describe('failures', () => {
  it('fails the version on a missing object, names the file, leaves nothing behind, never shows the signature', async () => {
    await start();
    const body = spec();
    body.files.push({ path: 'missing.bin', url: signed('/weights/m/missing.bin') });
    expect((await call('PUT', '/v1/models/m', body)).status).toBe(202);
    await agent!.idle();
    const [v] = (await call('GET', '/v1/models/m')).body.versions;
    expect(v.state).toBe('Failed');
    expect(v.reason).toBe('DownloadFailed');
    expect(v.error).toBe(
      'download of m/1/missing.bin through the peer proxy failed: HTTP 404 (backend error): the storage has no such object',
    );
    expect(existsSync(join(root, 'm'))).toBe(false); // not even the model's directory
    expect(JSON.stringify(v)).not.toContain(SIGNATURE);
    expect(logLines.join('')).not.toContain(SIGNATURE);
    expect(logLines.join('')).toContain('version failed');
  });

  it('checks sizes', async () => {
    await start();
    const body = spec({ files: [{ path: 'config.json', url: signed('/weights/m/config.json'), size: 3 }] });
    await call('PUT', '/v1/models/m', body);
    await agent!.idle();
    const [v] = (await call('GET', '/v1/models/m')).body.versions;
    expect(v.state).toBe('Failed');
    expect(v.error).toContain('m/1/config.json: the peer proxy announced 12 bytes, the file set says 3');
  });

  it('refuses a version above the byte cap, before and while downloading', async () => {
    await start({ limits: { maxBytes: 1000 } });
    const known = spec({
      files: [{ path: 'a', url: signed('/weights/m/model-1.safetensors'), size: 300_000 }],
    });
    const before = await call('PUT', '/v1/models/m', known);
    expect(before.status).toBe(413);
    expect(before.body.error.reason).toBe('DiskBudgetExceeded');
    expect(before.body.error.message).toContain("above the cap of 1000 bytes: raise the agent's --max-bytes");
    expect(bed.peer.stats.requests).toBe(0);
    const unknown = spec({ files: [{ path: 'a', url: signed('/weights/m/model-1.safetensors') }] });
    expect((await call('PUT', '/v1/models/m', unknown)).status).toBe(202);
    await agent!.idle();
    const [v] = (await call('GET', '/v1/models/m')).body.versions;
    expect(v).toMatchObject({ state: 'Failed', reason: 'DiskBudgetExceeded' });
    expect(existsSync(join(root, 'm'))).toBe(false); // not even the model's directory
  });

  it('refuses when free space would fall below the reserve (507)', async () => {
    await start({ limits: { minFreeBytes: Number.MAX_SAFE_INTEGER } });
    const r = await call('PUT', '/v1/models/m', spec());
    expect(r.status).toBe(507);
    expect(r.body.error.reason).toBe('InsufficientStorage');
    expect(r.body.error.message).toContain('--min-free-bytes');
  });

  it('gives up at the deadline', async () => {
    const gate = await gatedOrigin();
    try {
      await start();
      const body = spec({ deadlineSeconds: 1, files: [{ path: 'a.bin', url: `${gate.url}/a.bin` }] });
      await call('PUT', '/v1/models/m', body);
      await agent!.idle();
      const [v] = (await call('GET', '/v1/models/m')).body.versions;
      expect(v).toMatchObject({ state: 'Failed', reason: 'DeadlineExceeded' });
      expect(v.error).toBe('version 1 of m was not complete within 1 s (0 of 1 files)');
    } finally {
      gate.release();
      await gate.close();
    }
  });

  it('rejects bad bodies and names, naming the field', async () => {
    await start();
    const bad = await call('PUT', '/v1/models/m', {
      version: '../x',
      files: [{ path: '../etc/passwd', url: 'ftp://x' }],
    });
    expect(bad.status).toBe(400);
    expect(bad.body.error.reason).toBe('InvalidSpec');
    expect(bad.body.error.message).toContain('version: must be one path segment');
    expect(bad.body.error.message).toContain('files[0].path: must be a relative file path');
    const keys = await call('PUT', '/v1/models/m', { version: '1', files: [{ path: 'a', key: 'k' }] });
    expect(keys.body.error.message).toBe('storage: is required when a file gives a key');
    expect((await call('PUT', '/v1/models/.hidden', spec())).body.error.reason).toBe('InvalidName');
    expect((await call('POST', '/v1/models/m', spec())).status).toBe(405);
  });
});

describe('deleting a version', () => {
  it('removes the directory, and stops a running download', async () => {
    await start();
    await call('PUT', '/v1/models/m', spec());
    await agent!.idle();
    expect((await call('DELETE', '/v1/models/m/versions/1')).body).toEqual({
      name: 'm',
      version: '1',
      deleted: true,
    });
    await expect(stat(join(root, 'm', '1'))).rejects.toThrow();
    expect((await call('GET', '/v1/models/m')).status).toBe(404);
    expect((await call('DELETE', '/v1/models/m/versions/1')).status).toBe(404);

    const gate = await gatedOrigin();
    try {
      await call(
        'PUT',
        '/v1/models/m',
        spec({ version: '2', files: [{ path: 'a.bin', url: `${gate.url}/a.bin` }] }),
      );
      expect((await call('DELETE', '/v1/models/m/versions/2')).status).toBe(200);
      expect(existsSync(join(root, 'm'))).toBe(false); // not even the model's directory
    } finally {
      gate.release();
      await gate.close();
    }
  });
});

describe('a version placed by an earlier process', () => {
  it('is reported with the local hits its record kept, and deleting it removes the record', async () => {
    await start();
    for (const path of Object.keys(FILES))
      await bed.peer.preheat(signed(path), { filter: FILTER, tag: 'llama' });
    await call('PUT', '/v1/models/m', spec());
    await agent!.idle();
    // Another process now (peerload fetch before the agent, or the agent restarted): it knows only the disk.
    await agent!.close();
    await start();
    const [v] = (await call('GET', '/v1/models/m')).body.versions;
    expect(v).toMatchObject({ version: '1', state: 'Ready', filesDone: 3, localHits: 3 });
    expect(v.files.map((f: { localHit: boolean }) => f.localHit)).toEqual([true, true, true]);
    expect(JSON.stringify(v)).not.toContain(SIGNATURE);
    expect(await readdir(join(root, 'm'))).toEqual(['1']);
    await call('DELETE', '/v1/models/m/versions/1');
    // The record went with the directory: the same version placed by hand has no detail.
    expect(existsSync(join(root, 'm'))).toBe(false);
    await mkdir(join(root, 'm', '1'), { recursive: true });
    expect((await call('GET', '/v1/models/m')).body.versions).toEqual([
      { name: 'm', version: '1', directory: 'm', state: 'Ready', files: [] },
    ]);
  });
});

/** A model server's uid other than the daemon's (these tests' files are root's, as the daemon's are). */
const SERVER_UID = 1000;

/** PUTs `version` of one file, w.bin, and returns its progress once placed. */
async function placeOne(version: string) {
  await call(
    'PUT',
    '/v1/models/m',
    spec({
      version,
      files: [{ path: 'w.bin', url: `http://storage.invalid/w.bin?X-Amz-Signature=${SIGNATURE}` }],
    }),
  );
  await agent!.idle();
  return (await call('GET', '/v1/models/m')).body.versions.find(
    (x: { version: string }) => x.version === version,
  );
}

describe('hard links from the daemon cache', () => {
  it("copies every file, asking the daemon for no link, when the model server's uid is unknown or root", async () => {
    const cache = join(dir, 'cache');
    await mkdir(cache);
    const content = randomBytes(5000);
    await writeFile(join(cache, 'task'), content);
    const daemon = await fakeDaemon(async (outputPath) => {
      await link(join(cache, 'task'), outputPath);
      return { body: content, finished: true };
    });
    try {
      for (const [version, serverUid, why] of [
        ['1', undefined, "the model server's uid is not known"],
        ['2', 0, 'the model server runs as root'],
      ] as const) {
        await agent?.close();
        await start({ proxy: daemon.url, hardLinkRoot: root, serverUid });
        const v = await placeOne(version);
        expect(v).toMatchObject({ state: 'Ready', hardLinks: 0 });
        expect(v.files[0].hardLinkFallback).toContain(why);
        expect((await stat(join(root, 'm', version, 'w.bin'))).nlink).toBe(1);
      }
      expect(daemon.outputPaths).toEqual([]);
      expect((await stat(join(cache, 'task'))).nlink).toBe(1);
    } finally {
      await daemon.close();
    }
  });

  it('removes a link the model server could write or not read, and copies the file', async () => {
    const cache = join(dir, 'cache');
    await mkdir(cache);
    const content = randomBytes(5000);
    const task = join(cache, 'task');
    await writeFile(task, content);
    const daemon = await fakeDaemon(async (outputPath) => {
      await link(task, outputPath);
      return { body: content, finished: true };
    });
    try {
      await start({ proxy: daemon.url, hardLinkRoot: root, serverUid: SERVER_UID });
      const cases: [string, () => Promise<void>, string][] = [
        [
          '1',
          () => chown(task, SERVER_UID, 0),
          `runs as uid ${SERVER_UID}, the owner of the peer daemon's file`,
        ],
        [
          '2',
          async () => (await chown(task, 0, 0), chmod(task, 0o664)),
          'mode 664) is writable by its group or others',
        ],
        ['3', () => chmod(task, 0o646), 'mode 646) is writable by its group or others'],
        ['4', () => chmod(task, 0o640), 'mode 640) is not readable by others'],
      ];
      for (const [version, make, why] of cases) {
        await make();
        const v = await placeOne(version);
        expect(v, version).toMatchObject({ state: 'Ready', hardLinks: 0 });
        expect(v.files[0].hardLinkFallback).toContain(why);
        const placed = join(root, 'm', version, 'w.bin');
        expect((await stat(placed)).ino).not.toBe((await stat(task)).ino);
        expect(await readFile(placed)).toEqual(content);
        // The daemon's link was removed: its file has one name again.
        expect((await stat(task)).nlink).toBe(1);
      }
      // Read-only for the server (root's, 0644): the link is kept.
      await chmod(task, 0o644);
      expect(await placeOne('5')).toMatchObject({ state: 'Ready', hardLinks: 1 });
      expect((await stat(join(root, 'm', '5', 'w.bin'))).ino).toBe((await stat(task)).ino);
    } finally {
      await daemon.close();
    }
  });

  it('uses the daemon link on a local hit, and streams when the daemon refuses', async () => {
    const cache = join(dir, 'cache');
    await mkdir(cache);
    const content = randomBytes(5000);
    await writeFile(join(cache, 'task'), content);
    let refuse = false;
    const daemon = await fakeDaemon(async (outputPath) => {
      if (refuse) return 'refuse';
      await link(join(cache, 'task'), outputPath);
      return { body: content, finished: true };
    });
    try {
      // The daemon sees the model root under the same path here (one mount).
      await start({ proxy: daemon.url, hardLinkRoot: root, serverUid: SERVER_UID });
      const body = spec({
        files: [{ path: 'w.bin', url: `http://storage.invalid/w.bin?X-Amz-Signature=${SIGNATURE}` }],
      });
      await call('PUT', '/v1/models/m', body);
      await agent!.idle();
      const [v] = (await call('GET', '/v1/models/m')).body.versions;
      expect(v).toMatchObject({ state: 'Ready', hardLinks: 1, localHits: 1 });
      const st = await stat(join(root, 'm', '1', 'w.bin'));
      expect(st.ino).toBe((await stat(join(cache, 'task'))).ino);
      expect(daemon.outputPaths[0]).toMatch(
        new RegExp(`^${root}/m/\\.peerload-tmp-1-[0-9a-f]+/\\.p2p-.*\\.link$`),
      );

      refuse = true;
      await call('PUT', '/v1/models/m', { ...body, version: '2' });
      await agent!.idle();
      const v2 = (await call('GET', '/v1/models/m')).body.versions.find(
        (x: { version: string }) => x.version === '2',
      );
      expect(v2).toMatchObject({ state: 'Ready', hardLinks: 0 });
      expect(v2.files[0].hardLinkFallback).toBe('the peer daemon refused the hard link');
      expect(await readFile(join(root, 'm', '2', 'w.bin'))).toEqual(content);
      expect((await stat(join(root, 'm', '2', 'w.bin'))).nlink).toBe(1);
    } finally {
      await daemon.close();
    }
  });

  describe('a task the daemon is still filling (not a local hit)', () => {
    const content = randomBytes(3 * 4096 * 16 + 123);
    const place = async (version: string) => {
      await call('PUT', '/v1/models/m', {
        ...spec({
          files: [{ path: 'w.bin', url: `http://storage.invalid/w.bin?X-Amz-Signature=${SIGNATURE}` }],
        }),
        version,
      });
      await agent!.idle();
      return (await call('GET', '/v1/models/m')).body.versions.find(
        (x: { version: string }) => x.version === version,
      );
    };
    /** The daemon's file: allocated at full size and linked before the body is sent, filled as the daemon wishes. */
    async function allocatedLink(outputPath: string, fill: Buffer): Promise<string> {
      const task = join(dir, `task-${randomBytes(4).toString('hex')}`);
      await writeFile(task, Buffer.alloc(fill.length));
      await link(task, outputPath);
      await writeFile(task, fill, { flag: 'r+' });
      return task;
    }

    it('takes the link once the body was read whole and matches it, writing nothing itself', async () => {
      let task = '';
      const daemon = await fakeDaemon(async (outputPath) => {
        task = await allocatedLink(outputPath, content);
        return { body: content, finished: false };
      });
      try {
        await start({ proxy: daemon.url, hardLinkRoot: root, serverUid: SERVER_UID });
        const v = await place('1');
        expect(v).toMatchObject({ state: 'Ready', hardLinks: 1, localHits: 0, bytesDone: content.length });
        expect(v.files[0]).toMatchObject({ hardLink: true, localHit: false });
        const path = join(root, 'm', '1', 'w.bin');
        expect((await stat(path)).ino).toBe((await stat(task)).ino);
        expect(await readFile(path)).toEqual(content);
      } finally {
        await daemon.close();
      }
    });

    it('a linked file that is not the body (its last block differs) is removed and the file downloaded again', async () => {
      const wrong = Buffer.from(content);
      wrong.writeUInt8(wrong.readUInt8(wrong.length - 1) ^ 0xff, wrong.length - 1);
      const daemon = await fakeDaemon(async (outputPath) => {
        await allocatedLink(outputPath, wrong);
        return { body: content, finished: false };
      });
      try {
        await start({ proxy: daemon.url, hardLinkRoot: root, serverUid: SERVER_UID });
        const v = await place('1');
        // Counted once: the bytes received for the removed link were given back.
        expect(v).toMatchObject({ state: 'Ready', hardLinks: 0, bytesDone: content.length });
        expect(v.files[0].hardLinkFallback).toBe(
          `the daemon's file differs from the body at byte ${content.length - 4096}`,
        );
        const path = join(root, 'm', '1', 'w.bin');
        expect(await readFile(path)).toEqual(content);
        expect((await stat(path)).nlink).toBe(1);
      } finally {
        await daemon.close();
      }
    });

    it('a body the daemon cuts every time fails the version after the retries, and leaves no link behind', async () => {
      const daemon = await fakeDaemon(async (outputPath) => {
        await allocatedLink(outputPath, content);
        return { body: content, finished: false, truncateAt: 5000 };
      });
      try {
        await start({ proxy: daemon.url, hardLinkRoot: root, serverUid: SERVER_UID });
        const v = await place('1');
        expect(v).toMatchObject({ state: 'Failed', reason: 'DownloadFailed' });
        expect(v.error).toMatch(
          /w\.bin failed after \d+ bytes: UND_ERR_SOCKET \(the peer daemon closed the connection/,
        );
        expect(daemon.outputPaths).toHaveLength(1 + CUT_RETRIES);
        expect(logLines.filter((l) => l.includes('the peer daemon cut the download'))).toHaveLength(
          CUT_RETRIES,
        );
        // Nothing left: no link, no temporary directory, not even the model's directory.
        expect(existsSync(join(root, 'm'))).toBe(false);
      } finally {
        await daemon.close();
      }
    });

    it('without a link, the partial file of a cut body is removed and the file downloaded again', async () => {
      let asked = 0;
      const server = createServer((_req, res) => {
        res.writeHead(200, { 'x-dragonfly-task-id': 'a'.repeat(64), 'content-length': content.length });
        if (asked++ === 0) res.write(content.subarray(0, 70_000), () => setTimeout(() => res.destroy(), 50));
        else res.end(content);
      });
      const daemon = await listen(server);
      try {
        await start({ proxy: daemon.url });
        const v = await place('1');
        expect(v).toMatchObject({ state: 'Ready', hardLinks: 0, bytesDone: content.length });
        expect(asked).toBe(2);
        expect(await readFile(join(root, 'm', '1', 'w.bin'))).toEqual(content);
      } finally {
        await daemon.close();
      }
    });

    it('a body the daemon cuts once is asked for again, counted once, logged, and placed as the link', async () => {
      let asked = 0;
      const daemon = await fakeDaemon(async (outputPath) => {
        await allocatedLink(outputPath, content);
        return { body: content, finished: false, ...(asked++ === 0 ? { truncateAt: 5000 } : {}) };
      });
      try {
        await start({ proxy: daemon.url, hardLinkRoot: root, serverUid: SERVER_UID });
        const v = await place('1');
        expect(v).toMatchObject({ state: 'Ready', hardLinks: 1, bytesDone: content.length });
        expect(daemon.outputPaths).toHaveLength(2);
        const warned = logLines.filter((l) => l.includes('the peer daemon cut the download'));
        expect(warned).toHaveLength(1);
        expect(JSON.parse(warned[0]!)).toMatchObject({ file: 'w.bin', attempt: 2 });
        expect(warned[0]).toMatch(/failed after \d+ bytes: UND_ERR_SOCKET/);
        const path = join(root, 'm', '1', 'w.bin');
        expect(await readFile(path)).toEqual(content);
        expect((await stat(path)).nlink).toBe(2);
        expect((await readdir(join(root, 'm', '1'))).join()).not.toMatch(/link/);
      } finally {
        await daemon.close();
      }
    });
  });
});

/** An origin whose answers wait until release(). */
async function gatedOrigin() {
  let open!: () => void;
  const gate = new Promise<void>((r) => (open = r));
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    void gate.then(() => res.writeHead(200, { 'content-length': 3 }).end('abc'));
  });
  return {
    ...(await listen(server)),
    release: () => open(),
    get requests() {
      return requests;
    },
  };
}

/**
 * A peer daemon's proxy that makes the hard link the request asks for (`outputPath` -> its cache) and answers as a
 * local hit (`finished`) or as a task it is downloading, or refuses it (500, dfdaemon); a plain request then gets
 * the same body. `truncateAt` ends the body early (the connection closed).
 */
async function fakeDaemon(
  onLink: (
    outputPath: string,
  ) => Promise<{ body: Buffer; finished: boolean; truncateAt?: number } | 'refuse'>,
) {
  const outputPaths: string[] = [];
  let last: Buffer = Buffer.alloc(0);
  const server = createServer((req, res) => {
    void (async () => {
      const out = req.headers['x-dragonfly-output-path'];
      const base = { 'x-dragonfly-task-id': 'a'.repeat(64) };
      if (typeof out === 'string') {
        outputPaths.push(out);
        const r = await onLink(out);
        if (r === 'refuse') {
          res.writeHead(500, { 'x-dragonfly-error-type': 'dfdaemon', 'content-length': 0 }).end();
          return;
        }
        last = r.body;
        res.writeHead(200, {
          ...base,
          ...(r.finished ? { 'x-dragonfly-task-download-finished': 'true' } : {}),
          'content-length': r.body.length,
        });
        if (r.truncateAt === undefined) res.end(r.body);
        else res.write(r.body.subarray(0, r.truncateAt), () => res.destroy());
        return;
      }
      const body = last.length ? last : randomBytes(5000);
      last = body;
      res.writeHead(200, { ...base, 'content-length': body.length }).end(body);
    })();
  });
  return { ...(await listen(server)), outputPaths };
}

async function listen(server: Server) {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
