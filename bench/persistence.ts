/**
 * `npm run bench:persistence`: QoS 1 persistent-session throughput and loss after SIGKILL, edgeferry against
 * Mosquitto with persistence on, interleaved, medians over repetitions (issue 7). See bench/README.md.
 *
 * - `throughput`: a subscriber (3.1.1, clean session 0) subscribes to `bench/#` at QoS 1 and disconnects;
 *   N publishers publish M QoS 1 messages with a PUBACK-driven window; ingest rate = M / time until the last
 *   PUBACK. The subscriber then reconnects and drains its offline queue, PUBACKing everything: drain rate and
 *   how many of the acknowledged messages arrived.
 * - `sigkill`: the same ingest, then SIGKILL at once after the last PUBACK, restart on the same data
 *   directory, reconnect the subscriber: how many acknowledged messages arrive.
 *
 * All clients live in this process (raw sockets, pre-encoded packets from `mqtt-wire.ts`): the publishers
 * and the subscriber are never active at the same time, and the broker is its own process.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { freePort, machineInfo, mosquittoVersion, probe, readCpuS, readRssKb, spawnTracked, summarizeOutput } from './brokers.js';
import {
  PacketReader,
  PacketType,
  disconnectPacket,
  encodeConnect,
  encodePublish,
  encodeSubscribe,
  publishPayloadOffset,
  type PacketHandler,
} from './mqtt-wire.js';
import { formatNumber, formatRatio, median, table } from './report.js';

const brokerKinds = ['edgeferry', 'mosquitto', 'edgeferry-relaxed'] as const;
type BrokerKind = (typeof brokerKinds)[number];
const defaultBrokers: BrokerKind[] = ['edgeferry', 'mosquitto'];
const scenarioKinds = ['throughput', 'sigkill'] as const;
type ScenarioKind = (typeof scenarioKinds)[number];

const usage = `Usage: npm run bench:persistence -- [options]
  --brokers LIST        comma-separated from ${brokerKinds.join(',')}; default ${defaultBrokers.join(',')}
                        (edgeferry-relaxed = edgeferry with storage.sync: relaxed)
  --scenarios LIST      comma-separated from ${scenarioKinds.join(',')}; default both
  --reps N              repetitions per broker and scenario (median reported), default 5
  --messages N          QoS 1 messages per run (M), default 50000
  --publishers N        publisher connections, default 10
  --window N            unacknowledged PUBLISHes per publisher, default 16
  --payload-bytes N     payload size, default 64 (at least 8)
  --quick               1 repetition of 5,000 messages: a smoke test, not a measurement
  --out FILE            JSON summary, default bench/results/persistence.json
  --cpu-prof DIR        run edgeferry with node --cpu-prof, writing its profiles into DIR
  -h, --help`;

const scriptDir = path.dirname(fileURLToPath(import.meta.url)); // dist/bench
const rootDir = path.resolve(scriptDir, '../..');

const readyTimeoutMs = 20_000;
const stopTimeoutMs = 5_000;
const ingestDeadlineMs = 120_000;
const drainDeadlineMs = 120_000;
/** The drain ends when everything acknowledged arrived, or after this long without a new message. */
const drainQuietMs = 2_000;
/** Payload layout (the rest is filler): [0, 4) sequence number per publisher, [4, 6) publisher index. */
const seqOffset = 0;
const publisherIndexOffset = 4;

