/**
 * `peerload agent`: the sidecar beside a model server that places model directories for the operator (the API is
 * src/agent/server.ts). `agentOptions()` is shared with `peerload fetch`, which makes the same download once.
 */
import { Agent } from 'undici';
import { parseDuration } from '../api/index.ts';
import { credentialsDir } from '../agent/credentials.ts';
import { DEFAULT_LIMITS, removeStaleTemporaries, type DownloaderConfig } from '../place/placer.ts';
import { tokenFile } from '../agent/auth.ts';
import { startAgentServer } from '../agent/server.ts';
import { createLogger } from '../runtime/logger.ts';
import {
  DAEMON_VERSION_HINT,
  DEFAULT_TASK_ID_RULE,
  parsePieceLength,
  taskIdRule,
} from '../storage/taskid.ts';
import { parseHostRules, type HostRule } from '../policy/reach.ts';
import { DEFAULT_STORAGE_HOSTS } from '../policy/storage-reach.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';

/**
 * The longest `--deadline`: a version's download must end (a deadline beyond a timer's range, 2^31-1 ms, would
 * even fire at once), and a day is what a spec's `deadlineSeconds` may ask.
 */
export const MAX_DEADLINE_MS = 24 * 3_600_000;

export const DOWNLOAD_OPTIONS_USAGE = `--root             the model root (a volume the model server reads): a version lands in <root>/<model>/<version>
--proxy            the node's peer proxy (default http://127.0.0.1:4001; in a pod: http://$(NODE_IP):4001)
--credentials-dir  a mounted storage Secret (one file per key) to sign object keys with; without it only signed
                   URLs are accepted
--allowed-storage-hosts
                   hosts a request's storage location may name for the keys the agent signs, comma-separated:
                   name, *.domain (a * inside a label matches within it), IP or CIDR, each with an optional :port
                   (default: the storage services' own hosts; docs/security.md)
--hard-link-root   the model root as the peer daemon sees it (the same volume mounted into the daemon): files are
                   hard links of the daemon's own copies instead of copies (checked against the body when the
                   daemon fills them during the download), when --server-uid says the model server cannot write them
--server-uid       the uid the model server runs as (its container's runAsUser): a hard link is kept only when that
                   uid is not root, does not own the daemon's file and the file has no group or others write bit;
                   without it every file is copied (a link is the daemon's file: a server writing it would change
                   what the network serves)
--max-bytes        bytes one version may take (default 1Ti; suffixes k, Ki, M, Mi, G, Gi, T, Ti)
--min-free-bytes   free bytes the model volume must keep (default 1Gi)
--deadline         how long one version may take (default 1h, at most 24h)
--concurrency      files downloaded at once (default ${DEFAULT_LIMITS.concurrency})
--daemon-version   the peer daemon's version, for the expected task ids (default ${DEFAULT_TASK_ID_RULE})
--log-level        debug, info, warn, error (default info)`;

export const DOWNLOAD_OPTIONS = {
  root: { type: 'string' },
  proxy: { type: 'string', default: 'http://127.0.0.1:4001' },
  'credentials-dir': { type: 'string' },
  'allowed-storage-hosts': { type: 'string', default: DEFAULT_STORAGE_HOSTS },
  'hard-link-root': { type: 'string' },
  'server-uid': { type: 'string' },
  'max-bytes': { type: 'string', default: '1Ti' },
  'min-free-bytes': { type: 'string', default: '1Gi' },
  deadline: { type: 'string', default: '1h' },
  concurrency: { type: 'string', default: String(DEFAULT_LIMITS.concurrency) },
  'daemon-version': { type: 'string', default: DEFAULT_TASK_ID_RULE },
  'log-level': { type: 'string', default: 'info' },
  help: { type: 'boolean', short: 'h' },
} as const;

type DownloadFlags = { [K in keyof typeof DOWNLOAD_OPTIONS]?: string | boolean | undefined };

function bytesFlag(flag: string, value: string): number {
  // The same size syntax as the daemon's piece length (4mib, 4 MiB, 4mb), plus T/Ti.
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*(t|tb|ti|tib)\s*$/i.exec(value);
  const bytes = m
    ? Math.floor(Number(m[1]) * (m[2]!.toLowerCase().startsWith('ti') ? 1024 ** 4 : 1e12))
    : parsePieceLength(value);
  if (bytes === undefined || !Number.isSafeInteger(bytes) || bytes < 0)
    throw new CliError(`--${flag}: must be a byte count such as 500Gi or 1Ti, got "${value}"`);
  return bytes;
}

