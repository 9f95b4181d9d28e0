/**
 * A small OCI registry stand-in (distribution API v2, read side): enough for an image preheat to really resolve
 * a manifest (or a manifest list / image index with platforms) and download its blobs.
 *
 * Routes: `GET|HEAD /v2/`, `GET|HEAD /v2/<repo>/manifests/<tag|digest>`, `GET|HEAD /v2/<repo>/blobs/<digest>`.
 * Optional HTTP basic auth (401 + `WWW-Authenticate: Basic`). Content lives in memory: keep images small.
 */
import { createHash } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export const OCI_MANIFEST = 'application/vnd.oci.image.manifest.v1+json';
export const OCI_INDEX = 'application/vnd.oci.image.index.v1+json';
export const OCI_CONFIG = 'application/vnd.oci.image.config.v1+json';
export const OCI_LAYER = 'application/vnd.oci.image.layer.v1.tar+gzip';
export const DOCKER_MANIFEST = 'application/vnd.docker.distribution.manifest.v2+json';
export const DOCKER_LIST = 'application/vnd.docker.distribution.manifest.list.v2+json';

export interface OciRegistryOptions {
  host?: string;
  port?: number;
  /** Require HTTP basic auth with these credentials. */
  auth?: { username: string; password: string };
}

export interface PushImageOptions {
  /** Layer contents (default: two small generated layers). With platforms, each platform gets its own copy. */
  layers?: (Buffer | string)[];
  /** e.g. `['linux/amd64', 'linux/arm64']`: push an image index with one manifest per platform. */
  platforms?: string[];
  /** Docker media types instead of OCI ones. */
  docker?: boolean;
}

export interface PushedPlatformImage {
  platform?: string;
  manifestDigest: string;
  /** Config blob first, then layers: what a preheat downloads. */
  blobDigests: string[];
  blobURLs: string[];
  bytes: number;
}

export interface PushedImage {
  repo: string;
  reference: string;
  /** `<registry>/v2/<repo>/manifests/<reference>`: the preheat URL. */
  manifestURL: string;
  /** Digest of the top manifest (index when multi-platform). */
  digest: string;
  images: PushedPlatformImage[];
}

export interface OciRegistry {
  url: string;
  /** `127.0.0.1:<port>`, as it appears in image names. */
  host: string;
  port: number;
  pushImage(repo: string, reference: string, opts?: PushImageOptions): PushedImage;
  /** Serves arbitrary bytes as a blob; returns its digest. */
  putBlob(repo: string, content: Buffer | string): string;
  stats: {
    requests: number;
    manifestGets: number;
    blobGets: number;
    blobBytes: number;
    unauthorized: number;
  };
  requests: { method: string; path: string; authorized: boolean; status: number }[];
  close(): Promise<void>;
}

const sha256 = (b: Buffer) => `sha256:${createHash('sha256').update(b).digest('hex')}`;

