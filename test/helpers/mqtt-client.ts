/**
 * Client-side helpers for the broker's integration tests:
 * - `openClient(url, options)`: an MQTT.js client (no auto-reconnect) that records every message, DISCONNECT and
 *   close from the first byte on (queued messages arrive in the same flush as CONNACK), with a connect deadline.
 * - `connectRefused(url, options)`: a connect that must be refused; resolves with the CONNACK code.
 * - `RawClient`: a bare TCP socket speaking hand-made packets (mqtt-packet `generate`/`parser`), for exact flags,
 *   withheld acknowledgements and malformed input.
 * - `runTool` / `startMosquittoSub`: Debian's `mosquitto_pub`, `mosquitto_sub`, `mosquitto_rr` with a timeout.
 *
 *   const sub = d.add(await openClient(gw.url, { protocolVersion: 5 }));
 *   await sub.subscribe('a/#', { qos: 2 });
 *   await runTool('mosquitto_pub', ['-p', String(gw.port), '-q', '2', '-t', 'a/b', '-m', 'x']);
 *   const [m] = await sub.waitForMessages(1);
 *
 * Everything returned has `stop()`, so it can go to `Disposer.add` (test/helpers/disposer.ts).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import mqttPacket from 'mqtt-packet';
import type { IConnackPacket, IConnectPacket, IDisconnectPacket, IPublishPacket, Packet } from 'mqtt-packet';
import {
  connect,
  type IClientOptions,
  type IClientPublishOptions,
  type IClientSubscribeOptions,
  type MqttClient,
} from 'mqtt';
import { afterMarker, waitFor } from './wait.js';

export const DEFAULT_DEADLINE_MS = 5000;

/** The protocol levels most tests run in: MQTT 3.1.1 and 5.0. */
export const VERSIONS = [4, 5] as const;

/** The `-V` argument of mosquitto_pub/_sub for a protocol level. */
export const toolVersion = (v: 4 | 5): string => (v === 5 ? 'mqttv5' : 'mqttv311');

/** One PUBLISH as a client saw it. */
export interface ReceivedMessage {
  readonly topic: string;
  readonly payload: string;
  readonly qos: number;
  readonly retain: boolean;
  readonly dup: boolean;
  readonly properties: IPublishPacket['properties'];
  readonly packet: IPublishPacket;
}

/** An error from a refused or failed connect; `code` is the CONNACK return/reason code when there was one. */
export class ConnectFailure extends Error {
  constructor(
    message: string,
    readonly code: number | undefined,
  ) {
    super(message);
    this.name = 'ConnectFailure';
  }
}

/** An MQTT.js client plus everything it received. */
export class TestClient {
  /**
   * Messages in the order MQTT.js emits them. MQTT.js emits a QoS 2 message only at PUBREL, so for the order
   * on the wire use `wire`.
   */
  readonly messages: ReceivedMessage[] = [];
  /** Every PUBLISH packet in the order it arrived on the wire (resent ones included). */
  readonly wire: IPublishPacket[] = [];
  /** DISCONNECT packets from the server (MQTT 5). */
  readonly disconnects: IDisconnectPacket[] = [];
  closed = false;
  connack!: IConnackPacket;

  constructor(readonly client: MqttClient) {
    client.on('message', (topic, payload, packet) => {
      this.messages.push({
        topic,
        payload: payload.toString(),
        qos: packet.qos,
        retain: packet.retain,
        dup: packet.dup,
        properties: packet.properties,
        packet,
      });
    });
    client.on('packetreceive', (packet) => {
      if (packet.cmd === 'publish') this.wire.push(packet);
    });
    client.on('disconnect', (packet) => this.disconnects.push(packet));
    client.on('close', () => (this.closed = true));
    // Errors after connect (e.g. the socket reset on take-over) are expected in these tests; they show up as
    // `closed`, and an unhandled 'error' event would crash the test worker.
    client.on('error', () => undefined);
  }

