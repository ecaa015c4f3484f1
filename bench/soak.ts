/**
 * `npm run soak -- --duration 24h`: the soak of docs/reliability.md#fault-scenarios, with the bridge's faults on a cycle.
 *
 * One edgeferry gateway bridges `soak/#` to an upstream Mosquitto (`max_inflight_messages 200`) through the fault
 * proxy. A QoS 1 publisher sends to the gateway at a steady rate, a sequence number in each payload; a subscriber on
 * the upstream checks
 * every arrival. Each cycle the link is cut (RST, then refused) for --outage-s and restored; every
 * --kill-every cycles the gateway is also SIGKILLed during the outage and restarted on the same data directory.
 * Each cycle's sample (data file size, gateway RSS, backlog) is taken at its end, just before the next cut.
 * Replay is paced at 5x the publish rate, so the token bucket runs too.
 *
 * It fails (exit 1, naming the check) when, at the end:
 * - a message the gateway acknowledged never reached the upstream (after the backlog drained);
 * - a message arrived out of order: each first arrival must be the next sequence number (re-sends are
 *   duplicates, which at-least-once allows and which are counted);
 * - the data file grew after the warm-up cycles by more than a quarter (and 1 MB): freed pages must be reused
 *   under queue-like use (the lmdb-js#321 guard);
 * - an outage's backlog did not drain within its cycle, or the publisher had to hold messages back (more than
 *   5 s of them unacknowledged): the gateway fell behind;
 * - the gateway logged at level error or above, or did not come back after a SIGKILL;
 * - the gateway's RSS at the end is more than twice its RSS after the warm-up.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { connect, type MqttClient } from 'mqtt';
import { startFaultProxy, type FaultProxy } from '../test/helpers/fault-proxy.js';
import { freePort, killAllBrokers, launchUntilReady, readRssKb, startBroker, type LaunchedProcess, type RunningBroker } from './brokers.js';
import { parseOrExit, positiveInt, rootDir, runMain, scratchDir } from './harness.js';
import { encodePublish, PacketType, publishPayloadOffset, type PacketHandler } from './mqtt-wire.js';
import { openConnection, sleep, waitUntil, type Connection } from './qos1-load.js';

const usage = [
  'usage: npm run soak -- [options]',
  '  --duration D        how long to run: 24h, 90m, 600s or seconds, default 10m',
  '  --rate N            QoS 1 messages/s published to the gateway, default 2000',
  '  --payload-bytes N   payload size, default 256 (at least 4: the sequence number)',
  '  --cycle-s N         one fault cycle: the outage, then forwarding, default 60',
  '  --outage-s N        link down per cycle, default 15',
  '  --kill-every N      SIGKILL the gateway during every Nth outage (0: never), default 4',
  '  --warmup-cycles N   cycles before the data file and RSS baselines are taken (best with the first SIGKILL',
  '                      among them: a restart leaves the file a little larger once), default 4',
  '  --out FILE          JSON summary (every cycle\'s sample and the checks)',
  '  -h, --help',
].join('\n');

interface Options {
  durationS: number;
  rate: number;
  payloadBytes: number;
  cycleS: number;
  outageS: number;
  killEvery: number;
  warmupCycles: number;
  out: string | undefined;
}

function parseDuration(text: string): number {
  const m = /^(\d+)(h|m|s)?$/.exec(text.trim());
  if (m === null || Number(m[1]) <= 0) throw new Error(`--duration must be a positive number of seconds or like 24h, 90m, 600s; got ${text}`);
  return Number(m[1]) * (m[2] === 'h' ? 3600 : m[2] === 'm' ? 60 : 1);
}

function parseOptions(): Options | null {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string' },
      rate: { type: 'string' },
      'payload-bytes': { type: 'string' },
      'cycle-s': { type: 'string' },
      'outage-s': { type: 'string' },
      'kill-every': { type: 'string' },
      'warmup-cycles': { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) return null;
  const opts: Options = {
    durationS: parseDuration(values.duration ?? '10m'),
    rate: positiveInt(values.rate, 2000, 'rate'),
    payloadBytes: positiveInt(values['payload-bytes'], 256, 'payload-bytes'),
    cycleS: positiveInt(values['cycle-s'], 60, 'cycle-s'),
    outageS: positiveInt(values['outage-s'], 15, 'outage-s'),
    killEvery: values['kill-every'] === '0' ? 0 : positiveInt(values['kill-every'], 4, 'kill-every'),
    warmupCycles: values['warmup-cycles'] === '0' ? 0 : positiveInt(values['warmup-cycles'], 4, 'warmup-cycles'),
    out: values.out,
  };
  if (opts.payloadBytes < 4) throw new Error('--payload-bytes must be at least 4 (the sequence number)');
  if (opts.outageS >= opts.cycleS) throw new Error('--outage-s must be shorter than --cycle-s');
  return opts;
}

/** A set of sequence numbers as bits, growing as needed (a day at 2,000 messages/s is 21 MB). */
class SeqBits {
  private bits = new Uint8Array(1 << 16);

