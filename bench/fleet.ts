/**
 * `npm run bench:fleet`: N gateways (default 50) on one central Mosquitto, through one site link. See bench/README.md
 * ("Fleet benchmark").
 *
 * Each gateway is a real process with its own configuration and store, written as a user would: one bridge named
 * `central`, no client id (the default `<gateway.id>-central`), every other bridge setting at its default; only
 * `gateway.id` is set, as each gateway would have its own host name. A local publisher per gateway (in this process)
 * sends QoS 1 at `--rate` msg/s; payload = [seq u32][gateway u16][filler]. A checker at the central broker (a
 * persistent QoS 1 session on `fleet/#`) counts what arrives: loss (acknowledged by a gateway, never seen), order per
 * gateway (a first-seen seq below one seen before), duplicates.
 * - `cut`: the site's link (one fault proxy for all gateways) refuses and resets every connection for `--cut-s`, then
 *   forwards again. Reconnect = restore -> the first message of that gateway at the checker; drain = restore -> the
 *   checker has everything every gateway acknowledged up to the restore.
 * - `restart`: the central broker is restarted (SIGTERM, persistence, same port); the same figures from its return.
 * - ceiling: before the fleet, 8 publishers send straight to the central broker as fast as its PUBACKs allow, to a
 *   subscriber there: what the broker can pass at most on this machine, in the same run.
 * Peak ingress: the checker's highest receive rate over 1 s windows. Memory: every gateway, idle and under load, as
 * RSS, anonymous and Pss (brokers.ts readMemoryKb).
 * The first `--sparkplug` gateways (default 5) are also Sparkplug edge nodes of a Modbus press on the same bridge
 * (bench/fleet-sparkplug.ts): their rebirth after each outage and the Sparkplug rules a central host checks.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { startFaultProxy } from '../test/helpers/fault-proxy.js';
import {
  GATEWAY_NODE_FLAGS,
  freePort,
  launchCentralMosquitto,
  launchUntilReady,
  readMemoryKb,
  type LaunchedProcess,
} from './brokers.js';
import { FleetSparkplug, type SparkplugOutage } from './fleet-sparkplug.js';
import { rootDir, runMain, scratchDir, writeResults } from './harness.js';
import { encodePublish, encodeSubscribe, PacketType } from './mqtt-wire.js';
import {
  SequenceCounter,
  ingest,
  openConnection,
  quotas,
  secondsBetween,
  sleep,
  waitUntil,
  type Connection,
} from './qos1-load.js';

const usage = `npm run bench:fleet -- [--gateways 50] [--rate 100] [--cut-s 60] [--payload 64] [--sparkplug 5] [--out bench/results/fleet.json]`;
const live = new Set<ChildProcess>();
const killAll = (): void => {
  for (const child of live) child.kill('SIGKILL');
  live.clear();
};

const { values } = parseArgs({
  options: {
    gateways: { type: 'string', default: '50' },
    rate: { type: 'string', default: '100' },
    'cut-s': { type: 'string', default: '60' },
    payload: { type: 'string', default: '64' },
    sparkplug: { type: 'string', default: '5' },
    out: { type: 'string', default: path.join(rootDir, 'bench/results/fleet.json') },
    help: { type: 'boolean' },
  },
});
if (values.help) {
  process.stdout.write(`${usage}\n`);
  process.exit(0);
}
const opts = {
  gateways: Number(values.gateways),
  rate: Number(values.rate),
  cutS: Number(values['cut-s']),
  payloadBytes: Math.max(8, Number(values.payload)),
  sparkplugNodes: Math.min(Number(values.gateways), Math.max(0, Number(values.sparkplug))),
};
/** Messages a publisher may have unacknowledged; a gateway acknowledges once journaled, so this never binds. */
const MAX_INFLIGHT = 1000;
const TICK_MS = 20;
/** Seqs per gateway the run can hold: the publishers stop there. */
const capacity = opts.rate * (opts.cutS + 300);

/** The checker's view of one gateway's stream. */
interface Stream {
  readonly seen: Uint8Array;
  /** The smallest seq not seen yet. */
  prefix: number;
  maxSeen: number;
  /** Arrivals below `maxSeen`: for an in-order bridge each is an order break. */
  outOfOrder: number;
  /**
   * For a live-first bridge those arrivals are its backlog, draining beside live traffic: they must come in order
   * among themselves (`behindMax`: the highest of them so far; `behindOutOfOrder`: those below it).
   */
  behindMax: number;
  behindOutOfOrder: number;
  duplicates: number;
  /** ms (performance.now) of the first message after the last `mark`, NaN until then. */
  firstAfterMark: number;
}

