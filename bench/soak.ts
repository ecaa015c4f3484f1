/**
 * `npm run soak -- --duration 24h`: the soak of docs/reliability.md#fault-scenarios, with the bridge's faults on a cycle.
 *
 * One edgeferry gateway bridges `soak/#` to an upstream Mosquitto (`max_inflight_messages 200`) through
 * --bridges bridges (b1, b2, ...), all outboxes cursors over the store's one journal
 * (docs/architecture.md#one-journal). Each bridge has its own fault proxy, so that one link can be cut while the
 * others forward, and its own remote prefix (`b1/soak/data`), so that the upstream subscriber keeps a ledger per
 * bridge. A QoS 1 publisher sends to the gateway at a steady rate, a sequence number in each payload.
 * Each cycle every link is cut (RST, then refused) for --outage-s and restored; every --kill-every cycles the
 * gateway is also SIGKILLed during the outage and restarted on the same data directory. With two bridges or more,
 * b2 lags: every other cycle (not the last) its link stays cut for the whole cycle and comes back with the others
 * at the end of the next outage, so its cursor falls a cycle and an outage behind while the others drain.
 * Each cycle's sample (data file size, gateway RSS, each bridge's backlog) is taken at its end, just before the
 * next cut. Replay is paced at 5x the publish rate, so the token bucket runs too.
 *
 * It fails (exit 1, naming the check) when, at the end:
 * - a message the gateway acknowledged never reached the upstream through one of the bridges (after the backlogs
 *   drained);
 * - a message arrived out of order through a bridge: each first arrival must be the next sequence number (re-sends
 *   are duplicates, which at-least-once allows and which are counted per bridge);
 * - the data file grew after the warm-up cycles by more than a quarter (and 1 MB): freed pages must be reused
 *   under queue-like use (the lmdb-js#321 guard), and journal entries freed once the lagging cursor has passed
 *   them (with b2 lagging, each of its outages leaves a cycle and more of entries that only it still holds);
 * - a bridge's backlog did not drain within the cycle its link came back in, or the publisher had to hold
 *   messages back (more than 5 s of them unacknowledged): the gateway fell behind;
 * - the gateway logged at level error or above, or did not come back after a SIGKILL;
 * - the gateway's RSS at the end is more than twice its RSS after the warm-up.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { parseArgs } from 'node:util';
import { connect, type MqttClient } from 'mqtt';
import { startFaultProxy, type FaultProxy } from '../test/helpers/fault-proxy.js';
import {
  GATEWAY_NODE_FLAGS,
  freePort,
  killAllBrokers,
  launchUntilReady,
  readRssKb,
  startBroker,
  type LaunchedProcess,
  type RunningBroker,
} from './brokers.js';
import { parseOrExit, positiveInt, rootDir, runMain, scratchDir } from './harness.js';
import { encodePublish, PacketType, publishPayloadOffset, type PacketHandler } from './mqtt-wire.js';
import { openConnection, sleep, waitUntil, type Connection } from './qos1-load.js';

const usage = [
  'usage: npm run soak -- [options]',
  '  --duration D        how long to run: 24h, 90m, 600s or seconds, default 10m',
  '  --bridges N         bridges to the upstream (at most 15), each with its own link and ledger; with two or more,',
  '                      b2 lags: its link cut through every other cycle, default 1',
  '  --rate N            QoS 1 messages/s published to the gateway, default 2000',
  '  --payload-bytes N   payload size, default 256 (at least 4: the sequence number)',
  '  --cycle-s N         one fault cycle: the outage, then forwarding, default 60',
  '  --outage-s N        link down per cycle, default 15',
  '  --kill-every N      SIGKILL the gateway during every Nth outage (0: never), default 4',
  '  --warmup-cycles N   cycles before the data file and RSS baselines are taken (best with the first SIGKILL',
  '                      among them: a restart leaves the file a little larger once), default 4',
  "  --out FILE          JSON summary (every cycle's sample and the checks)",
  '  -h, --help',
].join('\n');

interface Options {
  durationS: number;
  bridges: number;
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
  if (m === null || Number(m[1]) <= 0)
    throw new Error(`--duration must be a positive number of seconds or like 24h, 90m, 600s; got ${text}`);
  return Number(m[1]) * (m[2] === 'h' ? 3600 : m[2] === 'm' ? 60 : 1);
}

function parseOptions(): Options | null {
  const { values } = parseArgs({
    options: {
      duration: { type: 'string' },
      bridges: { type: 'string' },
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
    bridges: positiveInt(values.bridges, 1, 'bridges'),
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
  // The store holds 32 outboxes, two per bridge (its own and its dead letters).
  if (opts.bridges > 15) throw new Error('--bridges must be at most 15 (the store holds 32 outboxes, two per bridge)');
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

/** What the publisher sent and the gateway acknowledged. */
class Published {
  readonly acked = new SeqBits();
  count = 0;
  ackedCount = 0;

