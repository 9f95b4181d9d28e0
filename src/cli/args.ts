import { parseArgs, type ParseArgsConfig } from 'node:util';
import { argsErrorMessage } from '../args-error.ts';
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