class Checker {
  readonly streams: Stream[];
  received = 0;
  /** Receive counts per 100 ms, for the peak rate over 1 s. */
  private readonly buckets = new Map<number, number>();
  private acks: number[] = [];
  conn: Connection | undefined;

  constructor(gateways: number) {
    this.streams = Array.from({ length: gateways }, () => ({
      seen: new Uint8Array(capacity),
      prefix: 0,
      maxSeen: -1,
      outOfOrder: 0,
      behindMax: -1,
      behindOutOfOrder: 0,
      duplicates: 0,
      firstAfterMark: Number.NaN,
    }));
  }

  mark(): void {
    for (const s of this.streams) s.firstAfterMark = Number.NaN;
    this.buckets.clear();
  }

  /** The highest receive rate over 1 s windows since the last `mark`. */
  peakPerS(): number {
    const keys = [...this.buckets.keys()].sort((a, b) => a - b);
    let best = 0;
    for (const k of keys) {
      let sum = 0;
      for (let j = 0; j < 10; j++) sum += this.buckets.get(k + j) ?? 0;
      best = Math.max(best, sum);
    }
    return best;
  }

  readonly onPacket = (type: number, flags: number, buf: Buffer, start: number, end: number): void => {
    if (type !== PacketType.publish) return;
    let pos = start + 2 + buf.readUInt16BE(start);
    if (((flags >> 1) & 3) > 0) {
      this.acks.push(buf.readUInt16BE(pos));
      pos += 2;
    }
    if (end - pos < 6) return;
    this.received++;
    const nowMs = performance.now();
    const bucket = Math.floor(nowMs / 100);
    this.buckets.set(bucket, (this.buckets.get(bucket) ?? 0) + 1);
    const s = this.streams.at(buf.readUInt16BE(pos + 4));
    const seq = buf.readUInt32BE(pos);
    if (s === undefined || seq >= capacity) return;
    if (Number.isNaN(s.firstAfterMark)) s.firstAfterMark = nowMs;
    if (s.seen[seq] === 1) {
      s.duplicates++;
      return;
    }
    s.seen[seq] = 1;
    if (seq < s.maxSeen) {
      s.outOfOrder++;
      if (seq < s.behindMax) s.behindOutOfOrder++;
      else s.behindMax = seq;
    } else s.maxSeen = seq;
    while (s.prefix < capacity && s.seen[s.prefix] === 1) s.prefix++;
  };

  readonly afterChunk = (): void => {
    if (this.acks.length === 0 || this.conn === undefined) return;
    const out = Buffer.allocUnsafe(4 * this.acks.length);
    this.acks.forEach((id, i) => out.writeUInt32BE(0x40020000 | id, 4 * i));
    this.acks = [];
    this.conn.sock.write(out);
  };

  async connect(port: number): Promise<void> {
    for (;;) {
      try {
        this.conn = await openConnection(port, 'fleet-checker', false, this.onPacket, this.afterChunk);
        break;
      } catch {
        await sleep(20);
      }
    }
    this.conn.sock.write(encodeSubscribe(1, 'fleet/#', 1));
  }
}

/** One gateway's local publisher: QoS 1 at `rate` msg/s; `acked[seq]` once the gateway acknowledged it. */
class Publisher {
  nextSeq = 0;
  readonly acked = new Uint8Array(capacity);
  ackedCount = 0;
  private readonly inflight = new Map<number, number>();
  private readonly payload: Buffer;
  private credit = 0;

  constructor(
    private readonly conn: Connection,
    private readonly index: number,
  ) {
    this.payload = Buffer.alloc(opts.payloadBytes, 0x61);
    this.payload.writeUInt16BE(index, 4);
  }

  tick(): void {
    this.credit += (opts.rate * TICK_MS) / 1000;
    const packets: Buffer[] = [];
    while (this.credit >= 1 && this.inflight.size < MAX_INFLIGHT && this.nextSeq < capacity) {
      this.credit--;
      const seq = this.nextSeq++;
      const id = (seq % 65_535) + 1;
      this.inflight.set(id, seq);
      this.payload.writeUInt32BE(seq, 0);
      packets.push(encodePublish(`fleet/gw${this.index}`, this.payload, 1, id));
    }
    if (packets.length > 0) this.conn.sock.write(Buffer.concat(packets));
  }