  has(seq: number): boolean {
    return seq >> 3 < this.bits.length && (this.bits[seq >> 3] & (1 << (seq & 7))) !== 0;
  }

  add(seq: number): void {
    if (seq >> 3 >= this.bits.length) {
      const grown = new Uint8Array(Math.max(this.bits.length * 2, (seq >> 3) + 1));
      grown.set(this.bits);
      this.bits = grown;
    }
    this.bits[seq >> 3] |= 1 << (seq & 7);
  }
}

/** What the upstream subscriber saw. */
class Ledger {
  readonly acked = new SeqBits();
  readonly seen = new SeqBits();
  published = 0;
  ackedCount = 0;
  unique = 0;
  duplicates = 0;
  /** First arrivals that were not the next sequence number, and the first few of them. */
  outOfOrder = 0;
  readonly outOfOrderExamples: string[] = [];
  /** One past the highest sequence number seen: the next one expected. */
  private next = 0;

  arrive(seq: number): void {
    if (this.seen.has(seq)) {
      this.duplicates++;
      return;
    }
    this.seen.add(seq);
    this.unique++;
    if (seq !== this.next) {
      this.outOfOrder++;
      if (this.outOfOrderExamples.length < 5) this.outOfOrderExamples.push(`${seq} arrived when ${this.next} was next`);
    }
    this.next = Math.max(this.next, seq + 1);
  }

  /** Acknowledged by the gateway and not (yet) seen upstream. */
  missing(): number[] {
    const out: number[] = [];
    for (let seq = 0; seq < this.published; seq++) if (this.acked.has(seq) && !this.seen.has(seq)) out.push(seq);
    return out;
  }
}

interface Sample {
  cycle: number;
  atS: number;
  published: number;
  acked: number;
  unique: number;
  duplicates: number;
  outOfOrder: number;
  backlog: number | undefined;
  dataFileMb: number;
  rssMb: number;
  /** From restoring the link until the backlog was below one second of traffic. */
  drainS: number | undefined;
  killed: boolean;
}

const live = new Set<ChildProcess>();
const proxies = new Set<FaultProxy>();
function killAll(): void {
  killAllBrokers();
  for (const child of live) child.kill('SIGKILL');
  live.clear();
  for (const proxy of proxies) void proxy.stop();
  proxies.clear();
}

const topicPrefix = 'soak/';
const publishTopic = `${topicPrefix}data`;

/** The gateway under soak: its config and data directory outlive each process (SIGKILL, then a restart). */
class SoakGateway {
  /** Lines it logged at level error (50) or fatal (60), across restarts. */
  readonly errors: string[] = [];
  private process: LaunchedProcess | undefined;
  private partialLine = '';

  private constructor(
    readonly dir: string,
    readonly port: number,
    readonly metricsPort: number,
    private readonly config: string,
  ) {}

  static async create(dir: string, proxyPort: number, rate: number): Promise<SoakGateway> {
    const port = await freePort();
    const metricsPort = await freePort();
    const config = path.join(dir, 'edgeferry.yaml');
    const settings = {
      listeners: [{ type: 'tcp', host: '127.0.0.1', port }],
      storage: { path: path.join(dir, 'data') },
      log: { level: 'info', format: 'json' },
      metrics: { host: '127.0.0.1', port: metricsPort },
      bridges: [
        {
          name: 'central',
          remote: { urls: [`mqtt://127.0.0.1:${proxyPort}`], clientId: 'edgeferry-soak' },
          topics: [{ filter: `${topicPrefix}#`, direction: 'out', qos: 1 }],
          reconnect: { minDelayMs: 100, maxDelayMs: 1000 },
          // Paced (the token bucket runs too), but fast enough for the backlog of an outage to drain within the
          // cycle while live traffic goes on: the default (1,000 msg/s) is below this soak's default rate.
          replay: { messagesPerS: rate * 5, bytesPerS: 0 },
        },
      ],
    };
    fs.writeFileSync(config, JSON.stringify(settings, null, 2) + '\n'); // JSON is valid YAML
    const gw = new SoakGateway(dir, port, metricsPort, config);
    await gw.start();
    return gw;
  }