interface Options {
  brokers: BrokerKind[];
  scenarios: ScenarioKind[];
  reps: number;
  messages: number;
  publishers: number;
  window: number;
  payloadBytes: number;
  quick: boolean;
  out: string;
  cpuProfDir: string | undefined;
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
const nowNs = (): bigint => process.hrtime.bigint();
const secondsBetween = (fromNs: bigint, toNs: bigint): number => Number(toNs - fromNs) / 1e9;
const errorText = (err: unknown): string => (err instanceof Error ? err.message : String(err));

// ---- brokers --------------------------------------------------------------------------------------------

/** A broker process on a fixed port and data directory, so it can be killed and started again on them. */
interface BrokerProcess {
  readonly pid: number;
  outputTail(): string;
  exitStatus(): number | string | null;
  /** SIGTERM, SIGKILL after `stopTimeoutMs`; resolves once the process is gone. */
  stop(): Promise<void>;
  /** SIGKILL now; resolves once the process is gone. */
  kill(): Promise<void>;
}

/** Every broker process still alive, so SIGINT and fatal errors can kill them all. */
const live = new Set<ChildProcess>();

function killAll(): void {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
}

/** Writes the broker's configuration into `dir` (its data lives there too) and returns how to run it. */
function brokerCommand(
  kind: BrokerKind,
  port: number,
  dir: string,
  cpuProfDir: string | undefined,
): { file: string; args: string[] } {
  if (kind === 'mosquitto') {
    const config = path.join(dir, 'mosquitto.conf');
    fs.writeFileSync(
      config,
      [
        `listener ${port} 127.0.0.1`,
        'allow_anonymous true',
        'persistence true',
        // Mosquitto appends the file name to this prefix, hence the trailing slash.
        `persistence_location ${dir}/`,
        // The default, written out: the in-memory state reaches the disk this often, or on a clean shutdown.
        'autosave_interval 1800',
        // No queue limit, so what Mosquitto loses here is not its max_queued_messages (default 1000) at work.
        'max_queued_messages 0',
        'log_dest stderr',
        'log_type error',
        'log_type warning',
        '',
      ].join('\n'),
    );
    return { file: '/usr/sbin/mosquitto', args: ['-c', config] };
  }
  const config = path.join(dir, 'edgeferry.yaml');
  const sync = kind === 'edgeferry-relaxed' ? 'relaxed' : 'full';
  fs.writeFileSync(
    config,
    [
      'listeners:',
      `  - { type: tcp, host: 127.0.0.1, port: ${port} }`,
      'broker: { maxQueuedMessages: 0 }',
      `storage: { path: ${JSON.stringify(path.join(dir, 'data'))}, sync: ${sync} }`,
      'log: { level: warn, format: json }',
      '',
    ].join('\n'),
  );
  const profile = cpuProfDir === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${cpuProfDir}`];
  return { file: process.execPath, args: [...profile, path.join(rootDir, 'dist/src/cli.js'), '--config', config] };
}

/** Starts the broker and waits until a TCP connect + CONNECT/CONNACK succeeds. */
async function launchBroker(kind: BrokerKind, port: number, dir: string, cpuProfDir: string | undefined): Promise<BrokerProcess> {
  const { file, args } = brokerCommand(kind, port, dir, cpuProfDir);
  const { child, exited, outputTail, exitStatus } = spawnTracked(file, args, dir, live);
  const stop = async (): Promise<void> => {
    if (exitStatus() !== null) return;
    child.kill('SIGTERM');
    const killer = setTimeout(() => child.kill('SIGKILL'), stopTimeoutMs);
    await exited;
    clearTimeout(killer);
  };
  const kill = async (): Promise<void> => {
    if (exitStatus() !== null) return;
    child.kill('SIGKILL');
    await exited;
  };

  const deadline = Date.now() + readyTimeoutMs;
  for (let attempt = 0; ; attempt++) {
    if (exitStatus() !== null) throw new Error(`${kind} exited (${String(exitStatus())}) before it was ready: ${summarizeOutput(outputTail())}`);
    if (await probe(port, `persist-probe-${attempt}`)) break;
    if (Date.now() > deadline) {
      await kill();
      throw new Error(`${kind} not ready on port ${port} within ${readyTimeoutMs} ms: ${summarizeOutput(outputTail())}`);
    }
    // Short, because the restart time after SIGKILL is one of the figures.
    await sleep(50);
  }
  if (child.pid === undefined) throw new Error(`${kind}: no pid`);
  return { pid: child.pid, outputTail, exitStatus, stop, kill };
}

// ---- clients --------------------------------------------------------------------------------------------

interface Connection {
  readonly sock: net.Socket;
  readonly sessionPresent: boolean;
  /** Set when the socket failed or the broker closed it before we did. */
  problem(): string | null;
  /** DISCONNECT, then wait for the broker to close the socket (destroyed after 2 s at the latest). */
  close(): Promise<void>;
  /** Drop the socket without DISCONNECT (the broker is gone anyway). */
  destroy(): void;
}

/**
 * TCP connect + CONNECT, resolved on CONNACK 0. Every later packet goes to `onPacket`, including those in
 * the CONNACK's own chunk (a broker sends the queued messages right behind it); `afterChunk` runs after each
 * received chunk, to batch PUBACKs into one write.
 */
function openConnection(
  port: number,
  clientId: string,
  cleanSession: boolean,
  onPacket: PacketHandler,
  afterChunk: () => void = () => {},
): Promise<Connection> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ port, host: '127.0.0.1', noDelay: true });
    let problem: string | null = null;
    let closing = false;
    let connected = false;
    const closed = new Promise<void>((done) => sock.on('close', () => done()));
    const timer = setTimeout(() => fail(`no CONNACK for ${clientId} in ${readyTimeoutMs} ms`), readyTimeoutMs);
    const fail = (message: string): void => {
      clearTimeout(timer);
      sock.destroy();
      reject(new Error(message));
    };
    let handler: PacketHandler = (type, _flags, buf, start) => {
      if (type !== PacketType.connack) return fail(`expected CONNACK for ${clientId}, got packet type ${type}`);
      const code = buf[start + 1];
      if (code !== 0) return fail(`CONNACK return code ${code} for ${clientId}`);
      clearTimeout(timer);
      connected = true;
      handler = onPacket; // synchronously, so the rest of this chunk already goes to the caller
      resolve({
        sock,
        sessionPresent: (buf[start] & 0x01) === 1,
        problem: () => problem,
        close: () => {
          if (!closing) {
            closing = true;
            if (sock.writable) sock.end(disconnectPacket);
            // A broker that keeps the socket open after DISCONNECT must not stall the benchmark.
            setTimeout(() => sock.destroy(), 2000).unref();
          }
          return closed;
        },
        destroy: () => {
          closing = true;
          sock.destroy();
        },
      });
    };
    const reader = new PacketReader((type, flags, buf, start, end) => handler(type, flags, buf, start, end));
    sock.on('connect', () => sock.write(encodeConnect(clientId, 0, cleanSession)));
    sock.on('data', (chunk: Buffer) => {
      reader.push(chunk);
      if (connected) afterChunk();
    });
    // Recorded and reported with the run; a refused connection before CONNACK fails the open.
    sock.on('error', (err) => {
      problem ??= err.message;
      if (!connected) fail(`${clientId}: ${err.message}`);
    });
    sock.on('close', () => {
      if (!closing) problem ??= `${clientId}: connection closed by the broker`;
      if (!connected) fail(`${clientId}: connection closed before CONNACK`);
    });
  });
}

/** Subscribes with a persistent session, then disconnects: from now on the broker queues for it. */
async function createPersistentSubscription(port: number, clientId: string): Promise<void> {
  let subacked: (granted: number) => void = () => {};
  const suback = new Promise<number>((resolve) => {
    subacked = resolve;
  });
  const conn = await openConnection(port, clientId, false, (type, _flags, buf, _start, end) => {
    if (type === PacketType.suback) subacked(buf[end - 1]);
  });
  conn.sock.write(encodeSubscribe(1, 'bench/#', 1));
  const granted = await Promise.race([suback, sleep(readyTimeoutMs).then(() => -1)]);
  await conn.close();
  if (granted === -1) throw new Error(`no SUBACK in ${readyTimeoutMs} ms`);
  if (granted !== 1) throw new Error(`SUBSCRIBE bench/# at QoS 1 granted ${granted}`);
}

/** How many messages each publisher sends: M split as evenly as possible. */
function quotas(messages: number, publishers: number): number[] {
  return Array.from({ length: publishers }, (_, i) => Math.floor(messages / publishers) + (i < messages % publishers ? 1 : 0));
}

interface IngestResult {
  sent: number;
  acked: number;
  /** Per publisher, 1 for each sequence number the broker acknowledged. */
  ackedSeqs: Uint8Array[];
  complete: boolean;
  startNs: bigint;
  lastAckNs: bigint;
  problem: string | null;
  connections: Connection[];
}

/**
 * N publishers, each with at most `window` QoS 1 PUBLISHes unacknowledged: every PUBACK releases the next
 * message under the same packet id. Packets are copies of one pre-encoded template per publisher with the
 * packet id and sequence number patched in; the PUBLISHes released by one chunk of PUBACKs go out in one
 * write. Resolves when every message was acknowledged (or on a deadline / a lost connection).
 */
async function ingest(port: number, runTag: string, opts: Options): Promise<IngestResult> {
  const counts = quotas(opts.messages, opts.publishers);
  const connections: Connection[] = [];
  const ackedSeqs = counts.map((n) => new Uint8Array(n));
  let sent = 0;
  let acked = 0;
  let lastAckNs = 0n;
  let finished = 0;
  let allDone: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    allDone = resolve;
  });
  const starters: (() => void)[] = [];

  await Promise.all(
    counts.map(async (count, index) => {
      const topic = `bench/p${index}`;
      const payload = Buffer.alloc(opts.payloadBytes, 0x61);
      payload.writeUInt16BE(index, publisherIndexOffset);
      const template = encodePublish(topic, payload, 1, 1);
      const payloadAt = publishPayloadOffset(topic, opts.payloadBytes, 1);
      const idAt = payloadAt - 2;
      const build = (id: number, seq: number): Buffer => {
        const packet = Buffer.allocUnsafe(template.length);
        template.copy(packet);
        packet.writeUInt16BE(id, idAt);
        packet.writeUInt32BE(seq, payloadAt + seqOffset);
        return packet;
      };
      const seqOfId = new Int32Array(opts.window + 1).fill(-1); // packet id -> sequence number in flight
      let next = 0;
      let ackedHere = 0;
      const ready: Buffer[] = [];
      const conn = await openConnection(
        port,
        `${runTag}-pub-${index}`,
        true,
        (type, _flags, buf, start) => {
          if (type !== PacketType.puback) return;
          const id = buf.readUInt16BE(start);
          const seq = id <= opts.window ? seqOfId[id] : -1;
          if (seq < 0) return; // not ours or a duplicate PUBACK: nothing in flight under that id
          seqOfId[id] = -1;
          ackedSeqs[index][seq] = 1;
          ackedHere++;
          acked++;
          if (next < count) {
            seqOfId[id] = next;
            ready.push(build(id, next++));
          }
        },
        () => {
          if (ready.length > 0) {
            sent += ready.length;
            conn.sock.write(ready.length === 1 ? ready[0] : Buffer.concat(ready));
            ready.length = 0;
          }
          if (count > 0 && ackedHere === count) {
            ackedHere = -1; // count this publisher once
            lastAckNs = nowNs();
            if (++finished === counts.length) allDone();
          }
        },
      );
      connections.push(conn);
      starters.push(() => {
        if (count === 0) {
          if (++finished === counts.length) allDone();
          return;
        }
        conn.sock.cork();
        for (let id = 1; id <= opts.window && next < count; id++) {
          seqOfId[id] = next;
          sent++;
          conn.sock.write(build(id, next++));
        }
        conn.sock.uncork();
      });
    }),
  );

  const startNs = nowNs();
  for (const start of starters) start();
  const problemOf = (): string | null => connections.map((c) => c.problem()).find((p) => p !== null) ?? null;
  const deadline = Date.now() + ingestDeadlineMs;
  let complete = false;
  for (;;) {
    const outcome = await Promise.race([done.then(() => 'done' as const), sleep(50).then(() => 'tick' as const)]);
    if (outcome === 'done') {
      complete = true;
      break;
    }
    if (problemOf() !== null || Date.now() > deadline) break;
  }
  return { sent, acked, ackedSeqs, complete, startNs, lastAckNs: complete ? lastAckNs : nowNs(), problem: problemOf(), connections };
}

