import {
  DAEMON_VERSION_HINT,
  DEFAULT_TASK_ID_RULE,
  canonicalURL,
  taskID,
  taskIdRule,
} from '../storage/taskid.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';

const USAGE = `Usage: peerload taskid <url> [--filter a,b] [--tag T] [--application A] [--piece-length N]
                      [--daemon-version V] [--canonical]

Prints the P2P network's task id of a download, as the peer daemon computes it, alone on one line.
--filter          query parameter names left out of the id (comma- or &-separated), e.g. X-Amz-Signature,X-Amz-Date
--daemon-version  the peer daemon (dragonfly-client) version: 1.4 (below 1.5.3: the query keeps its order),
                  1.5.3+ (sorted, as the manager computes it) or a version such as 1.4.2; default ${DEFAULT_TASK_ID_RULE}
                  (Dragonfly v2.5.1 bundles client 1.4.2)
--canonical       print the canonical URL the id is computed from instead of the id`;

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommandArgs(
    argv,
    {
      filter: { type: 'string', default: '' },
      tag: { type: 'string' },
      application: { type: 'string' },
      'piece-length': { type: 'string' },
      'daemon-version': { type: 'string', default: DEFAULT_TASK_ID_RULE },
      canonical: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    true,
  );
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (positionals.length !== 1) throw new CliError(`expected exactly one URL\n\n${USAGE}`);
  const url = positionals[0]!;
  try {
    new URL(url);
  } catch {
    throw new CliError(`"${url}" is not an absolute URL (e.g. https://bucket.s3.amazonaws.com/model.mar)`);
  }
  let pieceLength: number | undefined;
  if (values['piece-length'] !== undefined) {
    pieceLength = Number(values['piece-length']);
    if (!Number.isInteger(pieceLength) || pieceLength <= 0) {
      throw new CliError(
        `--piece-length must be a positive integer number of bytes, got "${values['piece-length']}"`,
      );
    }
  }
  const rule = taskIdRule(values['daemon-version']);
  if (rule === undefined) {
    throw new CliError(`--daemon-version ${DAEMON_VERSION_HINT}, got "${values['daemon-version']}"`);
  }
  const filter = values.filter
    .split(/[,&]/)
    .map((s) => s.trim())
    .filter(Boolean);
  console.log(
    values.canonical
      ? canonicalURL(url, filter, rule)
      : taskID({ url, filter, tag: values.tag, application: values.application, pieceLength, rule }),
  );
  return 0;
}
