/**
 * What both forms of `peerload fetch` do once they hold a version's spec: the agent's preflight and download into
 * place, and the one line (stdout) or the failure (stderr) with the exit status.
 */
import type { Logger } from 'pino';
import {
  DownloadRefused,
  downloadVersion,
  newProgress,
  preflight,
  versionPath,
  type DownloaderConfig,
} from '../place/placer.ts';
import type { ModelVersionSpec } from '../place/spec.ts';
import { MAX_REDACTED_INPUT, redact, redactURLs } from '../redact.ts';
import { CliError } from './errors.ts';

export interface FetchLines {
  out: (line: string) => void;
  err: (line: string) => void;
}

/**
 * `io` with every line it prints redacted: a storage URI may be presigned (its query holds a signature and a session
 * token) or carry userinfo, and the lines go to a pod's log. Each form of `peerload fetch` prints through this. A
 * line past redaction's input bound (a --json report of many layers) has its URLs redacted without being cut.
 */
export function redactedLines(io: FetchLines): FetchLines {
  const quiet = (line: string) => (line.length <= MAX_REDACTED_INPUT ? redact(line) : redactURLs(line));
  return { out: (line) => io.out(quiet(line)), err: (line) => io.err(quiet(line)) };
}

/**
 * Places `spec` as model `name`; `what` names the version in the lines (`m version 3`, `hf://org/m@main (commit
 * <sha>)`). Returns the exit status; a refusal before any byte is a {@link CliError}.
 */
export async function placeVersion(
  name: string,
  spec: ModelVersionSpec,
  config: DownloaderConfig,
  logger: Logger,
  what: string,
  io: FetchLines,
): Promise<number> {
  const started = Date.now();
  let target: string | undefined;
  try {
    target = await preflight(name, spec, config);
  } catch (e) {
    if (e instanceof DownloadRefused) throw new CliError(`${e.reason}: ${redact(e.message)}`);
    throw e;
  }
  if (target === undefined) {
    io.out(`${what} is already in ${versionPath(config.root, name, spec)}`);
    return 0;
  }
  const p = await downloadVersion(name, spec, { ...config, logger }, newProgress(name, spec, config.rule));
  const seconds = ((Date.now() - started) / 1000).toFixed(1);
  if (p.state === 'Ready') {
    io.out(
      `fetched ${what}: ${p.filesDone} files, ${p.bytesDone} bytes into ${target} in ${seconds} s (${p.localHits} local hits, ${p.hardLinks} hard links)`,
    );
    return 0;
  }
  io.err(`peerload fetch: ${p.reason}: ${p.error}`);
  return 1;
}
