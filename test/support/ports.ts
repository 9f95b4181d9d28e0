import type { Server as HttpServer } from 'node:http';
import { createServer, type AddressInfo, type Server as NetServer } from 'node:net';

/** Asks the kernel for a free loopback TCP port. */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      srv.close(() => (addr && typeof addr === 'object' ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

/** Listens `server` on an ephemeral port of `host`; its base URL. */
export async function listenOnLoopback(server: NetServer, host = '127.0.0.1'): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  return `http://${host}:${(server.address() as AddressInfo).port}`;
}

/** Closes `server` at once: its open connections first (a kept-alive one would hold close() back). */
export async function closeNow(server: HttpServer): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}
