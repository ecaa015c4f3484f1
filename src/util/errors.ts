/**
 * The error catalogue. Every error that crosses a module boundary is an EdgeferryError with a stable
 * code `EF_<AREA>_<WHAT>`; codes are never reused. docs/troubleshooting.md#errors has one row per code.
 */
export const ErrorCodes = {
  EF_CONFIG_INVALID: 'the configuration file is invalid',
  EF_CONFIG_UNREADABLE: 'the configuration file cannot be read',
  EF_PROTOCOL_VIOLATION: 'an MQTT peer broke the protocol',
  EF_LISTENER_BIND: 'a listener could not bind its address',
  EF_STORE_OPEN: 'the data directory cannot be opened',
  EF_STORE_IN_USE: 'another edgeferry process holds the data directory',
  EF_STORE_WRITE: 'a write to the data directory failed',
  EF_STORE_FULL: 'the store reached its size limit, or the disk is full',
  EF_UPLINK_CONNECT: 'an uplink could not connect to its central broker',
  EF_UPLINK_REJECTED: 'the central broker rejected the uplink',
  EF_UPLINK_SESSION_TAKEN: "the central broker gave the uplink's session to another client with the same client id",
  EF_CONNECTOR_UNREACHABLE: 'a connector cannot reach its device',
  EF_CONNECTOR_WRITE: 'a write to a device was refused or failed',
  EF_INTERNAL: 'a broken invariant inside edgeferry',
} as const;

export type ErrorCode = keyof typeof ErrorCodes;

export class EdgeferryError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

export interface ConfigProblem {
  /** Key path in dotted form, e.g. `bridges.0.remote.urls.1`; `(root)` for the document itself. */
  readonly path: string;
  readonly message: string;
  /** `file:line:col` when the problem could be located in the source file. */
  readonly location?: string;
}

export class ConfigError extends EdgeferryError {
  readonly problems: readonly ConfigProblem[];
  constructor(
    file: string,
    problems: readonly ConfigProblem[],
    options?: { cause?: unknown; code?: 'EF_CONFIG_INVALID' | 'EF_CONFIG_UNREADABLE' },
  ) {
    super(options?.code ?? 'EF_CONFIG_INVALID', formatProblems(file, problems), options);
    this.problems = problems;
  }
}

function formatProblems(file: string, problems: readonly ConfigProblem[]): string {
  // The file as a whole (it cannot be read): one line.
  const [only] = problems;
  if (problems.length === 1 && only.path === '(root)' && only.location === undefined) return `${file}: ${only.message}`;
  const lines = problems.map((p) => `  ${p.location ?? file} ${p.path}: ${p.message}`);
  return `${file}: ${problems.length} problem${problems.length === 1 ? '' : 's'}\n${lines.join('\n')}`;
}

/** An MQTT protocol violation; `reasonCode` is the MQTT 5 reason code to send before closing. */
export class ProtocolError extends EdgeferryError {
  readonly reasonCode: number;
  constructor(reasonCode: number, message: string, options?: { cause?: unknown }) {
    super('EF_PROTOCOL_VIOLATION', message, options);
    this.reasonCode = reasonCode;
  }
}

export class StoreError extends EdgeferryError {}

export class UplinkError extends EdgeferryError {}

export class ConnectorError extends EdgeferryError {
  readonly connectorId: string;
  /** False when retrying cannot help (bad tag address, refused write); true for network trouble. */
  readonly retryable: boolean;
  constructor(
    code: 'EF_CONNECTOR_UNREACHABLE' | 'EF_CONNECTOR_WRITE',
    connectorId: string,
    message: string,
    options?: { cause?: unknown; retryable?: boolean },
  ) {
    super(code, message, options);
    this.connectorId = connectorId;
    this.retryable = options?.retryable ?? code === 'EF_CONNECTOR_UNREACHABLE';
  }
}

/**
 * A listener that cannot bind (`what`: `tcp listener`, `metrics endpoint`): EF_LISTENER_BIND in one line that
 * names the listener, its address and port, and what probably stands in the way.
 */
export function listenerBindError(
  what: string,
  host: string,
  port: number,
  err: NodeJS.ErrnoException,
): EdgeferryError {
  const reasons: Record<string, string> = {
    EADDRINUSE:
      `port ${port} is already in use by another program: another edgeferry, or a Mosquitto service (Debian's ` +
      `mosquitto package starts one on 1883)? \`ss -ltnp 'sport = :${port}'\` names it`,
    EACCES: `port ${port} may not be bound by this user: ports below 1024 need root or CAP_NET_BIND_SERVICE`,
    EADDRNOTAVAIL: `the address ${host} is not on this host`,
  };
  return new EdgeferryError(
    'EF_LISTENER_BIND',
    `${what} ${host}:${port} cannot listen: ${reasons[err.code ?? ''] ?? err.message}`,
    { cause: err },
  );
}

/** The catalogue code of anything thrown: its own, or EF_INTERNAL for an error nothing classified. */
export function errorCode(value: unknown): ErrorCode {
  return value instanceof EdgeferryError ? value.code : 'EF_INTERNAL';
}

