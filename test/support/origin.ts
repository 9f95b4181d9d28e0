/**
 * A plain HTTP origin serving fixed files (query strings, e.g. signatures, are ignored), with counters. It answers
 * HEAD and single byte-range GETs (`Range: bytes=a-b`, 206 with Content-Range), because the real peer daemon
 * fetches pieces from the origin with Range requests and probes it with a 1-byte range on cache hits.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rangeOf } from './peer-proxy-http.ts';

export interface OriginRequest {
  method: string;
  /** Path and query as received. */
  url: string;
  range: string | undefined;
  status: number;
  bytes: number;
  /** performance.now() when the request came in and when its response ended (the counting proxy sets them). */
  startedAt?: number;
  endedAt?: number;
}

export interface Origin {
  url: string;
  files: Map<string, Buffer>;
  /** `bytes`: body bytes sent, ranges included. */
  stats: { requests: number; bytes: number };
  /** Every request, in order. */
  requests: OriginRequest[];
  close(): Promise<void>;
}

export async function startOrigin(files: Record<string, Buffer | string> = {}): Promise<Origin> {
  const map = new Map(Object.entries(files).map(([p, b]) => [p, Buffer.from(b)]));
  const stats = { requests: 0, bytes: 0 };
  const requests: OriginRequest[] = [];
  const server = createServer((req, res) => {
    stats.requests++;
    const entry: OriginRequest = {
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      range: req.headers.range,
      status: 0,
      bytes: 0,
    };
    requests.push(entry);
    const send = (status: number, headers: Record<string, string | number>, body?: Buffer) => {
      entry.status = status;
      const head = req.method === 'HEAD';
      entry.bytes = head || !body ? 0 : body.length;
      stats.bytes += entry.bytes;
      res.writeHead(status, headers).end(head ? undefined : body);
    };
    const path = new URL(req.url ?? '/', 'http://origin').pathname;
    const body = map.get(path);
    if (!body) {
      send(404, { 'content-type': 'text/plain' }, Buffer.from('not found'));
      return;
    }
    const range = rangeOf(req.headers.range, body.length);
    if (range === 'invalid') {
      send(416, { 'content-range': `bytes */${body.length}` });
      return;
    }
    if (range) {
      const part = body.subarray(range.start, range.end + 1);
      send(
        206,
        {
          'content-type': 'application/octet-stream',
          'content-length': part.length,
          'content-range': `bytes ${range.start}-${range.end}/${body.length}`,
          'accept-ranges': 'bytes',
        },
        part,
      );
      return;
    }
    send(
      200,
      { 'content-type': 'application/octet-stream', 'content-length': body.length, 'accept-ranges': 'bytes' },
      body,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    files: map,
    stats,
    requests,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