  get pid(): number {
    if (this.process === undefined) throw new Error('the gateway is not running');
    return this.process.pid;
  }

  get dataFileBytes(): number {
    return fs.statSync(path.join(this.dir, 'data', 'data.mdb')).size;
  }

  async start(): Promise<void> {
    const args = [path.join(rootDir, 'dist/src/cli.js'), '--config', this.config];
    const onOutput = (chunk: Buffer): void => {
      const lines = (this.partialLine + chunk.toString('utf8')).split('\n');
      this.partialLine = lines.pop() ?? '';
      for (const line of lines) if (/"level":(5|6)0\b/.test(line)) this.errors.push(line.slice(0, 500));
    };
    this.process = await launchUntilReady({ name: 'edgeferry', file: process.execPath, args, dir: this.dir, port: this.port, live, pollMs: 50, probePrefix: 'soak-probe-', onOutput });
  }

  async kill(): Promise<void> {
    await this.process?.kill();
  }

  async stop(): Promise<void> {
    await this.process?.stop();
  }

  /** Its outbox depth (`edgeferry_bridge_backlog_messages`); undefined while it restarts. */
  async backlog(): Promise<number | undefined> {
    try {
      const text = await (await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`)).text();
      const m = /^edgeferry_bridge_backlog_messages\{bridge="central"\} (\S+)$/m.exec(text);
      return m ? Number(m[1]) : undefined;
    } catch {
      return undefined;
    }
  }
}

/** The upstream subscriber (MQTT.js; its connection is never cut). */
function subscriber(port: number): Promise<MqttClient> {
  return new Promise((resolve, reject) => {
    const c = connect(`mqtt://127.0.0.1:${port}`, { clientId: 'soak-subscriber', protocolVersion: 5, connectTimeout: 5000 });
    c.once('connect', () => resolve(c));
    c.once('error', reject);
  });
}

/** Unique among the unacknowledged, which are far fewer than 65,535. */
const packetIdOf = (seq: number): number => (seq % 65_535) + 1;

/**
 * A device publishing `rate` QoS 1 messages/s in 10 ms ticks, as a PLC gateway would: it keeps what the gateway
 * has not acknowledged and, after a reconnect (the gateway was SIGKILLed), sends all of it again in order (DUP)
 * before anything new. While more than `maxUnacked` wait, new messages are held back (counted).
 */
class Publisher {
  heldBack = 0;
  reconnects = 0;
  /** Packet id -> sequence number, in send order (ids follow from the sequence number). */
  private readonly unacked = new Map<number, number>();
  private conn: Connection | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private readonly template: Buffer;
  private readonly payloadAt: number;
  private readonly maxUnacked: number;

  constructor(
    private readonly port: number,
    private readonly ledger: Ledger,
    private readonly opts: Options,
  ) {
    this.template = encodePublish(publishTopic, Buffer.alloc(opts.payloadBytes, 0x61), 1, 1);
    this.payloadAt = publishPayloadOffset(publishTopic, opts.payloadBytes, 1);
    this.maxUnacked = Math.max(10_000, opts.rate * 5);
  }

  async start(): Promise<void> {
    await this.connect();
    const startMs = performance.now();
    let due = 0;
    this.timer = setInterval(() => {
      const target = Math.floor(((performance.now() - startMs) / 1000) * this.opts.rate);
      const out: Buffer[] = [];
      for (; due < target; due++) {
        if (this.unacked.size >= this.maxUnacked) {
          this.heldBack++;
          continue;
        }
        const seq = this.ledger.published++;
        this.unacked.set(packetIdOf(seq), seq);
        out.push(this.packet(seq, false));
      }
      if (out.length > 0) this.conn?.sock.write(Buffer.concat(out));
    }, 10);
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
    this.conn?.destroy();
  }

  get waiting(): number {
    return this.unacked.size;
  }

  private packet(seq: number, dup: boolean): Buffer {
    const p = Buffer.from(this.template);
    if (dup) p[0] |= 0x08;
    p.writeUInt16BE(packetIdOf(seq), this.payloadAt - 2);
    p.writeUInt32BE(seq, this.payloadAt);
    return p;
  }

