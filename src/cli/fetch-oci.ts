/**
 * `peerload fetch oci://registry/repository:tag DIR`: a ModelPack artifact placed into DIR through the node's peer
 * proxy by the placer (fetch-oci-place.ts resolves the manifest and hands its files to src/place/placer.ts), for
 * an init container. Registry credentials come from a file (a docker config, as a
 * `kubernetes.io/dockerconfigjson` Secret holds) or a mounted Secret directory (`.dockerconfigjson`, or `username`
 * and `password`), or from the environment, and go only to hosts of `--allowed-registry-hosts` (the same rule
 * syntax as the operator's allow-lists).
 */
import { readFile, stat } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { pino } from 'pino';
import { Agent } from 'undici';
import { parseHostRules, type HostRule } from '../policy/reach.ts';
import { createLogger } from '../runtime/logger.ts';
import { RegistryClient } from '../oci/client.ts';
import { dockerConfigCredentials, secretCredentials, type RegistryCredentials } from '../oci/credentials.ts';
import { OciError, OciReason } from '../oci/errors.ts';
import { PlaceError } from '../place/errors.ts';
import { DEFAULT_PLACE_LIMITS, placeArtifact, type PlaceResult } from './fetch-oci-place.ts';
import { parseReference } from '../oci/reference.ts';
import { registryCredentialTag } from '../storage/credential-tag.ts';
import { downloaderConfig } from './agent.ts';
import { CliError } from './errors.ts';
import { redactedLines, type FetchLines } from './fetch-place.ts';

export const OCI_OPTIONS = {
  'registry-credentials': { type: 'string' },
  'allowed-registry-hosts': { type: 'string' },
  'plain-http': { type: 'boolean' },
  'max-files': { type: 'string', default: String(DEFAULT_PLACE_LIMITS.maxFiles) },
  json: { type: 'boolean' },
} as const;

export const OCI_USAGE = `Usage: peerload fetch oci://REGISTRY/REPOSITORY:TAG|@sha256:DIGEST DIR [options]

Places a ModelPack model artifact (modctl's, model-spec v0.0.7 or the older vnd.cnai types) into DIR through the
node's peer proxy: every blob by its registry URL, checked against its digest, raw layers as files on their
annotated path (hard links of the daemon's copies with --hard-link-root), tar layers extracted safely. DIR appears
whole or not at all; an existing DIR is left as it is.
--proxy, --max-bytes, --min-free-bytes, --deadline, --concurrency, --log-level  as for a directory (above)
--hard-link-root          DIR's parent directory as the peer daemon sees it
--max-files               files the artifact may hold (default ${DEFAULT_PLACE_LIMITS.maxFiles})
--registry-credentials    a docker config file (a kubernetes.io/dockerconfigjson Secret's .dockerconfigjson), or a
                          mounted Secret directory (.dockerconfigjson, or username and password); or set
                          PEERLOAD_REGISTRY_USERNAME and PEERLOAD_REGISTRY_PASSWORD
--allowed-registry-hosts  hosts the registry (and its token service) may be, comma-separated: host, *.domain, IP,
                          CIDR, each with an optional :port. Required with credentials; without it only anonymous
                          pulls, from any registry
--plain-http              http:// instead of https:// (a registry without TLS)
--json                    print the placement's report as JSON (per layer: bytes, task id, local hit, hard link)
Exit status: 0 in place, 1 placement failed, 2 bad input or refused.`;

type Values = Record<string, string | boolean | undefined>;

async function credentialsOf(values: Values, registry: string): Promise<RegistryCredentials | undefined> {
  const path = values['registry-credentials'] as string | undefined;
  const env = process.env;
  if (path === undefined) {
    const username = env['PEERLOAD_REGISTRY_USERNAME'];
    const password = env['PEERLOAD_REGISTRY_PASSWORD'];
    if ((username === undefined) !== (password === undefined))
      throw new CliError('set both PEERLOAD_REGISTRY_USERNAME and PEERLOAD_REGISTRY_PASSWORD, or neither');
    return username !== undefined ? { username, password: password! } : undefined;
  }
  const unreadable = (e: unknown) =>
    new CliError(`--registry-credentials: cannot read ${path}: ${(e as { code?: string }).code ?? 'error'}`);
  const st = await stat(path).catch((e: unknown) => {
    throw unreadable(e);
  });
  if (!st.isDirectory())
    return dockerConfigCredentials(
      await readFile(path, 'utf8').catch((e: unknown) => {
        throw unreadable(e);
      }),
      registry,
    );
  const data: Record<string, string> = {};
  for (const key of ['.dockerconfigjson', 'username', 'password']) {
    const v = await readFile(join(path, key), 'utf8').catch(() => undefined);
    if (v !== undefined) data[key] = key === '.dockerconfigjson' ? v : v.replace(/\r?\n$/, '');
  }
  return secretCredentials(data, registry);
}

