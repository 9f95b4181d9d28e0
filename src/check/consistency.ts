/**
 * Will the preheat and the plugin's downloads share a task id?
 *
 * A preheat only helps if the later download through the peer proxy has the same task id (seed 2.3), i.e. the
 * same canonical URL after filtering, the same tag, application and piece length
 * (shared/contracts/peer-proxy.md). This command takes the plugin's configuration file (seed 2.2) and
 * ModelPreheat / ServedModel manifests and, for every URL a preheat would warm and every download the plugin would
 * make, says whether their task ids are equal, and when not, precisely why.
 *
 * How each side is modelled, mirroring what goes over the wire:
 * - Plugin (plugin/src/main/java/io/peerload/plugin: PluginConfig, ModelRegistration, ProxyDownloader): it GETs
 *   objectURL(location, file_name) signed (valid 1 h) with X-Dragonfly-Use-P2P: true (without it a daemon whose
 *   proxy.rules do not match sends the download straight to the origin), sends the filter as
 *   X-Dragonfly-Filtered-Query-Params and
 *   X-Dragonfly-Filter (the configured `filter`, else the kind's default; none at all when empty, so the daemon's
 *   default filter applies), and passes every `header` entry through, so X-Dragonfly-Tag / -Application /
 *   -Piece-Length reach the daemon as they are.
 * - Preheat (src/controllers/preheat-request.ts planPreheat): `spec.objectStorage` keys are signed with
 *   effectiveFilter(location) (signedURLExpiry); `spec.url(s)` are preheated as written with
 *   `spec.filteredQueryParams`; an empty or absent filter is not sent, so the manager's default applies
 *   (DEFAULT_FILTERED_QUERY_PARAMS). A ServedModel with `preheat.create` implies the ModelPreheat of
 *   ownedPreheatSpec() (the controller's own function) for `fileName`.
 *
 * Task ids are computed with the rule of the peer daemon's version (`daemon_version` of the plugin configuration,
 * `spec.peerDaemonVersion` of a preheat; default 1.4, the tested Dragonfly v2.5.1). Configurations that make the
 * download bypass P2P altogether are reported as warnings (PluginSide.warnings).
 *
 * Nothing is signed: each side's URL is its unsigned object URL plus the names of the signature parameters its
 * signer adds, each with a symbolic value saying how it varies (every signing, per credential, constant). A
 * signature parameter a side does not filter makes that side's task id change with every signing; this is found by
 * reasoning, not by comparing two random signatures. Credentials are never read, and no secret value of the
 * configuration (keys, header values other than tag, application and piece length) is ever printed.
 */
import { readFile } from 'node:fs/promises';
import { loadAll, YAMLException } from 'js-yaml';
import { z } from 'zod';
import {
  API_VERSION,
  ModelPreheat,
  ModelPreheatSpec,
  ServedModel,
  parseDuration,
  type ObjectStorageType,
} from '../api/index.ts';
import { ownedPreheatSpec } from '../api/servedmodel.ts';
import { ABS_SAS_VERSION } from '../storage/abs.ts';
import {
  DEFAULT_S3_REGION,
  appendQuery,
  effectiveFilter,
  objectURL,
  type StorageLocation,
} from '../storage/objecturl.ts';
import {
  APPLICATION_HEADER,
  DAEMON_VERSION_HINT,
  DEFAULT_FILTERED_QUERY_PARAMS,
  DEFAULT_TASK_ID_RULE,
  PIECE_LENGTH_HEADER,
  TAG_HEADER,
  USE_P2P_HEADER,
  parsePieceLength,
  taskID,
  taskIdRule,
  type TaskIdRule,
} from '../storage/taskid.ts';

/** Bad input (a configuration or manifest that cannot be read); the message names the file and the field. */
export class CheckInputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CheckInputError';
  }
}

/** The plugin's signed-URL validity (ObjectStorage.DEFAULT_EXPIRY in the Java plugin). */
export const PLUGIN_SIGNED_URL_EXPIRY_SECONDS = 3600;

// ---- The plugin configuration (seed 2.2), validated like plugin/.../PluginConfig.java -----------------------

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
]);

const required = () =>
  z
    .string({
      error: (i) => (i.input === undefined || i.input === null ? 'is required' : 'must be a string'),
    })
    .trim()
    .min(1, 'must not be empty');
const optional = () => z.string({ error: 'must be a string' }).trim().nullish();
const bucketName = () =>
  required().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/, 'is not a valid bucket/container name');

