/**
 * A raw-socket MQTT client for tests that need exact bytes: malformed input, exact flags and properties, acks
 * withheld on purpose, a reader that stops reading. It writes hand-made bytes or mqtt-packet-generated packets and
 * parses everything the broker sends back with mqtt-packet. Every wait is bounded.
 *
 *   const c = d.add(await RawClient.open(gw.port, { protocolVersion: 5 }));
 *   const connack = await c.connect({ clientId: 'raw-1' });
 *   c.write([0x82, 0x00]);                            // hand-made bytes
 *   const disconnect = await c.expect('disconnect');  // the next DISCONNECT not yet taken
 *   await c.waitForClose(2000);
 *
 * Packets arrive in `received` in order; `expect`/`take` hand each one out at most once, so a test can assert on
 * a sequence. `ping()` is a barrier: the broker answers PINGREQ after everything it queued before it, so the
 * packets received before the PINGRESP are all the broker had sent at that point.
 */
import { connect as tcpConnect, type Socket } from 'node:net';
import mqttPacket from 'mqtt-packet';
import type {
  IConnackPacket,
  IConnectPacket,
  IDisconnectPacket,
  IPublishPacket,
  ISubackPacket,
  ISubscription,
  Packet,
  PacketCmd,
} from 'mqtt-packet';

export type { Packet, PacketCmd };
export type ProtocolVersion = 3 | 4 | 5;

export interface RawClientOptions {
  protocolVersion?: ProtocolVersion;
  host?: string;
  /** Milliseconds to wait for the TCP connection (default 5000). */
  openTimeoutMs?: number;
}

/** CONNECT fields; `cmd`, `protocolId` and `protocolVersion` are filled in from the client's version. */
export type ConnectOptions = Partial<Omit<IConnectPacket, 'cmd'>>;

const DEFAULT_WAIT_MS = 5000;

export class RawClient {
  /** Every packet parsed from the broker's bytes, in arrival order. */
  readonly received: Packet[] = [];
  /** How many bytes arrived in total (parsed or not). */
  bytesReceived = 0;
  /** Every byte the broker sent, for exact-bytes assertions. Capped at 1 MB to keep floods cheap. */
  rawBytes: Buffer = Buffer.alloc(0);
  /** The first parse error, if the broker sent something mqtt-packet could not parse. */
  parseError: Error | undefined;
  /** `performance.now()` when the socket closed, undefined while open. */
  closedAtMs: number | undefined;
  /** The socket error that preceded the close, if any (ECONNRESET...). */
  socketError: Error | undefined;
  readonly openedAtMs = performance.now();

  private readonly taken = new Set<number>();
  private readonly waiters = new Set<() => void>();
  private readonly closedPromise: Promise<void>;

  private constructor(
    readonly socket: Socket,
    public version: ProtocolVersion,
  ) {
    const parser = mqttPacket.parser({ protocolVersion: version });
    parser.on('packet', (packet: Packet) => {
      this.received.push(packet);
      this.notify();
    });
    parser.on('error', (err: Error) => {
      this.parseError ??= err;
      this.notify();
    });
    socket.on('data', (chunk: Buffer) => {
      this.bytesReceived += chunk.length;
      if (this.rawBytes.length < 1 << 20) this.rawBytes = Buffer.concat([this.rawBytes, chunk]);
      parser.parse(chunk);
    });
    socket.on('error', (err) => {
      this.socketError ??= err;
    });
    this.closedPromise = new Promise((resolve) =>
      socket.once('close', () => {
        this.closedAtMs = performance.now();
        this.notify();
        resolve();
      }),
    );
  }