interface DrainResult {
  sessionPresent: boolean;
  received: number; // PUBLISH packets, duplicates included
  unique: number; // distinct (publisher, sequence number) seen
  delivered: number; // distinct acknowledged messages seen
  duplicates: number;
  connectNs: bigint; // CONNECT written
  connackNs: bigint;
  lastNs: bigint; // the chunk with the last PUBLISH (connectNs if none)
  truncated: boolean; // still receiving at the deadline
  problem: string | null;
}

/**
 * Reconnects the persistent session and takes its offline queue, PUBACKing every QoS 1 PUBLISH (one write
 * per received chunk). Ends when every acknowledged message arrived, after `drainQuietMs` without a new
 * one, or at the deadline.
 */
async function drain(port: number, clientId: string, ackedSeqs: Uint8Array[], expected: number): Promise<DrainResult> {
  const seen = ackedSeqs.map((a) => new Uint8Array(a.length));
  let received = 0;
  let unique = 0;
  let delivered = 0;
  let lastNs = 0n;
  let inChunk = 0;
  const acks: number[] = [];
  const onPacket: PacketHandler = (type, flags, buf, start, end) => {
    if (type !== PacketType.publish) return;
    received++;
    inChunk++;
    let pos = start + 2 + buf.readUInt16BE(start);
    if (((flags >> 1) & 3) > 0) {
      acks.push(buf.readUInt16BE(pos));
      pos += 2;
    }
    if (end - pos < publisherIndexOffset + 2) return;
    const publisher = buf.readUInt16BE(pos + publisherIndexOffset);
    const seq = buf.readUInt32BE(pos + seqOffset);
    const marks = seen[publisher];
    if (marks === undefined || seq >= marks.length || marks[seq] === 1) return;
    marks[seq] = 1;
    unique++;
    if (ackedSeqs[publisher][seq] === 1) delivered++;
  };
  let conn: Connection | null = null;
  const afterChunk = (): void => {
    if (inChunk > 0) {
      inChunk = 0;
      lastNs = nowNs();
    }
    if (acks.length === 0 || conn === null) return;
    const out = Buffer.allocUnsafe(4 * acks.length);
    for (let i = 0; i < acks.length; i++) {
      out[4 * i] = 0x40;
      out[4 * i + 1] = 0x02;
      out.writeUInt16BE(acks[i], 4 * i + 2);
    }
    acks.length = 0;
    conn.sock.write(out);
  };
  const connectNs = nowNs();
  conn = await openConnection(port, clientId, false, onPacket, afterChunk);
  const connackNs = nowNs();
  // PUBLISHes that came in the CONNACK's chunk were counted before `conn` was set: acknowledge them now.
  afterChunk();
  const startedMs = Date.now();
  let lastSeen = -1;
  let lastChangeMs = startedMs;
  let truncated = false;
  for (;;) {
    if (delivered >= expected) break;
    const now = Date.now();
    if (received !== lastSeen) {
      lastSeen = received;
      lastChangeMs = now;
    } else if (now - lastChangeMs >= drainQuietMs) {
      break;
    }
    if (now - startedMs >= drainDeadlineMs) {
      truncated = true;
      break;
    }
    if (conn.problem() !== null) break;
    await sleep(20);
  }
  const problem = conn.problem();
  await conn.close();
  return {
    sessionPresent: conn.sessionPresent,
    received,
    unique,
    delivered,
    duplicates: received - unique,
    connectNs,
    connackNs,
    lastNs: lastNs === 0n ? connectNs : lastNs,
    truncated,
    problem,
  };
}

