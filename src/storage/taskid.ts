/**
 * Task identity of the P2P network's peer daemon (dragonflyoss/client, Rust), so that the task id of a preheat and
 * of a later download through the peer proxy can be computed — and compared — here.
 *
 * The daemon is the authority; test/vectors/taskid.json holds its cases (also read by the Java plugin's tests),
 * each with the expected value under both rules.
 *
 * `task_id = hex(sha256(canonical_url + tag? + application? + revision? + piece_length? + "STANDARD"))`.
 *
 * The canonical URL depends on the daemon version ({@link TaskIdRule}):
 * - `1.4` (client 1.4.x up to 1.5.2; Dragonfly v2.5.1 bundles 1.4.2; read from dragonfly-client-util
 *   id_generator at v1.4.2): the URL is always parsed (WHATWG), its query form-decoded, filtered keys dropped, the
 *   rest kept in their ORIGINAL order and re-serialised as application/x-www-form-urlencoded (`*` kept, `~` and
 *   `;` percent-encoded, space `+`).
 * - `1.5.3+` (client >= 1.5.3 and the manager's Go code): see {@link canonicalURL}: sorted keys, Go
 *   `url.QueryEscape`, segments with `;` dropped, an empty filter leaves the URL untouched.
 *
 * node:crypto gives the hash and the WHATWG URL parser gives the same parse/serialise as Rust's `url` crate (both
 * implement the WHATWG URL standard), and `URLSearchParams` is the WHATWG form-urlencoded parser and serialiser
 * that Rust's `form_urlencoded` also implements. What is written by hand for the 1.5.3+ rule: the query split (the
 * daemon splits on `&` itself and drops segments containing `;` before form-decoding), the byte-order stable sort,
 * and the encoder that reproduces Go's `url.QueryEscape`: no JavaScript library encodes exactly that set
 * (`encodeURIComponent` keeps `!'()*`, `URLSearchParams` encodes `~` and keeps `*`), and the id must match byte for
 * byte.
 */
import { createHash } from 'node:crypto';

/** Separator of the legacy / manager-side filter string (`Expires&Signature`). */
const LEGACY_FILTER_SEPARATOR = '&';
/** Separator of the current daemon's `X-Dragonfly-Filtered-Query-Params` header. */
const FILTER_HEADER_SEPARATOR = ',';

const FILTERED_QUERY_PARAMS_HEADER = 'X-Dragonfly-Filtered-Query-Params';
export const LEGACY_FILTER_HEADER = 'X-Dragonfly-Filter';
export const TAG_HEADER = 'X-Dragonfly-Tag';
export const APPLICATION_HEADER = 'X-Dragonfly-Application';
export const PIECE_LENGTH_HEADER = 'X-Dragonfly-Piece-Length';
export const TASK_ID_HEADER = 'X-Dragonfly-Task-ID';
export const DOWNLOAD_FINISHED_HEADER = 'X-Dragonfly-Task-Download-Finished';
export const ERROR_TYPE_HEADER = 'X-Dragonfly-Error-Type';
export const USE_P2P_HEADER = 'X-Dragonfly-Use-P2P';

/**
 * Which canonicalisation a peer daemon applies: `1.4` for clients below 1.5.3, `1.5.3+` from 1.5.3 on (see the
 * module comment).
 */
export const TASK_ID_RULES = ['1.4', '1.5.3+'] as const;
export type TaskIdRule = (typeof TASK_ID_RULES)[number];

/**
 * The rule of the Dragonfly release peerload is tested against: v2.5.1, whose peer daemon is client 1.4.2 (the
 * newest manager the Go module proxy serves; client 1.5.x needs a newer dragonfly-api than any manager there).
 * Operators on client >= 1.5.3 say so with `--peer-daemon-version` / `spec.peerDaemonVersion`.
 */
export const DEFAULT_TASK_ID_RULE: TaskIdRule = '1.4';

/** How to write a daemon version, for error messages. */
export const DAEMON_VERSION_HINT =
  'must be "1.4", "1.5.3+" or the peer daemon\'s (dragonfly-client) version such as 1.4.2 or v1.5.3';

const SEMVER = /^v?(\d{1,9})\.(\d{1,9})(?:\.(\d{1,9}))?(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$/;

/**
 * The rule of a daemon version: `1.4` or `1.5.3+` as they are, or a (client) version compared with 1.5.3, e.g.
 * `1.4.2` -> `1.4`, `v1.5.3` -> `1.5.3+`, `1.5` (= 1.5.0) -> `1.4`. A pre-release suffix is ignored. Undefined when
 * it is neither.
 */
export function taskIdRule(version: string): TaskIdRule | undefined {
  const v = version.trim();
  if (v === '1.5.3+') return '1.5.3+';
  const m = SEMVER.exec(v);
  if (!m) return undefined;
  const [major, minor, patch] = [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)];
  const below = major !== 1 ? major < 1 : minor !== 5 ? minor < 5 : patch < 3;
  return below ? '1.4' : '1.5.3+';
}

