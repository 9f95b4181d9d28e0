/**
 * A tenant's Hugging Face Hub and OCI registry look-alikes on loopback, anonymous (a source without a token or
 * credentials may name any host). The repository name chooses how each misbehaves.
 *
 * Hub (`hostile/<mode>`, any revision answers {@link HUB_SHA}):
 * - `huge-entries`: tree pages of one entry whose `oid` is 12 MiB, each linking to the next, forever;
 * - `long-entries`: the same with a 3 MiB `oid` (under a page's cap: only an entry's length bound stops it);
 * - `endless`: pages of 1,000 correct entries, forever;
 * - `drip`: the revision's answer sends its headers, then a space a second, forever;
 * - `slow-heads`: a correct tree of {@link SLOW_HEAD_FILES} LFS files; the first file's `HEAD` redirects at once,
 *   every other one after {@link SLOW_HEAD_MS} (each under a request's time-out: only a deadline over the whole
 *   LFS phase stops it).
 *
 * Registry (`/v2/hostile/<mode>/...`):
 * - `hugetoken`: a 401 whose Bearer realm answers a 1 MiB token (and the manifest is served to whoever sends it);
 * - `hugechallenge`: a 401 with a 10,000-character `WWW-Authenticate`;
 * - `hugemanifest`: a 200 manifest that never ends;
 * - `slow`: a manifest answer that sends its headers, then a space a second, forever;
 * - `slowtoken`: a 401 whose realm sends its headers, then a space a second, forever.
 *
 * It counts requests per mode and what it sent, and drops every connection on close.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export const HUB_SHA = 'e'.repeat(40);
export const SLOW_HEAD_FILES = 64;
export const SLOW_HEAD_MS = 4_000;
const MiB = 1024 * 1024;

export interface HostileSources {
  url: string;
  /** `host:port`, as an OCI reference names the registry. */
  host: string;
  /** Requests by mode. */
  requests: Map<string, number>;
  bytesSent(): number;
  close(): Promise<void>;
}

const lfsEntry = (i: number) => ({
  type: 'file',
  path: `weights/shard-${String(i).padStart(5, '0')}.safetensors`,
  size: 1000,
  oid: 'b'.repeat(40),
  lfs: { oid: i.toString(16).padStart(64, '0'), size: 1000 },
});

