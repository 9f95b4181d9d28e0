import { parseArgs, type ParseArgsConfig } from 'node:util';
import { CliError } from './errors.ts';

/**
 * `util.parseArgs` with strict checking. Its errors become one line in the CLI's words followed by the command's
 * usage, instead of parseArgs' own text (which suggests `--` tricks that do not apply here).
 */
export function parseCommandArgs<T extends NonNullable<ParseArgsConfig['options']>>(
  argv: string[],
  options: T,
  allowPositionals = false,
  usage?: string,
) {
  try {
    return parseArgs({ args: argv, options, strict: true, allowPositionals });
  } catch (err) {
    throw new CliError(argsErrorMessage(err, usage));
  }
}

/** One line for a parseArgs error, then the usage when given. */
export function argsErrorMessage(err: unknown, usage?: string): string {
  const e = err as Error & { code?: string };
  const quoted = /'([^']+)'/.exec(e.message)?.[1];
  let line: string;
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION':
      line = `unknown option ${quoted?.split(' ')[0] ?? e.message}`;
      break;
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL':
      line = `unexpected argument ${quoted ? `"${quoted}"` : e.message}`;
      break;
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      // "Option '--x <value>' argument missing" / "Option '--flag' does not take an argument"
      line = quoted
        ? `${quoted.split(' ')[0]} ${/missing/.test(e.message) ? 'needs a value' : 'takes no value'}`
        : e.message;
      break;
    default:
      line = e.message;
  }
  return usage ? `${line}\n\n${usage}` : line;
}