  /** Messages on `topic` (all when omitted). */
  received(topic?: string): ReceivedMessage[] {
    return topic === undefined ? this.messages : this.messages.filter((m) => m.topic === topic);
  }

  payloads(topic?: string): string[] {
    return this.received(topic).map((m) => m.payload);
  }

  /** Waits until at least `count` messages (on `topic`, if given) arrived; returns them. */
  async waitForMessages(
    count: number,
    options: { topic?: string; timeoutMs?: number } = {},
  ): Promise<ReceivedMessage[]> {
    await waitFor(() => this.received(options.topic).length >= count, options.timeoutMs ?? DEFAULT_DEADLINE_MS, {
      message: () =>
        `${count} message(s)${options.topic ? ` on ${options.topic}` : ''}, got ${JSON.stringify(this.messages.map((m) => [m.topic, m.payload]))}`,
    });
    return this.received(options.topic);
  }

  async waitForClose(timeoutMs = DEFAULT_DEADLINE_MS): Promise<void> {
    await waitFor(() => this.closed, timeoutMs, { message: 'client connection closed by the server' });
  }

  /** Subscribes; resolves with the granted QoS / reason code of each filter. */
  async subscribe(filter: string | string[], options: IClientSubscribeOptions = { qos: 0 }): Promise<number[]> {
    const grants = await withDeadline(this.client.subscribeAsync(filter, options), DEFAULT_DEADLINE_MS, 'SUBACK');
    return grants.map((g) => g.qos);
  }

  /** Publishes and, for QoS 1/2, waits for the acknowledgement. */
  async publish(topic: string, payload: string | Buffer, options: IClientPublishOptions = {}): Promise<void> {
    await withDeadline(this.client.publishAsync(topic, payload, options), DEFAULT_DEADLINE_MS, `publish to ${topic}`);
  }

  /** Clean DISCONNECT (MQTT 5: with `reasonCode`). */
  async disconnect(reasonCode?: number): Promise<void> {
    if (this.closed) return;
    await withDeadline(
      new Promise<void>((resolve) =>
        this.client.end(false, reasonCode === undefined ? {} : { reasonCode }, () => resolve()),
      ),
      DEFAULT_DEADLINE_MS,
      'DISCONNECT',
    );
  }

  /** Closes the socket without DISCONNECT (as a network failure looks to the broker). */
  drop(): void {
    this.client.stream.destroy();
    this.client.end(true);
  }

  async stop(): Promise<void> {
    if (this.client.disconnected && this.closed) return;
    await withDeadline(this.client.endAsync(true), DEFAULT_DEADLINE_MS, 'client end').catch(() =>
      // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- MQTT.js types the stream as always there
      this.client.stream?.destroy(),
    );
  }
}

/**
 * The marker pattern (`afterMarker`) between two clients: `pub` publishes `payload` on `topic` at QoS 1, which `sub`
 * receives after whatever the broker queued for it before; resolves once it is in. Then assert what did not come.
 */
export async function barrier(pub: TestClient, sub: TestClient, topic: string, payload = 'barrier'): Promise<void> {
  const count = (): number => sub.received(topic).filter((m) => m.payload === payload).length;
  const before = count();
  await afterMarker(
    () => pub.publish(topic, payload, { qos: 1 }),
    () => count() > before,
    DEFAULT_DEADLINE_MS,
    `the barrier on ${topic}`,
  );
}

/**
 * Connects an MQTT.js client (no reconnect) and resolves once CONNACK accepted it; rejects with `ConnectFailure`
 * (carrying the CONNACK code) if refused, closed, or nothing happened within `deadlineMs`.
 */
