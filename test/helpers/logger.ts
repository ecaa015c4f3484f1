/** A Logger for in-process tests that keeps what was logged at error and fatal, and drops the rest. */
import type { LogFn, Logger } from '../../src/util/logger.js';

export interface LoggedError {
  readonly obj: Record<string, unknown>;
  readonly msg: string | undefined;
}

export function recordingLogger(errors: LoggedError[]): Logger {
  const noop: LogFn = () => {};
  const record = ((first: unknown, msg?: string) => {
    errors.push(typeof first === 'string' ? { obj: {}, msg: first } : { obj: first as Record<string, unknown>, msg });
  }) as LogFn;
  const log: Logger = {
    fatal: record,
    error: record,
    warn: noop,
    info: noop,
    debug: noop,
    trace: noop,
    child: () => log,
    isLevelEnabled: () => false,
  };
  return log;
}