/** The downloader's configuration from the shared flags. */
export function downloaderConfig(values: DownloadFlags): DownloaderConfig & { logLevel: string } {
  const root = values.root as string | undefined;
  if (!root) throw new CliError('--root is required (the model root the server reads)');
  const proxy = String(values.proxy);
  let proxyURL: URL;
  try {
    proxyURL = new URL(proxy);
  } catch {
    throw new CliError(`--proxy: must be an http URL such as http://127.0.0.1:4001, got "${proxy}"`);
  }
  if (proxyURL.protocol !== 'http:' || proxyURL.pathname !== '/' || proxyURL.search)
    throw new CliError(
      `--proxy: must be http://host:port (the peer proxy speaks plain HTTP), got "${proxy}"`,
    );
  let deadlineMs: number;
  try {
    deadlineMs = parseDuration(String(values.deadline));
  } catch {
    deadlineMs = 0;
  }
  if (!(deadlineMs > 0))
    throw new CliError(
      `--deadline: must be a positive duration such as 30m or 2h, got "${String(values.deadline)}"`,
    );
  if (deadlineMs > MAX_DEADLINE_MS)
    throw new CliError(
      `--deadline: at most ${MAX_DEADLINE_MS / 3_600_000}h (a version that takes longer holds the agent's slots and disk for nothing; a spec's deadlineSeconds has the same bound), got "${String(values.deadline)}"`,
    );
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64)
    throw new CliError(`--concurrency: must be an integer from 1 to 64, got "${String(values.concurrency)}"`);
  const rule = taskIdRule(String(values['daemon-version']));
  if (rule === undefined)
    throw new CliError(`--daemon-version ${DAEMON_VERSION_HINT}, got "${String(values['daemon-version'])}"`);
  const level = String(values['log-level']);
  if (!['debug', 'info', 'warn', 'error'].includes(level))
    throw new CliError(`--log-level: must be debug, info, warn or error, got "${level}"`);
  const credentials = values['credentials-dir'] as string | undefined;
  let storageHosts: HostRule[];
  try {
    storageHosts = parseHostRules(String(values['allowed-storage-hosts']));
  } catch (err) {
    throw new CliError(`--allowed-storage-hosts: ${(err as Error).message}`);
  }
  const uid = values['server-uid'] as string | undefined;
  if (uid !== undefined && !/^\d{1,10}$/.test(uid))
    throw new CliError(
      `--server-uid: must be a uid such as 1000 (the model server's runAsUser), got "${uid}"`,
    );
  return {
    root,
    proxy: proxyURL.origin,
    dispatcher: new Agent({ connections: concurrency * 2 }),
    hardLinkRoot: values['hard-link-root'] as string | undefined,
    serverUid: uid !== undefined ? Number(uid) : undefined,
    limits: {
      maxBytes: bytesFlag('max-bytes', String(values['max-bytes'])),
      minFreeBytes: bytesFlag('min-free-bytes', String(values['min-free-bytes'])),
      deadlineMs,
      concurrency,
    },
    credentials: credentials ? credentialsDir(credentials) : undefined,
    storageHosts,
    rule,
    logLevel: level,
  };
}

const USAGE = `Usage: peerload agent --root DIR --token-file FILE [--address HOST:PORT] [options]

Runs beside a model server and places model directories for the operator: PUT /v1/models/{name} downloads a
version through the node's peer proxy into <root>/<name>/<version> (atomically), GET reports progress and local
hits, DELETE /v1/models/{name}/versions/{version} removes it. Only calls with the operator's token are accepted.
--address          where to listen (default 0.0.0.0:8095)
--token-file       the operator's token, a mounted Secret key (re-read when it changes)
${DOWNLOAD_OPTIONS_USAGE}`;

export async function run(argv: string[]): Promise<number> {
  const { values } = parseCommandArgs(
    argv,
    {
      ...DOWNLOAD_OPTIONS,
      address: { type: 'string', default: '0.0.0.0:8095' },
      'token-file': { type: 'string' },
    },
    false,
    USAGE,
  );
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const config = downloaderConfig(values);
  if (!values['token-file'])
    throw new CliError("--token-file is required (the operator's token, from a Secret)");
  const m = /^(.*):(\d{1,5})$/.exec(values.address);
  if (!m || Number(m[2]) > 65535)
    throw new CliError(`--address: must be HOST:PORT such as 0.0.0.0:8095, got "${values.address}"`);
  const logger = createLogger(config.logLevel as 'info');
  const stale = await removeStaleTemporaries(config.root);
  if (stale.length > 0) logger.info({ removed: stale }, 'removed temporary directories of an earlier run');
  const server = await startAgentServer({
    ...config,
    logger,
    host: m[1]!.replace(/^\[|\]$/g, '') || '0.0.0.0',
    port: Number(m[2]),
    token: tokenFile(values['token-file']),
  });
  logger.info({ url: server.url, root: config.root, proxy: config.proxy }, 'agent listening');
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  });
  logger.info('agent stopping');
  await server.close();
  await config.dispatcher.close();
  logger.flush();
  return 0;
}
