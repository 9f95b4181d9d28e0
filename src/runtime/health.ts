/**
 * One HTTP server for `/metrics` (Prometheus text), `/healthz` (liveness) and `/readyz` (readiness).
 * Checks are functions returning true or a reason string; the body lists each check as `[+]name ok` /
 * `[-]name failed: reason`, like the kube-apiserver's, so a failing probe says why.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';

export type Check = () => true | string;

export class HealthServer {
  private readonly server: Server;
  private readonly registry: Registry;
  readonly liveness = new Map<string, Check>();
  readonly readiness = new Map<string, Check>();

  constructor(registry: Registry) {
    this.registry = registry;
    this.server = createServer((req, res) => {
      const path = (req.url ?? '/').split('?')[0] ?? '/';
      if (req.method !== 'GET' && req.method !== 'HEAD') {
        res.writeHead(405).end();
        return;
      }
      if (path === '/metrics') {
        this.registry.metrics().then(
          (text) => res.writeHead(200, { 'content-type': this.registry.contentType }).end(text),
          (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(err.message),
        );
        return;
      }
      const checks =
        path === '/healthz' || path === '/livez' ? this.liveness : path === '/readyz' ? this.readiness : null;
      if (!checks) {
        res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        return;
      }
      let ok = true;
      const lines: string[] = [];
      for (const [name, check] of checks) {
        let r: true | string;
        try {
          r = check();
        } catch (err) {
          r = (err as Error).message;
        }
        if (r === true) lines.push(`[+]${name} ok`);
        else {
          ok = false;
          lines.push(`[-]${name} failed: ${r}`);
        }
      }
      lines.push(ok ? `${path.slice(1)} check passed` : `${path.slice(1)} check failed`);
      res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' }).end(lines.join('\n') + '\n');
    });
    this.server.keepAliveTimeout = 5_000;
  }

  /** Listens on `host:port` (`:8080` means all interfaces); resolves with the bound port. */
  listen(address: string): Promise<number> {
    const i = address.lastIndexOf(':');
    const host = address.slice(0, i).replace(/^\[|\]$/g, '') || undefined;
    const port = Number(address.slice(i + 1));
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }
}
