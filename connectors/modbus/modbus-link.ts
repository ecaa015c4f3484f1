/**
 * One Modbus connection (a TCP socket or a serial port) shared by every connector that addresses it: units
 * behind one TCP gateway, or several unit ids on one RS-485 bus. Requests go one at a time, in order (a serial
 * bus carries one transaction at a time; many PLCs handle TCP requests one by one as well), each with the
 * calling unit id and its own timeout. The only module that imports `modbus-serial`.
 *
 * A link that failed (socket closed, port error) is marked broken; the pool hands out a fresh one to the next
 * connector that starts, while the broken one lives until its last user released it.
 */
import type modbusSerial from 'modbus-serial';
import type { ModbusTable } from './schema.js';
import { systemErrorReason } from '../../src/util/errors.js';
import { DeadlineError, withDeadline } from '../polling.js';
import { onFirstUse } from '../../src/util/on-first-use.js';

export type LinkTarget =
  | { readonly transport: 'tcp'; readonly host: string; readonly port: number }
  | {
      readonly transport: 'rtu';
      readonly path: string;
      readonly baudRate: number;
      readonly parity: 'none' | 'even' | 'odd';
      readonly dataBits: 7 | 8;
      readonly stopBits: 1 | 2;
    };

/**
 * A Modbus exception response (the device answered, but refused), e.g. `read holding 0+11: exception 2
 * "illegal data address"`.
 */
export class ModbusException extends Error {
  override readonly name = 'ModbusException';
  constructor(
    readonly code: number,
    what: string,
  ) {
    super(`${what}: exception ${code} "${EXCEPTION_NAMES[code] ?? 'unknown exception'}"`);
  }
}

/** The request got no (valid) answer: timeout, closed socket, port error. The message says what and why. */
export class LinkError extends Error {
  override readonly name = 'LinkError';
}

/** Exception codes, named as in the Modbus Application Protocol Specification v1.1b3 §7. */
const EXCEPTION_NAMES: Readonly<Record<number, string>> = {
  1: 'illegal function',
  2: 'illegal data address',
  3: 'illegal data value',
  4: 'server device failure',
  5: 'acknowledge',
  6: 'server device busy',
  8: 'memory parity error',
  10: 'gateway path unavailable',
  11: 'gateway target device failed to respond',
};

/**
 * Why a request or connect failed, in a few words: `no answer within 1000 ms`, `connection refused`. modbus-serial
 * rejects with plain objects (not Errors) for timeouts and a closed port, so nothing here assumes an Error.
 */
export function failureReason(err: unknown, timeoutMs: number): string {
  const e = (typeof err === 'object' && err !== null ? err : {}) as {
    name?: unknown;
    code?: unknown;
    errno?: unknown;
    message?: unknown;
  };
  if (
    err instanceof DeadlineError ||
    e.name === 'TransactionTimedOutError' ||
    e.code === 'ETIMEDOUT' ||
    e.errno === 'ETIMEDOUT'
  ) {
    return `no answer within ${timeoutMs} ms`;
  }
  if (e.name === 'PortNotOpenError') return 'not connected';
  const system = systemErrorReason(err);
  if (system !== undefined) return system;
  if (typeof e.message === 'string' && e.message !== '') return e.message;
  return typeof err === 'string' ? err : 'unknown error';
}

/** Modbus exception codes that mean "this address range is wrong" (split the block), not "device trouble". */
export const ADDRESS_EXCEPTIONS: ReadonlySet<number> = new Set([2, 3]);

export interface LinkStats {
  /** Requests sent on this link (reads and writes). */
  requests: number;
}

// A CommonJS package whose module.exports has the client class as `default`; loaded with the first link.
const loadModbusSerial = onFirstUse<typeof modbusSerial>('modbus-serial');

/** Slack on top of the Modbus timeout before our own deadline fires (the library normally answers first). */
const DEADLINE_SLACK_MS = 250;

export class ModbusLink {
  readonly key: string;
  readonly stats: LinkStats = { requests: 0 };
  /** Users holding this link (connectors between start and stop). */
  users = 0;
  broken = false;
  private readonly client = new (loadModbusSerial().default)();
  private opening: Promise<void> | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private readonly closeListeners = new Set<(err: Error) => void>();

  constructor(
    readonly target: LinkTarget,
    private readonly counters: LinkStats = { requests: 0 },
  ) {
    this.key = linkKey(target);
    // Without a listener an 'error' event would throw; errors surface through the failing requests and 'close'.
    this.client.on('error', (err: unknown) => this.fail(new LinkError(failureReason(err, 0))));
    this.client.on('close', () => this.fail(new LinkError('connection closed')));
  }

  get isOpen(): boolean {
    return !this.broken && this.client.isOpen;
  }

  /** Opens the connection once; concurrent callers share the attempt. */
  open(timeoutMs: number): Promise<void> {
    if (this.broken) return Promise.reject(new LinkError('connection closed'));
    if (this.client.isOpen) return Promise.resolve();
    this.opening ??= this.connect(timeoutMs).finally(() => {
      this.opening = undefined;
    });
    return this.opening;
  }

