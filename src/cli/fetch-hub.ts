/**
 * `peerload fetch hf://namespace/name[@revision] DEST`: a Hugging Face repository placed as a model directory.
 * The revision is resolved to its commit sha through the Hub API, the files at that sha listed (include/exclude,
 * caps, a listing time-out), then downloaded through the node's peer proxy by the agent's own downloader (the
 * same placement, hard links included), each LFS file checked against its sha256, into DEST/<repo>/<sha>.
 * The token comes from $HF_TOKEN or --token-file and goes only to an allowed Hub host (--allowed-hub-hosts, the
 * operator's flag's name and syntax: https unless listed as http://host), checked before any request.
 */
import { readFile } from 'node:fs/promises';
import { pino } from 'pino';
import { parseDuration } from '../api/index.ts';
import { DEFAULT_MAX_FILES, MAX_DIRECTORY_FILES } from '../api/fileset.ts';
import { ModelVersionSpecSchema, SEGMENT, specProblems, type ModelVersionSpec } from '../place/spec.ts';
import { HubClient } from '../huggingface/client.ts';
import {
  DEFAULT_HUB_ENDPOINT,
  DEFAULT_HUB_REDIRECT_HOSTS,
  DEFAULT_HUB_TOKEN_HOSTS,
  hubEndpoint,
  tokenAllowed,
  type HubEndpoint,
} from '../huggingface/endpoint.ts';
import { HubError, HubReason, hubBudget } from '../huggingface/errors.ts';
import { parseHostRules, urlReach } from '../policy/reach.ts';
import { DEFAULT_LISTING_LIMITS, listRepoFiles } from '../huggingface/files.ts';
import { parseHubURI } from '../api/hub-reference.ts';
import { lfsLocations } from '../huggingface/locations.ts';
import { hubVersionSpec } from '../huggingface/version-spec.ts';
import { redact, rememberSecret } from '../redact.ts';
import { hubTokenTag } from '../storage/credential-tag.ts';
import { createLogger } from '../runtime/logger.ts';
import { DOWNLOAD_OPTIONS, DOWNLOAD_OPTIONS_USAGE, downloaderConfig } from './agent.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { placeVersion, redactedLines, type FetchLines } from './fetch-place.ts';

export const HUB_USAGE = `Usage: peerload fetch hf://NAMESPACE/NAME[@REVISION] DEST [options]

Resolves REVISION (a branch, tag or commit sha; default main) to its commit through the Hugging Face Hub API, lists
the repository's files at that commit and downloads them through the node's peer proxy into DEST/NAMESPACE/NAME/<sha>
(whole or not at all), each LFS file checked against its sha256. Every file is one P2P task: a git file keyed on
its resolve URL at the commit, an LFS file on the CDN URL it redirects to, without the signature. Prints one line
with the commit.
--endpoint         the Hub (default $HF_ENDPOINT, else ${DEFAULT_HUB_ENDPOINT}): a mirror or an Enterprise Hub
--token-file       a file holding the Hub token (default $HF_TOKEN); needed for gated and private repositories
--allowed-hub-hosts
                   hosts the token may be sent to, comma-separated (default ${DEFAULT_HUB_TOKEN_HOSTS}; *.domain,
                   IPs, ranges and :port allowed), over https only unless written http://host (a mirror without
                   TLS); --token-hosts is the same flag's older name
--allowed-hub-redirect-hosts
                   hosts an LFS file's redirect may name besides the Hub's own (its CDN), same syntax, https only
                   unless written http://host (default the public Hub's CDNs:
                   ${DEFAULT_HUB_REDIRECT_HOSTS.split(',').join(', ')}); no other is fetched
--include          glob of the files to keep (repeatable; default every file)
--exclude          glob of the files to leave out (repeatable)
--max-files        most files after include/exclude (default ${DEFAULT_MAX_FILES}, at most ${MAX_DIRECTORY_FILES})
--version          the version directory's name instead of the commit sha (e.g. a fixed path a server starts on);
                   the commit is still the one REVISION names now
--listing-timeout  how long resolving and listing may take (default ${DEFAULT_LISTING_LIMITS.timeoutMs / 1000}s)
${DOWNLOAD_OPTIONS_USAGE.replace(/^--root[^\n]*\n/, '')}
Exit status: 0 in place, 1 download failed, 2 bad input, refused, or the Hub's refusal (token, revision...).`;

