/**
 * A tenant's object-storage look-alike on loopback: it answers the list APIs of S3 (ListObjectsV2, path style:
 * `/{bucket}?list-type=2`), GCS (`/storage/v1/b/{bucket}/o`) and Azure (`/{account}/{container}?comp=list`), and the
 * bucket (container) name chooses how it misbehaves:
 * - `endless`: a 200 page that never ends (keys streamed as fast as the client reads them);
 * - `huge`: a 200 page of 100 MB with a Content-Length, valid up to its last byte;
 * - `silent`: accepts the connection and never answers;
 * - `errorbody`: a 500 whose body is 1 MB of `a` and `://` (the input that made the old redaction quadratic);
 * - `truncated`: an empty page that says there is a next one, forever;
 * - anything else: a correct page of {@link OK_KEYS} keys under the asked prefix.
 *
 * It counts what it sent, so a test can tell how much of a page the client read before it gave up.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

export const OK_KEYS = ['config.json', 'model.safetensors'];
export const HUGE_PAGE_BYTES = 100 * 1024 * 1024;
export const ERROR_BODY = 'a'.repeat(1e6) + '://';

export interface HostileStorage {
  url: string;
  /** Requests by bucket. */
  requests: Map<string, number>;
  /** Body bytes written, all buckets. */
  bytesSent(): number;
  close(): Promise<void>;
}

type Flavour = 's3' | 'gcs' | 'abs';

const xmlKey = (flavour: Flavour, key: string) =>
  flavour === 'abs'
    ? `<Blob><Name>${key}</Name><Properties><Content-Length>1</Content-Length><BlobType>BlockBlob</BlobType></Properties></Blob>`
    : `<Contents><Key>${key}</Key><Size>1</Size></Contents>`;

function pageHead(flavour: Flavour, prefix: string): string {
  return flavour === 'abs'
    ? `<?xml version="1.0" encoding="utf-8"?><EnumerationResults><Prefix>${prefix}</Prefix><Blobs>`
    : `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>b</Name><Prefix>${prefix}</Prefix><IsTruncated>false</IsTruncated>`;
}

function pageTail(flavour: Flavour, next?: string): string {
  if (flavour === 'abs') return `</Blobs><NextMarker>${next ?? ''}</NextMarker></EnumerationResults>`;
  return next
    ? `<NextContinuationToken>${next}</NextContinuationToken></ListBucketResult>`
    : '</ListBucketResult>';
}

/** A whole page, as each API writes it. */
function page(flavour: Flavour, prefix: string, keys: string[], next?: string): string {
  if (flavour === 'gcs')
    return JSON.stringify({
      items: keys.map((k) => ({ name: k, size: '1' })),
      ...(next ? { nextPageToken: next } : {}),
    });
  const head = pageHead(flavour, prefix);
  const truncated = flavour === 's3' && next ? head.replace('<IsTruncated>false', '<IsTruncated>true') : head;
  return truncated + keys.map((k) => xmlKey(flavour, k)).join('') + pageTail(flavour, next);
}

/** Writes `next()` chunks while the client reads, until `next` returns undefined or the socket closes. */
function stream(res: ServerResponse, next: () => string | undefined, count: (n: number) => void): void {
  const pump = () => {
    for (;;) {
      const chunk = next();
      if (chunk === undefined) {
        res.end();
        return;
      }
      count(Buffer.byteLength(chunk));
      if (!res.write(chunk)) {
        res.once('drain', pump);
        return;
      }
    }
  };
  res.on('error', () => {});
  pump();
}

export async function startHostileStorage(): Promise<HostileStorage> {
  const requests = new Map<string, number>();
  const sockets = new Set<Socket>();
  let sent = 0;
  const count = (n: number) => {
    sent += n;
  };
  const server = createServer((req, res) => {
    const u = new URL(req.url ?? '/', 'http://x');
    let flavour: Flavour;
    let bucket: string;
    let prefix: string;
    if (u.pathname.startsWith('/storage/v1/b/')) {
      flavour = 'gcs';
      bucket = decodeURIComponent(u.pathname.split('/')[4] ?? '');
      prefix = u.searchParams.get('prefix') ?? '';
    } else if (u.searchParams.get('comp') === 'list') {
      flavour = 'abs';
      bucket = decodeURIComponent(u.pathname.split('/')[2] ?? '');
      prefix = u.searchParams.get('prefix') ?? '';
    } else {
      flavour = 's3';
      bucket = decodeURIComponent(u.pathname.split('/')[1] ?? '');
      prefix = u.searchParams.get('prefix') ?? '';
    }
    requests.set(bucket, (requests.get(bucket) ?? 0) + 1);
    const type = flavour === 'gcs' ? 'application/json' : 'application/xml';
    switch (bucket) {
      case 'silent':
        return; // the request stays open; the socket is closed by close()
      case 'errorbody':
        count(ERROR_BODY.length);
        res.writeHead(500, { 'content-type': 'text/plain' }).end(ERROR_BODY);
        return;
      case 'truncated': {
        const token = `t${(requests.get(bucket) ?? 0) + 1}`;
        const body = page(flavour, prefix, [], token);
        count(body.length);
        res.writeHead(200, { 'content-type': type }).end(body);
        return;
      }
      case 'endless':
      case 'huge': {
        let i = 0;
        let written = 0;
        const head = flavour === 'gcs' ? '{"items":[' : pageHead(flavour, prefix);
        const limit = bucket === 'huge' ? HUGE_PAGE_BYTES : Infinity;
        res.writeHead(200, {
          'content-type': type,
          ...(bucket === 'huge' ? { 'content-length': HUGE_PAGE_BYTES } : {}),
        });
        stream(
          res,
          () => {
            if (written >= limit) return undefined;
            let chunk = '';
            if (i === 0) chunk = head;
            for (let n = 0; n < 200; n++, i++) {
              const key = `${prefix}k${String(i).padStart(12, '0')}`;
              chunk +=
                flavour === 'gcs' ? `${i ? ',' : ''}{"name":"${key}","size":"1"}` : xmlKey(flavour, key);
            }
            if (written + chunk.length > limit) chunk = chunk.slice(0, limit - written);
            written += chunk.length;
            return chunk;
          },
          count,
        );
        return;
      }
      default: {
        const body = page(
          flavour,
          prefix,
          OK_KEYS.map((k) => prefix + k),
        );
        count(body.length);
        res.writeHead(200, { 'content-type': type }).end(body);
      }
    }
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    requests,
    bytesSent: () => sent,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
