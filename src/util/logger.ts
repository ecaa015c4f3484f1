/**
 * The logging surface every module sees. `ops/log.ts` implements it with pino; modules never import pino.
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