const HUB_OPTIONS = {
  ...DOWNLOAD_OPTIONS,
  endpoint: { type: 'string' },
  'token-file': { type: 'string' },
  'allowed-hub-hosts': { type: 'string' },
  'token-hosts': { type: 'string' },
  'allowed-hub-redirect-hosts': { type: 'string', default: DEFAULT_HUB_REDIRECT_HOSTS },
  include: { type: 'string', multiple: true },
  exclude: { type: 'string', multiple: true },
  'max-files': { type: 'string' },
  version: { type: 'string' },
  'listing-timeout': { type: 'string', default: `${DEFAULT_LISTING_LIMITS.timeoutMs / 1000}s` },
} as const;

async function readToken(file: string | undefined, env: NodeJS.ProcessEnv): Promise<string | undefined> {
  let token = env.HF_TOKEN;
  if (file !== undefined) {
    try {
      token = await readFile(file, 'utf8');
    } catch (e) {
      throw new CliError(
        `--token-file: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`,
      );
    }
  }
  token = token?.trim();
  if (token === '') return undefined;
  rememberSecret(token);
  return token;
}

/**
 * Why the token is not sent, naming where the token and the endpoint came from (a KServe init container gets both
 * from HF_TOKEN and HF_ENDPOINT) and the flag an admin sets. Before any request: nothing was sent, no network failed.
 */
function tokenNotAllowed(
  endpoint: HubEndpoint,
  values: { endpoint?: string | undefined; 'token-file'?: string | undefined },
  env: NodeJS.ProcessEnv,
): string {
  const tokenFrom = values['token-file'] !== undefined ? '--token-file' : 'HF_TOKEN';
  const endpointFrom =
    values.endpoint !== undefined ? '--endpoint' : env.HF_ENDPOINT ? 'HF_ENDPOINT' : 'the default endpoint';
  const host = new URL(endpoint.url).host;
  const list = endpoint.tokenHosts.map((r) => r.text).join(',');
  const admin =
    'an admin adds it to --allowed-hub-hosts (for KServe, in the ClusterStorageContainer command)';
  if (urlReach(endpoint.url, endpoint.tokenHosts) === 'plain')
    return (
      `${HubReason.TokenNotAllowed}: ${endpointFrom} ${endpoint.url} is plain HTTP and --allowed-hub-hosts ` +
      `(${list}) allows ${host} over https only, so the token of ${tokenFrom} is not sent (it would cross the network ` +
      `in clear): use https://${host}, or ${admin.replace('adds it', `adds http://${host}`)}`
    );
  return (
    `${HubReason.TokenNotAllowed}: ${endpointFrom} names ${host}, which is not in --allowed-hub-hosts ` +
    `(${list || 'empty'}), so the token of ${tokenFrom} is not sent: ${admin} ` +
    `(--allowed-hub-hosts=${list ? `${list},` : ''}${host}), or unset ${tokenFrom} for a public repository`
  );
}

