/**
 * The error catalogue. Every error that crosses a module boundary is an EdgeferryError with a stable
 * code `EF_<AREA>_<WHAT>`; codes are never reused. The README has one row per code.
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
  EF_UPLINK_SESSION_TAKEN: 'the central broker gave the uplink\'s session to another client with the same client id',
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
export function listenerBindError(what: string, host: string, port: number, err: NodeJS.ErrnoException): EdgeferryError {
  const reasons: Record<string, string> = {
    EADDRINUSE:
      `port ${port} is already in use by another program: another edgeferry, or a Mosquitto service (Debian's ` +
      `mosquitto package starts one on 1883)? \`ss -ltnp 'sport = :${port}'\` names it`,
    EACCES: `port ${port} may not be bound by this user: ports below 1024 need root or CAP_NET_BIND_SERVICE`,
    EADDRNOTAVAIL: `the address ${host} is not on this host`,
  };
  return new EdgeferryError('EF_LISTENER_BIND', `${what} ${host}:${port} cannot listen: ${reasons[err.code ?? ''] ?? err.message}`, { cause: err });
}

/** The catalogue code of anything thrown: its own, or EF_INTERNAL for an error nothing classified. */
export function errorCode(value: unknown): ErrorCode {
  return value instanceof EdgeferryError ? value.code : 'EF_INTERNAL';
}

/** The fields of a log line about an error: its code, and the problems of a configuration or else the error. */
export function errorLogFields(value: unknown): { code: ErrorCode; problems?: readonly ConfigProblem[]; err?: Error } {
  return value instanceof ConfigError ? { code: value.code, problems: value.problems } : { code: errorCode(value), err: asError(value) };
}

/** `EF_CODE: message`, the form in which the command line prints an error. */
export function describeError(value: unknown): string {
  return `${errorCode(value)}: ${asError(value).message}`;
}

/** Normalizes anything thrown into an Error, for logging. */
export function asError(value: unknown): Error {
  return value instanceof Error ? value : new Error(String(value));
}
