import { redact } from '../redact.ts';

/**
 * An error the user can fix: printed as one line, no stack trace. Its message is redacted (src/redact.ts): it often
 * quotes an argument, and a storage URI argument may be presigned or carry a password.
 */
export class CliError extends Error {
  readonly exitCode: number;
  constructor(message: string, exitCode = 2) {
    super(redact(message));
    this.name = 'CliError';
    this.exitCode = exitCode;
  }
}