  /** Acknowledged by the gateway and not (yet) seen upstream through one bridge. */
  missingFrom(arrivals: Arrivals): number[] {
    const out: number[] = [];
    for (let seq = 0; seq < this.count; seq++) if (this.acked.has(seq) && !arrivals.seen.has(seq)) out.push(seq);
    return out;
  }
}

/** What the upstream subscriber saw through one bridge. */
class Arrivals {
  readonly seen = new SeqBits();
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
}

/** One bridge seen from outside: its name (also its remote prefix), its link's fault proxy, what came through it. */
interface Uplink {
  readonly name: string;
  readonly proxy: FaultProxy;
  readonly arrivals: Arrivals;
}

interface UplinkSample {
  name: string;
  unique: number;
  duplicates: number;
  outOfOrder: number;
  backlog: number | undefined;
  /** From restoring its link until its backlog was below one second of traffic; undefined while it lags. */
  drainS: number | undefined;
  /** Its link stayed cut through this cycle. */
  lagging: boolean;
}

interface Sample {
  cycle: number;
  atS: number;
  published: number;
  acked: number;
  bridges: UplinkSample[];
  dataFileMb: number;
  rssMb: number;
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

  static async create(dir: string, uplinks: readonly Uplink[], rate: number): Promise<SoakGateway> {
    const port = await freePort();
    const metricsPort = await freePort();
    const config = path.join(dir, 'edgeferry.yaml');
    const settings = {
      listeners: [{ type: 'tcp', host: '127.0.0.1', port }],
      storage: { path: path.join(dir, 'data') },
      log: { level: 'info', format: 'json' },
      metrics: { host: '127.0.0.1', port: metricsPort },
      bridges: uplinks.map(({ name, proxy }) => ({
        name,
        remote: { urls: [`mqtt://127.0.0.1:${proxy.port}`], clientId: `edgeferry-soak-${name}` },
        topics: [{ filter: `${topicPrefix}#`, direction: 'out', qos: 1, remotePrefix: `${name}/` }],
        reconnect: { minDelayMs: 100, maxDelayMs: 1000 },
        // Paced (the token bucket runs too), but fast enough for the backlog of an outage to drain within the
        // cycle while live traffic goes on: the default (1,000 msg/s) is below this soak's default rate.
        replay: { messagesPerS: rate * 5, bytesPerS: 0 },
      })),
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
    const args = [...GATEWAY_NODE_FLAGS, path.join(rootDir, 'dist/src/cli.js'), '--config', this.config];
    const onOutput = (chunk: Buffer): void => {
      const lines = (this.partialLine + chunk.toString('utf8')).split('\n');
      this.partialLine = lines.pop() ?? '';
      for (const line of lines) if (/"level":(5|6)0\b/.test(line)) this.errors.push(line.slice(0, 500));
    };
    this.process = await launchUntilReady({
      name: 'edgeferry',
      file: process.execPath,
      args,
      dir: this.dir,
      port: this.port,
      live,
      pollMs: 50,
      probePrefix: 'soak-probe-',
      onOutput,
    });
  }

  async kill(): Promise<void> {
    await this.process?.kill();
  }

  async stop(): Promise<void> {
    await this.process?.stop();
  }

  /** Each bridge's outbox depth (`edgeferry_bridge_backlog_messages`) by name; empty while it restarts. */
  async backlogs(): Promise<Map<string, number>> {
    const out = new Map<string, number>();
    try {
      const text = await (await fetch(`http://127.0.0.1:${this.metricsPort}/metrics`)).text();
      for (const m of text.matchAll(/^edgeferry_bridge_backlog_messages\{bridge="([^"]+)"\} (\S+)$/gm))
        out.set(m[1], Number(m[2]));
    } catch {
      // restarting: no figures
    }
    return out;
  }
}

/** The upstream subscriber (MQTT.js; its connection is never cut). */
function subscriber(port: number): Promise<MqttClient> {
  return new Promise((resolve, reject) => {
    const c = connect(`mqtt://127.0.0.1:${port}`, {
      clientId: 'soak-subscriber',
      protocolVersion: 5,
      connectTimeout: 5000,
    });
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
    private readonly published: Published,
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
        const seq = this.published.count++;
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
    this.published.acked.add(seq);
    this.published.ackedCount++;
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
        if (this.unacked.size > 0)
          conn.sock.write(Buffer.concat([...this.unacked.values()].map((seq) => this.packet(seq, true))));
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
  readonly cycles: number;
  readonly uplinks: readonly Uplink[];
  readonly gw: SoakGateway;
  readonly published: Published;
  readonly problems: string[];
  readonly startMs: number;
}

/** b2 (with two bridges or more) lags: its link stays cut through every even cycle but the last, whose backlog must drain before the end. */
const lagsIn = (rig: Rig, index: number, cycle: number): boolean =>
  index === 1 && cycle % 2 === 0 && cycle < rig.cycles;

/**
 * One cycle: the outage (open connections reset, new ones refused; with a SIGKILL and a restart in its middle),
 * the drain after it, then forwarding until the cycle ends; the sample is taken at its end. A lagging bridge's link
 * stays cut until the next cycle's outage ends. Undefined when the gateway did not come back.
 */
async function runCycle(rig: Rig, cycle: number): Promise<Sample | undefined> {
  const { opts, uplinks, gw, published } = rig;
  const cycleEndMs = performance.now() + opts.cycleS * 1000;
  const killed = opts.killEvery > 0 && cycle % opts.killEvery === 0;
  for (const { proxy } of uplinks) {
    proxy.refuse();
    proxy.reset();
  }
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
  const lagging = uplinks.map((_, i) => lagsIn(rig, i, cycle));
  uplinks.forEach(({ proxy }, i) => {
    if (!lagging[i]) proxy.restore();
  });
  const drainS = await drainTimes(rig, lagging, cycleEndMs - performance.now());
  uplinks.forEach(({ name }, i) => {
    if (!lagging[i] && drainS[i] === undefined)
      rig.problems.push(`cycle ${cycle}: ${name}'s backlog did not drain before the next outage`);
  });
  await sleep(cycleEndMs - performance.now());
  const backlogs = await gw.backlogs();
  return {
    cycle,
    atS: (performance.now() - rig.startMs) / 1000,
    published: published.count,
    acked: published.ackedCount,
    bridges: uplinks.map(({ name, arrivals }, i) => ({
      name,
      unique: arrivals.unique,
      duplicates: arrivals.duplicates,
      outOfOrder: arrivals.outOfOrder,
      backlog: backlogs.get(name),
      drainS: drainS[i],
      lagging: lagging[i],
    })),
    dataFileMb: gw.dataFileBytes / 1048576,
    rssMb: readRssKb(gw.pid) / 1024,
    killed,
  };
}

/**
 * Seconds from now until each bridge's backlog was no more than a second of live traffic; undefined for a bridge
 * that lags or did not drain within `timeoutMs`.
 */
async function drainTimes(rig: Rig, lagging: readonly boolean[], timeoutMs: number): Promise<(number | undefined)[]> {
  const startMs = performance.now();
  const drainS: (number | undefined)[] = rig.uplinks.map(() => undefined);
  const allDrained = async (): Promise<boolean> => {
    const backlogs = await rig.gw.backlogs();
    let waiting = false;
    rig.uplinks.forEach(({ name }, i) => {
      if (lagging[i] || drainS[i] !== undefined) return;
      if ((backlogs.get(name) ?? Infinity) <= rig.opts.rate) drainS[i] = (performance.now() - startMs) / 1000;
      else waiting = true;
    });
    return !waiting;
  };
  await waitUntil(allDrained, timeoutMs, 100);
  return drainS;
}

function uplinkText(b: UplinkSample): string {
  const outOfOrder = b.outOfOrder > 0 ? `, ${b.outOfOrder} out of order` : '';
  const drain = b.lagging ? 'link cut all cycle' : `drained in ${b.drainS?.toFixed(1) ?? 'n/a'} s`;
  return `${b.name} arrived ${b.unique} (+${b.duplicates} dup${outOfOrder}), backlog ${b.backlog ?? 'n/a'}, ${drain}`;
}

function sampleLine(s: Sample): string {
  return (
    `[cycle ${s.cycle}${s.killed ? ', SIGKILL' : ''}] ${s.atS.toFixed(0)} s: published ${s.published}, acked ${s.acked}; ` +
    `${s.bridges.map(uplinkText).join('; ')}; data file ${s.dataFileMb.toFixed(1)} MB, RSS ${s.rssMb.toFixed(0)} MB`
  );
}

/** The end-of-run checks (see the top of this file); adds what failed to `rig.problems`. Returns the missing count per bridge. */
function check(rig: Rig, samples: readonly Sample[], heldBack: number): number[] {
  const { opts, uplinks, published, gw, problems } = rig;
  const missingCounts = uplinks.map(({ name, arrivals }) => {
    const missing = published.missingFrom(arrivals);
    if (missing.length > 0)
      problems.push(
        `${name}: ${missing.length} acknowledged message(s) never arrived upstream, first ${missing.slice(0, 5).join(', ')}`,
      );
    if (arrivals.outOfOrder > 0)
      problems.push(
        `${name}: ${arrivals.outOfOrder} message(s) arrived out of order: ${arrivals.outOfOrderExamples.join('; ')}`,
      );
    return missing.length;
  });
  if (gw.errors.length > 0) problems.push(`the gateway logged ${gw.errors.length} error(s), first: ${gw.errors[0]}`);
  if (heldBack > 0) problems.push(`the gateway fell behind: ${heldBack} message(s) held back by the publisher`);
  const warm = samples[Math.min(opts.warmupCycles, samples.length) - 1] as Sample | undefined;
  const last = samples[samples.length - 1];
  if (warm === undefined || samples.length <= opts.warmupCycles) {
    process.stdout.write('no cycle after the warm-up: data file and RSS growth not checked\n');
  } else {
    // A quarter, and 1 MB for small files: LMDB grows in pages, and a restart can leave a few unused.
    if (last.dataFileMb > warm.dataFileMb * 1.25 + 1) {
      problems.push(
        `the data file grew after the warm-up from ${warm.dataFileMb.toFixed(1)} to ${last.dataFileMb.toFixed(1)} MB`,
      );
    }
    if (last.rssMb > warm.rssMb * 2)
      problems.push(
        `the gateway's RSS grew after the warm-up from ${warm.rssMb.toFixed(0)} to ${last.rssMb.toFixed(0)} MB`,
      );
  }
  return missingCounts;
}

async function main(): Promise<void> {
  const opts = parseOrExit(usage, parseOptions);
  const { tmpDir, cleanup } = scratchDir('edgeferry-soak-', killAll, 'soak stopped');
  try {
    // The upstream's Receive Maximum (Mosquitto's max_inflight_messages, 20 by default) bounds a replay to 20
    // messages per round trip; through this rig's proxy on a loaded machine that is barely above the live rate,
    // and the soak tests what the gateway keeps, not the upstream's flow control.
    const upstream: RunningBroker = await startBroker('mosquitto-unlimited', {
      tmpDir,
      rootDir,
      mosquittoLines: ['max_inflight_messages 200'],
    });
    // One proxy per bridge: b2's link is cut while the others forward.
    const uplinks: Uplink[] = [];
    for (let i = 1; i <= opts.bridges; i++) {
      const proxy = await startFaultProxy(upstream.port);
      proxies.add(proxy);
      uplinks.push({ name: `b${i}`, proxy, arrivals: new Arrivals() });
    }
    const gw = await SoakGateway.create(tmpDir, uplinks, opts.rate);
    const published = new Published();
    const arrivalsOf = new Map(uplinks.map(({ name, arrivals }) => [name, arrivals]));
    const sub = await subscriber(upstream.port);
    // The remote topic is `<bridge>/soak/data`; only those are subscribed.
    sub.on('message', (topic, payload) =>
      arrivalsOf.get(topic.slice(0, topic.indexOf('/')))?.arrive(payload.readUInt32BE(0)),
    );
    await sub.subscribeAsync(
      uplinks.map(({ name }) => `${name}/${topicPrefix}#`),
      { qos: 1 },
    );
    const publisher = new Publisher(gw.port, published, opts);
    await publisher.start();
    const cycles = Math.max(1, Math.floor(opts.durationS / opts.cycleS));
    const rig: Rig = { opts, cycles, uplinks, gw, published, problems: [], startMs: performance.now() };
    process.stdout.write(
      `edgeferry soak: ${cycles} cycle(s) of ${opts.cycleS} s (outage ${opts.outageS} s, SIGKILL in every ${opts.killEvery || 'no'} ` +
        `outage), ${opts.rate} msg/s of ${opts.payloadBytes} B, ${opts.bridges} bridge(s)` +
        `${opts.bridges > 1 ? ' (b2 lags: its link cut through every other cycle)' : ''}\n`,
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
    await waitUntil(() => uplinks.every(({ arrivals }) => arrivals.unique >= published.count), 60_000, 100);
    const missing = check(rig, samples, publisher.heldBack);
    const totals = {
      published: published.count,
      acked: published.ackedCount,
      heldBack: publisher.heldBack,
      publisherReconnects: publisher.reconnects,
      gatewayErrors: gw.errors.length,
    };
    const bridges = uplinks.map(({ name, arrivals }, i) => ({
      name,
      arrived: arrivals.unique,
      duplicates: arrivals.duplicates,
      outOfOrder: arrivals.outOfOrder,
      missing: missing[i],
    }));
    if (opts.out !== undefined) {
      fs.writeFileSync(
        opts.out,
        JSON.stringify({ options: opts, ...totals, bridges, samples, problems: rig.problems }, null, 2) + '\n',
      );
    }
    process.stdout.write(
      `${Object.entries(totals)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}\n`,
    );
    for (const b of bridges)
      process.stdout.write(
        `${b.name}: arrived ${b.arrived}, duplicates ${b.duplicates}, out of order ${b.outOfOrder}, missing ${b.missing}\n`,
      );
    await sub.endAsync();
    await gw.stop();
    await upstream.stop();
    for (const { proxy } of uplinks) {
      await proxy.stop();
      proxies.delete(proxy);
    }
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
