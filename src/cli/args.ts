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

/** The flags naming a bucket's location, shared by the subcommands that take one (`--object-storage` and its fields). */
export const OBJECT_STORAGE_FLAGS = {
  'object-storage': { type: 'string' },
  bucket: { type: 'string' },
  container: { type: 'string' },
  'account-name': { type: 'string' },
  region: { type: 'string' },
  endpoint: { type: 'string' },
} as const;
