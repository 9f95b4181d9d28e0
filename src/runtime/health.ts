/**
 * One HTTP(S) server for `/metrics` (Prometheus text), `/healthz` (liveness) and `/readyz` (readiness).
 * Checks are functions returning true or a reason string; the body lists each check as `[+]name ok` /
 * `[-]name failed: reason`, like the kube-apiserver's, so a failing probe says why.
 *
 * With `tls` it serves HTTPS only; with `authorizeMetrics` /metrics answers only whom that allows (401/403
 * otherwise, see authz.ts) while the probes stay open, as the kubelet probes without a token and their bodies
 * name checks, not objects.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer, type Server as HttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { Authorize } from './authz.ts';
import type { CertificateKeyPair } from './tls.ts';

export type Check = () => true | string;

export interface HealthServerOptions {
  /** Serve HTTPS with this certificate; none: plain HTTP. */
  tls?: CertificateKeyPair;
  /** Who may read /metrics; none: anyone who reaches the port. */
  authorizeMetrics?: Authorize;
}

export class HealthServer {
  private readonly server: Server | HttpsServer;
  private readonly registry: Registry;
  private readonly authorizeMetrics: Authorize | undefined;
  private tls: CertificateKeyPair | undefined;
  readonly liveness = new Map<string, Check>();
  readonly readiness = new Map<string, Check>();

  constructor(registry: Registry, opts: HealthServerOptions = {}) {
    this.registry = registry;
    this.authorizeMetrics = opts.authorizeMetrics;
    this.tls = opts.tls;
    const handler = (req: IncomingMessage, res: ServerResponse) => this.handle(req, res);
    this.server = opts.tls
      ? createHttpsServer({ cert: opts.tls.cert, key: opts.tls.key, minVersion: 'TLSv1.2' }, handler)
      : createServer(handler);
    this.server.keepAliveTimeout = 5_000;
  }

  /** True when serving HTTPS. */
  get secure(): boolean {
    return this.tls !== undefined;
  }

  /** The certificate served (PEM), if any. */
  get certificate(): string | undefined {
    return this.tls?.cert;
  }

  /** Serves a new certificate from the next TLS handshake on (a rotated Secret). */
  setCertificate(tls: CertificateKeyPair): void {
    if (!this.tls) throw new Error('the server was started without TLS');
    (this.server as HttpsServer).setSecureContext({ cert: tls.cert, key: tls.key });
    this.tls = tls;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405).end();
      return;
    }
    if (path === '/metrics') {
      void this.serveMetrics(req, res, path);
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
  }

  private async serveMetrics(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    if (this.authorizeMetrics) {
      let d: Awaited<ReturnType<Authorize>>;
      try {
        d = await this.authorizeMetrics(req, path);
      } catch {
        d = { allowed: false, status: 500, message: 'Authorization failed' };
      }
      if (!d.allowed) {
        const headers: Record<string, string> = { 'content-type': 'text/plain; charset=utf-8' };
        if (d.status === 401) headers['www-authenticate'] = 'Bearer';
        res.writeHead(d.status, headers).end(d.message + '\n');
        return;
      }
    }
    try {
      const text = await this.registry.metrics();
      res.writeHead(200, { 'content-type': this.registry.contentType }).end(text);
    } catch (err) {
      res.writeHead(500, { 'content-type': 'text/plain' }).end((err as Error).message);
    }
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
