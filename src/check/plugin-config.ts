/**
 * The plugin's configuration file, read and validated exactly as the plugin reads it
 * (plugin/src/main/java/io/peerload/plugin/PluginConfig.java): the check must accept what the plugin accepts, refuse
 * what it refuses, and see the same normalised values. The plugin is the authority; the two are held together by
 * test/vectors/plugin-config.json, which both test suites read (PluginConfigVectorsTest, plugin-config.test.ts).
 *
 * The rules are written in the plugin's order and the first problem is reported, naming the field and never a
 * value (the file holds credentials). Credentials are never read: a GCS service account file is not opened.
 */
import { effectiveFilter, parseEndpoint, type Endpoint, type StorageLocation } from '../storage/objecturl.ts';
import {
  DAEMON_VERSION_HINT,
  DEFAULT_TASK_ID_RULE,
  PIECE_LENGTH_HEADER,
  USE_P2P_HEADER,
  parsePieceLength,
  taskIdRule,
  type TaskIdRule,
} from '../storage/taskid.ts';
import { CheckInputError } from './input.ts';

/** The plugin's proxy when `addr` is not set (PluginConfig.DEFAULT_ADDR). */
export const DEFAULT_ADDR = 'http://127.0.0.1:4001';

/** `max_bytes` when not set (PluginConfig.DEFAULT_MAX_BYTES): 256 GiB. */
export const DEFAULT_MAX_BYTES = 256 * 1024 ** 3;
/** `download_timeout` when not set (PluginConfig.DEFAULT_DOWNLOAD_TIMEOUT_MILLIS): 1 h. */
export const DEFAULT_DOWNLOAD_TIMEOUT_MS = 3_600_000;
const MIN_DOWNLOAD_TIMEOUT_MS = 1_000;
const MAX_DOWNLOAD_TIMEOUT_MS = 7 * 24 * 3_600_000;

/** The configuration as the plugin holds it after parsing. */
export interface PluginConfig {
  /** The peer proxy, `http://host:port`. */
  addr: string;
  /** Whether `addr` was written (the default must be a peer daemon in the model server's network namespace). */
  addrConfigured: boolean;
  /** Headers added to every download, values as strings. */
  headers: Record<string, string>;
  /** The filter the plugin sends: the configured one (deduplicated), or the storage kind's default. */
  filter: string[];
  filterConfigured: boolean;
  location: StorageLocation;
  /** Whether an S3 session token is configured (its signature then carries X-Amz-Security-Token). */
  sessionToken: boolean;
  /** How the peer daemon (`daemon_version`) computes task ids. */
  rule: TaskIdRule;
  /** `max_bytes`: the largest archive the plugin downloads (413 past it). */
  maxBytes: number;
  /** `download_timeout` in milliseconds: how long one download may take in all (504 past it). */
  downloadTimeoutMs: number;
}

/** Headers the plugin sets itself and refuses in `header` (PluginConfig.RESERVED_HEADERS). */
const RESERVED_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'upgrade',
  'te',
  'trailer',
  'proxy-connection',
  'x-dragonfly-filter',
  'x-dragonfly-filtered-query-params',
  'x-dragonfly-output-path',
  'x-dragonfly-force-hard-link',
]);
const TOP_LEVEL = [
  'addr',
  'header',
  'filter',
  'object_storage',
  'daemon_version',
  'hard_link_dir',
  'max_bytes',
  'download_timeout',
];
/** `${NAME}` in hard_link_dir, replaced from the model server's environment by the plugin. */
const ENV_REF = /\$\{[A-Za-z_][A-Za-z0-9_]*\}/g;
const STORAGE_FIELDS: Record<string, { required: string[]; optional: string[] }> = {
  s3: {
    required: ['type', 'bucket_name', 'access_key', 'secret_key'],
    optional: ['region', 'endpoint', 'path_style', 'session_token'],
  },
  oss: { required: ['type', 'bucket_name', 'endpoint', 'access_key_id', 'access_key_secret'], optional: [] },
  gcs: { required: ['type', 'bucket_name', 'project_id', 'service_account_path'], optional: ['endpoint'] },
  abs: { required: ['type', 'account_name', 'account_key', 'container_name'], optional: ['endpoint'] },
};
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;
/** What java.util.Base64's basic decoder takes: padding optional, but complete when present. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}(?:==)?|[A-Za-z0-9+/]{3}=?)?$/;

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Java's String.trim: strips code points up to U+0020 (not the other Unicode spaces JavaScript's trim takes). */
function javaTrim(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && s.charCodeAt(start) <= 0x20) start++;
  while (end > start && s.charCodeAt(end - 1) <= 0x20) end--;
  return s.slice(start, end);
}