/** The command line, checked: the repository, the Hub, the selection and the downloader's configuration. */
async function parseHubArgs(argv: string[], env: NodeJS.ProcessEnv) {
  const { values, positionals } = parseCommandArgs(argv, HUB_OPTIONS, true, HUB_USAGE);
  if (values.help) return undefined;
  if (positionals.length !== 2)
    throw new CliError(
      `give the repository and the destination: peerload fetch hf://namespace/name[@revision] DEST`,
    );
  let ref;
  try {
    ref = parseHubURI(positionals[0]!);
  } catch (e) {
    throw new CliError((e as Error).message);
  }
  if (values['allowed-hub-hosts'] !== undefined && values['token-hosts'] !== undefined)
    throw new CliError('give --allowed-hub-hosts or its older name --token-hosts, not both');
  let endpoint;
  try {
    endpoint = hubEndpoint(
      values.endpoint ?? env.HF_ENDPOINT ?? DEFAULT_HUB_ENDPOINT,
      values['allowed-hub-hosts'] ?? values['token-hosts'] ?? DEFAULT_HUB_TOKEN_HOSTS,
    );
  } catch (e) {
    throw new CliError(`--endpoint/--allowed-hub-hosts: ${(e as Error).message}`);
  }
  let redirectHosts;
  try {
    redirectHosts = parseHostRules(values['allowed-hub-redirect-hosts']);
  } catch (e) {
    throw new CliError(`--allowed-hub-redirect-hosts: ${(e as Error).message}`);
  }
  const maxFiles = values['max-files'] === undefined ? undefined : Number(values['max-files']);
  if (
    maxFiles !== undefined &&
    !(Number.isInteger(maxFiles) && maxFiles >= 1 && maxFiles <= MAX_DIRECTORY_FILES)
  )
    throw new CliError(
      `--max-files: must be an integer from 1 to ${MAX_DIRECTORY_FILES}, got "${values['max-files']}"`,
    );
  let listingMs: number;
  try {
    listingMs = parseDuration(values['listing-timeout']);
  } catch {
    listingMs = 0;
  }
  if (!(listingMs > 0))
    throw new CliError(
      `--listing-timeout: must be a positive duration such as 30s or 2m, got "${values['listing-timeout']}"`,
    );
  const token = await readToken(values['token-file'], env);
  if (token !== undefined && !tokenAllowed(endpoint))
    throw new CliError(tokenNotAllowed(endpoint, values, env));
  const config = downloaderConfig({ ...values, root: positionals[1] });
  const selection = {
    include: values.include,
    exclude: values.exclude,
    maxFiles,
    maxBytes: config.limits.maxBytes,
  };
  const version = values.version;
  if (version !== undefined && !SEGMENT.test(version))
    throw new CliError(
      `--version: must be one path segment of letters, digits, . _ - (not starting with .), got "${version}"`,
    );
  return { ref, endpoint, token, config, selection, listingMs, version, redirectHosts };
}

/** The repository listed at its commit as the agent's version; a Hub refusal is a line and an exit status. */
async function hubSpec(
  args: NonNullable<Awaited<ReturnType<typeof parseHubArgs>>>,
  io: FetchLines,
): Promise<{ spec: ModelVersionSpec; commit: string } | number> {
  const { ref, endpoint, token, config, selection, listingMs, version, redirectHosts } = args;
  try {
    const budget = hubBudget(endpoint.url, ref.repo, { ...DEFAULT_LISTING_LIMITS, timeoutMs: listingMs });
    const client = new HubClient({ endpoint, dispatcher: config.dispatcher, token, budget });
    const listing = await listRepoFiles(client, ref.repo, ref.revision, selection);
    const locations = await lfsLocations(client, listing, {
      hosts: redirectHosts,
      flag: '--allowed-hub-redirect-hosts',
    });
    budget.close();
    // With a token every file's task carries the token's tag, the one the operator's agents and preheat give it.
    const tag = token !== undefined ? hubTokenTag(endpoint.url, ref.repo, token) : undefined;
    const spec = ModelVersionSpecSchema.safeParse(
      hubVersionSpec(endpoint, listing, locations, { headers: client.authHeaders(), version, tag }),
    );
    if (!spec.success) throw new CliError(`hf://${ref.repo}: ${redact(specProblems(spec.error))}`);
    return { spec: spec.data, commit: listing.sha };
  } catch (e) {
    if (!(e instanceof HubError)) throw e;
    io.err(`peerload fetch: ${e.reason}: ${redact(e.message)}`);
    return e.retryable ? 1 : 2;
  }
}

/**
 * Runs the hf:// form. With `mount` (KServe's form), DEST is a mount point the repository's files are moved into
 * (the placer's `mount` destination) instead of DEST/NAMESPACE/NAME/<sha>.
 */
export async function runHub(
  argv: string[],
  given: FetchLines,
  env: NodeJS.ProcessEnv = process.env,
  mount = false,
): Promise<number> {
  const io = redactedLines(given);
  const args = await parseHubArgs(argv, env);
  if (args === undefined) {
    io.out(HUB_USAGE);
    return 0;
  }
  const { ref } = args;
  const config: typeof args.config = mount
    ? { ...args.config, destination: { kind: 'mount', path: args.config.root } }
    : args.config;
  const logger = createLogger(config.logLevel as 'info', pino.destination({ fd: 2, sync: true }));
  try {
    const found = await hubSpec(args, io);
    if (typeof found === 'number') return found;
    return await placeVersion(
      ref.repo.split('/')[1]!,
      found.spec,
      config,
      logger,
      `hf://${ref.repo}@${ref.revision} (commit ${found.commit})`,
      io,
    );
  } finally {
    await config.dispatcher.close();
    logger.flush();
  }
}
