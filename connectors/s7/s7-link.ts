/**
 * One ISO-on-TCP connection to one S7 CPU: TCP connect, COTP connection (rack/slot or TSAPs), setup communication
 * (the PDU size the CPU grants bounds every request), then one request at a time, each with its own deadline. An
 * answer is matched to its request by the PDU reference, so a late answer to a request that timed out is dropped.
 * Any socket error or malformed frame closes the link and tells its listener once.
 */
import { Socket } from 'node:net';
import { systemErrorReason } from '../../src/util/errors.js';
import { DeadlineError, withDeadline } from '../polling.js';
import type { ItemAddress, ItemResult, ReadItem } from './s7comm.js';
import {
  answerRef,
  connectionRequest,
  FrameError,
  parseConnectionConfirm,
  parseReadVar,
  parseSetupCommunication,
  parseWriteVar,
  readVar,
  S7Error,
  setupCommunication,
  TpktReader,
  writeVar,
} from './s7comm.js';

export interface S7Target {
  readonly host: string;
  readonly port: number;
  readonly localTsap: number;
  readonly remoteTsap: number;
  /** The PDU size asked for in setup communication; the CPU may grant less. */
  readonly pduSize: number;
}

/** The request got no (valid) answer: timeout, closed socket, malformed frame. The message says what and why. */
export class LinkError extends Error {
  override readonly name = 'LinkError';
}

export interface LinkStats {
  /** Requests (PDUs) sent: reads and writes. */
  requests: number;
}

type Waiter = { ref: number; resolve: (tpkt: Buffer) => void; reject: (err: Error) => void };

export class S7Link {
  /** Granted by the CPU in setup communication; 0 until open. */
  pduSize = 0;
  private socket: Socket | undefined;
  private closed = false;
  private ref = 0;
  private waiter: Waiter | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private closeListener: ((err: Error) => void) | undefined;

  constructor(
    readonly target: S7Target,
    private readonly stats: LinkStats,
  ) {}

  get isOpen(): boolean {
    return this.socket !== undefined && !this.closed;
  }

  /** TCP, COTP and setup communication, all within `timeoutMs`. */
  async open(timeoutMs: number): Promise<void> {
    const { host, port } = this.target;
    const socket = new Socket();
    this.socket = socket;
    const reader = new TpktReader();
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      try {
        reader.push(chunk, (tpkt) => this.answer(tpkt));
      } catch (err) {
        this.fail(err instanceof Error ? err : new FrameError(String(err)));
      }
    });
    socket.on('error', (err) => this.fail(new LinkError(systemErrorReason(err) ?? err.message)));
    socket.on('close', () => this.fail(new LinkError('connection closed by the PLC')));
    const connect = async (): Promise<void> => {
      await new Promise<void>((resolve, reject) => {
        socket.once('connect', resolve);
        socket.once('error', reject);
        socket.connect(port, host);
      });
      parseConnectionConfirm(await this.exchange(connectionRequest(this.target.localTsap, this.target.remoteTsap), 0));
      const ref = this.nextRef();
      this.pduSize = parseSetupCommunication(await this.exchange(setupCommunication(ref, this.target.pduSize), ref));
    };
    try {
      await withDeadline(connect(), timeoutMs, 'connect');
    } catch (err) {
      this.destroy();
      throw new LinkError(`connect: ${reason(err, timeoutMs)}`);
    }
  }

  /** The one listener told when the link fails after open (the connector reports its device lost). */
  onClose(listener: (err: Error) => void): void {
    this.closeListener = listener;
  }

  /** One Read Var request; `items` must fit the PDU size (see `readRoom`). */
  read(items: readonly ReadItem[], timeoutMs: number): Promise<ItemResult[]> {
    const what = `read ${items.length} item${items.length === 1 ? '' : 's'}`;
    return this.enqueue(what, timeoutMs, async (ref) =>
      parseReadVar(await this.exchange(readVar(ref, items), ref), items, what),
    );
  }

  /** One Write Var request; resolves with the item's return code (0xff: written). */
  write(item: ItemAddress, value: Buffer | { bit: number; state: boolean }, timeoutMs: number): Promise<number> {
    const what = 'write';
    return this.enqueue(what, timeoutMs, async (ref) =>
      parseWriteVar(await this.exchange(writeVar(ref, item, value), ref), what),
    );
  }

  close(): void {
    this.closeListener = undefined;
    this.destroy();
  }

  private nextRef(): number {
    this.ref = (this.ref % 0xffff) + 1;
    return this.ref;
  }

  private enqueue<T>(what: string, timeoutMs: number, request: (ref: number) => Promise<T>): Promise<T> {
    const run = async (): Promise<T> => {
      if (!this.isOpen) throw new LinkError(`${what}: not connected`);
      this.stats.requests++;
      try {
        return await withDeadline(request(this.nextRef()), timeoutMs, what, () => {
          this.waiter = undefined; // a late answer finds no waiter and is dropped
        });
      } catch (err) {
        if (err instanceof S7Error) throw err; // the PLC answered, and refused: the link is fine
        // A malformed answer leaves the stream out of step: the link is done.
        if (err instanceof FrameError) {
          this.fail(err);
          throw new LinkError(err.message);
        }
        throw new LinkError(`${what}: ${reason(err, timeoutMs)}`);
      }
    };
    const result = this.queue.then(run, run);
    this.queue = result.catch(() => undefined);
    return result;
  }

  /** Sends a frame and waits for the answer with PDU reference `ref` (0: the COTP confirm, which has none). */
  private exchange(frame: Buffer, ref: number): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      if (this.closed || !this.socket) {
        reject(new LinkError('not connected'));
        return;
      }
      this.waiter = { ref, resolve, reject };
      this.socket.write(frame);
    });
  }

  private answer(tpkt: Buffer): void {
    const waiter = this.waiter;
    if (!waiter) return;
    if (waiter.ref !== 0 && answerRef(tpkt) !== waiter.ref) return; // the answer to a request that timed out
    this.waiter = undefined;
    waiter.resolve(tpkt);
  }

  private fail(err: Error): void {
    if (this.closed) return;
    this.destroy();
    this.waiter?.reject(err);
    this.waiter = undefined;
    const listener = this.closeListener;
    this.closeListener = undefined;
    listener?.(err);
  }

  private destroy(): void {
    this.closed = true;
    this.socket?.destroy();
  }
}

function reason(err: unknown, timeoutMs: number): string {
  if (err instanceof DeadlineError) return `no answer within ${timeoutMs} ms`;
  const system = systemErrorReason(err);
  if (system !== undefined) return system;
  return err instanceof Error ? err.message : String(err);
}
