/**
 * A bandwidth-limited origin for benchmarks: a TCP relay on loopback in front of an HTTP server (MinIO), whose
 * upstream→client direction shares ONE token bucket across all connections (the origin's egress), e.g. 50 MB/s.
 *
 * TCP rather than HTTP on purpose: the bytes (request line, `Host`, query) reach the origin unchanged, so URLs
 * presigned for the relay's address (SigV4 signs the Host header) verify at the origin. Written by hand (about 80
 * lines) because no maintained package throttles a shared budget across sockets; it counts every byte it relays
 * from the origin (`bytesDown`: bodies plus response heads), which is what origin egress means.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';

export interface Throttle {
  /** `http://127.0.0.1:<port>`: use as the object store endpoint. */
  url: string;
  port: number;
  /** Bytes relayed origin → clients since start (or the last resetStats). */
  readonly bytesDown: number;
  /** Connections accepted since start (or the last resetStats). */
  readonly connections: number;
  resetStats(): void;
  close(): Promise<void>;
}

export interface ThrottleOptions {
  /** Upstream `host:port` (must be loopback). */
  target: { host: string; port: number };
  /** Shared download budget, bytes per second. */
  bytesPerSecond: number;
  /** Bucket depth in bytes (burst). Default 64 KiB. */
  burstBytes?: number;
}

export async function startThrottle(opts: ThrottleOptions): Promise<Throttle> {
  if (!/^127\./.test(opts.target.host)) throw new Error('bench-throttle relays to loopback only');
  const rate = opts.bytesPerSecond;
  const burst = opts.burstBytes ?? 64 * 1024;
  let tokens = burst;
  let last = performance.now();
  let bytesDown = 0;
  let connections = 0;
  const sockets = new Set<Socket>();

  const refill = () => {
    const now = performance.now();
    tokens = Math.min(burst, tokens + ((now - last) / 1000) * rate);
    last = now;
  };

  const server: Server = createServer((client) => {
    connections++;
    const upstream = connect({ host: opts.target.host, port: opts.target.port });
    sockets.add(client);
    sockets.add(upstream);
    const closeBoth = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', closeBoth);
    upstream.on('error', closeBoth);
    client.on('close', closeBoth);
    upstream.on('close', closeBoth);
    // client → origin: unthrottled (requests are small).
    client.pipe(upstream);
    // origin → client: take tokens; when the bucket runs dry, pause the origin until the debt is repaid.
    upstream.on('data', (chunk: Buffer) => {
      refill();
      tokens -= chunk.length;
      bytesDown += chunk.length;
      const ok = client.write(chunk);
      if (tokens < 0) {
        upstream.pause();
        setTimeout(
          () => {
            if (!client.destroyed && (ok || client.writableLength === 0)) upstream.resume();
            else client.once('drain', () => upstream.resume());
          },
          (-tokens / rate) * 1000,
        );
      } else if (!ok) {
        upstream.pause();
        client.once('drain', () => upstream.resume());
      }
    });
    upstream.on('end', () => client.end());
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    get bytesDown() {
      return bytesDown;
    },
    get connections() {
      return connections;
    },
    resetStats() {
      bytesDown = 0;
      connections = 0;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
