import { parseArgs, type ParseArgsConfig } from 'node:util';
import { CliError } from './errors.ts';

/** `util.parseArgs` with strict checking, turning its TypeErrors into one-line CLI messages. */
export function parseCommandArgs<T extends NonNullable<ParseArgsConfig['options']>>(
  argv: string[],
  options: T,
  allowPositionals = false,
) {
  try {
    return parseArgs({ args: argv, options, strict: true, allowPositionals });
  } catch (err) {
    throw new CliError((err as Error).message);
  }
}