  private readonly onPacket: PacketHandler = (type, _flags, buf, start) => {
    if (type !== PacketType.puback) return;
    const id = buf.readUInt16BE(start);
    const seq = this.unacked.get(id);
    if (seq === undefined) return;
    this.unacked.delete(id);
    this.ledger.acked.add(seq);
    this.ledger.ackedCount++;
  };

  private async connect(): Promise<void> {
    while (!this.stopped) {
      try {
        const conn = await openConnection(this.port, 'soak-publisher', true, this.onPacket);
        conn.sock.on('close', () => {
          if (this.conn !== conn || this.stopped) return;
          this.conn = undefined;
          this.reconnects++;
          void this.connect();
        });
        this.conn = conn;
        if (this.unacked.size > 0) conn.sock.write(Buffer.concat([...this.unacked.values()].map((seq) => this.packet(seq, true))));
        return;
      } catch {
        await sleep(200); // the gateway is restarting
      }
    }
  }
}

/** The processes of a soak and what it has seen so far. */
interface Rig {
  readonly opts: Options;
  readonly proxy: FaultProxy;
  readonly gw: SoakGateway;
  readonly ledger: Ledger;
  readonly problems: string[];
  readonly startMs: number;
}

/**
 * One cycle: the outage (open connections reset, new ones refused; with a SIGKILL and a restart in its middle),
 * the drain after it, then forwarding until the cycle ends; the sample is taken at its end. Undefined when the
 * gateway did not come back.
 */
async function runCycle(rig: Rig, cycle: number): Promise<Sample | undefined> {
  const { opts, proxy, gw, ledger } = rig;
  const cycleEndMs = performance.now() + opts.cycleS * 1000;
  const killed = opts.killEvery > 0 && cycle % opts.killEvery === 0;
  proxy.refuse();
  proxy.reset();
  if (killed) {
    await sleep((opts.outageS * 1000) / 2);
    await gw.kill();
    try {
      await gw.start();
    } catch (err) {
      rig.problems.push(`the gateway did not come back after SIGKILL: ${String(err)}`);
      return undefined;
    }
    await sleep((opts.outageS * 1000) / 2);
  } else {
    await sleep(opts.outageS * 1000);
  }
  proxy.restore();
  const restoredMs = performance.now();
  // Drained: no more than a second of live traffic waiting.
  const drained = await waitUntil(async () => ((await gw.backlog()) ?? Infinity) <= opts.rate, cycleEndMs - restoredMs, 100);
  if (!drained) rig.problems.push(`cycle ${cycle}: the backlog did not drain before the next outage`);
  const drainS = drained ? (performance.now() - restoredMs) / 1000 : undefined;
  await sleep(cycleEndMs - performance.now());
  return {
    cycle,
    atS: (performance.now() - rig.startMs) / 1000,
    published: ledger.published,
    acked: ledger.ackedCount,
    unique: ledger.unique,
    duplicates: ledger.duplicates,
    outOfOrder: ledger.outOfOrder,
    backlog: await gw.backlog(),
    dataFileMb: gw.dataFileBytes / 1048576,
    rssMb: readRssKb(gw.pid) / 1024,
    drainS,
    killed,
  };
}

function sampleLine(s: Sample): string {
  return (
    `[cycle ${s.cycle}${s.killed ? ', SIGKILL' : ''}] ${s.atS.toFixed(0)} s: published ${s.published}, acked ${s.acked}, ` +
    `arrived ${s.unique} (+${s.duplicates} dup, ${s.outOfOrder} out of order), backlog ${s.backlog ?? 'n/a'}, ` +
    `drained in ${s.drainS?.toFixed(1) ?? 'n/a'} s, data file ${s.dataFileMb.toFixed(1)} MB, RSS ${s.rssMb.toFixed(0)} MB`
  );
}

/** The end-of-run checks (see the top of this file); adds what failed to `rig.problems`. */
function check(rig: Rig, samples: readonly Sample[], heldBack: number): { missing: number } {
  const { opts, ledger, gw, problems } = rig;
  const missing = ledger.missing();
  if (missing.length > 0) problems.push(`${missing.length} acknowledged message(s) never arrived upstream, first ${missing.slice(0, 5).join(', ')}`);
  if (ledger.outOfOrder > 0) problems.push(`${ledger.outOfOrder} message(s) arrived out of order: ${ledger.outOfOrderExamples.join('; ')}`);
  if (gw.errors.length > 0) problems.push(`the gateway logged ${gw.errors.length} error(s), first: ${gw.errors[0]}`);
  if (heldBack > 0) problems.push(`the gateway fell behind: ${heldBack} message(s) held back by the publisher`);
  const warm = samples[Math.min(opts.warmupCycles, samples.length) - 1];
  const last = samples[samples.length - 1];
  if (warm === undefined || samples.length <= opts.warmupCycles) {
    process.stdout.write('no cycle after the warm-up: data file and RSS growth not checked\n');
  } else {
    // A quarter, and 1 MB for small files: LMDB grows in pages, and a restart can leave a few unused.
    if (last.dataFileMb > warm.dataFileMb * 1.25 + 1) {
      problems.push(`the data file grew after the warm-up from ${warm.dataFileMb.toFixed(1)} to ${last.dataFileMb.toFixed(1)} MB`);
    }
    if (last.rssMb > warm.rssMb * 2) problems.push(`the gateway's RSS grew after the warm-up from ${warm.rssMb.toFixed(0)} to ${last.rssMb.toFixed(0)} MB`);
  }
  return { missing: missing.length };
}

async function main(): Promise<void> {
  const opts = parseOrExit(usage, parseOptions);
  const { tmpDir, cleanup } = scratchDir('edgeferry-soak-', killAll, 'soak stopped');
  try {
    // The upstream's Receive Maximum (Mosquitto's max_inflight_messages, 20 by default) bounds a replay to 20
    // messages per round trip; through this rig's proxy on a loaded machine that is barely above the live rate,
    // and the soak tests what the gateway keeps, not the upstream's flow control.
    const upstream: RunningBroker = await startBroker('mosquitto-unlimited', { tmpDir, rootDir, mosquittoLines: ['max_inflight_messages 200'] });
    const proxy = await startFaultProxy(upstream.port);
    proxies.add(proxy);
    const gw = await SoakGateway.create(tmpDir, proxy.port, opts.rate);
    const ledger = new Ledger();
    const sub = await subscriber(upstream.port);
    sub.on('message', (_topic, payload) => ledger.arrive(payload.readUInt32BE(0)));
    await sub.subscribeAsync(`${topicPrefix}#`, { qos: 1 });
    const publisher = new Publisher(gw.port, ledger, opts);
    await publisher.start();
    const rig: Rig = { opts, proxy, gw, ledger, problems: [], startMs: performance.now() };
    const cycles = Math.max(1, Math.floor(opts.durationS / opts.cycleS));
    process.stdout.write(
      `edgeferry soak: ${cycles} cycle(s) of ${opts.cycleS} s (outage ${opts.outageS} s, SIGKILL in every ${opts.killEvery || 'no'} ` +
        `outage), ${opts.rate} msg/s of ${opts.payloadBytes} B\n`,
    );
    const samples: Sample[] = [];
    for (let cycle = 1; cycle <= cycles; cycle++) {
      const sample = await runCycle(rig, cycle);
      if (sample === undefined) break;
      samples.push(sample);
      process.stdout.write(sampleLine(sample) + '\n');
    }
    // Everything acknowledged must arrive: the publisher's last PUBACKs, then the bridge's backlog.
    await waitUntil(() => publisher.waiting === 0, 30_000, 100);
    publisher.stop();
    await waitUntil(() => ledger.unique >= ledger.published, 60_000, 100);
    const { missing } = check(rig, samples, publisher.heldBack);
    const totals = {
      published: ledger.published,
      acked: ledger.ackedCount,
      arrived: ledger.unique,
      duplicates: ledger.duplicates,
      outOfOrder: ledger.outOfOrder,
      missing,
      heldBack: publisher.heldBack,
      publisherReconnects: publisher.reconnects,
      gatewayErrors: gw.errors.length,
    };
    if (opts.out !== undefined) fs.writeFileSync(opts.out, JSON.stringify({ options: opts, ...totals, samples, problems: rig.problems }, null, 2) + '\n');
    process.stdout.write(`${Object.entries(totals).map(([k, v]) => `${k} ${v}`).join(', ')}\n`);
    await sub.endAsync();
    await gw.stop();
    await upstream.stop();
    await proxy.stop();
    proxies.delete(proxy);
    if (rig.problems.length > 0) {
      process.stdout.write(`SOAK FAILED\n${rig.problems.map((p) => `- ${p}`).join('\n')}\n`);
      process.exitCode = 1;
    } else {
      process.stdout.write('soak passed: nothing lost, in order, no errors, data file and RSS stable\n');
    }
  } finally {
    cleanup();
  }
}

runMain('soak', main, killAll);
