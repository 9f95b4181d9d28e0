/** A plain HTTP origin serving fixed files (query strings, e.g. signatures, are ignored), with counters. */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Origin {
  url: string;
  files: Map<string, Buffer>;
  stats: { requests: number; bytes: number };
  close(): Promise<void>;
}

export async function startOrigin(files: Record<string, Buffer | string> = {}): Promise<Origin> {
  const map = new Map(Object.entries(files).map(([p, b]) => [p, Buffer.from(b)]));
  const stats = { requests: 0, bytes: 0 };
  const server = createServer((req, res) => {
    stats.requests++;
    const path = new URL(req.url ?? '/', 'http://origin').pathname;
    const body = map.get(path);
    if (!body) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
      return;
    }
    stats.bytes += body.length;
    res
      .writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': body.length })
      .end(body);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    files: map,
    stats,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