/** `scheme://host[:port]` (trailing slashes dropped, no path): PluginConfig.baseUrl. Undefined when invalid. */
function baseURL(value: string): string | undefined {
  const m = /^(https?):\/\/([^/?#@\s]+)\/*$/i.exec(value.trim());
  if (!m) return undefined;
  try {
    new URL(`${m[1]}://${m[2]}`); // the authority must parse (host, port)
  } catch {
    return undefined;
  }
  return `${m[1]!.toLowerCase()}://${m[2]}`;
}
const endpoint = (schemeOptional = false) =>
  z
    .string({ error: 'must be a string' })
    .trim()
    .refine(
      (e) => e === '' || baseURL(schemeOptional && !e.includes('://') ? `https://${e}` : e) !== undefined,
      {
        message: `must be an http:// or https:// URL without path, query or user info (scheme://host[:port])`,
      },
    );

const S3Config = z
  .strictObject({
    type: z.literal('s3'),
    bucket_name: bucketName(),
    region: optional().refine((r) => !r || /^[a-z0-9-]{1,64}$/.test(r), 'must look like us-east-1'),
    access_key: required(),
    secret_key: required(),
    session_token: optional(),
    endpoint: endpoint().nullish(),
    path_style: z
      .union([z.boolean(), z.enum(['true', 'false', 'TRUE', 'FALSE', 'True', 'False'])], {
        error: 'must be true or false',
      })
      .nullish(),
  })
  .superRefine((s, ctx) => {
    if (String(s.path_style).toLowerCase() === 'true' && !s.endpoint) {
      ctx.addIssue({ code: 'custom', path: ['path_style'], message: 'needs object_storage.endpoint' });
    }
  });
const OSSConfig = z.strictObject({
  type: z.literal('oss'),
  bucket_name: bucketName(),
  endpoint: required().pipe(endpoint(true)),
  access_key_id: required(),
  access_key_secret: required(),
});
const GCSConfig = z.strictObject({
  type: z.literal('gcs'),
  bucket_name: bucketName(),
  project_id: required(),
  service_account_path: required(),
  endpoint: endpoint().nullish(),
});
const ABSConfig = z.strictObject({
  type: z.literal('abs'),
  account_name: required().regex(/^[a-z0-9]{3,24}$/, 'must be 3-24 lower-case letters or digits'),
  account_key: required().refine(
    (k) => /^[A-Za-z0-9+/]+={0,2}$/.test(k) && k.length % 4 === 0,
    'must be the base64 account key',
  ),
  container_name: bucketName(),
  endpoint: endpoint().nullish(),
});

export const PluginConfigFile = z.strictObject({
  addr: optional(),
  header: z
    .record(z.string(), z.union([z.string(), z.boolean()], { error: 'must be a string' }), {
      error: 'must be an object of header names to string values',
    })
    .nullish(),
  filter: z
    .array(
      z
        .string({ error: 'must be a string' })
        .regex(/^[^&,\s\p{Cc}]+$/u, "must be a non-empty query parameter name without '&', ',' or spaces"),
      { error: 'must be an array of query parameter names' },
    )
    .nullish(),
  daemon_version: z
    .union([z.string(), z.boolean()], { error: 'must be a string' })
    .refine((v) => taskIdRule(String(v)) !== undefined, DAEMON_VERSION_HINT)
    .nullish(),
  object_storage: z.discriminatedUnion('type', [S3Config, OSSConfig, GCSConfig, ABSConfig], {
    error: (i) =>
      i.input === undefined || i.input === null ? 'is required' : 'type must be one of s3, oss, gcs, abs',
  }),
});
export type PluginConfigFile = z.infer<typeof PluginConfigFile>;

/** What the plugin's downloads look like to the peer daemon. */
export interface PluginSide {
  location: StorageLocation;
  /** The filter as the daemon applies it. */
  filter: string[];
  /** Where the filter comes from, for messages. */
  filterSource: string;
  tag?: string | undefined;
  application?: string | undefined;
  pieceLength?: number | undefined;
  sessionToken: boolean;
  /** How the plugin's peer daemon computes task ids (`daemon_version`). */
  rule: TaskIdRule;
  /** Why downloads might not go through P2P at all (a preheat would then never be used). */
  warnings: string[];
}

function joinPath(path: readonly PropertyKey[]): string {
  return path
    .map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`))
    .join('')
    .replace(/^\./, '');
}

/** Parses and validates the plugin configuration; errors name the field, never a value. */
export function parsePluginConfig(text: string, source: string): PluginSide {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    // V8's message may quote the input, which holds secrets: keep only the position.
    const at = /position \d+(?: \(line \d+ column \d+\))?/.exec((err as Error).message);
    throw new CheckInputError(`${source}: not valid JSON${at ? ` (at ${at[0]})` : ''}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new CheckInputError(`${source}: the configuration must be a JSON object`);
  }
  const parsed = PluginConfigFile.safeParse(raw);
  if (!parsed.success) {
    const messages = parsed.error.issues.map((i) => {
      const path = joinPath(i.path);
      if (i.code === 'unrecognized_keys') {
        return i.keys.map((k) => `unknown field "${path ? `${path}.` : ''}${k}"`).join('; ');
      }
      return `field "${path}" ${i.message}`;
    });
    throw new CheckInputError(`${source}: ${messages.join('; ')}`);
  }
  const c = parsed.data;
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(c.header ?? {})) {
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(name)) {
      throw new CheckInputError(`${source}: field "header.${name}": not a valid HTTP header name`);
    }
    if (name.toLowerCase() === USE_P2P_HEADER.toLowerCase()) {
      throw new CheckInputError(
        `${source}: field "header.${name}": the plugin always sends ${USE_P2P_HEADER}: true so that downloads go through P2P whatever the daemon's proxy rules; remove this entry`,
      );
    }
    if (RESERVED_HEADERS.has(name.toLowerCase())) {
      throw new CheckInputError(
        `${source}: field "header.${name}": this header is set by the plugin and cannot be configured`,
      );
    }
    const v = String(value);
    if (/[\r\n\0]/.test(v)) {
      throw new CheckInputError(
        `${source}: field "header.${name}": the value must not contain CR, LF or NUL`,
      );
    }
    headers[name] = v;
  }
  const header = (wanted: string) => {
    const hit = Object.entries(headers).find(([k]) => k.toLowerCase() === wanted.toLowerCase());
    return hit === undefined || hit[1] === '' ? undefined : hit[1];
  };
  const rawPiece = header(PIECE_LENGTH_HEADER);
  const pieceLength = parsePieceLength(rawPiece);
  if (rawPiece !== undefined && pieceLength === undefined) {
    throw new CheckInputError(
      `${source}: field "header.${PIECE_LENGTH_HEADER}": not a size such as 4194304 or 4mib`,
    );
  }

  const s = c.object_storage;
  const ep = (e: string | null | undefined) => (e ? baseURL(e) : undefined);
  let location: StorageLocation;
  switch (s.type) {
    case 's3':
      location = {
        type: 's3',
        bucket: s.bucket_name,
        region: s.region || undefined,
        endpoint: ep(s.endpoint),
        pathStyle: String(s.path_style).toLowerCase() === 'true',
      };
      break;
    case 'oss':
      location = {
        type: 'oss',
        bucket: s.bucket_name,
        endpoint: baseURL(s.endpoint.includes('://') ? s.endpoint : `https://${s.endpoint}`),
      };
      break;
    case 'gcs':
      location = { type: 'gcs', bucket: s.bucket_name, projectID: s.project_id, endpoint: ep(s.endpoint) };
      break;
    case 'abs':
      location = {
        type: 'abs',
        accountName: s.account_name,
        container: s.container_name,
        endpoint: ep(s.endpoint),
      };
      break;
  }
  // The plugin dedups the configured filter; absent means the kind's default; an empty list sends no filter
  // header, so the daemon's own default applies.
  const configured = c.filter === null || c.filter === undefined ? undefined : [...new Set(c.filter)];
  const filter = configured ?? effectiveFilter({ type: location.type });
  return {
    rule:
      c.daemon_version === null || c.daemon_version === undefined
        ? DEFAULT_TASK_ID_RULE
        : taskIdRule(String(c.daemon_version))!,
    warnings: bypassWarnings(c.addr, location, source),
    location,
    ...(filter.length > 0
      ? { filter, filterSource: configured ? 'config filter' : `${location.type} default filter` }
      : { filter: [...DEFAULT_FILTERED_QUERY_PARAMS], filterSource: "empty filter: the daemon's default" }),
    tag: header(TAG_HEADER),
    application: header(APPLICATION_HEADER),
    pieceLength,
    sessionToken: s.type === 's3' && Boolean(s.session_token),
  };
}

