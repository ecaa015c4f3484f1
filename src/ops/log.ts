/**
 * The root logger, built on pino: JSON lines by default, pino-pretty for people. Both write synchronously,
 * so a `fatal` line logged just before `process.exit()` reaches the terminal or the journal.
 */
import { isatty } from 'node:tty';
import { pino } from 'pino';
import { build as prettyStream } from 'pino-pretty';
import type { Logger } from '../util/logger.js';

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/** Structurally config's `LogConfig`; ops/ does not import config/ (docs/architecture.md#dependency-rules). */
export interface LogSettings {
  readonly level: LogLevel;
  readonly format: 'json' | 'pretty' | 'auto';
  readonly auditFile?: string;
}

export interface RootLogger extends Logger {
  /** Changes the level of this logger and of every child that did not set its own. */
  setLevel(level: LogLevel): void;
}

export function createLogger(
  settings: LogSettings,
  opts: { destination?: NodeJS.WritableStream | number } = {},
): RootLogger {
  const destination = opts.destination ?? 1;
  const isTty = typeof destination === 'number' ? isatty(destination) : (destination as { isTTY?: boolean }).isTTY === true;
  const isPretty = settings.format === 'pretty' || (settings.format === 'auto' && isTty);
  const stream = isPretty
    ? prettyStream({ destination, sync: true, colorize: isTty, translateTime: 'SYS:standard', ignore: 'hostname' })
    : typeof destination === 'number'
      ? pino.destination({ dest: destination, sync: true })
      : destination;
  const log = pino({ level: settings.level, redact: ['password', '*.password'] }, stream);
  // pino children read the level through their prototype (the root) until they set their own.
  return Object.assign(log, {
    setLevel(level: LogLevel) {
      log.level = level;
    },
  });
}

/**
 * The audit log: a child of the main log (`mod: audit`), or JSON lines appended to `auditFile` when one is set, so
 * that logins, refusals and PLC writes can be kept and shipped apart from the operational log.
 */
export function createAuditLogger(log: Logger, auditFile: string | undefined): Logger {
  if (auditFile === undefined) return log.child({ mod: 'audit' });
  return pino({ level: 'info', base: { mod: 'audit' } }, pino.destination({ dest: auditFile, sync: true, mkdir: true, append: true }));
}