export function openClient(
  url: string,
  options: IClientOptions = {},
  deadlineMs = DEFAULT_DEADLINE_MS,
): Promise<TestClient> {
  const client = connect(url, { reconnectPeriod: 0, connectTimeout: deadlineMs, ...options });
  const tc = new TestClient(client);
  return new Promise<TestClient>((resolve, reject) => {
    const cleanup = (): void => {
      clearTimeout(timer);
      client.off('connect', onConnect);
      client.off('error', onError);
      client.off('close', onClose);
    };
    const fail = (err: ConnectFailure): void => {
      cleanup();
      client.end(true);
      reject(err);
    };
    const onConnect = (connack: IConnackPacket): void => {
      cleanup();
      tc.connack = connack;
      resolve(tc);
    };
    const onError = (err: Error & { code?: unknown }): void =>
      fail(new ConnectFailure(`connect refused: ${err.message}`, typeof err.code === 'number' ? err.code : undefined));
    const onClose = (): void => fail(new ConnectFailure('connection closed before CONNACK', undefined));
    const timer = setTimeout(
      () => fail(new ConnectFailure(`no CONNACK within ${deadlineMs} ms`, undefined)),
      deadlineMs,
    );
    client.on('connect', onConnect);
    client.on('error', onError);
    client.on('close', onClose);
  });
}

/** A connect that must be refused: resolves with the CONNACK code, rejects if the client got in. */
export async function connectRefused(url: string, options: IClientOptions = {}): Promise<number | undefined> {
  let tc: TestClient;
  try {
    tc = await openClient(url, options);
  } catch (err) {
    if (err instanceof ConnectFailure) return err.code;
    throw err;
  }
  await tc.stop();
  throw new Error(`connect was accepted (CONNACK ${JSON.stringify(tc.connack)}), expected a refusal`);
}