  /** Called when the link fails; listeners are the connectors using it. */
  onClose(listener: (err: Error) => void): () => void {
    this.closeListeners.add(listener);
    return () => this.closeListeners.delete(listener);
  }

  read(
    unitId: number,
    table: ModbusTable,
    address: number,
    count: number,
    timeoutMs: number,
  ): Promise<readonly number[] | readonly boolean[]> {
    return this.enqueue(unitId, timeoutMs, `read ${table} ${address}+${count}`, async () => {
      switch (table) {
        case 'coil':
          return (await this.client.readCoils(address, count)).data.slice(0, count);
        case 'discrete':
          return (await this.client.readDiscreteInputs(address, count)).data.slice(0, count);
        case 'input':
          return (await this.client.readInputRegisters(address, count)).data;
        case 'holding':
          return (await this.client.readHoldingRegisters(address, count)).data;
      }
    });
  }

  /** FC 5, or FC 15 with `multiple`. */
  writeCoil(unitId: number, address: number, state: boolean, multiple: boolean, timeoutMs: number): Promise<void> {
    return this.enqueue(unitId, timeoutMs, `write coil ${address}`, async () => {
      if (multiple) await this.client.writeCoils(address, [state]);
      else await this.client.writeCoil(address, state);
    });
  }

  /** FC 6 for one register (unless `multiple`), FC 16 otherwise. */
  writeRegisters(
    unitId: number,
    address: number,
    values: readonly number[],
    multiple: boolean,
    timeoutMs: number,
  ): Promise<void> {
    return this.enqueue(unitId, timeoutMs, `write holding ${address}+${values.length}`, async () => {
      if (values.length === 1 && !multiple) await this.client.writeRegister(address, values[0]);
      else await this.client.writeRegisters(address, [...values]);
    });
  }

  /** Closes the connection; pending requests fail. */
  close(): Promise<void> {
    this.broken = true;
    return new Promise((resolve) => {
      if (this.target.transport === 'tcp' || !this.client.isOpen) {
        // destroy() resets a TCP socket at once (end() could wait on a half-open peer) and cancels pending
        // transactions; an RTU port that never opened has nothing to close.
        this.client.destroy(() => resolve());
        return;
      }
      this.client.close(() => resolve());
    });
  }

  private async connect(timeoutMs: number): Promise<void> {
    const t = this.target;
    const attempt =
      t.transport === 'tcp'
        ? this.client.connectTCP(t.host, { port: t.port })
        : this.client.connectRTUBuffered(t.path, {
            baudRate: t.baudRate,
            parity: t.parity,
            dataBits: t.dataBits,
            stopBits: t.stopBits,
          });
    try {
      await withDeadline(attempt, timeoutMs, 'connect', () => this.client.destroy(() => undefined));
    } catch (err) {
      this.broken = true;
      throw new LinkError(`connect: ${failureReason(err, timeoutMs)}`);
    }
  }

  private enqueue<T>(unitId: number, timeoutMs: number, what: string, request: () => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      if (!this.isOpen) throw new LinkError(`${what}: not connected`);
      this.client.setID(unitId);
      this.client.setTimeout(timeoutMs);
      this.stats.requests++;
      this.counters.requests++;
      try {
        return await withDeadline(request(), timeoutMs + DEADLINE_SLACK_MS, what);
      } catch (err) {
        throw classify(err, what, timeoutMs);
      }
    };
    const result = this.queue.then(run, run);
    // The queue only orders requests; each caller handles its own outcome.
    this.queue = result.catch(() => undefined);
    return result;
  }

  private fail(err: Error): void {
    if (this.broken) return;
    this.broken = true;
    for (const listener of this.closeListeners) listener(err);
  }
}

/** One error with one message (what, why): no cause chain that would repeat it in the log. */
function classify(err: unknown, what: string, timeoutMs: number): Error {
  const code = (err as { modbusCode?: unknown } | null)?.modbusCode;
  if (typeof code === 'number') return new ModbusException(code, what);
  return new LinkError(`${what}: ${failureReason(err, timeoutMs)}`);
}

export function linkKey(target: LinkTarget): string {
  return target.transport === 'tcp' ? `tcp://${target.host}:${target.port}` : `rtu:${target.path}`;
}

/** The links of one gateway, keyed by address; created by the factory, so there is no module-level state. */
export class LinkPool {
  /** Requests sent on every link of this pool, ever (for stats and the benchmark). */
  readonly stats: LinkStats = { requests: 0 };
  private readonly links = new Map<string, ModbusLink>();

  acquire(target: LinkTarget): ModbusLink {
    const key = linkKey(target);
    let link = this.links.get(key);
    if (!link || link.broken) {
      link = new ModbusLink(target, this.stats);
      this.links.set(key, link);
    }
    link.users++;
    return link;
  }

  async release(link: ModbusLink): Promise<void> {
    link.users--;
    if (link.users > 0) return;
    if (this.links.get(link.key) === link) this.links.delete(link.key);
    await link.close();
  }
}
