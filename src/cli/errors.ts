/** How the command line ends and reports errors: exit codes, and errors with their EF_ code (docs/troubleshooting.md#errors). */
import { createLogger } from '../ops/pino-logger.js';
import { asError, describeError, errorLogFields } from '../util/errors.js';

/** Exit codes (0 is ok). systemd does not restart on `config` and `store`: restarting cannot help. */
export const EXIT = {
  runtime: 1,
  /** Bad configuration or usage. */
  config: 2,
  /** The data directory cannot be opened, or another edgeferry holds it. */
  store: 3,
} as const;

export const LOG_FORMATS = ['json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

/**
 * An error before the log exists (the configuration cannot be used): with `--log-format json` one fatal log line
 * like those that follow it (what a log shipper parses), else `edgeferry: EF_CODE: message` on stderr.
 */
export function reportEarlyError(err: unknown, format: LogFormat | undefined): void {
  if (format === 'json')
    createLogger({ level: 'info', format: 'json' }).fatal(errorLogFields(err), asError(err).message);
  else process.stderr.write(`edgeferry: ${describeError(err)}\n`);
}