/** Rejects with a clear message if `promise` does not settle within `timeoutMs`. */
export function withDeadline<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${timeoutMs} ms`)), timeoutMs);
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

// ---- raw sockets ----

/**
 * A bare MQTT connection over TCP. Packets are encoded with mqtt-packet for `version`; every packet received is
 * kept in `packets` (in order) and `next(cmd)` consumes them one at a time.
 */
export class RawClient {
  readonly packets: Packet[] = [];
  private consumed = new Set<Packet>();
  /** Parse errors of what the server sent (should stay empty). */
  readonly parseErrors: Error[] = [];
  closedAtMs: number | undefined;
  private readonly parser: ReturnType<typeof mqttPacket.parser>;

  private constructor(
    readonly socket: net.Socket,
    readonly version: 3 | 4 | 5,
  ) {
    this.parser = mqttPacket.parser({ protocolVersion: version });
    this.parser.on('packet', (p: Packet) => this.packets.push(p));
    this.parser.on('error', (err: Error) => this.parseErrors.push(err));
    socket.on('data', (chunk: Buffer) => this.parser.parse(chunk));
    socket.on('close', () => (this.closedAtMs ??= Date.now()));
    socket.on('error', () => undefined);
  }

  /** Opens a TCP connection to 127.0.0.1:`port` (no MQTT traffic yet). */
  static open(port: number, version: 3 | 4 | 5 = 4, timeoutMs = DEFAULT_DEADLINE_MS): Promise<RawClient> {
    return new Promise((resolve, reject) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.setNoDelay(true);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`TCP connect to ${port} timed out`));
      }, timeoutMs);
      socket.once('connect', () => {
        clearTimeout(timer);
        resolve(new RawClient(socket, version));
      });
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  }

  /**
   * Opens a connection and sends CONNECT (protocol name and level from `version` unless given), resolving with
   * the CONNACK. Does not check the code.
   */
  static async connect(
    port: number,
    version: 3 | 4 | 5,
    fields: Partial<IConnectPacket> = {},
  ): Promise<{ raw: RawClient; connack: IConnackPacket }> {
    const raw = await RawClient.open(port, version);
    raw.write(
      encodeConnect({
        cmd: 'connect',
        protocolId: version === 3 ? 'MQIsdp' : 'MQTT',
        protocolVersion: version,
        clean: true,
        clientId: '',
        keepalive: 0,
        ...fields,
      } as IConnectPacket),
    );
    const connack = (await raw.next('connack')) as IConnackPacket;
    return { raw, connack };
  }

  get isClosed(): boolean {
    return this.closedAtMs !== undefined;
  }

  send(packet: Packet): void {
    this.socket.write(mqttPacket.generate(packet, { protocolVersion: this.version }));
  }

  write(bytes: Buffer | number[]): void {
    this.socket.write(Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes));
  }

  /** The first not yet consumed packet of type `cmd` (any type when omitted), waiting up to `timeoutMs`. */
  async next(cmd?: Packet['cmd'], timeoutMs = DEFAULT_DEADLINE_MS): Promise<Packet> {
    const packet = await waitFor(
      () => this.packets.find((p) => !this.consumed.has(p) && (cmd === undefined || p.cmd === cmd)),
      timeoutMs,
      {
        message: () =>
          `a ${cmd ?? 'packet'} from the server; got ${JSON.stringify(this.packets.map((p) => p.cmd))}${this.isClosed ? ' (socket closed)' : ''}`,
      },
    );
    this.consumed.add(packet);
    return packet;
  }

  /** Packets of type `cmd` received so far (consumed or not). */
  all(cmd: Packet['cmd']): Packet[] {
    return this.packets.filter((p) => p.cmd === cmd);
  }

  /** Waits until the server closed the socket; resolves with the time of the close (Date.now() clock). */
  async waitForClose(timeoutMs = DEFAULT_DEADLINE_MS): Promise<number> {
    return waitFor(() => this.closedAtMs, timeoutMs, { message: 'the server to close the connection' });
  }

  stop(): void {
    this.socket.destroy();
  }
}

/**
 * Encodes a CONNECT like mqtt-packet does, but also with an empty client id where mqtt-packet refuses to
 * (MQTT 3.1, or clean session 0), so that the broker's answer to those can be tested.
 */
export function encodeConnect(packet: IConnectPacket): Buffer {
  const version = packet.protocolVersion ?? 4;
  if (packet.clientId !== '' || (packet.clean !== false && version >= 4))
    return mqttPacket.generate(packet, { protocolVersion: version });
  // Encode with a one-character id, then cut that character out and fix the remaining length.
  const bytes = mqttPacket.generate({ ...packet, clientId: 'x' }, { protocolVersion: version });
  const { value: remaining, bytes: vbiBytes } = readVbi(bytes, 1);
  let o = 1 + vbiBytes;
  o += 2 + bytes.readUInt16BE(o); // protocol name
  o += 1 + 1 + 2; // level, flags, keep alive
  if (version === 5) {
    const props = readVbi(bytes, o);
    o += props.bytes + props.value;
  }
  const body = Buffer.concat([bytes.subarray(1 + vbiBytes, o), Buffer.from([0, 0]), bytes.subarray(o + 3)]);
  if (body.length !== remaining - 1) throw new Error('encodeConnect: unexpected CONNECT layout');
  return Buffer.concat([Buffer.from([bytes[0]]), writeVbi(body.length), body]);
}

function readVbi(buf: Buffer, offset: number): { value: number; bytes: number } {
  let value = 0;
  let mul = 1;
  for (let i = 0; i < 4; i++) {
    const b = buf[offset + i];
    value += (b & 0x7f) * mul;
    mul *= 128;
    if ((b & 0x80) === 0) return { value, bytes: i + 1 };
  }
  throw new Error('malformed variable byte integer');
}

function writeVbi(n: number): Buffer {
  const out: number[] = [];
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    out.push(b);
  } while (n > 0);
  return Buffer.from(out);
}

// ---- mosquitto_pub / mosquitto_sub / mosquitto_rr ----

export type Tool = 'mosquitto_pub' | 'mosquitto_sub' | 'mosquitto_rr';

export interface ToolResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
  readonly timedOut: boolean;
}

/** Runs a Mosquitto client tool to completion; killed (and `timedOut`) after `timeoutMs`. */
export function runTool(tool: Tool, args: readonly string[], timeoutMs = 10_000): Promise<ToolResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(tool, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    let timedOut = false;
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    });
  });
}

/** Runs a tool and rejects unless it exits 0 in time. */
export async function runToolOk(tool: Tool, args: readonly string[], timeoutMs = 10_000): Promise<ToolResult> {
  const r = await runTool(tool, args, timeoutMs);
  if (r.code !== 0) {
    throw new Error(
      `${tool} ${args.join(' ')} exited ${r.code ?? r.signal}${r.timedOut ? ' (timed out)' : ''}: ${r.stderr}${r.stdout}`,
    );
  }
  return r;
}

/** A message line printed by a `startMosquittoSub` process. */
export interface ToolMessage {
  readonly retain: boolean;
  readonly qos: number;
  readonly topic: string;
  readonly payload: string;
}

/** Output format given to mosquitto_sub: retain flag, QoS, topic, payload (topics in tests have no spaces). */
const SUB_FORMAT = 'MSG %r %q %t %p';

/** A long-running tool process (line-buffered through `stdbuf`, so output is seen as it happens). */
export class ToolProcess {
  readonly lines: string[] = [];
  private partial = '';
  stderr = '';
  exitCode: number | null = null;
  exited = false;

  constructor(readonly child: ChildProcess) {
    child.stdout?.on('data', (c: Buffer) => {
      const text = this.partial + c.toString();
      const parts = text.split('\n');
      this.partial = parts.pop() ?? '';
      this.lines.push(...parts);
    });
    child.stderr?.on('data', (c: Buffer) => (this.stderr += c.toString()));
    child.once('exit', (code) => {
      this.exitCode = code;
      this.exited = true;
    });
  }

  /** Messages printed so far (lines in the `MSG` format). */
  messages(): ToolMessage[] {
    const out: ToolMessage[] = [];
    for (const line of this.lines) {
      const m = /^MSG (\d) (\d) (\S+) ?(.*)$/.exec(line);
      if (m) out.push({ retain: m[1] === '1', qos: Number(m[2]), topic: m[3], payload: m[4] });
    }
    return out;
  }

  async waitForLine(
    predicate: (line: string) => boolean,
    timeoutMs = DEFAULT_DEADLINE_MS,
    what = 'an output line',
  ): Promise<string> {
    return waitFor(() => this.lines.find(predicate), timeoutMs, {
      message: () => `${what}; output so far:\n${this.lines.join('\n')}\n${this.stderr}`,
    });
  }

  async waitForMessages(count: number, timeoutMs = DEFAULT_DEADLINE_MS): Promise<ToolMessage[]> {
    await waitFor(() => this.messages().length >= count, timeoutMs, {
      message: () =>
        `${count} message(s) at ${this.child.spawnargs.join(' ')}; output:\n${this.lines.join('\n')}\n${this.stderr}`,
    });
    return this.messages();
  }

  /** Sends `signal` (default SIGTERM) to this process only and waits for it to exit. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    this.child.kill(signal);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  }
}

/** Spawns a tool line-buffered, without waiting for anything. */
export function spawnTool(tool: Tool, args: readonly string[]): ToolProcess {
  return new ToolProcess(spawn('stdbuf', ['-oL', tool, ...args], { stdio: ['ignore', 'pipe', 'pipe'] }));
}

/**
 * Starts `mosquitto_sub -d` printing messages in the `MSG` format, and resolves once its SUBACK arrived (so a
 * publish after this is seen). `args` adds options such as `-t`, `-q`, `-V mqttv5`, `--will-topic`.
 */
export async function startMosquittoSub(
  port: number,
  args: readonly string[],
  timeoutMs = DEFAULT_DEADLINE_MS,
): Promise<ToolProcess> {
  const proc = spawnTool('mosquitto_sub', ['-h', '127.0.0.1', '-p', String(port), '-d', '-F', SUB_FORMAT, ...args]);
  try {
    await proc.waitForLine((l) => l.includes('received SUBACK'), timeoutMs, 'mosquitto_sub SUBACK');
  } catch (err) {
    await proc.stop('SIGKILL');
    throw err;
  }
  return proc;
}
