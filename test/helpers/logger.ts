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

export interface LogLine {
  readonly level: string;
  readonly fields: Record<string, unknown>;
  readonly msg: string;
}

/** A Logger that keeps every line at every level, for tests of what an operator reads in the log. */
export function captureLogger(lines: LogLine[]): Logger {
  const fn =
    (level: string): LogFn =>
    (a: object | string, b?: string) => {
      lines.push(
        typeof a === 'string'
          ? { level, fields: {}, msg: a }
          : { level, fields: a as Record<string, unknown>, msg: b ?? '' },
      );
    };
  const log: Logger = {
    fatal: fn('fatal'),
    error: fn('error'),
    warn: fn('warn'),
    info: fn('info'),
    debug: fn('debug'),
    trace: fn('trace'),
    child: () => log,
    isLevelEnabled: () => true,
  };
  return log;
}