/**
 * Configurations whose downloads do not go through the peer daemon's P2P network. The plugin itself always sends
 * X-Dragonfly-Use-P2P: true, so what is left is a proxy address that is not a peer daemon.
 */
function bypassWarnings(
  addr: string | null | undefined,
  location: StorageLocation,
  source: string,
): string[] {
  const warnings: string[] = [];
  const raw = addr?.trim() || undefined;
  if (raw === undefined) {
    warnings.push(
      "addr is not set: the plugin uses the peer proxy at http://127.0.0.1:4001, which must be a peer daemon in the model server's network namespace (e.g. a hostNetwork DaemonSet); otherwise no download goes through P2P",
    );
    return warnings;
  }
  let proxy: URL;
  try {
    proxy = new URL(raw.includes('://') ? raw : `http://${raw}`);
  } catch {
    throw new CheckInputError(`${source}: field "addr" is not a URL`);
  }
  const proxyAuthority = `${proxy.hostname.toLowerCase()}:${proxy.port || '80'}`;
  if (location.endpoint !== undefined) {
    const origin = new URL(location.endpoint);
    const port = origin.port || (origin.protocol === 'https:' ? '443' : '80');
    if (`${origin.hostname.toLowerCase()}:${port}` === proxyAuthority) {
      warnings.push(
        `addr ${proxy.host} is the object storage endpoint itself, not a peer daemon's proxy: every download goes straight to the origin and no preheat is used`,
      );
    }
  }
  return warnings;
}

// ---- Signature parameters --------------------------------------------------------------------------------

/**
 * How a signature parameter's value varies: `signing` with every signing (time, signature), `session` with every
 * session token, `credential` with the access key, `expiry` with the URL's validity, `constant` never.
 */
type Variation = 'signing' | 'session' | 'credential' | 'expiry' | 'constant';
interface SignatureParam {
  name: string;
  varies: Variation;
  value?: string;
}

/** The query parameters each kind's signer adds (src/storage/{s3,oss,gcs,abs}.ts and the Java plugin's). */
export const SIGNATURE_PARAMS: Readonly<Record<ObjectStorageType, readonly SignatureParam[]>> = {
  s3: [
    { name: 'X-Amz-Algorithm', varies: 'constant', value: 'AWS4-HMAC-SHA256' },
    { name: 'X-Amz-Credential', varies: 'signing' }, // access key / date / region / s3 / aws4_request
    { name: 'X-Amz-Date', varies: 'signing' },
    { name: 'X-Amz-Expires', varies: 'expiry' },
    { name: 'X-Amz-SignedHeaders', varies: 'constant', value: 'host' },
    { name: 'X-Amz-Signature', varies: 'signing' },
    { name: 'X-Amz-Security-Token', varies: 'session' }, // only with a session token
  ],
  oss: [
    { name: 'OSSAccessKeyId', varies: 'credential' },
    { name: 'Expires', varies: 'signing' }, // an absolute time
    { name: 'Signature', varies: 'signing' },
  ],
  gcs: [
    { name: 'X-Goog-Algorithm', varies: 'constant', value: 'GOOG4-RSA-SHA256' },
    { name: 'X-Goog-Credential', varies: 'signing' },
    { name: 'X-Goog-Date', varies: 'signing' },
    { name: 'X-Goog-Expires', varies: 'expiry' },
    { name: 'X-Goog-SignedHeaders', varies: 'constant', value: 'host' },
    { name: 'X-Goog-Signature', varies: 'signing' },
  ],
  abs: [
    { name: 'sv', varies: 'constant', value: ABS_SAS_VERSION },
    { name: 'se', varies: 'signing' }, // an absolute time
    { name: 'sr', varies: 'constant', value: 'b' },
    { name: 'sp', varies: 'constant', value: 'r' },
    { name: 'sig', varies: 'signing' },
  ],
};

