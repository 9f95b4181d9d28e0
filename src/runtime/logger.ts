/** pino JSON logs: one line per event, ISO timestamps, `level` as a word, never a secret in a field. */
import { pino, type Logger, type LevelWithSilent, type DestinationStream } from 'pino';
import { redactDeep } from '../redact.ts';

export type { Logger };

export function createLogger(level: LevelWithSilent = 'info', destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      // The redaction boundary for logs: every argument (messages, fields, errors) passes it before pino sees it.
      hooks: {
        logMethod(args, method) {
          return method.apply(this, redactDeep(args) as Parameters<typeof method>);
        },
      },
      redact: {
        paths: ['token', '*.token', 'authorization', '*.authorization', 'password', '*.password'],
        censor: '[redacted]',
      },
    },
    destination ?? pino.destination({ fd: 1, sync: false }),
  );
}
