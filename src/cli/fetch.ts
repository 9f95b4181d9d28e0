/**
 * `peerload fetch`: the agent's download once, for an init container (a server without a load API starts on a
 * complete directory). Prints one line; exit 0 when the version is in place, 1 when the download failed, 2 on bad
 * input or a refusal (byte cap, free space, credentials). Its forms are a table ({@link FORMS}): the first whose
 * `matches` takes the arguments runs them, parsing them once; the version spec of the operator's agents is the form
 * when none does. A new source's form is a row (and its file), not a branch here.
 */
import { readFile } from 'node:fs/promises';
import { pino } from 'pino';
import { text } from 'node:stream/consumers';
import { ModelVersionSpecSchema, SEGMENT, specProblems } from '../place/spec.ts';
import { createLogger } from '../runtime/logger.ts';
import { redact } from '../redact.ts';
import { DOWNLOAD_OPTIONS, DOWNLOAD_OPTIONS_USAGE, downloaderConfig } from './agent.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';
import { OCI_OPTIONS, OCI_USAGE, runOci } from './fetch-oci.ts';
import { placeVersion, redactedLines, type FetchLines } from './fetch-place.ts';

const USAGE = `Usage: peerload fetch --name MODEL --spec FILE --root DIR [options]
       peerload fetch hf://NAMESPACE/NAME[@REVISION] DEST [options]   (a Hugging Face repository; --help after it)
       peerload fetch [--kserve] STORAGE_URI DEST [options]   (KServe's storage initializer; --kserve --help)

Downloads one version of a model directory through the node's peer proxy into <root>/<model>/<version>, as
'peerload agent' does on a PUT, and prints one line. For an init container. Like the agent it leaves a record of
the download (local hits, hard links) under <root>/.peerload-records/, which an agent on the same root reports.
--name             the model's name
--spec             the version spec, JSON (the body of the agent's PUT /v1/models/{name}); - reads stdin
${DOWNLOAD_OPTIONS_USAGE}
Exit status: 0 in place, 1 download failed, 2 bad input or refused.

${OCI_USAGE}`;

export type FetchIO = FetchLines;

/** Options every form but KServe's and the Hub's parses: a spec's, and an artifact's (each refused for the other). */
const SHARED_OPTIONS = {
  ...DOWNLOAD_OPTIONS,
  ...OCI_OPTIONS,
  name: { type: 'string' },
  spec: { type: 'string' },
} as const;

/** One form of `peerload fetch`: the arguments it takes (by the source's URI scheme, or a flag) and its run. */
interface FetchForm {
  /** What it fetches, for messages. */
  what: string;
  matches(argv: readonly string[]): boolean | Promise<boolean>;
  run(argv: string[], io: FetchLines): Promise<number>;
}

/**
 * Every form but the version spec's, in the order they are asked: KServe's storage initializer first (its URI may
 * be any scheme it hands over, and `--kserve` says it outright), then each source's own URI scheme.
 */
const FORMS: readonly FetchForm[] = [
  {
    what: "KServe's storage URI",
    matches: async (argv) => (await import('./fetch-kserve.ts')).isKServeInvocation(argv),
    run: async (argv, io) => (await import('./fetch-kserve.ts')).runKServe(argv, io),
  },
  {
    what: 'a Hugging Face repository',
    matches: (argv) => argv[0]?.startsWith('hf://') === true,
    run: async (argv, io) => (await import('./fetch-hub.ts')).runHub(argv, io),
  },
  {
    what: 'an OCI artifact',
    // Parsed to find the reference: a flag's value (`--proxy http://…`) is not it. Arguments that do not parse
    // are not this form's; the version spec's form says what is wrong with them.
    matches: (argv) => {
      try {
        return (
          parseCommandArgs([...argv], SHARED_OPTIONS, true).positionals[0]?.startsWith('oci://') === true
        );
      } catch {
        return false;
      }
    },
    run: runOciForm,
  },
];

export async function run(
  argv: string[],
  given: FetchIO = { out: console.log, err: console.error },
): Promise<number> {
  const io = redactedLines(given);
  for (const form of FORMS) if (await form.matches(argv)) return form.run(argv, io);
  return runSpecForm(argv, io);
}

/** `peerload fetch oci://REGISTRY/REPOSITORY:TAG DIR`. */
async function runOciForm(argv: string[], io: FetchLines): Promise<number> {
  const { values, positionals } = parseCommandArgs(argv, SHARED_OPTIONS, true, USAGE);
  if (values.help) {
    io.out(USAGE);
    return 0;
  }
  if (positionals.length > 2) throw new CliError(`unexpected argument "${positionals[2]}"`);
  if (values.name !== undefined || values.spec !== undefined || values.root !== undefined)
    throw new CliError('an oci:// reference takes a directory, not --name, --spec or --root');
  return runOci(positionals[0]!, positionals[1], values, io);
}

/** `peerload fetch --name MODEL --spec FILE --root DIR`: the version spec of the operator's agents. */
async function runSpecForm(argv: string[], io: FetchLines): Promise<number> {
  const { values, positionals } = parseCommandArgs(argv, SHARED_OPTIONS, true, USAGE);
  if (values.help) {
    io.out(USAGE);
    return 0;
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
    return await placeVersion(name, spec, config, logger, `${name} version ${spec.version}`, io);
  } finally {
    await config.dispatcher.close();
    logger.flush();
  }
}
