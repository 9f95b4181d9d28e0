/**
 * `peerload fetch`: the agent's download once, for an init container (a server without a load API starts on a
 * complete directory). Prints one line; exit 0 when the version is in place, 1 when the download failed, 2 on bad
 * input or a refusal (byte cap, free space, credentials). Given an `oci://` reference it places a ModelPack
 * artifact instead (fetch-oci.ts).
 */
import { readFile } from 'node:fs/promises';
import { pino } from 'pino';
import { text } from 'node:stream/consumers';
import { DownloadRefused, downloadVersion, newProgress, preflight, versionPath } from '../agent/download.ts';
import { ModelVersionSpecSchema, SEGMENT, specProblems } from '../agent/spec.ts';
import { createLogger } from '../runtime/logger.ts';
import { redact } from '../redact.ts';
import { DOWNLOAD_OPTIONS, DOWNLOAD_OPTIONS_USAGE, downloaderConfig } from './agent.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { OCI_OPTIONS, OCI_USAGE, runOci, type FetchIO } from './fetch-oci.ts';

const USAGE = `Usage: peerload fetch --name MODEL --spec FILE --root DIR [options]

Downloads one version of a model directory through the node's peer proxy into <root>/<model>/<version>, as
'peerload agent' does on a PUT, and prints one line. For an init container. Like the agent it leaves a record of
the download (local hits, hard links) under <root>/.peerload-records/, which an agent on the same root reports.
--name             the model's name
--spec             the version spec, JSON (the body of the agent's PUT /v1/models/{name}); - reads stdin
${DOWNLOAD_OPTIONS_USAGE}
Exit status: 0 in place, 1 download failed, 2 bad input or refused.

${OCI_USAGE}`;

export type { FetchIO };

export async function run(
  argv: string[],
  io: FetchIO = { out: console.log, err: console.error },
): Promise<number> {
  const { values, positionals } = parseCommandArgs(
    argv,
    { ...DOWNLOAD_OPTIONS, ...OCI_OPTIONS, name: { type: 'string' }, spec: { type: 'string' } },
    true,
    USAGE,
  );
  if (values.help) {
    io.out(USAGE);
    return 0;
  }
  if (positionals[0]?.startsWith('oci://')) {
    if (positionals.length > 2) throw new CliError(`unexpected argument "${positionals[2]}"`);
    if (values.name !== undefined || values.spec !== undefined || values.root !== undefined)
      throw new CliError('an oci:// reference takes a directory, not --name, --spec or --root');
    return runOci(positionals[0], positionals[1], values, io);
  }
  if (positionals.length > 0)
    throw new CliError(
      `unexpected argument "${positionals[0]}": a model directory takes --name, --spec and --root; an artifact oci://registry/repository:tag DIR`,
    );
  for (const flag of Object.keys(OCI_OPTIONS))
    if (values[flag as keyof typeof OCI_OPTIONS] !== undefined && flag !== 'max-files')
      throw new CliError(`--${flag} is for an oci:// reference`);
  const name = values.name;
  if (!name || !SEGMENT.test(name))
    throw new CliError(
      '--name is required: one path segment of letters, digits, . _ - (not starting with .)',
    );
  const config = downloaderConfig(values);
  if (!values.spec) throw new CliError('--spec is required (the version spec, JSON; - for stdin)');
  let raw: string;
  try {
    raw = values.spec === '-' ? await text(process.stdin) : await readFile(values.spec, 'utf8');
  } catch (e) {
    throw new CliError(`--spec: cannot read ${values.spec}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw new CliError(`--spec: ${values.spec} is not JSON`);
  }
  const parsed = ModelVersionSpecSchema.safeParse(json);
  if (!parsed.success) throw new CliError(`--spec: ${redact(specProblems(parsed.error))}`);
  const spec = parsed.data;
  // Logs go to stderr: stdout is the one-line summary.
  const logger = createLogger(config.logLevel as 'info', pino.destination({ fd: 2, sync: true }));
  try {
    const started = Date.now();
    let target: string | undefined;
    try {
      target = await preflight(name, spec, config);
    } catch (e) {
      if (e instanceof DownloadRefused) throw new CliError(`${e.reason}: ${redact(e.message)}`);
      throw e;
    }
    if (target === undefined) {
      io.out(`${name} version ${spec.version} is already in ${versionPath(config.root, name, spec)}`);
      return 0;
    }
    const p = await downloadVersion(name, spec, { ...config, logger }, newProgress(name, spec, config.rule));
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    if (p.state === 'Ready') {
      io.out(
        `fetched ${name} version ${spec.version}: ${p.filesDone} files, ${p.bytesDone} bytes into ${target} in ${seconds} s (${p.localHits} local hits, ${p.hardLinks} hard links)`,
      );
      return 0;
    }
    io.err(`peerload fetch: ${p.reason}: ${p.error}`);
    return 1;
  } finally {
    await config.dispatcher.close();
    logger.flush();
  }
}