export async function startHostileSources(): Promise<HostileSources> {
  const requests = new Map<string, number>();
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let sent = 0;
  let url = '';

  const write = (res: ServerResponse, chunk: string | Buffer) => {
    sent += chunk.length;
    return res.write(chunk);
  };
  /** Headers now, then a space a second until the client goes away. */
  const drip = (res: ServerResponse, status = 200, headers: Record<string, string> = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    write(res, '{');
    const t = setInterval(() => write(res, ' '), 1_000);
    timers.add(t);
    res.on('close', () => {
      clearInterval(t);
      timers.delete(t);
    });
  };
  /** A body streamed as fast as the client reads it, forever. */
  const endless = (res: ServerResponse, chunk: Buffer) => {
    const more = () => {
      while (!res.destroyed && write(res, chunk));
    };
    res.on('drain', more);
    more();
  };
  const page = (res: ServerResponse, path: string, cursor: number, entries: unknown[] | string) => {
    const body = typeof entries === 'string' ? entries : JSON.stringify(entries);
    sent += body.length;
    res
      .writeHead(200, {
        'content-type': 'application/json',
        link: `<${url}${path}?recursive=true&cursor=${cursor + 1}>; rel="next"`,
      })
      .end(body);
  };

  function hub(mode: string, req: IncomingMessage, res: ServerResponse, u: URL): void {
    const repo = `hostile/${mode}`;
    if (u.pathname.includes('/revision/')) {
      if (mode === 'drip') return drip(res);
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ id: repo, sha: HUB_SHA }));
      return;
    }
    if (u.pathname.includes('/tree/')) {
      const cursor = Number(u.searchParams.get('cursor') ?? 0);
      const oid = (n: number) => 'a'.repeat(n);
      switch (mode) {
        case 'huge-entries':
        case 'long-entries': {
          const size = mode === 'huge-entries' ? 12 * MiB : 3 * MiB;
          return page(res, u.pathname, cursor, [
            { type: 'file', path: `f${cursor}`, size: 1, oid: oid(size) },
          ]);
        }
        case 'endless':
          return page(
            res,
            u.pathname,
            cursor,
            Array.from({ length: 1000 }, (_, i) => ({
              type: 'file',
              path: `p${cursor}/${'d'.repeat(80)}/${i}`,
              size: 1,
              oid: 'c'.repeat(40),
            })),
          );
        default:
          res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(JSON.stringify(Array.from({ length: SLOW_HEAD_FILES }, (_, i) => lfsEntry(i))));
          return;
      }
    }
    // HEAD /hostile/slow-heads/resolve/<sha>/<path>
    const first = u.pathname.endsWith(lfsEntry(0).path);
    const redirect = () =>
      void res.writeHead(302, { location: `${url}/cdn/${encodeURIComponent(u.pathname)}` }).end();
    if (first) return redirect();
    const t = setTimeout(redirect, SLOW_HEAD_MS);
    timers.add(t);
    res.on('close', () => clearTimeout(t));
    void req;
  }

  const challenge = (realm: string) => `Bearer realm="${realm}",service="hostile",scope="repository:x:pull"`;

  function registry(mode: string, req: IncomingMessage, res: ServerResponse): void {
    const auth = req.headers.authorization;
    switch (mode) {
      case 'hugetoken':
        if (!auth)
          return void res
            .writeHead(401, { 'www-authenticate': challenge(`${url}/token/hugetoken`) })
            .end('{"errors":[{"code":"UNAUTHORIZED"}]}');
        return void res
          .writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' })
          .end('{"schemaVersion":2,"layers":[]}');
      case 'hugechallenge':
        return void res
          .writeHead(401, { 'www-authenticate': `${challenge(`${url}/token/x`)},x="${'a'.repeat(10_000)}"` })
          .end();
      case 'hugemanifest':
        res.writeHead(200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' });
        return endless(res, Buffer.alloc(64 * 1024, 32));
      case 'slow':
        return drip(res, 200, { 'content-type': 'application/vnd.oci.image.manifest.v1+json' });
      case 'slowtoken':
        return void res.writeHead(401, { 'www-authenticate': challenge(`${url}/token/slowtoken`) }).end();
      default:
        res.writeHead(404).end();
    }
  }

  const server = createServer({ maxHeaderSize: 4 * MiB }, (req, res) => {
    const u = new URL(req.url ?? '/', url);
    let m = /^\/(?:api\/models\/)?hostile\/([a-z-]+)\//.exec(u.pathname);
    if (m) {
      requests.set(m[1]!, (requests.get(m[1]!) ?? 0) + 1);
      return hub(m[1]!, req, res, u);
    }
    m = /^\/v2\/hostile\/([a-z-]+)\//.exec(u.pathname);
    if (m) {
      requests.set(m[1]!, (requests.get(m[1]!) ?? 0) + 1);
      return registry(m[1]!, req, res);
    }
    m = /^\/token\/([a-z-]+)/.exec(u.pathname);
    if (m?.[1] === 'hugetoken') {
      res.writeHead(200, { 'content-type': 'application/json' });
      const body = JSON.stringify({ token: 't'.repeat(MiB) });
      sent += body.length;
      return void res.end(body);
    }
    if (m?.[1] === 'slowtoken') return drip(res);
    if (u.pathname === '/v2/') return void res.writeHead(200).end('{}');
    res.writeHead(404).end();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  url = `http://127.0.0.1:${port}`;
  return {
    url,
    host: `127.0.0.1:${port}`,
    requests,
    bytesSent: () => sent,
    close: async () => {
      for (const t of timers) clearTimeout(t);
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}