const ALL_SIGNATURE_NAMES = new Set(Object.values(SIGNATURE_PARAMS).flatMap((ps) => ps.map((p) => p.name)));

// ---- The two sides of a pair -----------------------------------------------------------------------------

type SideName = 'preheat' | 'plugin';

/** One side's request as the daemon sees it, with what is known about how it was made. */
interface Side {
  /** The URL without signature (an object URL), or the preheat URL as written. */
  url: string;
  /** The signer of this side, when it signs (`expiresSeconds` for `expiry` parameters). */
  signer?: { type: ObjectStorageType; expiresSeconds: number; sessionToken: boolean } | undefined;
  location?: StorageLocation | undefined;
  key?: string | undefined;
  filter: string[];
  filterSource: string;
  tag?: string | undefined;
  application?: string | undefined;
  pieceLength?: number | undefined;
  /** The task id rule of the daemon that computes this side's id. */
  rule: TaskIdRule;
  /** Where the rule comes from, for messages. */
  ruleSource: string;
}

interface Reason {
  code: string;
  message: string;
}

export interface CheckResult {
  status: 'OK' | 'MISS';
  /** The object key, or the preheat URL (signature values redacted). */
  label: string;
  /** Which document the pair comes from. */
  source: string;
  /** The task id both share (OK), or each side's when it is stable. */
  taskID?: string | undefined;
  preheat?: SideReport | undefined;
  plugin?: SideReport | undefined;
  reasons: Reason[];
}

interface SideReport {
  url: string;
  filter: string[];
  filterSource: string;
  tag?: string | undefined;
  application?: string | undefined;
  pieceLength?: number | undefined;
  /** Undefined when it changes with every signing (or depends on an unknown credential). */
  taskID?: string | undefined;
  /** The daemon version's task id rule the id follows. */
  rule: TaskIdRule;
}

/** The side's URL with symbolic signature values (`<signing:preheat>` differs from `<signing:plugin>`). */
function symbolicURL(side: Side, who: SideName): string {
  if (!side.signer) return side.url;
  const params: [string, string][] = [];
  for (const p of SIGNATURE_PARAMS[side.signer.type]) {
    if (p.varies === 'session' && !side.signer.sessionToken) continue;
    const value =
      p.varies === 'constant'
        ? p.value!
        : p.varies === 'expiry'
          ? String(side.signer.expiresSeconds)
          : `<${p.varies}:${who}>`;
    params.push([p.name, value]);
  }
  return appendQuery(side.url, params);
}

/** Query pairs of a URL the daemon keeps (as it splits and decodes them), by name. */
function keptQuery(url: string, filter: readonly string[], rule: TaskIdRule): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const q = new URL(url).search.replace(/^\?/, '');
  const dropped = new Set(filter);
  for (const segment of q === '' ? [] : q.split('&')) {
    // Only the 1.5.3+ rule drops segments holding `;` (client 1.4 form-decodes them like any other).
    if (rule === '1.5.3+' && segment.includes(';')) continue;
    for (const [k, v] of new URLSearchParams('?' + segment)) {
      if (!dropped.has(k)) out.set(k, [...(out.get(k) ?? []), v]);
    }
  }
  return out;
}

function queryNames(url: string): Set<string> {
  return new Set(new URL(url).searchParams.keys());
}

function variation(side: Side, name: string, values: string[]): Variation | undefined {
  const p = side.signer && SIGNATURE_PARAMS[side.signer.type].find((s) => s.name === name);
  if (p) return p.varies;
  // A preheat URL written with a signature in it: its values are fixed, the plugin's are fresh every time.
  if (ALL_SIGNATURE_NAMES.has(name) && values.length > 0) return 'signing';
  return undefined;
}