/**
 * The manager's and daemon's default filter (dragonfly pkg/net/http: S3, GCS, OSS, OBS, COS signature
 * parameters and containerd's `ns`), in the manager's order (duplicates included, as Go concatenates them).
 */
export const DEFAULT_FILTERED_QUERY_PARAMS: readonly string[] = [
  'X-Amz-Algorithm',
  'X-Amz-Credential',
  'X-Amz-Date',
  'X-Amz-Expires',
  'X-Amz-SignedHeaders',
  'X-Amz-Signature',
  'X-Amz-Security-Token',
  'X-Amz-User-Agent',
  'X-Goog-Algorithm',
  'X-Goog-Credential',
  'X-Goog-Date',
  'X-Goog-Expires',
  'X-Goog-SignedHeaders',
  'X-Goog-Signature',
  'OSSAccessKeyId',
  'Expires',
  'Signature',
  'SecurityToken',
  'AccessKeyId',
  'Signature',
  'Expires',
  'X-Obs-Date',
  'X-Obs-Security-Token',
  'q-sign-algorithm',
  'q-ak',
  'q-sign-time',
  'q-key-time',
  'q-header-list',
  'q-url-param-list',
  'q-signature',
  'x-cos-security-token',
  'ns',
];

/** The default filter as the manager writes it into job args (`&`-joined). */
export const RAW_DEFAULT_FILTERED_QUERY_PARAMS = DEFAULT_FILTERED_QUERY_PARAMS.join(LEGACY_FILTER_SEPARATOR);

const UNRESERVED = /[A-Za-z0-9\-._~]/;

/**
 * Go's `url.QueryEscape` (and the daemon's `query_escape`): per UTF-8 byte, unreserved `A-Z a-z 0-9 - . _ ~`
 * kept, space -> `+`, everything else `%XX` uppercase. Hand-written: see the module comment.
 */
