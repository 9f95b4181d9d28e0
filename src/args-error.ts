/**
 * What a `util.parseArgs` error says, in one line: shared by the CLI's commands (src/cli/args.ts) and the
 * operator's flags (src/config.ts), which must not depend on the CLI.
 */
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