const stripQuery = (url: string) => url.replace(/[?#].*$/, '');

/** The facts of a URL that decide its identity, for explaining a difference. */
interface Facts {
  kind?: ObjectStorageType;
  scheme: string;
  /** `host[:port]` of the service endpoint, or a description of the provider default. */
  endpoint: string;
  region?: string;
  hostStyle?: 'virtual-hosted' | 'path style';
  account?: string;
  bucket?: string;
  container?: string;
  key?: string;
}

function endpointOf(location: StorageLocation): { scheme: string; authority?: string } {
  if (location.endpoint === undefined) return { scheme: 'https' };
  const m = /^(https?):\/\/([^/?#]+)/i.exec(location.endpoint)!;
  return { scheme: m[1]!.toLowerCase(), authority: m[2]! };
}

function factsOf(location: StorageLocation, key: string): Facts {
  const ep = endpointOf(location);
  const f: Facts = { kind: location.type, scheme: ep.scheme, endpoint: ep.authority ?? '', key };
  switch (location.type) {
    case 's3':
      f.endpoint = ep.authority ?? '(none: AWS S3)';
      f.hostStyle =
        ep.authority !== undefined && location.pathStyle === true ? 'path style' : 'virtual-hosted';
      if (ep.authority === undefined) f.region = location.region || DEFAULT_S3_REGION;
      f.bucket = location.bucket;
      break;
    case 'oss':
      f.bucket = location.bucket;
      break;
    case 'gcs':
      f.endpoint = ep.authority ?? '(none: storage.googleapis.com)';
      f.bucket = location.bucket;
      break;
    case 'abs':
      f.endpoint = ep.authority ?? '(none: <account>.blob.core.windows.net)';
      f.account = location.accountName;
      f.container = location.container;
      break;
  }
  return f;
}

function decodeSegments(path: string): string {
  return path
    .split('/')
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    })
    .join('/');
}

/**
 * The storage location and key a preheat URL points at: the providers' own host forms first, then the plugin's
 * endpoint (`hint`) in path or host style. Undefined when the URL fits none of them.
 */
export function locationFromURL(
  url: string,
  hint?: StorageLocation,
): { location: StorageLocation; key: string } | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined;
  }
  const scheme = u.protocol.replace(/:$/, '');
  const host = u.hostname.toLowerCase();
  const path = stripQuery(url).replace(/^[a-z]+:\/\/[^/]*\/?/i, '');
  const [first = '', ...restSegs] = path.split('/');
  const rest = restSegs.join('/');
  const ep = (authority: string) => `${scheme}://${authority}`;
  let m: RegExpExecArray | null;
  if ((m = /^(.+)\.s3\.amazonaws\.com$/.exec(host))) {
    return {
      location: { type: 's3', bucket: m[1]!, endpoint: ep('s3.amazonaws.com') },
      key: decodeSegments(path),
    };
  }
  if (scheme === 'https' && !u.port && (m = /^(.+)\.s3[.-]([a-z0-9-]+)\.amazonaws\.com$/.exec(host))) {
    return { location: { type: 's3', bucket: m[1]!, region: m[2]! }, key: decodeSegments(path) };
  }
  if ((m = /^s3[.-]([a-z0-9-]+)\.amazonaws\.com$/.exec(host)) || host === 's3.amazonaws.com') {
    return {
      location: {
        type: 's3',
        bucket: decodeSegments(first),
        region: m?.[1],
        endpoint: ep(u.host),
        pathStyle: true,
      },
      key: decodeSegments(rest),
    };
  }
  if ((m = /^([^.]+)\.(oss-[a-z0-9-]+(?:\.[a-z0-9-]+)*\.aliyuncs\.com)$/.exec(host))) {
    return {
      location: { type: 'oss', bucket: m[1]!, endpoint: ep(u.port ? `${m[2]}:${u.port}` : m[2]!) },
      key: decodeSegments(path),
    };
  }
  if (host === 'storage.googleapis.com' && scheme === 'https' && !u.port) {
    return { location: { type: 'gcs', bucket: decodeSegments(first) }, key: decodeSegments(rest) };
  }
  if (scheme === 'https' && !u.port && (m = /^([a-z0-9]{3,24})\.blob\.core\.windows\.net$/.exec(host))) {
    return {
      location: { type: 'abs', accountName: m[1]!, container: decodeSegments(first) },
      key: decodeSegments(rest),
    };
  }
  if (hint?.endpoint === undefined) return undefined;
  const hintAuthority = endpointOf(hint).authority!.toLowerCase();
  const authority = u.host.toLowerCase();
  if (authority === hintAuthority) {
    switch (hint.type) {
      case 's3':
        return {
          location: {
            type: 's3',
            bucket: decodeSegments(first),
            region: hint.region,
            endpoint: ep(u.host),
            pathStyle: true,
          },
          key: decodeSegments(rest),
        };
      case 'gcs':
        return {
          location: { type: 'gcs', bucket: decodeSegments(first), endpoint: ep(u.host) },
          key: decodeSegments(rest),
        };
      case 'abs': {
        if (host.startsWith(`${hint.accountName!.toLowerCase()}.`)) {
          return {
            location: {
              type: 'abs',
              accountName: hint.accountName,
              container: decodeSegments(first),
              endpoint: ep(u.host),
            },
            key: decodeSegments(rest),
          };
        }
        const [container = '', ...keySegs] = restSegs;
        return {
          location: {
            type: 'abs',
            accountName: decodeSegments(first),
            container: decodeSegments(container),
            endpoint: ep(u.host),
          },
          key: decodeSegments(keySegs.join('/')),
        };
      }
      default:
        return undefined;
    }
  }
  if ((hint.type === 's3' || hint.type === 'oss') && authority.endsWith(`.${hintAuthority}`)) {
    return {
      location: {
        type: hint.type,
        bucket: u.host.slice(0, u.host.length - hintAuthority.length - 1),
        region: hint.region,
        endpoint: ep(u.host.slice(u.host.length - hintAuthority.length)),
      },
      key: decodeSegments(path),
    };
  }
  return undefined;
}

const show = (v: string | number | undefined) =>
  v === undefined ? '(none)' : typeof v === 'number' ? String(v) : `"${v}"`;

/** Why two unsigned URLs differ, field by field. */
function urlReasons(preheat: Side, plugin: Side): Reason[] {
  const reasons: Reason[] = [];
  const add = (code: string, what: string, a: string | undefined, b: string | undefined) => {
    if (a !== b)
      reasons.push({ code, message: `${what}: preheat ${a ?? '(none)'}, plugin ${b ?? '(none)'}` });
  };
  if (preheat.location && plugin.location) {
    const a = factsOf(preheat.location, preheat.key ?? '');
    const b = factsOf(plugin.location, plugin.key ?? '');
    add('kind', 'storage kind', a.kind, b.kind);
    if (a.kind === b.kind) {
      const withScheme = (f: Facts) =>
        f.endpoint.startsWith('(') ? f.endpoint : `${f.scheme}://${f.endpoint}`;
      // The endpoint names its scheme; the scheme alone differs only on one endpoint.
      if (a.endpoint.toLowerCase() !== b.endpoint.toLowerCase()) {
        add('endpoint', 'endpoint', withScheme(a), withScheme(b));
      } else {
        add('scheme', 'scheme', a.scheme, b.scheme);
      }
      // The region is in the URL only on AWS's own endpoints.
      if (a.region !== undefined && b.region !== undefined) add('region', 'region', a.region, b.region);
      add('hostStyle', 'host style', a.hostStyle, b.hostStyle);
      add('account', 'storage account', a.account, b.account);
    }
    add('bucket', 'bucket', a.bucket, b.bucket);
    add('container', 'container', a.container, b.container);
    if (a.key !== b.key) {
      reasons.push({ code: 'key', message: `key: preheat ${show(a.key)}, plugin ${show(b.key)}` });
    }
  } else {
    const a = new URL(preheat.url);
    const b = new URL(plugin.url);
    add('scheme', 'scheme', a.protocol.replace(/:$/, ''), b.protocol.replace(/:$/, ''));
    add('host', 'host', a.host, b.host);
    add('path', 'path', a.pathname, b.pathname);
  }
  if (reasons.length === 0) {
    reasons.push({
      code: 'url',
      message: `object URL: preheat ${stripQuery(preheat.url)}, plugin ${stripQuery(plugin.url)}`,
    });
  }
  return reasons;
}

