/**
 * A Hugging Face Hub emulator on loopback, answering what huggingface_hub (2.4.0) and peerload's Hub client ask
 * for, the way the Hub answers (held to the real client by test/e2e/hub-emulator-client.test.ts):
 *   - `GET /api/models/{repo}[/revision/{rev}]` the model info (`sha`, `siblings`; sizes and LFS with `?blobs=true`);
 *   - `GET /api/models/{repo}/tree/{rev}[/{dir}]?recursive=` the tree, paged with a `Link: <...>; rel="next"` cursor;
 *   - `HEAD|GET /{repo}/resolve/{rev}/{path}`: a git file's bytes with `ETag` and `X-Repo-Commit`; an LFS file a 302
 *     to the second host, the "CDN", with `X-Linked-Etag` (the sha256) and `X-Linked-Size`;
 *   - the CDN serves `/repos/{aa}/{bb}/{sha256}` only with valid `X-Amz-*` query parameters (an HMAC over the path
 *     and the other parameters, and an expiry), so a URL whose signature was cut or that expired is a 403;
 *   - a renamed repository (`renamed`: old id -> new id) answers its API and `resolve` calls with a 307 to the same
 *     path under the new name, a relative `Location` with the query kept, as the Hub does (meta-llama/Meta-Llama-3.1-8B
 *     -> meta-llama/Llama-3.1-8B);
 *   - errors carry the Hub's `X-Error-Code` / `X-Error-Message` headers: RepoNotFound (401 without a token, as the
 *     Hub hides private repositories), GatedRepo (401 without a token, 403 with one not granted), RevisionNotFound,
 *     EntryNotFound, and "Invalid credentials in Authorization header" for an unknown token.
 * Both hosts record every request (the CDN its body bytes) so tests count what crossed.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { rangeOf } from './peer-proxy-http.ts';
import {
  buildRepo,
  commitOf,
  siblings,
  treeEntries,
  type HubFile,
  type HubRepo,
  type HubRepoInput,
} from './hub-emulator-repo.ts';

export interface HubRequest {
  method: string;
  /** Path and query as received. */
  url: string;
  range: string | undefined;
  authorized: boolean;
  status: number;
  /** Body bytes sent. */
  bytes: number;
}

export interface HubEmulatorOptions {
  repos: HubRepoInput[];
  /** Token -> the repositories it is granted (`*`: all). */
  tokens?: Record<string, readonly string[] | '*'>;
  /** Entries per tree page (the Hub's is 1,000). */
  treePageSize?: number;
  /** Validity of the CDN URLs, seconds. */
  cdnExpiresSeconds?: number;
  /** Old repository id -> the id it was renamed to (which must be one of `repos`). */
  renamed?: Record<string, string>;
  /** Loopback addresses of the two hosts (default 127.0.0.1 both, on their own ports). */
  hubHost?: string;
  cdnHost?: string;
  /** A hostile Hub: the redirect target of an LFS file (`path`) instead of its CDN URL, when it returns one. */
  redirectOf?: (path: string) => string | undefined;
}

export interface HubEmulator {
  /** `http://host:port` of the Hub (what `HF_ENDPOINT` names). */
  url: string;
  /** `http://host:port` of the CDN the LFS files redirect to. */
  cdnURL: string;
  repos: Map<string, HubRepo>;
  hubRequests: HubRequest[];
  cdnRequests: HubRequest[];
  /** Body bytes the CDN sent for the LFS object `sha256` (GETs, ranges included). */
  cdnBytes(sha256: string): number;
  /** Points a branch or tag at commit `index` (a moved branch). */
  setRef(repo: string, ref: string, index: number): void;
  /** The CDN URL the Hub would redirect to now for `file`, signed (for tests of the signature). */
  signedCDNURL(file: HubFile): string;
  close(): Promise<void>;
}

type Headers = Record<string, string | number>;

const ERROR = (status: number, code: string | undefined, message: string) => ({ status, code, message });
type HubErrorAnswer = ReturnType<typeof ERROR>;