  readonly onPacket = (type: number, _flags: number, buf: Buffer, start: number): void => {
    if (type !== PacketType.puback) return;
    const seq = this.inflight.get(buf.readUInt16BE(start));
    if (seq === undefined) return;
    this.inflight.delete(buf.readUInt16BE(start));
    this.acked[seq] = 1;
    this.ackedCount++;
  };

  /** The highest seq such that every seq below it was acknowledged. */
  ackedPrefix(): number {
    let n = 0;
    while (n < this.nextSeq && this.acked[n] === 1) n++;
    return n;
  }
}

const stats = (xs: number[]) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return { min: sorted[0], p50: at(0.5), p90: at(0.9), max: sorted[sorted.length - 1] };
};
const round = (x: number, digits = 2) => Number(x.toFixed(digits));
/** Figures in MB to one decimal. */
const rounded = (o: Record<string, number>) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, round(v, 1)]));

async function main(): Promise<void> {
  const startedAt = new Date();
  const { tmpDir, cleanup } = scratchDir('edgeferry-fleet-', killAll, 'bench:fleet interrupted');
  const centralPort = await freePort();
  const centralDir = path.join(tmpDir, 'central');
  fs.mkdirSync(centralDir);
  const centralLog = path.join(centralDir, 'mosquitto.log');
  // The central broker as shipped (Receive Maximum 20), with persistence so that the checker's session survives
  // the restart, and no queue cap for the checker.
  const launchCentral = () =>
    launchCentralMosquitto({
      dir: centralDir,
      port: centralPort,
      lines: [
        'persistence true',
        `persistence_location ${centralDir}/`,
        'max_queued_messages 0',
        `log_dest file ${centralLog}`,
        'log_type error',
        'log_type warning',
        'log_type notice',
        'log_type information',
        'connection_messages true',
      ],
      live,
      probePrefix: 'fleet-probe-',
    });
  let central = await launchCentral();

  // The ceiling: straight to the central broker, as fast as it acknowledges, to a subscriber there.
  const ceilingMessages = 200_000;
  const ceilingCounter = new SequenceCounter(quotas(ceilingMessages, 8).map((n) => new Uint8Array(n)));
  const ceilingSub = await openConnection(
    centralPort,
    'fleet-ceiling-sub',
    true,
    ceilingCounter.onPacket,
    ceilingCounter.afterChunk,
  );
  ceilingCounter.attach(ceilingSub.sock);
  ceilingSub.sock.write(encodeSubscribe(1, 'bench/#', 1));
  await sleep(200);
  const ceilingRun = await ingest(centralPort, 'fleet-ceiling', {
    messages: ceilingMessages,
    publishers: 8,
    window: 64,
    payloadBytes: opts.payloadBytes,
  });
  ceilingCounter.expect(ceilingRun.ackedSeqs);
  await waitUntil(() => ceilingCounter.delivered >= ceilingRun.acked, 30_000);
  const ceilingPerS = ceilingCounter.delivered / secondsBetween(ceilingCounter.firstNs, ceilingCounter.lastNs);
  await Promise.all(ceilingRun.connections.map((c) => c.close()));
  await ceilingSub.close();
  process.stdout.write(
    `ceiling: ${Math.round(ceilingPerS)} msg/s through the central broker (8 publishers straight to it, 1 subscriber)\n`,
  );

  const checker = new Checker(opts.gateways);
  await checker.connect(centralPort);
  const site = await startFaultProxy(centralPort);
  const sparkplug = opts.sparkplugNodes > 0 ? await FleetSparkplug.start(centralPort, opts.sparkplugNodes) : undefined;

  // The gateways, a few at a time (each start costs a second of CPU).
  const gateways: { proc: LaunchedProcess; port: number }[] = [];
  for (let i = 0; i < opts.gateways; i += 5) {
    const batch = await Promise.all(
      Array.from({ length: Math.min(5, opts.gateways - i) }, async (_, k) => {
        const index = i + k;
        const dir = path.join(tmpDir, `gw${index}`);
        fs.mkdirSync(dir);
        const port = await freePort();
        const spb = sparkplug?.isNode(index) ? sparkplug.config(index) : undefined;
        const config = {
          gateway: { id: `gw${index}` },
          listeners: [{ type: 'tcp', host: '127.0.0.1', port }],
          storage: { path: path.join(dir, 'data') },
          log: { level: 'warn', format: 'json' },
          bridges: [
            {
              name: 'central',
              remote: { urls: [site.url] },
              topics: [{ filter: 'fleet/#', direction: 'out' }, ...(spb?.topics ?? [])],
            },
          ],
          ...(spb ? { sparkplug: spb.sparkplug, connectors: spb.connectors } : {}),
        };
        fs.writeFileSync(path.join(dir, 'edgeferry.yaml'), JSON.stringify(config, null, 2));
        const args = [
          ...GATEWAY_NODE_FLAGS,
          path.join(rootDir, 'dist/src/cli.js'),
          '--config',
          path.join(dir, 'edgeferry.yaml'),
        ];
        const proc = await launchUntilReady({
          name: `gw${index}`,
          file: process.execPath,
          args,
          dir,
          port,
          live,
          pollMs: 100,
          probePrefix: 'fleet-probe-',
          readyTimeoutMs: 60_000,
        });
        return { proc, port };
      }),
    );
    gateways.push(...batch);
  }
  await sleep(5000);
  await sparkplug?.born(60_000);
  const idle = gateways.map((g) => readMemoryKb(g.proc.pid));
  const mb = (kb: number): number => kb / 1024;
  const rssIdleMb = idle.map((m) => mb(m.rss));
  const anonIdleMb = idle.map((m) => mb(m.anon));
  const pssIdleMb = idle.map((m) => mb(m.pss));
  process.stdout.write(`${opts.gateways} gateways up; idle RSS ${JSON.stringify(stats(rssIdleMb))} MB\n`);

  const publishers: Publisher[] = [];
  for (const [index, g] of gateways.entries()) {
    // PUBACKs go to the publisher, which needs the connection first.
    const holder: { publisher?: Publisher } = {};
    const conn = await openConnection(g.port, `fleet-pub-${index}`, true, (type, flags, buf, start) =>
      holder.publisher?.onPacket(type, flags, buf, start),
    );
    holder.publisher = new Publisher(conn, index);
    publishers.push(holder.publisher);
  }
  const ticker = setInterval(() => publishers.forEach((p) => p.tick()), TICK_MS);

  const rssLoadMb = gateways.map(() => 0);
  const anonLoadMb = gateways.map(() => 0);
  const pssLoadMb = gateways.map(() => 0);
  const sampleRss = () =>
    gateways.forEach((g, i) => {
      const m = readMemoryKb(g.proc.pid);
      rssLoadMb[i] = Math.max(rssLoadMb[i], mb(m.rss));
      anonLoadMb[i] = Math.max(anonLoadMb[i], mb(m.anon));
      pssLoadMb[i] = Math.max(pssLoadMb[i], mb(m.pss));
    });
  const rssTimer = setInterval(sampleRss, 2000);
  await sleep(15_000);

  /**
   * `outage` ends with the link or the broker back, marks the checker then and returns when that was
   * (performance.now): the reconnect spread and the time until every message the gateways acknowledged before then
   * is at the checker.
   */
  const recover = async (name: string, outage: () => Promise<number>) => {
    const t0 = await outage();
    const backAtMs = Date.now() - (performance.now() - t0);
    const targets = publishers.map((p) => p.ackedPrefix());
    const backlog = targets.reduce((a, b) => a + b, 0) - checker.streams.reduce((a, s) => a + s.prefix, 0);
    const progress = setInterval(() => {
      const missing = checker.streams.reduce((n, s, i) => n + Math.max(0, targets[i] - s.prefix), 0);
      process.stdout.write(
        `  ${name}: ${missing} of ${backlog} still to arrive at ${((performance.now() - t0) / 1000).toFixed(0)} s (received ${checker.received})\n`,
      );
    }, 5000);
    const drained = await waitUntil(() => checker.streams.every((s, i) => s.prefix >= targets[i]), 300_000, 20);
    clearInterval(progress);
    const drainS = (performance.now() - t0) / 1000;
    const reconnectS = checker.streams.map((s) => (s.firstAfterMark - t0) / 1000);
    const peak = checker.peakPerS();
    const spb: SparkplugOutage | undefined = await sparkplug?.outage(backAtMs, 60_000);
    const result = {
      scenario: name,
      backlogMessages: backlog,
      drained,
      drainS: round(drainS),
      ceilingTimeS: round(backlog / ceilingPerS),
      targetS: round(2 + (1.2 * backlog) / ceilingPerS),
      reconnectS: Object.fromEntries(Object.entries(stats(reconnectS)).map(([k, v]) => [k, round(v)])),
      peakIngressPerS: peak,
      peakOfCeiling: round(peak / ceilingPerS),
      ...(spb ? { sparkplug: spb } : {}),
    };
    process.stdout.write(`${name}: ${JSON.stringify(result)}\n`);
    return result;
  };

  const cut = await recover('cut', async () => {
    site.refuse();
    site.reset();
    await sleep(opts.cutS * 1000);
    checker.mark();
    site.restore();
    return performance.now();
  });
  await sleep(10_000);
  const restart = await recover('restart', async () => {
    checker.conn?.destroy();
    await sparkplug?.hostGone();
    await central.stop();
    // The checker connects the moment the broker accepts (it retries every 20 ms), before most gateways (their
    // first retry is 0.25-0.75 s away): a gateway's first message then dates its reconnect.
    checker.mark();
    const back = checker.connect(centralPort).then(() => performance.now());
    central = await launchCentral();
    await sparkplug?.hostBack();
    return back;
  });
  await sleep(5000);

  clearInterval(ticker);
  clearInterval(rssTimer);
  sampleRss();
  await waitUntil(() => publishers.every((p) => p.ackedCount === p.nextSeq), 30_000);
  await waitUntil(
    () => checker.streams.every((s, i) => publishers[i].acked.every((a, seq) => a === 0 || s.seen[seq] === 1)),
    60_000,
    200,
  );
  const lost = checker.streams.reduce(
    (n, s, i) => n + publishers[i].acked.reduce((m, a, seq) => m + (a === 1 && s.seen[seq] === 0 ? 1 : 0), 0),
    0,
  );
  const log = fs.readFileSync(centralLog, 'utf8');
  const summary = {
    gateways: opts.gateways,
    ratePerGateway: opts.rate,
    cutS: opts.cutS,
    ceilingPerS: Math.round(ceilingPerS),
    acknowledged: publishers.reduce((n, p) => n + p.ackedCount, 0),
    lost,
    // A Sparkplug gateway's bridge catches up live-first (its default: docs/failures.md): its backlog and its live
    // traffic each keep their order, interleaved. The Sparkplug host checks the seq of its Sparkplug messages.
    outOfOrder: checker.streams.reduce((n, s, i) => n + (sparkplug?.isNode(i) ? s.behindOutOfOrder : s.outOfOrder), 0),
    liveFirstInterleaved: checker.streams.reduce((n, s, i) => n + (sparkplug?.isNode(i) ? s.outOfOrder : 0), 0),
    duplicates: checker.streams.reduce((n, s) => n + s.duplicates, 0),
    clientIdClashes: (log.match(/already connected, closing old connection/g) ?? []).length,
    rssIdleMb: rounded(stats(rssIdleMb)),
    rssLoadMb: rounded(stats(rssLoadMb)),
    anonIdleMb: rounded(stats(anonIdleMb)),
    anonLoadMb: rounded(stats(anonLoadMb)),
    pssIdleMb: rounded(stats(pssIdleMb)),
    pssLoadMb: rounded(stats(pssLoadMb)),
    sparkplugNodes: opts.sparkplugNodes,
    sparkplugViolations: sparkplug?.violations() ?? [],
    cut,
    restart,
  };
  process.stdout.write(`${JSON.stringify(summary, null, 2)}\n`);
  await Promise.all(gateways.map((g) => g.proc.stop()));
  await sparkplug?.stop();
  await central.stop();
  await site.stop();
  writeResults(values.out as string, startedAt, opts, summary, []);
  cleanup();
  const notReborn = (cut.sparkplug?.notReborn ?? 0) + (restart.sparkplug?.notReborn ?? 0);
  if (lost > 0 || summary.outOfOrder > 0 || summary.clientIdClashes > 0) process.exitCode = 1;
  if (summary.sparkplugViolations.length > 0 || notReborn > 0) process.exitCode = 1;
}

runMain('bench:fleet', main, killAll);