/** Parses and validates the plugin configuration; the error names the file and the field, never a value. */
export function parsePluginConfig(text: string, source: string): PluginConfig {
  const fail = (message: string): never => {
    throw new CheckInputError(`${source}: ${message}`);
  };
  /** ConfigFields.primitiveString: a JSON string or boolean, as a string. */
  const str = (value: unknown, field: string): string =>
    typeof value === 'string' || typeof value === 'boolean'
      ? String(value)
      : fail(`field "${field}" must be a string`);
  const given = (o: Json, k: string) => Object.hasOwn(o, k) && o[k] !== null;

  let root: unknown;
  try {
    root = JSON.parse(text);
  } catch (err) {
    // V8's message may quote the input, which holds secrets: keep only the position.
    const at = /position \d+(?: \(line \d+ column \d+\))?/.exec((err as Error).message);
    fail(`not valid JSON${at ? ` (at ${at[0]})` : ''}`);
  }
  if (!isObject(root)) return fail('the configuration must be a JSON object');
  for (const k of Object.keys(root)) {
    if (!TOP_LEVEL.includes(k)) fail(`unknown field "${k}" (expected ${TOP_LEVEL.join(', ')})`);
  }

  const addr = given(root, 'addr') ? parseAddr(str(root.addr, 'addr'), fail) : DEFAULT_ADDR;

  const headers = given(root, 'header') ? parseHeaders(root.header, str, fail) : {};

  const filter = given(root, 'filter') ? parseFilter(root.filter, str, fail) : undefined;

  let rule = DEFAULT_TASK_ID_RULE;
  if (given(root, 'daemon_version')) {
    rule =
      taskIdRule(str(root.daemon_version, 'daemon_version')) ??
      fail(`field "daemon_version" ${DAEMON_VERSION_HINT}`);
  }

  if (given(root, 'hard_link_dir')) checkHardLinkDir(str(root.hard_link_dir, 'hard_link_dir'), fail);

  const maxBytes = given(root, 'max_bytes') ? byteSize(root.max_bytes, 'max_bytes', fail) : DEFAULT_MAX_BYTES;
  const downloadTimeoutMs = given(root, 'download_timeout')
    ? durationMs(root.download_timeout, 'download_timeout', fail)
    : DEFAULT_DOWNLOAD_TIMEOUT_MS;

  if (!given(root, 'object_storage')) fail('field "object_storage" is required');
  if (!isObject(root.object_storage)) fail('field "object_storage" must be an object');
  const { location, sessionToken } = parseStorage(root.object_storage as Json, str, fail);
  return {
    addr,
    addrConfigured: given(root, 'addr'),
    headers,
    filter: filter ?? effectiveFilter({ type: location.type }),
    filterConfigured: filter !== undefined,
    location,
    sessionToken,
    rule,
    maxBytes,
    downloadTimeoutMs,
  };
}

/** The `filter` array: query parameter names, each once. */
function parseFilter(
  value: unknown,
  str: (value: unknown, field: string) => string,
  fail: (message: string) => never,
): string[] {
  if (!Array.isArray(value)) fail('field "filter" must be an array of query parameter names');
  const filter: string[] = [];
  (value as unknown[]).forEach((item, i) => {
    const name = str(item, `filter[${i}]`);
    if (name === '' || /[&,\p{Cc}]/u.test(name) || javaTrim(name).length !== name.length) {
      fail(
        `field "filter[${i}]" must be a non-empty query parameter name without '&', ',', control characters or surrounding spaces`,
      );
    }
    if (!filter.includes(name)) filter.push(name);
  });
  return filter;
}

