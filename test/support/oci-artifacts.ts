/**
 * ModelPack artifacts made byte by byte for tests of bad input: tar archives with any entry (node-tar's Header
 * encodes each header, so `..`, absolute paths, links and devices can be written as an attacker would), manifests
 * with any media types, and a small in-process registry that serves them as given (or other bytes, or an error).
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { gzipSync, zstdCompressSync } from 'node:zlib';
import { Header, type HeaderData } from 'tar';

export const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

export interface TarEntry extends HeaderData {
  body?: Buffer | string;
}

/** A tar archive of `entries` as written (no normalisation, no checks). */
export function tarOf(entries: TarEntry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const body = e.body === undefined ? Buffer.alloc(0) : Buffer.from(e.body);
    const h = new Header({
      mode: 0o644,
      uid: 0,
      gid: 0,
      mtime: new Date(0),
      type: 'File',
      ...e,
      size: e.type === undefined || e.type === 'File' ? body.length : 0,
    });
    const block = Buffer.alloc(512);
    h.encode(block, 0);
    blocks.push(block, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

export const gzip = (b: Buffer) => gzipSync(b);
export const zstd = (b: Buffer) => zstdCompressSync(b);

export interface LayerSpec {
  mediaType: string;
  content: Buffer;
  filepath?: string;
  /** Use the legacy org.cnai.model.filepath annotation. */
  legacy?: boolean;
}

export function modelManifest(
  layers: LayerSpec[],
  opts: { artifactType?: string | null; configType?: string; mediaType?: string } = {},
): { body: Buffer; blobs: Map<string, Buffer> } {
  const config = Buffer.from('{"descriptor":{"name":"m"},"modelfs":{"type":"layers","diffIds":[]}}');
  const blobs = new Map<string, Buffer>([[sha256(config), config]]);
  const manifest = {
    schemaVersion: 2,
    mediaType: opts.mediaType ?? 'application/vnd.oci.image.manifest.v1+json',
    ...(opts.artifactType === null
      ? {}
      : { artifactType: opts.artifactType ?? 'application/vnd.cncf.model.manifest.v1+json' }),
    config: {
      mediaType: opts.configType ?? 'application/vnd.cncf.model.config.v1+json',
      digest: sha256(config),
      size: config.length,
    },
    layers: layers.map((l) => {
      blobs.set(sha256(l.content), l.content);
      return {
        mediaType: l.mediaType,
        digest: sha256(l.content),
        size: l.content.length,
        ...(l.filepath !== undefined
          ? {
              annotations: { [l.legacy ? 'org.cnai.model.filepath' : 'org.cncf.model.filepath']: l.filepath },
            }
          : {}),
      };
    }),
  };
  return { body: Buffer.from(JSON.stringify(manifest)), blobs };
}

export interface FakeRegistry {
  url: string;
  host: string;
  /** Serves `body` as the manifest of repo:tag (and by its digest). */
  putManifest(repo: string, tag: string, body: Buffer, contentType?: string): string;
  putBlob(repo: string, content: Buffer): string;
  /** Serves `content` for a digest it does not hash to. */
  putWrongBlob(repo: string, digest: string, content: Buffer): void;
  /** Answers every request for paths containing `part` with this status. */
  failPaths: Map<string, number>;
  /** Requires Basic credentials when set (of its token service, with `bearer`). */
  basic?: { username: string; password: string } | undefined;
  /**
   * Requires `Bearer <token>` when set, challenging with its own token service (`/token`), which answers this
   * token (its lifetime `expiresIn`, s, when given) to whoever `basic` admits.
   */
  bearer?: { token: string; expiresIn?: number } | undefined;
  requests: { path: string; authorization: string | undefined; status: number }[];
  /** The token service's requests: the scope asked for and the credentials sent. */
  tokenRequests: { scope: string | null; authorization: string | undefined }[];
  close(): Promise<void>;
}

export async function startFakeRegistry(): Promise<FakeRegistry> {
  const manifests = new Map<string, { body: Buffer; type: string }>();
  const blobs = new Map<string, Buffer>();
  const reg: FakeRegistry = {
    url: '',
    host: '',
    failPaths: new Map(),
    requests: [],
    tokenRequests: [],
    putManifest(repo, tag, body, type = 'application/vnd.oci.image.manifest.v1+json') {
      manifests.set(`${repo}:${tag}`, { body, type });
      manifests.set(`${repo}:${sha256(body)}`, { body, type });
      return sha256(body);
    },
    putBlob(repo, content) {
      blobs.set(`${repo}:${sha256(content)}`, content);
      return sha256(content);
    },
    putWrongBlob(repo, digest, content) {
      blobs.set(`${repo}:${digest}`, content);
    },
    close: async () => undefined,
  };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const path = (req.url ?? '/').split('?')[0]!;
    const entry = { path, authorization: req.headers.authorization, status: 0 };
    reg.requests.push(entry);
    const send = (status: number, headers: Record<string, string>, body: Buffer) => {
      entry.status = status;
      res.writeHead(status, { ...headers, 'content-length': String(body.length) }).end(body);
    };
    const error = (status: number, code: string) =>
      send(
        status,
        { 'content-type': 'application/json' },
        Buffer.from(JSON.stringify({ errors: [{ code, message: code.toLowerCase() }] })),
      );
    for (const [part, status] of reg.failPaths)
      if (path.includes(part)) return error(status, status === 403 ? 'DENIED' : 'UNKNOWN');
    const basicOK = () =>
      !reg.basic ||
      req.headers.authorization ===
        `Basic ${Buffer.from(`${reg.basic.username}:${reg.basic.password}`).toString('base64')}`;
    if (reg.bearer && path === '/token') {
      const scope = new URL(req.url ?? '/', reg.url).searchParams.get('scope');
      reg.tokenRequests.push({ scope, authorization: req.headers.authorization });
      if (!basicOK()) return error(401, 'UNAUTHORIZED');
      const { token, expiresIn } = reg.bearer;
      const answer = { token, ...(expiresIn !== undefined ? { expires_in: expiresIn } : {}) };
      return send(200, { 'content-type': 'application/json' }, Buffer.from(JSON.stringify(answer)));
    }
    if (reg.bearer) {
      if (req.headers.authorization !== `Bearer ${reg.bearer.token}`) {
        const repo = /^\/v2\/(.+)\/(manifests|blobs|tags)\//.exec(path)?.[1] ?? '';
        res.setHeader(
          'www-authenticate',
          `Bearer realm="${reg.url}/token",service="fake",scope="repository:${repo}:pull"`,
        );
        return error(401, 'UNAUTHORIZED');
      }
    } else if (reg.basic) {
      const expected = `Basic ${Buffer.from(`${reg.basic.username}:${reg.basic.password}`).toString('base64')}`;
      if (req.headers.authorization !== expected) {
        res.setHeader('www-authenticate', 'Basic realm="fake"');
        return error(401, 'UNAUTHORIZED');
      }
    }
    if (path === '/v2/') return send(200, {}, Buffer.from('{}'));
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
    if (!m) return error(404, 'NAME_UNKNOWN');
    if (m[2] === 'manifests') {
      const man = manifests.get(`${m[1]}:${m[3]}`);
      if (!man) return error(404, 'MANIFEST_UNKNOWN');
      return send(200, { 'content-type': man.type, 'docker-content-digest': sha256(man.body) }, man.body);
    }
    const blob = blobs.get(`${m[1]}:${m[3]}`);
    if (!blob) return error(404, 'BLOB_UNKNOWN');
    return send(200, { 'content-type': 'application/octet-stream' }, blob);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  reg.url = `http://127.0.0.1:${port}`;
  reg.host = `127.0.0.1:${port}`;
  reg.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return reg;
}

/** Pushes a manifest of `layers` and all its blobs; returns the manifest digest. */
export function pushModel(
  reg: FakeRegistry,
  repo: string,
  tag: string,
  layers: LayerSpec[],
  opts?: Parameters<typeof modelManifest>[1],
): string {
  const { body, blobs } = modelManifest(layers, opts);
  for (const b of blobs.values()) reg.putBlob(repo, b);
  return reg.putManifest(repo, tag, body);
}
