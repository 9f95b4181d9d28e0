/**
 * A counting reverse proxy in front of an origin (MinIO, Azurite): every request is passed through unchanged — the
 * Host header included, so a SigV4 signature made for the proxy's address verifies at MinIO — and every response's
 * body bytes are counted. This is how the real-network tests and the demo count what the origin served.
 * `tamper` makes it a tampering proxy: one bit of an object flipped in every GET answer that carries it (a whole
 * body or a Range of it, as the daemons ask for pieces), the length and headers unchanged.
 */
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { OriginRequest } from './origin.ts';

export interface CountingProxy {
  /** `http://<host>:<port>`: use it as the origin's endpoint. */
  url: string;
  requests: OriginRequest[];
  /** Body bytes of the GET responses for paths that contain `pathPart`. */
  bytesServed(pathPart: string): number;
  /** From now on, flips one bit of the byte at `offset` of the object of every path containing `pathPart` (unset:
   *  passes bytes unchanged again). */
  tamper(t: { pathPart: string; offset: number } | undefined): void;
  close(): Promise<void>;
}

/** `host`: the address it listens on (default loopback; a real cluster's pods reach the host on a node address). */
export async function startCountingProxy(target: string, host = '127.0.0.1'): Promise<CountingProxy> {
  const upstream = new URL(target);
  const requests: OriginRequest[] = [];
  let tampering: { pathPart: string; offset: number } | undefined;
  const server = createServer((req, res) => {
    const entry: OriginRequest = {
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      range: req.headers.range,
      status: 0,
      bytes: 0,
      startedAt: performance.now(),
    };
    requests.push(entry);
    const out = request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        headers: req.headers,
      },
      (up) => {
        entry.status = up.statusCode ?? 0;
        res.writeHead(up.statusCode ?? 502, up.headers);
        // Where this body starts in the object (a 206's Content-Range), for the byte to tamper with.
        let at = Number(/^bytes (\d+)-/.exec(String(up.headers['content-range'] ?? ''))?.[1] ?? 0);
        const t =
          req.method === 'GET' && tampering && req.url?.includes(tampering.pathPart) ? tampering : undefined;
        up.on('data', (chunk: Buffer) => {
          entry.bytes += chunk.length;
          if (t && t.offset >= at && t.offset < at + chunk.length) {
            chunk[t.offset - at]! ^= 0x01;
          }
          at += chunk.length;
        });
        up.on('end', () => (entry.endedAt = performance.now()));
        up.pipe(res);
      },
    );
    out.on('error', () => {
      entry.status = 502;
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    });
    req.pipe(out);
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host}:${port}`,
    requests,
    bytesServed: (pathPart) =>
      requests
        .filter((r) => r.method === 'GET' && r.url.includes(pathPart))
        .reduce((sum, r) => sum + r.bytes, 0),
    tamper: (t) => (tampering = t),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
