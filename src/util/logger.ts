/**
 * The logging surface every module sees, declared here because util/ is what every module (connectors/ too) may
 * import. `ops/pino-logger.ts` implements it with pino; no other module imports pino.
 * Call style is pino's: facts in the object, what happened in the message.
 */
export interface LogFn {
  (obj: object, msg?: string): void;
  (msg: string): void;
}

export interface Logger {
  fatal: LogFn;
  error: LogFn;
  warn: LogFn;
  info: LogFn;
  debug: LogFn;
  trace: LogFn;
  child(bindings: Record<string, unknown>): Logger;
  isLevelEnabled(level: string): boolean;
}

const noop: LogFn = () => {};

/** A logger that discards everything: for unit tests and library use without a log. */
export const silentLogger: Logger = {
  fatal: noop,
  error: noop,
  warn: noop,
  info: noop,
  debug: noop,
  trace: noop,
  child: () => silentLogger,
  isLevelEnabled: () => false,
};