/** Socket, serial port and DNS errors by their Node.js code, in words an operator reads. */
const SYSTEM_ERRORS: Readonly<Partial<Record<string, string>>> = {
  ECONNREFUSED: 'connection refused',
  ECONNRESET: 'connection reset by the peer',
  EPIPE: 'connection closed by the peer',
  ECONNABORTED: 'connection aborted',
  ETIMEDOUT: 'connection timed out',
  EHOSTUNREACH: 'host unreachable',
  ENETUNREACH: 'network unreachable',
  ENOTFOUND: 'host name not found',
  EAI_AGAIN: 'host name lookup failed',
  ENOENT: 'no such file or serial port',
  EACCES: 'permission denied',
  EBUSY: 'serial port in use',
};

/**
 * The reason for a socket or serial port error in a few words (`connection refused`), from its `code` or, as
 * device libraries wrap them in their own sentences, the code named in its message; undefined for other errors.
 */
export function systemErrorReason(err: unknown): string | undefined {
  const e = (typeof err === 'object' && err !== null ? err : {}) as { code?: unknown; message?: unknown };
  if (typeof e.code === 'string' && SYSTEM_ERRORS[e.code] !== undefined) return SYSTEM_ERRORS[e.code];
  if (typeof e.message !== 'string') return undefined;
  for (const [word] of e.message.matchAll(/\bE[A-Z_]+\b/g))
    if (SYSTEM_ERRORS[word] !== undefined) return SYSTEM_ERRORS[word];
  return undefined;
}

/** Error classes that only a mistake in the code throws: never an expected operational error, whatever wraps them. */
const BUG_CLASSES = [TypeError, RangeError, ReferenceError, SyntaxError, EvalError];

/**
 * Whether `value` is an expected operational error (docs/architecture.md#errors-and-logs): one of our typed errors (not
 * EF_INTERNAL), or a socket/serial/DNS error, none of whose causes is a bug (a TypeError wrapped on its way up).
 */
export function isOperationalError(value: unknown): boolean {
  const seen = new Set<unknown>();
  let typed = false;
  for (let e: unknown = value; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (BUG_CLASSES.some((c) => e instanceof c)) return false;
    if (e instanceof EdgeferryError) {
      if (e.code === 'EF_INTERNAL') return false;
      typed = true;
    } else if (!typed && systemErrorReason(e) === undefined) return false;
  }
  return typed || systemErrorReason(value) !== undefined;
}

export interface ErrorLogFields {
  /** The catalogue code; absent for a bare system error, which no catalogue entry classified. */
  code?: ErrorCode;
  /** The cause in words, one line: put it in the message too. */
  reason: string;
  /** The system error's code (`ECONNREFUSED`), the call and the peer, from the error or its causes. */
  errno?: string;
  syscall?: string;
  address?: string;
  port?: number;
  problems?: readonly ConfigProblem[];
  /** Only for a bug: the error itself, whose stack pino writes. */
  err?: Error;
}

/**
 * The fields of a log line about an error. An expected operational error (`isOperationalError`) is its code, its
 * reason in words and the system error's details: one line, no stack. A configuration error adds its problems.
 * Anything else is a bug, logged with its stack.
 */
export function errorLogFields(value: unknown): ErrorLogFields {
  const error = asError(value);
  const reason = error.message.split('\n', 1)[0];
  const code = value instanceof EdgeferryError ? value.code : undefined;
  if (value instanceof ConfigError) return { code: value.code, reason, problems: value.problems };
  if (!isOperationalError(value)) return { code: errorCode(value), reason, err: error };
  const fields: ErrorLogFields = code === undefined ? { reason } : { code, reason };
  const system = systemCause(value);
  if (system === undefined) return fields;
  if (typeof system.code === 'string') fields.errno = system.code;
  if (typeof system.syscall === 'string') fields.syscall = system.syscall;
  if (typeof system.address === 'string') fields.address = system.address;
  if (typeof system.port === 'number') fields.port = system.port;
  // A bare socket error says `connect ECONNREFUSED 127.0.0.1:1883`: in words, `connection refused (127.0.0.1:1883)`.
  if (system === value && fields.address !== undefined) {
    fields.reason = `${systemErrorReason(system)} (${fields.address}${fields.port === undefined ? '' : `:${fields.port}`})`;
  }
  return fields;
}

/** The first error in the cause chain that carries a system error code. */
function systemCause(value: unknown): (NodeJS.ErrnoException & { address?: unknown; port?: unknown }) | undefined {
  const seen = new Set<unknown>();
  for (let e: unknown = value; e instanceof Error && !seen.has(e); e = e.cause) {
    seen.add(e);
    if (typeof (e as NodeJS.ErrnoException).code === 'string' && systemErrorReason(e) !== undefined)
      return e as NodeJS.ErrnoException;
  }
  return undefined;
}

/** `EF_CODE: message`, the form in which the command line prints an error. */
export function describeError(value: unknown): string {
  return `${errorCode(value)}: ${asError(value).message}`;
}

/** Normalizes anything thrown into an Error, for logging. */
export function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