/** Compares the two sides of a pair. */
function comparePair(label: string, source: string, preheat: Side, plugin: Side): CheckResult {
  const sides: [SideName, Side][] = [
    ['preheat', preheat],
    ['plugin', plugin],
  ];
  const symbolic = { preheat: symbolicURL(preheat, 'preheat'), plugin: symbolicURL(plugin, 'plugin') };
  const reasons: Reason[] = [];

  // 1. The object URL itself.
  if (new URL(stripQuery(preheat.url)).href !== new URL(stripQuery(plugin.url)).href) {
    reasons.push(...urlReasons(preheat, plugin));
  }

  // 2. The query: what each side keeps of its (signed) URL after its filter.
  const kept = {
    preheat: keptQuery(symbolic.preheat, preheat.filter, preheat.rule),
    plugin: keptQuery(symbolic.plugin, plugin.filter, plugin.rule),
  };
  const carried = new Set([...queryNames(symbolic.preheat), ...queryNames(symbolic.plugin)]);
  const onlyIn = (a: string[], b: string[]) => a.filter((n) => !b.includes(n) && carried.has(n));
  const onlyPreheat = onlyIn(preheat.filter, plugin.filter);
  const onlyPlugin = onlyIn(plugin.filter, preheat.filter);
  if (onlyPreheat.length > 0 || onlyPlugin.length > 0) {
    const parts = [];
    if (onlyPreheat.length > 0) parts.push(`only the preheat filters ${onlyPreheat.join(', ')}`);
    if (onlyPlugin.length > 0) parts.push(`only the plugin filters ${onlyPlugin.join(', ')}`);
    reasons.push({
      code: 'filter',
      message: `different filter (preheat: ${preheat.filterSource}; plugin: ${plugin.filterSource}): ${parts.join('; ')}`,
    });
  }
  const unstable = { preheat: false, plugin: false };
  for (const [who, side] of sides) {
    for (const [name, values] of kept[who]) {
      const v = variation(side, name, values);
      if (v === 'signing' || v === 'session') {
        unstable[who] = true;
        reasons.push({
          code: 'unfilteredSignature',
          message: `${who}: signature parameter ${name} is not filtered: the task id changes with every ${v === 'session' ? 'session token' : 'signing'}`,
        });
      } else if (v === 'credential') {
        unstable[who] = true;
        reasons.push({
          code: 'unfilteredCredential',
          message: `${who}: signature parameter ${name} is not filtered: the task id depends on the access key (it changes when the key is rotated, and the preheat's key is in a Secret)`,
        });
      }
    }
  }
  for (const [who, side] of sides) {
    const other: SideName = who === 'preheat' ? 'plugin' : 'preheat';
    for (const [name, values] of kept[who]) {
      const theirs = kept[other].get(name);
      const v = variation(side, name, values);
      if (v === 'signing' || v === 'session' || v === 'credential') continue; // reported above
      if (theirs === undefined) {
        // Filtered by the other side: the filter reason says it; else the other URL does not carry it.
        if (!queryNames(symbolic[other]).has(name)) {
          reasons.push({ code: 'query', message: `query parameter ${name} only in the ${who} URL` });
        }
      } else if (who === 'preheat' && theirs.join('\u0000') !== values.join('\u0000')) {
        reasons.push({
          code: 'query',
          message:
            v === 'expiry'
              ? `${name} is not filtered and the URLs are valid for different times: preheat ${values.join(',')} s, plugin ${theirs.join(',')} s`
              : `query parameter ${name} differs between the preheat and the plugin URL`,
        });
      }
    }
  }

  // 3. The other parts of the task id.
  const part = (
    code: string,
    what: string,
    a: string | number | undefined,
    b: string | number | undefined,
  ) => {
    if (a !== b) reasons.push({ code, message: `${what}: preheat ${show(a)}, plugin ${show(b)}` });
  };
  part('tag', 'tag', preheat.tag, plugin.tag);
  part('application', 'application', preheat.application, plugin.application);
  part('pieceLength', 'piece length', preheat.pieceLength, plugin.pieceLength);

  const idOf = (who: SideName, side: Side) =>
    unstable[who]
      ? undefined
      : taskID({
          url: symbolic[who],
          filter: side.filter,
          tag: side.tag,
          application: side.application,
          pieceLength: side.pieceLength,
          rule: side.rule,
        });
  const ids = { preheat: idOf('preheat', preheat), plugin: idOf('plugin', plugin) };
  if (preheat.rule !== plugin.rule && ids.preheat !== ids.plugin) {
    reasons.push({
      code: 'daemonVersion',
      message: `different peer daemon versions: the preheat's ids follow the ${preheat.rule} rule (${preheat.ruleSource}), the plugin's the ${plugin.rule} rule (${plugin.ruleSource}); daemons of both versions compute different ids for this URL`,
    });
  }
  const report = (who: SideName, side: Side): SideReport => ({
    url: who === 'preheat' && !side.signer ? redact(side.url) : side.url,
    filter: side.filter,
    filterSource: side.filterSource,
    tag: side.tag,
    application: side.application,
    pieceLength: side.pieceLength,
    taskID: ids[who],
    rule: side.rule,
  });
  const ok = reasons.length === 0 && ids.preheat !== undefined && ids.preheat === ids.plugin;
  if (!ok && reasons.length === 0) {
    // Not expected: every way two ids can differ is named above. Never report a miss without a reason.
    reasons.push({ code: 'taskID', message: 'the task ids differ' });
  }
  return {
    status: ok ? 'OK' : 'MISS',
    label,
    source,
    taskID: ok ? ids.preheat : undefined,
    preheat: report('preheat', preheat),
    plugin: report('plugin', plugin),
    reasons: ok ? [] : reasons,
  };
}