/** `hard_link_dir`: an absolute path without `.` or `..` segments once `${NAME}` is filled. */
function checkHardLinkDir(value: string, fail: (message: string) => never): void {
  // The plugin fills ${NAME} from TorchServe's environment, which a check does not have: the rest is checked.
  const dir = value.replace(ENV_REF, 'x');
  if (dir.includes('${'))
    fail('field "hard_link_dir": only ${NAME} (letters, digits, \'_\') can be replaced from the environment');
  if (!dir.startsWith('/'))
    fail(
      'field "hard_link_dir" must be an absolute path: the model store\'s directory as the peer daemon sees it (the same path when both pods mount the node volume at the same place)',
    );
  if (/\p{Cc}/u.test(dir)) fail('field "hard_link_dir" must not contain control characters');
  if (dir.split('/').some((seg) => seg === '.' || seg === '..'))
    fail("field \"hard_link_dir\" must not contain '.' or '..' segments");
}

/** The `header` object: names the plugin may send, each with a value the daemon reads as the plugin means it. */
function parseHeaders(
  header: unknown,
  str: (value: unknown, field: string) => string,
  fail: (message: string) => never,
): Record<string, string> {
  const headers: Record<string, string> = {};
  if (!isObject(header)) fail('field "header" must be an object of header names to string values');
  for (const [name, raw] of Object.entries(header as Json)) {
    const field = `header.${name}`;
    if (!TOKEN.test(name)) fail(`field "${field}": not a valid HTTP header name`);
    if (name.toLowerCase() === USE_P2P_HEADER.toLowerCase()) {
      fail(
        `field "${field}": the plugin always sends ${USE_P2P_HEADER}: true so that downloads go through P2P whatever the daemon's proxy rules; remove this entry`,
      );
    }
    if (RESERVED_HEADERS.has(name.toLowerCase())) {
      fail(`field "${field}": this header is set by the plugin and cannot be configured`);
    }
    const value = str(raw, field);
    if (/[\r\n\0]/.test(value)) fail(`field "${field}": the value must not contain CR, LF or NUL`);
    // The daemon ignores a piece length it cannot parse, which silently changes the task id.
    if (
      name.toLowerCase() === PIECE_LENGTH_HEADER.toLowerCase() &&
      value !== '' &&
      parsePieceLength(value) === undefined
    ) {
      fail(`field "${field}": not a size such as 4194304 or 4mib`);
    }
    headers[name] = value;
  }
  return headers;
}

/** ConfigFields.byteSize's units, case-insensitive: powers of 1000 and of 1024. */
const SIZE_UNITS: Record<string, bigint> = {
  '': 1n,
  b: 1n,
  kb: 1000n,
  mb: 1000n ** 2n,
  gb: 1000n ** 3n,
  tb: 1000n ** 4n,
  kib: 1024n,
  mib: 1024n ** 2n,
  gib: 1024n ** 3n,
  tib: 1024n ** 4n,
};

/**
 * ConfigFields.byteSize: a JSON integer, or a whole number and a unit (`"256GiB"`), from 1 to 2^53 - 1. Whole numbers
 * only (in bigint), so the value is the plugin's exactly.
 */
function byteSize(value: unknown, field: string, fail: (message: string) => never): number {
  const hint = `field "${field}" must be a number of bytes or a size such as "256GiB" (a whole number and B, KB, MB, GB, TB, KiB, MiB, GiB or TiB), from 1 byte to 8 PiB`;
  let n: bigint;
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value)) return fail(hint);
    n = BigInt(value);
  } else if (typeof value === 'string') {
    const m = /^([0-9]+) ?([A-Za-z]*)$/.exec(javaTrim(value));
    const unit = m ? SIZE_UNITS[m[2]!.toLowerCase()] : undefined;
    if (!m || unit === undefined) return fail(hint);
    n = BigInt(m[1]!) * unit;
  } else {
    return fail(hint);
  }
  if (n < 1n || n > BigInt(Number.MAX_SAFE_INTEGER)) fail(hint);
  return Number(n);
}

const DURATION_UNITS: Record<string, bigint> = { h: 3_600_000n, m: 60_000n, s: 1000n, ms: 1n };

/** ConfigFields.formatMillis: milliseconds in the largest whole unit. */
function formatMs(ms: number): string {
  if (ms > 0 && ms % 3_600_000 === 0) return `${ms / 3_600_000}h`;
  if (ms > 0 && ms % 60_000 === 0) return `${ms / 60_000}m`;
  if (ms > 0 && ms % 1000 === 0) return `${ms / 1000}s`;
  return `${ms}ms`;
}