export async function startOciRegistry(opts: OciRegistryOptions = {}): Promise<OciRegistry> {
  const host = opts.host ?? '127.0.0.1';
  const blobs = new Map<string, Map<string, Buffer>>(); // repo -> digest -> content
  const manifests = new Map<string, Map<string, { mediaType: string; body: Buffer; digest: string }>>();
  const stats = { requests: 0, manifestGets: 0, blobGets: 0, blobBytes: 0, unauthorized: 0 };
  const requests: OciRegistry['requests'] = [];

  const repoMap = <T>(m: Map<string, Map<string, T>>, repo: string): Map<string, T> => {
    let r = m.get(repo);
    if (!r) m.set(repo, (r = new Map()));
    return r;
  };

  function authorized(req: IncomingMessage): boolean {
    if (!opts.auth) return true;
    const h = req.headers.authorization ?? '';
    const m = /^Basic\s+(.+)$/i.exec(h);
    if (!m) return false;
    const [user, ...rest] = Buffer.from(m[1]!, 'base64').toString('utf8').split(':');
    return user === opts.auth.username && rest.join(':') === opts.auth.password;
  }

  function send(
    res: ServerResponse,
    req: IncomingMessage,
    status: number,
    headers: Record<string, string>,
    body: Buffer,
  ) {
    res.writeHead(status, { ...headers, 'content-length': String(body.length) });
    res.end(req.method === 'HEAD' ? undefined : body);
  }

  const errorBody = (code: string, message: string) =>
    Buffer.from(JSON.stringify({ errors: [{ code, message, detail: null }] }));

  const server = createServer((req, res) => {
    stats.requests++;
    const path = (req.url ?? '/').split('?')[0]!;
    const ok = authorized(req);
    const record = { method: req.method ?? 'GET', path, authorized: ok, status: 0 };
    requests.push(record);
    const reply = (status: number, headers: Record<string, string>, body: Buffer) => {
      record.status = status;
      send(res, req, status, { 'docker-distribution-api-version': 'registry/2.0', ...headers }, body);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      reply(405, { 'content-type': 'application/json' }, errorBody('UNSUPPORTED', 'read-only registry'));
      return;
    }
    if (!ok) {
      stats.unauthorized++;
      reply(
        401,
        { 'content-type': 'application/json', 'www-authenticate': 'Basic realm="peerload-test-registry"' },
        errorBody('UNAUTHORIZED', 'authentication required'),
      );
      return;
    }
    if (path === '/v2/' || path === '/v2') {
      reply(200, { 'content-type': 'application/json' }, Buffer.from('{}'));
      return;
    }
    const m = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
    if (!m) {
      reply(404, { 'content-type': 'application/json' }, errorBody('NOT_FOUND', 'not found'));
      return;
    }
    const [, repo, kind, ref] = m as unknown as [string, string, string, string];
    const reference = decodeURIComponent(ref);
    if (kind === 'manifests') {
      const man = manifests.get(repo)?.get(reference);
      if (!man) {
        reply(404, { 'content-type': 'application/json' }, errorBody('MANIFEST_UNKNOWN', 'manifest unknown'));
        return;
      }
      if (req.method === 'GET') stats.manifestGets++;
      reply(200, { 'content-type': man.mediaType, 'docker-content-digest': man.digest }, man.body);
      return;
    }
    const blob = blobs.get(repo)?.get(reference);
    if (!blob) {
      reply(404, { 'content-type': 'application/json' }, errorBody('BLOB_UNKNOWN', 'blob unknown'));
      return;
    }
    if (req.method === 'GET') {
      stats.blobGets++;
      stats.blobBytes += blob.length;
    }
    reply(200, { 'content-type': 'application/octet-stream', 'docker-content-digest': reference }, blob);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const url = `http://${host}:${port}`;

  function putBlob(repo: string, content: Buffer | string): string {
    const b = Buffer.isBuffer(content) ? content : Buffer.from(content);
    const d = sha256(b);
    repoMap(blobs, repo).set(d, b);
    return d;
  }

  function putManifest(repo: string, refs: string[], mediaType: string, doc: unknown): string {
    const body = Buffer.from(JSON.stringify(doc));
    const digest = sha256(body);
    const m = repoMap(manifests, repo);
    for (const r of [...refs, digest]) m.set(r, { mediaType, body, digest });
    return digest;
  }

  function pushOne(repo: string, layers: Buffer[], docker: boolean, platform?: string): PushedPlatformImage {
    const [os, architecture, variant] = (platform ?? 'linux/amd64').split('/');
    const config = Buffer.from(
      JSON.stringify({
        architecture,
        os,
        ...(variant ? { variant } : {}),
        rootfs: { type: 'layers', diff_ids: [] },
      }),
    );
    const configDigest = putBlob(repo, config);
    const layerDescs = layers.map((l) => ({
      mediaType: docker ? 'application/vnd.docker.image.rootfs.diff.tar.gzip' : OCI_LAYER,
      digest: putBlob(repo, l),
      size: l.length,
    }));
    const mediaType = docker ? DOCKER_MANIFEST : OCI_MANIFEST;
    const manifestDigest = putManifest(repo, [], mediaType, {
      schemaVersion: 2,
      mediaType,
      config: {
        mediaType: docker ? 'application/vnd.docker.container.image.v1+json' : OCI_CONFIG,
        digest: configDigest,
        size: config.length,
      },
      layers: layerDescs,
    });
    const blobDigests = [configDigest, ...layerDescs.map((l) => l.digest)];
    return {
      ...(platform ? { platform } : {}),
      manifestDigest,
      blobDigests,
      blobURLs: blobDigests.map((d) => `${url}/v2/${repo}/blobs/${d}`),
      bytes: config.length + layers.reduce((n, l) => n + l.length, 0),
    };
  }

  function pushImage(repo: string, reference: string, o: PushImageOptions = {}): PushedImage {
    const base = (o.layers ?? [`layer-1 of ${repo}:${reference}`, `layer-2 of ${repo}:${reference}`]).map(
      (l) => (Buffer.isBuffer(l) ? l : Buffer.from(l)),
    );
    const docker = o.docker ?? false;
    const manifestURL = `${url}/v2/${repo}/manifests/${reference}`;
    if (!o.platforms || o.platforms.length === 0) {
      const img = pushOne(repo, base, docker);
      const mediaType = docker ? DOCKER_MANIFEST : OCI_MANIFEST;
      const m = manifests.get(repo)!.get(img.manifestDigest)!;
      repoMap(manifests, repo).set(reference, { mediaType, body: m.body, digest: m.digest });
      return { repo, reference, manifestURL, digest: img.manifestDigest, images: [img] };
    }
    const images = o.platforms.map((p) =>
      pushOne(
        repo,
        base.map((l) => Buffer.concat([l, Buffer.from(` (${p})`)])),
        docker,
        p,
      ),
    );
    const indexType = docker ? DOCKER_LIST : OCI_INDEX;
    const digest = putManifest(repo, [reference], indexType, {
      schemaVersion: 2,
      mediaType: indexType,
      manifests: images.map((img) => {
        const [os, architecture, variant] = img.platform!.split('/');
        const man = manifests.get(repo)!.get(img.manifestDigest)!;
        return {
          mediaType: docker ? DOCKER_MANIFEST : OCI_MANIFEST,
          digest: img.manifestDigest,
          size: man.body.length,
          platform: { os, architecture, ...(variant ? { variant } : {}) },
        };
      }),
    });
    return { repo, reference, manifestURL, digest, images };
  }

  return {
    url,
    host: `${host}:${port}`,
    port,
    pushImage,
    putBlob,
    stats,
    requests,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