// ---- scenarios ------------------------------------------------------------------------------------------

type Metrics = Record<string, number>;

interface RunRecord {
  rep: number;
  scenario: ScenarioKind;
  broker: BrokerKind;
  ok: boolean;
  error?: string;
  metrics?: Metrics;
  notes: string[]; // anomalies worth a look: incomplete ingest, truncated drain, socket problems
  elapsedS: number;
  loadavg1: number;
}

interface RunContext {
  kind: BrokerKind;
  scenario: ScenarioKind;
  opts: Options;
  tmpDir: string;
  runTag: string;
}

async function runOnce(ctx: RunContext, notes: string[]): Promise<Metrics> {
  const dir = fs.mkdtempSync(path.join(ctx.tmpDir, `${ctx.kind}-`));
  const port = await freePort();
  const subscriberId = `${ctx.runTag}-sub`;
  let broker: BrokerProcess | null = null;
  let publishers: Connection[] = [];
  try {
    const startedNs = nowNs();
    broker = await launchBroker(ctx.kind, port, dir, ctx.opts.cpuProfDir);
    const startS = secondsBetween(startedNs, nowNs());
    await createPersistentSubscription(port, subscriberId);

    const cpuBefore = readCpuS(broker.pid);
    const genBefore = process.cpuUsage();
    const pub = await ingest(port, ctx.runTag, ctx.opts);
    publishers = pub.connections;
    const ingestS = secondsBetween(pub.startNs, pub.lastAckNs);
    const ingestBrokerCpuPct = (100 * (readCpuS(broker.pid) - cpuBefore)) / ingestS;
    const gen = process.cpuUsage(genBefore);
    const genCpuPct = (100 * (gen.user + gen.system)) / 1e6 / ingestS;
    if (!pub.complete) notes.push(`ingest incomplete: ${pub.acked} of ${ctx.opts.messages} acknowledged${pub.problem ? ` (${pub.problem})` : ''}`);
    if (broker.exitStatus() !== null) throw new Error(`${ctx.kind} exited (${String(broker.exitStatus())}) during the ingest`);

    let restartS = Number.NaN;
    let rssAfterIngestKb = Number.NaN;
    if (ctx.scenario === 'sigkill') {
      // At once after the last PUBACK: whatever the broker acknowledged must already be durable.
      await broker.kill();
      for (const c of publishers) c.destroy();
      publishers = [];
      const restartedNs = nowNs();
      broker = await launchBroker(ctx.kind, port, dir, ctx.opts.cpuProfDir);
      restartS = secondsBetween(restartedNs, nowNs());
    } else {
      rssAfterIngestKb = readRssKb(broker.pid);
      await Promise.all(publishers.map((c) => c.close()));
      publishers = [];
    }

    const drainCpuBefore = readCpuS(broker.pid);
    const d = await drain(port, subscriberId, pub.ackedSeqs, pub.acked);
    const drainS = secondsBetween(d.connectNs, d.lastNs);
    const drainBrokerCpuPct = (100 * (readCpuS(broker.pid) - drainCpuBefore)) / secondsBetween(d.connectNs, nowNs());
    if (d.truncated) notes.push(`drain still receiving after ${drainDeadlineMs / 1000} s`);
    if (d.problem !== null) notes.push(`subscriber: ${d.problem}`);
    if (broker.exitStatus() !== null) throw new Error(`${ctx.kind} exited (${String(broker.exitStatus())}) during the drain`);

    const lost = pub.acked - d.delivered;
    const common = {
      acked: pub.acked,
      delivered: d.delivered,
      lost,
      lostPct: pub.acked > 0 ? (100 * lost) / pub.acked : 0,
      duplicates: d.duplicates,
      sessionPresent: d.sessionPresent ? 1 : 0,
      ingestPerS: pub.acked / ingestS,
      ingestBrokerCpuPct,
      genCpuPct,
      startS,
    };
    if (ctx.scenario === 'sigkill') return { ...common, restartS };
    return {
      ...common,
      drainPerS: d.delivered > 0 ? d.delivered / drainS : 0,
      endToEndPerS: d.delivered / (ingestS + drainS),
      connackMs: secondsBetween(d.connectNs, d.connackNs) * 1000,
      ingestS,
      drainS,
      drainBrokerCpuPct,
      rssAfterIngestKb,
    };
  } catch (err) {
    const output = broker?.outputTail().trim() ?? '';
    throw new Error(`${errorText(err)}${output ? ` (broker output: ${summarizeOutput(output)})` : ''}`);
  } finally {
    for (const c of publishers) c.destroy();
    if (broker !== null) await broker.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// ---- report ---------------------------------------------------------------------------------------------

interface Column {
  key: string;
  label: string;
  ratio?: boolean; // compared edgeferry/other (higher is better)
  worst?: 'max';
  /** A 0/1 flag: shown as the number of runs where it was 1, e.g. "5/5", instead of a median. */
  flag?: boolean;
}

const columns: Record<ScenarioKind, Column[]> = {
  throughput: [
    { key: 'ingestPerS', label: 'ingest msg/s', ratio: true },
    { key: 'drainPerS', label: 'drain msg/s', ratio: true },
    { key: 'endToEndPerS', label: 'end-to-end msg/s', ratio: true },
    { key: 'acked', label: 'acked' },
    { key: 'delivered', label: 'delivered' },
    { key: 'lost', label: 'lost', worst: 'max' },
    { key: 'duplicates', label: 'dups', worst: 'max' },
    { key: 'ingestBrokerCpuPct', label: 'broker CPU % in' },
    { key: 'drainBrokerCpuPct', label: 'broker CPU % out' },
    { key: 'genCpuPct', label: 'gen CPU % in' },
    { key: 'rssAfterIngestKb', label: 'RSS after ingest kB' },
  ],
  sigkill: [
    { key: 'acked', label: 'acknowledged' },
    { key: 'delivered', label: 'delivered after restart' },
    { key: 'lost', label: 'lost', worst: 'max' },
    { key: 'lostPct', label: 'lost %', worst: 'max' },
    { key: 'duplicates', label: 'dups', worst: 'max' },
    { key: 'sessionPresent', label: 'session kept', flag: true },
    { key: 'startS', label: 'fresh start s' },
    { key: 'restartS', label: 'restart s' },
    { key: 'ingestPerS', label: 'ingest msg/s' },
  ],
};

const titles: Record<ScenarioKind, (o: Options) => string> = {
  throughput: (o) =>
    `QoS 1 persistent session: ${o.publishers} publishers (window ${o.window}) -> offline queue -> 1 subscriber on reconnect, ` +
    `${o.messages.toLocaleString('en-US')} x ${o.payloadBytes} B`,
  sigkill: (o) => `Loss after SIGKILL: ${o.messages.toLocaleString('en-US')} QoS 1 messages acknowledged, SIGKILL, restart, reconnect`,
};

interface BrokerSummary {
  runs: number;
  failures: number;
  medians: Metrics | null;
  worst: Metrics | null;
  /** For `flag` columns: in how many successful runs the flag was 1. */
  flagged: Metrics | null;
  errors: string[];
  notes: string[];
}

interface ScenarioSummary {
  title: string;
  brokers: Partial<Record<BrokerKind, BrokerSummary>>;
  ratios: Record<string, Record<string, number | null>>;
}

function summarize(records: RunRecord[], opts: Options): Record<string, ScenarioSummary> {
  const out: Record<string, ScenarioSummary> = {};
  for (const scenario of opts.scenarios) {
    const cols = columns[scenario];
    const summary: ScenarioSummary = { title: titles[scenario](opts), brokers: {}, ratios: {} };
    for (const broker of opts.brokers) {
      const runs = records.filter((r) => r.scenario === scenario && r.broker === broker);
      const good = runs.filter((r) => r.ok && r.metrics !== undefined);
      const values = (key: string): number[] => good.map((r) => (r.metrics as Metrics)[key]);
      summary.brokers[broker] = {
        runs: good.length,
        failures: runs.length - good.length,
        medians: good.length === 0 ? null : Object.fromEntries(cols.map((c) => [c.key, median(values(c.key))])),
        worst: good.length === 0 ? null : Object.fromEntries(cols.filter((c) => c.worst).map((c) => [c.key, Math.max(...values(c.key))])),
        flagged:
          good.length === 0 ? null : Object.fromEntries(cols.filter((c) => c.flag).map((c) => [c.key, values(c.key).filter((v) => v === 1).length])),
        errors: [...new Set(runs.filter((r) => !r.ok).map((r) => r.error ?? 'unknown error'))],
        notes: [...new Set(runs.flatMap((r) => r.notes))],
      };
    }
    for (const subject of opts.brokers.filter((b) => b !== 'mosquitto')) {
      const mine = summary.brokers[subject]?.medians ?? null;
      const theirs = summary.brokers.mosquitto?.medians ?? null;
      if (!opts.brokers.includes('mosquitto')) continue;
      summary.ratios[`${subject}/mosquitto`] = Object.fromEntries(
        cols
          .filter((c) => c.ratio)
          .map((c) => {
            const ratio = mine === null || theirs === null || !(theirs[c.key] > 0) ? null : mine[c.key] / theirs[c.key];
            return [c.key, ratio !== null && Number.isFinite(ratio) ? ratio : null];
          }),
      );
    }
    out[scenario] = summary;
  }
  return out;
}

function renderSummary(summary: Record<string, ScenarioSummary>): string {
  const parts: string[] = [];
  for (const [scenario, s] of Object.entries(summary)) {
    const cols = columns[scenario as ScenarioKind];
    const header = ['broker', ...cols.map((c) => c.label), ...cols.filter((c) => c.worst).map((c) => `worst ${c.label}`), 'runs'];
    const rows: string[][] = [];
    const notes: string[] = [];
    for (const [broker, b] of Object.entries(s.brokers)) {
      if (b === undefined) continue;
      rows.push([
        broker,
        ...cols.map((c) => (c.flag ? `${b.flagged?.[c.key] ?? 0}/${b.runs}` : formatNumber(b.medians?.[c.key]))),
        ...cols.filter((c) => c.worst).map((c) => formatNumber(b.worst?.[c.key])),
        `${b.runs}/${b.runs + b.failures}`,
      ]);
      for (const err of b.errors) notes.push(`  ${broker} failed: ${err.split('\n')[0].slice(0, 300)}`);
      for (const note of b.notes) notes.push(`  ${broker}: ${note.slice(0, 300)}`);
    }
    const attempts = Math.max(...Object.values(s.brokers).map((b) => (b === undefined ? 0 : b.runs + b.failures)));
    parts.push(`\n== ${s.title} (median of ${attempts}) ==`);
    parts.push(table(header, rows));
    const ratioCols = cols.filter((c) => c.ratio);
    const ratioLines = Object.entries(s.ratios).filter(() => ratioCols.length > 0).map(
      ([pair, values]) => `${pair}: ` + ratioCols.map((c) => `${c.label} ${formatRatio(values[c.key])}`).join(', '),
    );
    if (ratioLines.length > 0) parts.push(ratioLines.join('   |   '));
    if (notes.length > 0) parts.push(['notes:', ...notes].join('\n'));
  }
  return parts.join('\n');
}

function describeRun(r: RunRecord): string {
  const head = `[rep ${r.rep}] ${r.scenario.padEnd(10)} ${r.broker.padEnd(17)}`;
  const tail = `(${r.elapsedS.toFixed(1)} s, load ${r.loadavg1.toFixed(1)})${r.notes.length > 0 ? ` NOTE: ${r.notes.join('; ')}` : ''}`;
  if (!r.ok || r.metrics === undefined) return `${head} FAILED: ${(r.error ?? '').split('\n')[0].slice(0, 300)}`;
  const m = r.metrics;
  const loss = `acked ${formatNumber(m.acked)}, delivered ${formatNumber(m.delivered)}, lost ${formatNumber(m.lost)}, dups ${formatNumber(m.duplicates)}`;
  if (r.scenario === 'sigkill') {
    return `${head} ingest ${formatNumber(m.ingestPerS)} msg/s; after SIGKILL + restart (${formatNumber(m.restartS)} s, session ${m.sessionPresent === 1 ? 'kept' : 'gone'}): ${loss} ${tail}`;
  }
  return (
    `${head} ingest ${formatNumber(m.ingestPerS)} msg/s (broker CPU ${m.ingestBrokerCpuPct.toFixed(0)}%), ` +
    `drain ${formatNumber(m.drainPerS)} msg/s (broker CPU ${m.drainBrokerCpuPct.toFixed(0)}%), ${loss} ${tail}`
  );
}

// ---- main -----------------------------------------------------------------------------------------------

function positiveInt(value: string | undefined, fallback: number, name: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new Error(`--${name} must be a positive integer, got ${value}`);
  return n;
}

function list<T extends string>(value: string, valid: readonly T[], what: string): T[] {
  const items = value.split(',').map((s) => s.trim()).filter((s) => s.length > 0);
  const bad = items.filter((s) => !(valid as readonly string[]).includes(s));
  if (bad.length > 0) throw new Error(`unknown ${what}: ${bad.join(', ')}`);
  return items as T[];
}

function parseOptions(): Options {
  const { values } = parseArgs({
    options: {
      brokers: { type: 'string' },
      scenarios: { type: 'string' },
      reps: { type: 'string' },
      messages: { type: 'string' },
      publishers: { type: 'string' },
      window: { type: 'string' },
      'payload-bytes': { type: 'string' },
      quick: { type: 'boolean', default: false },
      out: { type: 'string' },
      'cpu-prof': { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(usage + '\n');
    process.exit(0);
  }
  const quick = values.quick === true;
  const opts: Options = {
    brokers: list(values.brokers ?? defaultBrokers.join(','), brokerKinds, 'broker'),
    scenarios: list(values.scenarios ?? scenarioKinds.join(','), scenarioKinds, 'scenario'),
    reps: positiveInt(values.reps, quick ? 1 : 5, 'reps'),
    messages: positiveInt(values.messages, quick ? 5_000 : 50_000, 'messages'),
    publishers: positiveInt(values.publishers, 10, 'publishers'),
    window: positiveInt(values.window, 16, 'window'),
    payloadBytes: positiveInt(values['payload-bytes'], 64, 'payload-bytes'),
    quick,
    out: path.resolve(values.out ?? path.join(rootDir, 'bench/results/persistence.json')),
    cpuProfDir: values['cpu-prof'] === undefined ? undefined : path.resolve(values['cpu-prof']),
  };
  if (opts.payloadBytes < 8) throw new Error('--payload-bytes must be at least 8 (sequence number and publisher index)');
  if (opts.window > 65_535) throw new Error('--window must be at most 65535 (packet ids)');
  if (opts.publishers > 65_535) throw new Error('--publishers must be at most 65535');
  return opts;
}

async function main(): Promise<void> {
  let opts: Options;
  try {
    opts = parseOptions();
  } catch (err) {
    process.stderr.write(`${errorText(err)}\n\n${usage}\n`);
    process.exit(2);
  }
  if (!fs.existsSync(path.join(rootDir, 'dist/src/cli.js')) && opts.brokers.some((b) => b !== 'mosquitto')) {
    throw new Error('dist/src/cli.js is missing: run `npm run build` first');
  }
  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'edgeferry-bench-persist-'));
  const cleanup = (): void => {
    killAll();
    fs.rmSync(tmpDir, { recursive: true, force: true });
  };
  process.on('SIGINT', () => {
    process.stderr.write('\ninterrupted: stopping brokers\n');
    cleanup();
    process.exit(130);
  });
  process.on('SIGTERM', () => {
    cleanup();
    process.exit(143);
  });

  const startedAt = new Date();
  process.stdout.write(
    `edgeferry persistence bench: brokers ${opts.brokers.join(', ')}; scenarios ${opts.scenarios.join(', ')}; ` +
      `${opts.reps} repetition(s) of ${opts.messages.toLocaleString('en-US')} messages${opts.quick ? ' (quick)' : ''}; ` +
      `load average ${os.loadavg().map((l) => l.toFixed(2)).join(' ')}\n`,
  );
  const records: RunRecord[] = [];
  let runIndex = 0;
  for (let rep = 1; rep <= opts.reps; rep++) {
    // Rotate the order each repetition, so a slow phase of the shared machine hits every broker alike.
    const order = opts.brokers.map((_, i) => opts.brokers[(i + rep - 1) % opts.brokers.length]);
    for (const scenario of opts.scenarios) {
      for (const broker of order) {
        const started = Date.now();
        const record: RunRecord = { rep, scenario, broker, ok: false, notes: [], elapsedS: 0, loadavg1: os.loadavg()[0] };
        try {
          record.metrics = await runOnce({ kind: broker, scenario, opts, tmpDir, runTag: `p${process.pid}-${runIndex++}` }, record.notes);
          record.ok = true;
        } catch (err) {
          record.error = errorText(err);
        }
        record.elapsedS = (Date.now() - started) / 1000;
        records.push(record);
        process.stdout.write(describeRun(record) + '\n');
      }
    }
  }

  const summary = summarize(records, opts);
  process.stdout.write(renderSummary(summary) + '\n');
  for (const r of records) {
    if (r.ok && r.broker !== 'mosquitto' && r.metrics !== undefined && r.metrics.lost > 0) {
      process.stdout.write(`\nWARNING: ${r.broker} lost ${r.metrics.lost} acknowledged message(s) in ${r.scenario} rep ${r.rep}\n`);
    }
  }
  const finishedAt = new Date();
  const json = {
    startedAt: startedAt.toISOString(),
    finishedAt: finishedAt.toISOString(),
    elapsedS: (finishedAt.getTime() - startedAt.getTime()) / 1000,
    machine: { ...machineInfo(), mosquitto: mosquittoVersion(), loadavgAtEnd: os.loadavg() },
    options: { ...opts, out: undefined, drainQuietMs, mosquitto: 'persistence true, autosave_interval 1800, max_queued_messages 0' },
    summary,
    runs: records,
  };
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  fs.writeFileSync(opts.out, JSON.stringify(json, null, 2) + '\n');
  process.stdout.write(`\nJSON summary: ${path.relative(process.cwd(), opts.out)}; took ${json.elapsedS.toFixed(0)} s\n`);
  cleanup();
}

main().catch((err: unknown) => {
  process.stderr.write(`persistence bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  killAll();
  process.exit(1);
});