/** ConfigFields.durationMillis: a Go-style duration of whole numbers (`"1h30m"`), within the plugin's bounds. */
function durationMs(value: unknown, field: string, fail: (message: string) => never): number {
  const hint = `field "${field}" must be a duration such as "1h", "90m" or "1h30m" (whole numbers with h, m, s or ms), from ${formatMs(MIN_DOWNLOAD_TIMEOUT_MS)} to ${formatMs(MAX_DOWNLOAD_TIMEOUT_MS)}`;
  if (typeof value !== 'string') return fail(hint);
  const s = javaTrim(value);
  if (!/^(?:[0-9]+(?:ms|s|m|h))+$/.test(s)) return fail(hint);
  let total = 0n;
  for (const m of s.matchAll(/([0-9]+)(ms|s|m|h)/g)) total += BigInt(m[1]!) * DURATION_UNITS[m[2]!]!;
  if (total < BigInt(MIN_DOWNLOAD_TIMEOUT_MS) || total > BigInt(MAX_DOWNLOAD_TIMEOUT_MS)) fail(hint);
  return Number(total);
}

function parseStorage(
  s: Json,
  str: (value: unknown, field: string) => string,
  fail: (message: string) => never,
): { location: StorageLocation; sessionToken: boolean } {
  if (!Object.hasOwn(s, 'type')) fail('field "object_storage.type" is required (s3, oss, gcs or abs)');
  const type = str(s.type, 'object_storage.type');
  const fields = Object.hasOwn(STORAGE_FIELDS, type) ? STORAGE_FIELDS[type] : undefined;
  if (!fields) return fail('field "object_storage.type" type must be one of s3, oss, gcs, abs');
  for (const k of Object.keys(s)) {
    if (!fields.required.includes(k) && !fields.optional.includes(k)) {
      const optional = fields.optional.length > 0 ? `; optional ${fields.optional.join(', ')}` : '';
      fail(
        `unknown field "object_storage.${k}": not a field of object storage type ${type} (expected ${fields.required.join(', ')}${optional})`,
      );
    }
  }
  const v: Record<string, string> = {};
  for (const k of fields.required) {
    const field = `object_storage.${k}`;
    if (!Object.hasOwn(s, k) || s[k] === null)
      fail(`field "${field}" is required for object storage type ${type}`);
    const value = javaTrim(str(s[k], field));
    if (value === '') fail(`field "${field}" must not be empty`);
    v[k] = value;
  }
  for (const k of fields.optional) {
    if (Object.hasOwn(s, k) && s[k] !== null) v[k] = javaTrim(str(s[k], `object_storage.${k}`));
  }
  return storageLocation(type, v, fail);
}

/** The object storage of one type's fields (trimmed, the required ones present). */
function storageLocation(
  type: string,
  v: Record<string, string>,
  fail: (message: string) => never,
): { location: StorageLocation; sessionToken: boolean } {
  const checkName = (k: string) => {
    if (!NAME.test(v[k]!)) fail(`field "object_storage.${k}" is not a valid bucket/container name`);
  };
  if (v.bucket_name !== undefined) checkName('bucket_name');
  const endpoint = (e: string | undefined) => (e ? baseURL(e, 'object_storage.endpoint', fail) : undefined);
  switch (type) {
    case 's3':
      return s3Location(v, endpoint(v.endpoint), fail);
    case 'oss': {
      const e = v.endpoint!;
      return {
        location: {
          type: 'oss',
          bucket: v.bucket_name,
          endpoint: endpoint(e.includes('://') ? e : `https://${e}`),
        },
        sessionToken: false,
      };
    }
    case 'gcs':
      return {
        location: {
          type: 'gcs',
          bucket: v.bucket_name,
          projectID: v.project_id,
          endpoint: endpoint(v.endpoint),
        },
        sessionToken: false,
      };
    default: {
      const ep = endpoint(v.endpoint);
      if (!/^[a-z0-9]{3,24}$/.test(v.account_name!)) {
        fail('field "object_storage.account_name" must be 3-24 lower-case letters or digits');
      }
      checkName('container_name');
      if (!BASE64.test(v.account_key!))
        fail('field "object_storage.account_key" must be the base64 account key');
      return {
        location: { type: 'abs', accountName: v.account_name, container: v.container_name, endpoint: ep },
        sessionToken: false,
      };
    }
  }
}

