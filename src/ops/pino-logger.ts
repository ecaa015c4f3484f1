/**
 * The `Logger` (util/logger.ts) built on pino: the root logger, JSON lines by default, pino-pretty for people.
 * Both write synchronously, so a `fatal` line logged just before `process.exit()` reaches the terminal or the journal.
 * An error is logged through `errorLogFields` (util/errors.ts): the cause in words, a stack only for a bug
 * (docs/architecture.md#errors-and-logs).
 */
import { isatty } from 'node:tty';
import { pino } from 'pino';
import type * as PinoPretty from 'pino-pretty';
import type { Logger } from '../util/logger.js';
import { onFirstUse } from '../util/on-first-use.js';

/** pino-pretty only for a terminal or `format: pretty`: a service logging JSON never loads it. */
const loadPretty = onFirstUse<typeof PinoPretty>('pino-pretty');

export type LogLevel = 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace';

/** Structurally config's `LogConfig`; ops/ does not import config/ (docs/architecture.md#dependency-rules). */
export interface LogSettings {
  readonly level: LogLevel;
  readonly format: 'json' | 'pretty' | 'auto';
  readonly auditFile?: string;
}

/**
 * The last warn/error and audit lines, kept as the JSON text pino wrote (parsed only when someone asks): the web
 * console's log view. A line is kept when its level is warn or above, or it comes from the audit log.
 */
export class LogRing {
  private readonly lines: string[] = [];
  private next = 0;
  constructor(readonly capacity = 500) {}

  /** pino's stream contract: one serialized line per call. */
  write(line: string): void {
    if (!line.includes('"mod":"audit"') && levelOf(line) < 40) return;
    if (this.lines.length < this.capacity) this.lines.push(line);
    else this.lines[this.next] = line;
    this.next = (this.next + 1) % this.capacity;
  }

  /** Oldest first. */
  entries(): Record<string, unknown>[] {
    const ordered =
      this.lines.length < this.capacity
        ? this.lines
        : [...this.lines.slice(this.next), ...this.lines.slice(0, this.next)];
    return ordered.map((line) => JSON.parse(line) as Record<string, unknown>);
  }
}

/** The numeric level of a pino JSON line (`"level":40`), read without parsing the line. */
function levelOf(line: string): number {
  const at = line.indexOf('"level":');
  return at < 0 ? 0 : Number.parseInt(line.slice(at + 8, at + 10), 10);
}

export interface RootLogger extends Logger {
  /** Changes the level of this logger and of every child that did not set its own. */
  setLevel(level: LogLevel): void;
}

export function createLogger(
  settings: LogSettings,
  opts: { destination?: NodeJS.WritableStream | number; ring?: LogRing } = {},
): RootLogger {
  const destination = opts.destination ?? 1;
  const isTty =
    typeof destination === 'number' ? isatty(destination) : (destination as { isTTY?: boolean }).isTTY === true;
  const isPretty = settings.format === 'pretty' || (settings.format === 'auto' && isTty);
  const stream = isPretty
    ? // One line per event, fields after the message; only an error logged with `err` (a bug) adds its stack below.
      loadPretty().build({
        destination,
        sync: true,
        colorize: isTty,
        translateTime: 'SYS:standard',
        ignore: 'hostname',
        singleLine: true,
      })
    : typeof destination === 'number'
      ? pino.destination({ dest: destination, sync: true })
      : destination;
  const options = { level: settings.level, redact: ['password', '*.password'] };
  const log =
    opts.ring === undefined
      ? pino(options, stream)
      : pino(
          options,
          pino.multistream([
            { stream, level: 'trace' },
            { stream: opts.ring, level: 'info' },
          ]),
        );
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
export function createAuditLogger(log: Logger, auditFile: string | undefined, ring?: LogRing): Logger {
  if (auditFile === undefined) return log.child({ mod: 'audit' });
  const file = pino.destination({ dest: auditFile, sync: true, mkdir: true, append: true });
  const options = { level: 'info', base: { mod: 'audit' } };
  return ring === undefined
    ? pino(options, file)
    : pino(
        options,
        pino.multistream([
          { stream: file, level: 'info' },
          { stream: ring, level: 'info' },
        ]),
      );
}