/** A preheat URL with the values of signature parameters replaced: a signed URL is a bearer credential. */
function redact(url: string): string {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url;
  }
  let changed = false;
  for (const name of [...u.searchParams.keys()]) {
    if (ALL_SIGNATURE_NAMES.has(name) || DEFAULT_FILTERED_QUERY_PARAMS.includes(name)) {
      u.searchParams.set(name, 'REDACTED');
      changed = true;
    }
  }
  return changed ? u.href : url;
}

/** A preheat URL as a label: without its signature and filtered parameters (the rest kept as written). */
function withoutSignature(url: string, filter: readonly string[]): string {
  const q = url.indexOf('?');
  if (q < 0) return url;
  const kept = url
    .slice(q + 1)
    .replace(/#.*$/, '')
    .split('&')
    .filter((segment) => {
      const name = new URLSearchParams('?' + segment).keys().next().value;
      return name === undefined || !(ALL_SIGNATURE_NAMES.has(name) || filter.includes(name));
    });
  return kept.length > 0 ? `${url.slice(0, q)}?${kept.join('&')}` : url.slice(0, q);
}

// ---- Manifests ---------------------------------------------------------------------------------------------

interface PreheatItem {
  /** The object key (objectStorage, or inferred from a URL). */
  key?: string | undefined;
  side: Side;
  label: string;
}

interface PreheatDoc {
  name: string;
  namespace: string;
  source: string;
  items: PreheatItem[];
  /** Items already compared with a ServedModel's download. */
  used: Set<PreheatItem>;
}

interface Documents {
  preheats: PreheatDoc[];
  servedModels: { doc: ServedModel; source: string }[];
  notes: string[];
}

function describeIssues(error: z.ZodError): string {
  return error.issues
    .map((i) => {
      const path = joinPath(i.path);
      if (i.code === 'unrecognized_keys')
        return `unknown field(s) ${i.keys.map((k) => `${path}.${k}`).join(', ')}`;
      return `${path || '(document)'}: ${i.message}`;
    })
    .join('; ');
}

/** Turns a ModelPreheat spec into the URLs it warms, as the operator would send them. */
function preheatItems(spec: ModelPreheatSpec, plugin: PluginSide): PreheatItem[] {
  const common = {
    tag: spec.tag,
    application: spec.application,
    pieceLength: spec.pieceLength,
    // The schema's pattern admits only versions taskIdRule reads.
    ...(spec.peerDaemonVersion !== undefined
      ? { rule: taskIdRule(spec.peerDaemonVersion)!, ruleSource: 'spec.peerDaemonVersion' }
      : { rule: plugin.rule, ruleSource: "the plugin's daemon_version" }),
  };
  if (spec.objectStorage) {
    const os = spec.objectStorage;
    const location: StorageLocation = {
      type: os.type,
      bucket: os.bucket,
      container: os.container,
      accountName: os.accountName,
      region: os.region,
      endpoint: os.endpoint,
      pathStyle: os.pathStyle,
      projectID: os.projectID,
    };
    const own = effectiveFilter(os);
    const [filter, filterSource] =
      own.length > 0
        ? [
            own,
            os.filteredQueryParams !== undefined
              ? 'objectStorage.filteredQueryParams'
              : `${os.type} default filter`,
          ]
        : [[...DEFAULT_FILTERED_QUERY_PARAMS], "empty filter: the manager's default"];
    const expiresSeconds = Math.round(parseDuration(os.signedURLExpiry) / 1000);
    return os.keys.map((key) => ({
      key,
      label: key,
      side: {
        url: objectURL(location, key),
        // The Secret is not read: a session token is not known, so X-Amz-Security-Token is not assumed.
        signer: { type: os.type, expiresSeconds, sessionToken: false },
        location,
        key,
        filter,
        filterSource,
        ...common,
      },
    }));
  }
  const urls = spec.urls ?? (spec.url !== undefined ? [spec.url] : []);
  const given = spec.filteredQueryParams ?? [];
  const [filter, filterSource] =
    given.length > 0
      ? [given, 'filteredQueryParams']
      : [[...DEFAULT_FILTERED_QUERY_PARAMS], "the manager's default filter"];
  return urls.map((url) => {
    const found = locationFromURL(url, plugin.location);
    return {
      key: found?.key,
      label: withoutSignature(url, filter),
      side: { url, location: found?.location, key: found?.key, filter, filterSource, ...common },
    };
  });
}

const docName = (m: { name: string; namespace?: string | undefined }) =>
  `${m.namespace ?? 'default'}/${m.name}`;

export async function readManifests(paths: string[], plugin: PluginSide): Promise<Documents> {
  const out: Documents = { preheats: [], servedModels: [], notes: [] };
  for (const path of paths) {
    const text = await readText(path);
    let docs: unknown[];
    try {
      docs = loadAll(text);
    } catch (err) {
      if (err instanceof YAMLException) {
        // Only the reason and position: the file may also hold a Secret.
        const mark = err.mark ? ` at line ${err.mark.line + 1}, column ${err.mark.column + 1}` : '';
        throw new CheckInputError(`${path}: not valid YAML${mark}: ${err.reason}`);
      }
      throw err;
    }
    docs.forEach((doc, i) => {
      if (doc === null || doc === undefined) return;
      const where = `${path}: document ${i + 1}`;
      if (typeof doc !== 'object' || Array.isArray(doc))
        throw new CheckInputError(`${where}: not a Kubernetes object`);
      const { kind, apiVersion, metadata } = doc as {
        kind?: unknown;
        apiVersion?: unknown;
        metadata?: unknown;
      };
      if (kind !== 'ModelPreheat' && kind !== 'ServedModel') return; // Secrets, Services...: not ours
      const name = (metadata as { name?: unknown } | undefined)?.name;
      const what = `${where} (${kind}${typeof name === 'string' ? ` ${name}` : ''})`;
      if (apiVersion !== API_VERSION) {
        throw new CheckInputError(`${what}: apiVersion must be ${API_VERSION}`);
      }
      if (kind === 'ModelPreheat') {
        const parsed = ModelPreheat.safeParse(doc);
        if (!parsed.success) throw new CheckInputError(`${what}: ${describeIssues(parsed.error)}`);
        const mp = parsed.data;
        const source = `ModelPreheat ${docName(mp.metadata)}`;
        if (mp.spec.type === 'image') {
          out.notes.push(
            `${source}: type image is not checked (its blobs are known once the manifest is read)`,
          );
          return;
        }
        out.preheats.push({
          name: mp.metadata.name,
          namespace: mp.metadata.namespace ?? 'default',
          source,
          items: preheatItems(mp.spec, plugin),
          used: new Set(),
        });
      } else {
        const parsed = ServedModel.safeParse(doc);
        if (!parsed.success) throw new CheckInputError(`${what}: ${describeIssues(parsed.error)}`);
        out.servedModels.push({ doc: parsed.data, source: `ServedModel ${docName(parsed.data.metadata)}` });
      }
    });
  }
  if (out.preheats.length === 0 && out.servedModels.length === 0 && out.notes.length === 0) {
    throw new CheckInputError(`no ModelPreheat or ServedModel in ${paths.join(', ')}`);
  }
  return out;
}

export async function readText(path: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw new CheckInputError(
      `cannot read ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
}

// ---- The check ---------------------------------------------------------------------------------------------

function pluginDownload(plugin: PluginSide, key: string): Side {
  return {
    url: objectURL(plugin.location, key),
    signer: {
      type: plugin.location.type,
      expiresSeconds: PLUGIN_SIGNED_URL_EXPIRY_SECONDS,
      sessionToken: plugin.sessionToken,
    },
    location: plugin.location,
    key,
    filter: plugin.filter,
    filterSource: plugin.filterSource,
    rule: plugin.rule,
    ruleSource: 'daemon_version',
    tag: plugin.tag,
    application: plugin.application,
    pieceLength: plugin.pieceLength,
  };
}

/** Every pair of the manifests, compared. */
export function checkDocuments(plugin: PluginSide, docs: Documents): CheckResult[] {
  const results: CheckResult[] = [];
  const miss = (label: string, source: string, code: string, message: string): CheckResult => ({
    status: 'MISS',
    label,
    source,
    reasons: [{ code, message }],
  });

  for (const { doc, source } of docs.servedModels) {
    const spec = doc.spec;
    const key = spec.fileName;
    const download = pluginDownload(plugin, key);
    const preheat = spec.preheat;
    if (!preheat) {
      results.push(miss(key, source, 'notPreheated', 'not preheated: spec.preheat is not set'));
      continue;
    }
    if (preheat.create) {
      // The ModelPreheat the controller creates, from its own function.
      const owned = ModelPreheatSpec.parse(ownedPreheatSpec(spec));
      const item = preheatItems(owned, plugin)[0]!;
      results.push(comparePair(key, `${source} (preheat.create)`, item.side, download));
      continue;
    }
    const namespace = doc.metadata.namespace ?? 'default';
    const named = docs.preheats.find((p) => p.name === preheat.name && p.namespace === namespace);
    if (!named) {
      results.push(
        miss(
          key,
          source,
          'preheatNotFound',
          `spec.preheat.name: ModelPreheat ${namespace}/${preheat.name} is not among the given manifests`,
        ),
      );
      continue;
    }
    const item =
      named.items.find((it) => it.key === key) ?? (named.items.length === 1 ? named.items[0] : undefined);
    if (!item) {
      results.push(
        miss(
          key,
          `${source} (preheat.name ${preheat.name})`,
          'key',
          `ModelPreheat ${named.name} does not warm ${key}: it warms ${named.items.map((it) => it.label).join(', ')}`,
        ),
      );
      continue;
    }
    named.used.add(item);
    results.push(comparePair(key, `${source} (preheat.name ${preheat.name})`, item.side, download));
  }

  // The other URLs of the ModelPreheats: compared with the plugin's download of the same key.
  for (const p of docs.preheats) {
    for (const item of p.items) {
      if (p.used.has(item)) continue;
      const key = item.key ?? decodeSegments(new URL(item.side.url).pathname.replace(/^\//, ''));
      results.push(comparePair(item.label, p.source, item.side, pluginDownload(plugin, key)));
    }
  }
  return results;
}