function amzDate(d: Date): string {
  return d
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

export async function startHubEmulator(opts: HubEmulatorOptions): Promise<HubEmulator> {
  const repos = new Map(opts.repos.map((r) => [r.id, buildRepo(r)]));
  const tokens = new Map(Object.entries(opts.tokens ?? {}));
  const pageSize = opts.treePageSize ?? 1000;
  const expires = opts.cdnExpiresSeconds ?? 3600;
  const secret = randomBytes(32);
  const hubRequests: HubRequest[] = [];
  const cdnRequests: HubRequest[] = [];
  const blobs = new Map<string, HubFile>();
  for (const repo of repos.values())
    for (const c of repo.commits) for (const f of c.files.values()) if (f.lfs) blobs.set(f.sha256, f);

  let hubURL = '';
  let cdnURL = '';

  const signature = (path: string, params: URLSearchParams) => {
    const rest = [...params].filter(([k]) => k !== 'X-Amz-Signature').sort(([a], [b]) => (a < b ? -1 : 1));
    return createHmac('sha256', secret)
      .update(`${path}\n${new URLSearchParams(rest).toString()}`)
      .digest('hex');
  };

  const signedCDNURL = (file: HubFile) => {
    const path = `/repos/${file.sha256.slice(0, 2)}/${file.sha256.slice(2, 4)}/${file.sha256}`;
    const name = file.path.split('/').pop()!;
    const now = new Date();
    const params = new URLSearchParams({
      'response-content-disposition': `inline; filename*=UTF-8''${encodeURIComponent(name)}; filename="${name}";`,
      'X-Amz-Algorithm': 'AWS4-HMAC-SHA256',
      'X-Amz-Content-Sha256': 'UNSIGNED-PAYLOAD',
      'X-Amz-Credential': `EMULATORKEY/${amzDate(now).slice(0, 8)}/us-east-1/s3/aws4_request`,
      'X-Amz-Date': amzDate(now),
      'X-Amz-Expires': String(expires),
      'X-Amz-SignedHeaders': 'host',
      'x-id': 'GetObject',
    });
    params.set('X-Amz-Signature', signature(path, params));
    return `${cdnURL}${path}?${params.toString()}`;
  };

  /** Who the request's token is: undefined (none), null (unknown), or the repositories it is granted. */
  const grantOf = (req: IncomingMessage): readonly string[] | '*' | undefined | null => {
    const auth = req.headers.authorization;
    if (!auth) return undefined;
    const m = /^Bearer (.+)$/.exec(auth);
    return (m && tokens.get(m[1]!)) ?? null;
  };

  /** Whether the caller may see `repo` (and, for `files`, download its files); an error answer otherwise. */
  const access = (
    req: IncomingMessage,
    id: string,
    files: boolean,
  ): { repo: HubRepo } | { error: HubErrorAnswer } => {
    const grant = grantOf(req);
    if (grant === null)
      return { error: ERROR(401, undefined, 'Invalid credentials in Authorization header') };
    const repo = repos.get(id);
    const granted = grant === '*' || (grant !== undefined && grant.includes(id));
    if (!repo || (repo.private && !granted))
      return { error: ERROR(grant === undefined ? 401 : 404, 'RepoNotFound', 'Repository not found') };
    if (repo.gated && files && !granted)
      return grant === undefined
        ? {
            error: ERROR(
              401,
              'GatedRepo',
              `Access to model ${id} is restricted. You must have access to it and be authenticated to access it. Please log in.`,
            ),
          }
        : {
            error: ERROR(
              403,
              'GatedRepo',
              `Access to model ${id} is restricted and you are not in the authorized list. Visit https://huggingface.co/${id} to ask for access.`,
            ),
          };
    return { repo };
  };

  const record = (list: HubRequest[], req: IncomingMessage) => {
    const entry: HubRequest = {
      method: req.method ?? 'GET',
      url: req.url ?? '/',
      range: req.headers.range,
      authorized: req.headers.authorization !== undefined,
      status: 0,
      bytes: 0,
    };
    list.push(entry);
    return entry;
  };

  const sender = (req: IncomingMessage, res: ServerResponse, entry: HubRequest) => {
    return (status: number, headers: Headers, body?: Buffer) => {
      entry.status = status;
      const head = req.method === 'HEAD';
      entry.bytes = head || !body ? 0 : body.length;
      res.writeHead(status, { ...headers, ...(body ? { 'content-length': body.length } : {}) });
      res.end(head ? undefined : body);
    };
  };

  const sendError = (send: ReturnType<typeof sender>, e: HubErrorAnswer, extra: Headers = {}) =>
    send(
      e.status,
      {
        'content-type': 'application/json; charset=utf-8',
        'x-error-message': e.message,
        ...(e.code ? { 'x-error-code': e.code } : {}),
        ...extra,
      },
      Buffer.from(JSON.stringify({ error: e.message })),
    );

  /** Serves `body` whole or the single range asked for. */
  const sendBytes = (
    req: IncomingMessage,
    send: ReturnType<typeof sender>,
    headers: Headers,
    body: Buffer,
  ) => {
    const range = rangeOf(req.headers.range, body.length);
    if (range === 'invalid') return send(416, { ...headers, 'content-range': `bytes */${body.length}` });
    const base = { ...headers, 'content-type': 'application/octet-stream', 'accept-ranges': 'bytes' };
    if (!range) return send(200, base, body);
    send(
      206,
      { ...base, 'content-range': `bytes ${range.start}-${range.end}/${body.length}` },
      body.subarray(range.start, range.end + 1),
    );
  };

  const json = (send: ReturnType<typeof sender>, value: unknown, headers: Headers = {}) =>
    send(
      200,
      { 'content-type': 'application/json; charset=utf-8', ...headers },
      Buffer.from(JSON.stringify(value)),
    );

  const revisionNotFound = (rev: string) => ERROR(404, 'RevisionNotFound', `Invalid rev id: ${rev}`);

  const renamed = new Map(Object.entries(opts.renamed ?? {}));
  /** The same path under a renamed repository's new name (API or resolve), or undefined. */
  const movedPath = (u: URL): string | undefined => {
    const raw = u.pathname.split('/');
    const at = raw[1] === 'api' && raw[2] === 'models' ? 3 : raw[3] === 'resolve' ? 1 : 0;
    if (at === 0 || raw.length < at + 2) return undefined;
    const to = renamed.get(`${decodeURIComponent(raw[at]!)}/${decodeURIComponent(raw[at + 1]!)}`);
    if (to === undefined) return undefined;
    raw.splice(at, 2, ...to.split('/').map(encodeURIComponent));
    return raw.join('/') + u.search;
  };

  const hub = createServer((req, res) => {
    const entry = record(hubRequests, req);
    const send = sender(req, res, entry);
    const u = new URL(req.url ?? '/', 'http://hub');
    const moved = movedPath(u);
    if (moved !== undefined)
      return send(
        307,
        { location: moved, 'content-type': 'text/plain; charset=utf-8' },
        Buffer.from(`Temporary Redirect. Redirecting to ${moved}`),
      );
    const parts = u.pathname.split('/').slice(1).map(decodeURIComponent);
    if (parts[0] === 'api' && parts[1] === 'models' && parts.length >= 4) {
      if (req.method !== 'GET') return sendError(send, ERROR(405, undefined, 'Method not allowed'));
      const id = `${parts[2]}/${parts[3]}`;
      const a = access(req, id, false);
      if ('error' in a) return sendError(send, a.error);
      const { repo } = a;
      if (parts.length === 4 || (parts[4] === 'revision' && parts.length === 6)) {
        const rev = parts[5] ?? 'main';
        const commit = commitOf(repo, rev);
        if (!commit) return sendError(send, revisionNotFound(rev));
        return json(send, {
          _id: `emulated-${repo.id}`,
          id: repo.id,
          modelId: repo.id,
          author: repo.id.split('/')[0],
          sha: commit.sha,
          lastModified: '2026-11-27T00:00:00.000Z',
          createdAt: '2026-11-01T00:00:00.000Z',
          private: repo.private,
          gated: repo.gated ? 'manual' : false,
          disabled: false,
          downloads: 0,
          likes: 0,
          tags: [],
          siblings: siblings(commit, u.searchParams.get('blobs') === 'true'),
        });
      }
      if (parts[4] === 'tree' && parts.length >= 6) {
        const rev = parts[5]!;
        const commit = commitOf(repo, rev);
        if (!commit) return sendError(send, revisionNotFound(rev));
        const dir = parts.slice(6).join('/');
        const all = treeEntries(commit, dir, u.searchParams.get('recursive') === 'true');
        if (dir !== '' && all.length === 0)
          return sendError(send, ERROR(404, 'EntryNotFound', `${dir} does not exist on "${rev}"`));
        const from = Number(Buffer.from(u.searchParams.get('cursor') ?? '', 'base64url').toString() || 0);
        const page = all.slice(from, from + pageSize);
        const headers: Headers = {};
        if (from + pageSize < all.length) {
          const next = new URL(u.pathname + u.search, hubURL);
          next.searchParams.set('cursor', Buffer.from(String(from + pageSize)).toString('base64url'));
          headers.link = `<${next.toString()}>; rel="next"`;
        }
        return json(send, page, headers);
      }
      return sendError(send, ERROR(404, undefined, "Sorry, we can't find the page you are looking for."));
    }
    if (parts.length >= 5 && parts[2] === 'resolve') {
      if (req.method !== 'GET' && req.method !== 'HEAD')
        return sendError(send, ERROR(405, undefined, 'Method not allowed'));
      const id = `${parts[0]}/${parts[1]}`;
      const a = access(req, id, true);
      if ('error' in a) return sendError(send, a.error);
      const rev = parts[3]!;
      const commit = commitOf(a.repo, rev);
      if (!commit) return sendError(send, revisionNotFound(rev));
      const path = parts.slice(4).join('/');
      const file = commit.files.get(path);
      const repoCommit = { 'x-repo-commit': commit.sha };
      if (!file) return sendError(send, ERROR(404, 'EntryNotFound', 'Entry not found'), repoCommit);
      if (!file.lfs) return sendBytes(req, send, { ...repoCommit, etag: `"${file.blobId}"` }, file.content);
      const location = opts.redirectOf?.(file.path) ?? signedCDNURL(file);
      return send(
        302,
        {
          ...repoCommit,
          location,
          etag: `"${file.sha256}"`,
          'x-linked-etag': `"${file.sha256}"`,
          'x-linked-size': file.content.length,
          'content-type': 'text/plain; charset=utf-8',
        },
        Buffer.from(`Found. Redirecting to ${location}`),
      );
    }
    sendError(send, ERROR(404, undefined, "Sorry, we can't find the page you are looking for."));
  });

  const cdnDenied = (send: ReturnType<typeof sender>, code: string, message: string) =>
    send(
      403,
      { 'content-type': 'application/xml' },
      Buffer.from(
        `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message></Error>`,
      ),
    );

  const cdn = createServer((req, res) => {
    const entry = record(cdnRequests, req);
    const send = sender(req, res, entry);
    const u = new URL(req.url ?? '/', 'http://cdn');
    const m = /^\/repos\/[0-9a-f]{2}\/[0-9a-f]{2}\/([0-9a-f]{64})$/.exec(u.pathname);
    const file = m ? blobs.get(m[1]!) : undefined;
    if (!file) return cdnDenied(send, 'AccessDenied', 'Access Denied');
    const given = Buffer.from(u.searchParams.get('X-Amz-Signature') ?? '', 'hex');
    const want = Buffer.from(signature(u.pathname, u.searchParams), 'hex');
    if (given.length !== want.length || !timingSafeEqual(given, want))
      return cdnDenied(
        send,
        'SignatureDoesNotMatch',
        'The request signature we calculated does not match the signature you provided.',
      );
    const date = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(
      u.searchParams.get('X-Amz-Date') ?? '',
    );
    const signedAt = date
      ? Date.UTC(+date[1]!, +date[2]! - 1, +date[3]!, +date[4]!, +date[5]!, +date[6]!)
      : 0;
    if (Date.now() > signedAt + Number(u.searchParams.get('X-Amz-Expires') ?? 0) * 1000)
      return cdnDenied(send, 'AccessDenied', 'Request has expired');
    sendBytes(req, send, { etag: `"${file.sha256}"` }, file.content);
  });

  const listen = (server: Server, host: string) =>
    new Promise<string>((resolve) =>
      server.listen(0, host, () => resolve(`http://${host}:${(server.address() as AddressInfo).port}`)),
    );
  hubURL = await listen(hub, opts.hubHost ?? '127.0.0.1');
  cdnURL = await listen(cdn, opts.cdnHost ?? '127.0.0.1');
  const close = (server: Server) =>
    new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });

  return {
    url: hubURL,
    cdnURL,
    repos,
    hubRequests,
    cdnRequests,
    cdnBytes: (sha) =>
      cdnRequests
        .filter((r) => r.method === 'GET' && r.url.includes(`/${sha}?`))
        .reduce((s, r) => s + r.bytes, 0),
    setRef: (id, ref, index) => {
      const repo = repos.get(id);
      if (!repo || !repo.commits[index]) throw new Error(`no commit ${index} in ${id}`);
      repo.refs.set(ref, index);
    },
    signedCDNURL,
    close: async () => {
      await Promise.all([close(hub), close(cdn)]);
    },
  };
}