export function queryEscape(s: string): string {
  let out = '';
  for (const byte of Buffer.from(s, 'utf8')) {
    const ch = String.fromCharCode(byte);
    if (byte < 0x80 && UNRESERVED.test(ch)) out += ch;
    else if (byte === 0x20) out += '+';
    else out += '%' + byte.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

/** Rust `String::cmp`: byte-wise comparison of the UTF-8 encodings (JS `<` compares UTF-16 code units). */
function compareUtf8(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

/**
 * The URL as the daemon hashes it, under `rule` (default `1.5.3+`: the manager's and the newest daemon's).
 *
 * `1.5.3+`: with an empty filter the URL is returned unchanged (not even parsed). Otherwise: split the query on
 * `&`, drop segments containing `;`, form-decode, drop filtered keys, stable-sort by key, re-encode like Go's
 * `url.QueryEscape`.
 *
 * `1.4`: parse (also with an empty filter), form-decode the query, drop filtered keys, keep the order, re-encode as
 * application/x-www-form-urlencoded.
 *
 * Both: no query when none remain; a URL whose path is `/` loses its trailing slash(es); the fragment is kept.
 * Throws `TypeError` on a URL that does not parse.
 */
export function canonicalURL(url: string, filter: readonly string[], rule: TaskIdRule = '1.5.3+'): string {
  if (rule === '1.4') return canonicalURL14(url, filter);
  if (filter.length === 0) return url;
  const parsed = new URL(url);
  // `search` is '' both for no query and for an empty one; both yield no pairs.
  const query = parsed.search.startsWith('?') ? parsed.search.slice(1) : parsed.search;
  const dropped = new Set(filter);
  const pairs: [string, string][] = [];
  for (const segment of query.split('&')) {
    if (segment.includes(';')) continue;
    // URLSearchParams strips exactly one leading '?' from a string: prefixing one keeps the segment intact.
    for (const [k, v] of new URLSearchParams('?' + segment)) {
      if (!dropped.has(k)) pairs.push([k, v]);
    }
  }
  // Array.prototype.sort is stable (ES2019): values of one key keep their order.
  pairs.sort((a, b) => compareUtf8(a[0], b[0]));
  parsed.search =
    pairs.length === 0 ? '' : '?' + pairs.map(([k, v]) => `${queryEscape(k)}=${queryEscape(v)}`).join('&');
  return trimRootSlash(parsed);
}

/** Client 1.4.x: `Url::parse`, `query_pairs()` filtered, `query_pairs_mut().clear().extend_pairs(..)`. */
function canonicalURL14(url: string, filter: readonly string[]): string {
  const parsed = new URL(url);
  const dropped = new Set(filter);
  const kept = [...parsed.searchParams].filter(([k]) => !dropped.has(k));
  // URLSearchParams#toString is the WHATWG urlencoded serialiser, the one Rust's form_urlencoded implements.
  parsed.search = kept.length === 0 ? '' : '?' + new URLSearchParams(kept).toString();
  return trimRootSlash(parsed);
}

function trimRootSlash(parsed: URL): string {
  const serialised = parsed.href;
  if (parsed.pathname === '/' && serialised.endsWith('/')) return serialised.replace(/\/+$/, '');
  return serialised;
}

export interface TaskIdentity {
  url: string;
  /** Query parameter names left out of the task id. Empty or absent: the URL is used as it is. */
  filter?: readonly string[] | undefined;
  tag?: string | undefined;
  application?: string | undefined;
  revision?: string | undefined;
  /** Piece length in bytes, when the download fixes it. */
  pieceLength?: number | undefined;
  /** The daemon version's canonicalisation; absent: `1.5.3+` (the manager's). */
  rule?: TaskIdRule | undefined;
}

/** The daemon's task id: sha256 hex of the canonical URL (under `identity.rule`) and the optional parts. */
export function taskID(identity: TaskIdentity): string {
  const hash = createHash('sha256');
  hash.update(canonicalURL(identity.url, identity.filter ?? [], identity.rule));
  // Each part is appended only when set; an empty string appends nothing, exactly as in the daemon.
  if (identity.tag !== undefined) hash.update(identity.tag);
  if (identity.application !== undefined) hash.update(identity.application);
  if (identity.revision !== undefined) hash.update(identity.revision);
  if (identity.pieceLength !== undefined) hash.update(String(identity.pieceLength));
  hash.update('STANDARD');
  return hash.digest('hex');
}

/** Splits a filter string on a separator, trimming blanks and dropping empty names. */
function splitFilter(raw: string, separator: string): string[] {
  return raw
    .split(separator)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

type HeaderBag = Headers | Record<string, string | string[] | undefined>;

function headerValue(headers: HeaderBag, name: string): string | undefined {
  if (typeof (headers as Headers).get === 'function') return (headers as Headers).get(name) ?? undefined;
  const wanted = name.toLowerCase();
  for (const [k, v] of Object.entries(headers as Record<string, string | string[] | undefined>)) {
    if (k.toLowerCase() === wanted && v !== undefined) return Array.isArray(v) ? v.join(',') : v;
  }
  return undefined;
}

/**
 * The filter a request asks for: `X-Dragonfly-Filtered-Query-Params` (`,`; current daemon) when present, else the
 * legacy `X-Dragonfly-Filter` (`&`; old Go daemon), else `undefined` (the daemon then uses its default filter).
 */
export function parseFilterHeaders(headers: HeaderBag): string[] | undefined {
  const current = headerValue(headers, FILTERED_QUERY_PARAMS_HEADER);
  if (current !== undefined) return splitFilter(current, FILTER_HEADER_SEPARATOR);
  const legacy = headerValue(headers, LEGACY_FILTER_HEADER);
  if (legacy !== undefined) return splitFilter(legacy, LEGACY_FILTER_SEPARATOR);
  return undefined;
}

/** Both filter headers, so the current and the legacy daemon compute the same task id. */
export function filterHeaders(filter: readonly string[]): Record<string, string> {
  return {
    [FILTERED_QUERY_PARAMS_HEADER]: filter.join(FILTER_HEADER_SEPARATOR),
    [LEGACY_FILTER_HEADER]: filter.join(LEGACY_FILTER_SEPARATOR),
  };
}

const SIZE_UNITS: Record<string, number> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  ki: 1024,
  kib: 1024,
  m: 1e6,
  mb: 1e6,
  mi: 1024 ** 2,
  mib: 1024 ** 2,
  g: 1e9,
  gb: 1e9,
  gi: 1024 ** 3,
  gib: 1024 ** 3,
};

/**
 * Parses `X-Dragonfly-Piece-Length` (`4194304`, `4mib`, `4 MiB`, `4mb`) into bytes, like the daemon's byte-size
 * parser (case-insensitive; `k`/`kb` decimal, `ki`/`kib` binary). Returns undefined when it does not parse.
 */
export function parsePieceLength(raw: string | undefined): number | undefined {
  if (raw === undefined) return undefined;
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$/.exec(raw);
  if (!m) return undefined;
  const unit = SIZE_UNITS[m[2]!.toLowerCase()];
  if (unit === undefined) return undefined;
  return Math.floor(Number(m[1]) * unit);
}

/** The task identity a proxied request asks for, from its headers (filter falls back to `defaultFilter`). */
export function identityFromHeaders(
  url: string,
  headers: HeaderBag,
  defaultFilter: readonly string[] = DEFAULT_FILTERED_QUERY_PARAMS,
): TaskIdentity {
  const tag = headerValue(headers, TAG_HEADER);
  const application = headerValue(headers, APPLICATION_HEADER);
  return {
    url,
    filter: parseFilterHeaders(headers) ?? defaultFilter,
    tag: tag === '' ? undefined : tag,
    application: application === '' ? undefined : application,
    pieceLength: parsePieceLength(headerValue(headers, PIECE_LENGTH_HEADER)),
  };
}
