import { canonicalURL, taskID } from '../storage/taskid.ts';
import { parseCommandArgs } from './args.ts';
import { CliError } from './errors.ts';

const USAGE = `Usage: peerload taskid <url> [--filter a,b] [--tag T] [--application A] [--piece-length N] [--canonical]

Prints the P2P network's task id of a download (the current peer daemon's algorithm), alone on one line.
--filter        query parameter names left out of the id (comma- or &-separated), e.g. X-Amz-Signature,X-Amz-Date
                (default: none)
--tag           task tag (default: none)
--application   task application (default: none)
--piece-length  piece length in bytes (default: none, the peer daemon's own)
--canonical     print the canonical URL the id is computed from instead of the id`;

export async function run(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommandArgs(
    argv,
    {
      filter: { type: 'string', default: '' },
      tag: { type: 'string' },
      application: { type: 'string' },
      'piece-length': { type: 'string' },
      canonical: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    true,
    USAGE,
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
  const filter = values.filter
    .split(/[,&]/)
    .map((s) => s.trim())
    .filter(Boolean);
  console.log(
    values.canonical
      ? canonicalURL(url, filter)
      : taskID({ url, filter, tag: values.tag, application: values.application, pieceLength }),
  );
  return 0;
}