function report(r: PlaceResult, seconds: string): string[] {
  const lines = r.layers.map(
    (l) =>
      `  layer ${l.index} ${l.digest.slice(0, 19)} ${l.filepath ?? ''} ${l.mediaType.replace(/^application\/vnd\.\w+\.model\./, '')}: ${l.bytes} bytes, ${l.files} files${l.localHit ? ', local hit' : ''}${l.hardLink ? ', hard link' : ''}`,
  );
  return [
    `fetched ${r.reference} (${r.digest}): ${r.layers.length} layers, ${r.files} files, ${r.bytes} bytes into ${r.dest} in ${seconds} s (${r.localHits} local hits, ${r.hardLinks} hard links)`,
    ...lines,
  ];
}

/** The reference, destination and flags of an `oci://` fetch, each checked, or a CliError naming the flag. */
function ociArgs(
  reference: string,
  destArg: string | undefined,
  values: Values,
): {
  ref: ReturnType<typeof parseReference>;
  dest: string;
  allowedHosts: HostRule[] | undefined;
  maxFiles: number;
} {
  if (!destArg)
    throw new CliError('give the directory to place the artifact in: peerload fetch oci://... DIR');
  if (values['credentials-dir'] !== undefined)
    throw new CliError('--credentials-dir is for object storage; a registry takes --registry-credentials');
  let ref: ReturnType<typeof parseReference>;
  try {
    ref = parseReference(reference);
  } catch (e) {
    throw new CliError((e as Error).message);
  }
  const dest = resolve(destArg);
  let allowedHosts: HostRule[] | undefined;
  if (values['allowed-registry-hosts'] !== undefined) {
    try {
      allowedHosts = parseHostRules(String(values['allowed-registry-hosts']));
    } catch (e) {
      throw new CliError(`--allowed-registry-hosts: ${(e as Error).message}`);
    }
  }
  const maxFiles = Number(values['max-files']);
  if (!Number.isSafeInteger(maxFiles) || maxFiles < 1)
    throw new CliError(`--max-files: must be a positive integer, got "${String(values['max-files'])}"`);
  return { ref, dest, allowedHosts, maxFiles };
}

/**
 * Runs the OCI form; `values` were parsed with DOWNLOAD_OPTIONS and OCI_OPTIONS. With `mount` (KServe's form), DIR
 * is a mount point the artifact's entries are moved into (the placer's `mount` destination).
 */
export async function runOci(
  reference: string,
  destArg: string | undefined,
  values: Values,
  given: FetchLines,
  mount = false,
): Promise<number> {
  const io = redactedLines(given);
  const { ref, dest, allowedHosts, maxFiles } = ociArgs(reference, destArg, values);
  const config = downloaderConfig({ ...values, root: dirname(dest) } as Parameters<
    typeof downloaderConfig
  >[0]);
  const logger = createLogger(config.logLevel as 'info', pino.destination({ fd: 2, sync: true }));
  const registryDispatcher = new Agent();
  try {
    if (
      !mount &&
      (await stat(dest).then(
        () => true,
        () => false,
      ))
    ) {
      io.out(`${reference} is already in ${dest}`);
      return 0;
    }
    const started = Date.now();
    let result: PlaceResult;
    try {
      const credentials = await credentialsOf(values, ref.registry);
      const client = new RegistryClient(ref.registry, {
        dispatcher: registryDispatcher,
        plainHTTP: values['plain-http'] === true,
        credentials,
        allowedHosts,
      });
      // With credentials the blobs' tasks carry their tag, the one the operator's agents and preheat give them.
      const tag = credentials && registryCredentialTag(client.baseURL, ref.repository, credentials);
      result = await placeArtifact({
        client,
        ref,
        dest,
        mount,
        tag,
        proxy: config.proxy,
        dispatcher: config.dispatcher,
        hardLinkRoot: config.hardLinkRoot,
        serverUid: config.serverUid,
        limits: { ...config.limits, maxFiles },
        logger,
      });
    } catch (e) {
      if (!(e instanceof OciError || e instanceof PlaceError)) throw e;
      const refused: string[] = [
        OciReason.InvalidReference,
        OciReason.RegistryNotAllowed,
        OciReason.InvalidCredentials,
      ];
      if (refused.includes(e.reason)) throw new CliError(`${e.reason}: ${e.message}`);
      io.err(`peerload fetch: ${e.reason}: ${e.message}`);
      return 1;
    }
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    if (values.json) io.out(JSON.stringify(result));
    else for (const line of report(result, seconds)) io.out(line);
    return 0;
  } finally {
    await registryDispatcher.close();
    await config.dispatcher.close();
    logger.flush();
  }
}