  /** Opens a TCP connection to 127.0.0.1:`port` (nothing is sent yet). */
  static open(port: number, options: RawClientOptions = {}): Promise<RawClient> {
    const timeoutMs = options.openTimeoutMs ?? DEFAULT_WAIT_MS;
    return new Promise((resolve, reject) => {
      const socket = tcpConnect(port, options.host ?? '127.0.0.1');
      socket.setNoDelay(true);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`raw client: no TCP connection to ${port} within ${timeoutMs} ms`));
      }, timeoutMs);
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.removeListener('error', reject);
        resolve(new RawClient(socket, options.protocolVersion ?? 4));
      });
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  }

  /** Opens, sends CONNECT and waits for a successful CONNACK (throws on a refusal). */
  static async connect(port: number, connect: ConnectOptions = {}, options: RawClientOptions = {}): Promise<RawClient> {
    const client = await RawClient.open(port, options);
    try {
      const connack = await client.connect(connect);
      const code = client.version === 5 ? connack.reasonCode : connack.returnCode;
      if (code !== 0) throw new Error(`raw client: CONNACK refused with 0x${(code ?? -1).toString(16)}`);
    } catch (err) {
      client.destroy();
      throw err;
    }
    return client;
  }

  get closed(): boolean {
    return this.closedAtMs !== undefined;
  }

  // ---- writing ----

  /** Writes bytes as given (a Buffer, an array of byte values, or a hex string such as `'30 05 00 01'`). */
  write(bytes: Buffer | readonly number[] | string): void {
    if (this.socket.destroyed) return;
    this.socket.write(toBuffer(bytes));
  }

  /** Encodes a packet with mqtt-packet for this client's protocol version and writes it. */
  send(packet: Packet): void {
    this.write(encode(packet, this.version));
  }

  /** Sends CONNECT (defaults: clean, keepalive 30, a unique client id) and waits for the CONNACK. */
  async connect(options: ConnectOptions = {}, timeoutMs = DEFAULT_WAIT_MS): Promise<IConnackPacket> {
    this.send(connectPacket(this.version, options));
    return (await this.expect('connack', timeoutMs)) as IConnackPacket;
  }

  /** SUBSCRIBE and wait for its SUBACK. */
  async subscribe(
    subscriptions: ISubscription[] | string,
    options: { messageId?: number; properties?: Record<string, unknown>; timeoutMs?: number } = {},
  ): Promise<ISubackPacket> {
    const list = typeof subscriptions === 'string' ? [{ topic: subscriptions, qos: 1 as const }] : subscriptions;
    const messageId = options.messageId ?? 1;
    this.send({ cmd: 'subscribe', messageId, subscriptions: list, properties: options.properties } as Packet);
    return (await this.expect(
      (p) => p.cmd === 'suback' && p.messageId === messageId,
      options.timeoutMs,
    )) as ISubackPacket;
  }

  /** PUBLISH (QoS 0 by default); does not wait for any acknowledgement. */
  publish(
    topic: string,
    payload: string | Buffer,
    options: Partial<Omit<IPublishPacket, 'cmd' | 'topic' | 'payload'>> = {},
  ): void {
    this.send({
      cmd: 'publish',
      topic,
      payload: typeof payload === 'string' ? Buffer.from(payload) : payload,
      qos: options.qos ?? 0,
      dup: options.dup ?? false,
      retain: options.retain ?? false,
      messageId: options.messageId ?? ((options.qos ?? 0) > 0 ? 1 : undefined),
      properties: options.properties,
    } as Packet);
  }

  /** PINGREQ, then waits for PINGRESP: everything the broker queued before answering has arrived. */
  async ping(timeoutMs = DEFAULT_WAIT_MS): Promise<void> {
    this.write([0xc0, 0x00]);
    await this.expect('pingresp', timeoutMs);
  }

  // ---- reading ----

  /** Received packets of one type (taken or not). */
  packets<C extends PacketCmd>(cmd: C): Extract<Packet, { cmd: C }>[] {
    return this.received.filter((p) => p.cmd === cmd) as Extract<Packet, { cmd: C }>[];
  }

  /** PUBLISH packets received so far. */
  get publishes(): IPublishPacket[] {
    return this.packets('publish');
  }

  /** Takes the first received packet not yet taken that matches, or undefined. */
  take(match: PacketCmd | ((p: Packet) => boolean)): Packet | undefined {
    const predicate = typeof match === 'string' ? (p: Packet) => p.cmd === match : match;
    for (let i = 0; i < this.received.length; i++) {
      if (!this.taken.has(i) && predicate(this.received[i])) {
        this.taken.add(i);
        return this.received[i];
      }
    }
    return undefined;
  }

  /** Waits (bounded) for a matching packet not yet taken, and takes it. Rejects if the socket closes first. */
  async expect(match: PacketCmd | ((p: Packet) => boolean), timeoutMs = DEFAULT_WAIT_MS): Promise<Packet> {
    const what = typeof match === 'string' ? match : 'a matching packet';
    return this.until(() => this.take(match), timeoutMs, what, true);
  }

  /** Waits for the DISCONNECT the broker sends before closing (MQTT 5). */
  async expectDisconnect(timeoutMs = DEFAULT_WAIT_MS): Promise<IDisconnectPacket> {
    return (await this.expect('disconnect', timeoutMs)) as IDisconnectPacket;
  }

  /** Waits (bounded) until the broker closed the connection. */
  async waitForClose(timeoutMs = DEFAULT_WAIT_MS): Promise<void> {
    if (this.closed) return;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => reject(new Error(`raw client: connection still open after ${timeoutMs} ms; received ${this.describe()}`)),
        timeoutMs,
      );
    });
    try {
      await Promise.race([this.closedPromise, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Waits (bounded) until `predicate` returns a truthy value, re-checked whenever something arrives. */
  async until<T>(
    predicate: () => T | undefined,
    timeoutMs = DEFAULT_WAIT_MS,
    what = 'condition',
    failOnClose = false,
  ): Promise<T> {
    const first = predicate();
    if (first) return first;
    return new Promise<T>((resolve, reject) => {
      const check = (): void => {
        const value = predicate();
        if (value) return finish(undefined, value);
        if (failOnClose && this.closed)
          return finish(
            new Error(`raw client: connection closed while waiting for ${what}; received ${this.describe()}`),
          );
      };
      const finish = (err: Error | undefined, value?: T): void => {
        clearTimeout(timer);
        this.waiters.delete(check);
        if (err) reject(err);
        else resolve(value as T);
      };
      const timer = setTimeout(
        () => finish(new Error(`raw client: no ${what} within ${timeoutMs} ms; received ${this.describe()}`)),
        timeoutMs,
      );
      this.waiters.add(check);
      check();
    });
  }

  /** A short summary of what arrived, for failure messages. */
  describe(): string {
    const list = this.received.map((p) => {
      const code = (p as { reasonCode?: number }).reasonCode ?? (p as { returnCode?: number }).returnCode;
      return code === undefined ? p.cmd : `${p.cmd}(0x${code.toString(16)})`;
    });
    const tail = list.length > 20 ? [...list.slice(0, 20), `... ${list.length - 20} more`] : list;
    return `[${tail.join(', ')}]${this.closed ? ', closed' : ''}${this.parseError ? `, parse error: ${this.parseError.message}` : ''}`;
  }

  // ---- flow control of our own reading ----

  /** Stops reading from the socket (the kernel buffers fill up and the broker's writes back up). */
  pause(): void {
    this.socket.pause();
  }

  resume(): void {
    this.socket.resume();
  }

  // ---- teardown ----

  /** Closes our side gracefully (FIN). */
  end(): void {
    this.socket.end();
  }

  destroy(): void {
    this.socket.destroy();
  }

  /** For `Disposer.add`. */
  stop(): void {
    this.destroy();
  }

  private notify(): void {
    for (const waiter of [...this.waiters]) waiter();
  }
}

/** A CONNECT packet for `version` with test defaults. */
export function connectPacket(version: ProtocolVersion, options: ConnectOptions = {}): IConnectPacket {
  return {
    cmd: 'connect',
    protocolId: version === 3 ? 'MQIsdp' : 'MQTT',
    protocolVersion: version,
    clean: true,
    keepalive: 30,
    clientId: `raw-${Math.random().toString(16).slice(2, 10)}`,
    ...options,
  };
}

/** Encodes a packet with mqtt-packet. */
export function encode(packet: Packet, version: ProtocolVersion): Buffer {
  return mqttPacket.generate(packet, { protocolVersion: version });
}

function toBuffer(bytes: Buffer | readonly number[] | string): Buffer {
  if (Buffer.isBuffer(bytes)) return bytes;
  if (typeof bytes === 'string') return Buffer.from(bytes.replace(/\s+/g, ''), 'hex');
  return Buffer.from(bytes);
}