/** An s3 store: path style only with an endpoint, a region of AWS's form. */
function s3Location(
  v: Record<string, string>,
  ep: string | undefined,
  fail: (message: string) => never,
): { location: StorageLocation; sessionToken: boolean } {
  let pathStyle = false;
  if (v.path_style !== undefined) {
    const p = v.path_style.toLowerCase();
    if (p !== 'true' && p !== 'false') fail('field "object_storage.path_style" must be true or false');
    pathStyle = p === 'true';
    if (pathStyle && ep === undefined) {
      fail('field "object_storage.path_style" needs object_storage.endpoint');
    }
  }
  const region = v.region ?? '';
  if (region !== '' && !/^[a-z0-9-]{1,64}$/.test(region)) {
    fail('field "object_storage.region" must look like us-east-1');
  }
  return {
    location: { type: 's3', bucket: v.bucket_name, region: region || undefined, endpoint: ep, pathStyle },
    sessionToken: Boolean(v.session_token),
  };
}

/**
 * `host[:port]` as java.net.URI reads a server authority: a host name of letter-digit-hyphen labels (the last one
 * starting with a letter), an IPv4 address or a bracketed IPv6 address, and a port of 1-65535. Undefined otherwise
 * (URI then takes the authority as registry-based and has no host, e.g. with `_` in the name, and the plugin
 * refuses it; java.net.URI itself would take any port, which the plugin cannot connect to).
 */
function serverAuthority(authority: string): { host: string; port?: number } | undefined {
  const m = /^(\[[0-9A-Fa-f:.]+\]|[^:]*)(?::(\d{0,9}))?$/.exec(authority);
  if (!m) return undefined;
  const host = m[1]!;
  const label = '[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?';
  const topLabel = '[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?';
  const byte = '(?:25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)';
  const hostOK = host.startsWith('[')
    ? URL.canParse(`http://${host}`)
    : new RegExp(`^(?:${byte}(?:\\.${byte}){3}|(?:${label}|(?:${label}\\.)+${topLabel})\\.?)$`).test(host);
  if (!hostOK) return undefined;
  if (!m[2]) return { host }; // "host:" has no port, like "host"
  const port = Number(m[2]);
  return port >= 1 && port <= 65535 ? { host, port } : undefined;
}

/** ConfigUrls.parseAddr: `http://host:port` (the port defaults to 80). */
function parseAddr(value: string, fail: (message: string) => never): string {
  let a = javaTrim(value);
  if (!a.includes('://')) a = `http://${a}`; // "127.0.0.1:4001" is a common way to write it
  a = a.replace(/#.*$/, ''); // the plugin ignores a fragment
  let ep: Endpoint;
  try {
    ep = parseEndpoint(a);
  } catch {
    if (/^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@/i.test(a)) fail('field "addr" must be http://host:port');
    if (/^https?:\/\/[^?]*\?/i.test(a)) fail('field "addr" must not have a path or query');
    return fail(/^https?:/i.test(a) ? 'field "addr" is not a URL' : 'field "addr" must be an http:// URL');
  }
  if (ep.scheme !== 'http') fail('field "addr" must be an http:// URL (the peer\'s proxy speaks plain HTTP)');
  const server = serverAuthority(ep.authority) ?? fail('field "addr" must be http://host:port');
  if (ep.path !== '' || a.endsWith('//')) fail('field "addr" must not have a path or query');
  return `http://${server.host}:${server.port ?? 80}`;
}

/** ConfigUrls.baseUrl: `scheme://host[:port]`, trailing slashes dropped; no path, query or user info. */
function baseURL(value: string, field: string, fail: (message: string) => never): string {
  let ep: Endpoint;
  try {
    ep = parseEndpoint(javaTrim(value));
  } catch {
    return fail(
      `field "${field}" must be an http:// or https:// URL without query or user info (scheme://host[:port])`,
    );
  }
  const server = serverAuthority(ep.authority) ?? fail(`field "${field}" must be scheme://host[:port]`);
  if (ep.path !== '') fail(`field "${field}" must not have a path`);
  return `${ep.scheme}://${server.host}${server.port === undefined ? '' : `:${server.port}`}`;
}
