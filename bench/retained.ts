/**
 * `npm run bench:retained`: retained messages at scale, edgeferry beside Mosquitto and Aedes. Each broker (fresh,
 * interleaved over the repetitions) gets 100,000 retained messages `r/<i>/x` (16-byte payloads), then:
 *
 * - idle: four pinger clients each publish QoS 0 to a topic of their own that they subscribe to, one message every
 *   millisecond or so, and time the round trip (publish → delivery); after 3 s of settling (a Node broker is still
 *   collecting the preload's garbage), 2 s give the baseline p50/p99;
 * - floor: the same pingers for 2 s while a process of their own keeps one core busy, no broker work at all: the
 *   least any broker's busy burst costs the pingers on this machine (below it, a ratio says nothing of the broker);
 * - no-match: one client sends SUBSCRIBEs in a row for 2 s (each waits for its SUBACK; at least one) of the same
 *   1,000 filters `r/<j>/y`, which match none of the retained messages (the first subscribes, the others replace):
 *   SUBACK time (median), and the pingers' round trip meanwhile (p99 and the worst);
 * - wildcard: a new client subscribes `#` and reads every retained message: time to the last one, and the pingers'
 *   round trip meanwhile;
 * - again: after 3 s, no-match and wildcard once more with new clients. The first round is the broker's first
 *   SUBSCRIBEs (a Node broker compiles that code meanwhile), the second how every later one runs.
 *
 * Medians over the repetitions, ratios to the idle baseline and to Mosquitto. Writes bench/results/retained.json.
 *
 *   node dist/bench/retained.js [--brokers edgeferry,mosquitto,aedes] [--reps 3] [--retained 100000] [--out FILE] [--cpu-prof DIR]
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { generate, type Packet } from 'mqtt-packet';
import { brokerNames, killAllBrokers, startBroker, type BrokerName } from './brokers.js';
import { choiceList, positiveInt, rootDir, runMain, scratchDir, writeResults } from './harness.js';
import { PacketReader, PacketType, encodeConnect, encodePublish, encodeSubscribe } from './mqtt-wire.js';
import { median, table } from './report.js';

const { values } = parseArgs({
  options: {
    brokers: { type: 'string', default: 'edgeferry,mosquitto,aedes' },
    reps: { type: 'string' },
    retained: { type: 'string' },
    out: { type: 'string' },
    'cpu-prof': { type: 'string' },
  },
});
const BROKERS = choiceList(values.brokers!, brokerNames, 'broker');
const REPS = positiveInt(values.reps, 3, 'reps');
const RETAINED = positiveInt(values.retained, 100_000, 'retained');
const OUT = values.out ?? path.join(rootDir, 'bench/results/retained.json');
const CPU_PROF = values['cpu-prof'] === undefined ? undefined : path.resolve(values['cpu-prof']);
const FILTERS = 1000;
const PINGERS = 4;
const IDLE_MS = 2000;
/** Pinging before the idle window, not counted: the preload's aftermath (see runOne). */
const SETTLE_MS = 3000;

/** One round of SUBSCRIBEs and a `#` (`subscribeRound`). */
interface Round {
  subackMs: number;
  /** SUBSCRIBEs answered in the window. */
  subscribes: number;
  noMatchP99: number;
  noMatchMax: number;
  wildcardMs: number;
  wildcardDelivered: number;
  wildcardP99: number;
}

interface Run {
  broker: BrokerName;
  rep: number;
  idleP50: number;
  idleP99: number;
  /** The pingers' p99 while another process keeps a core busy (`spinElsewhere`). */
  floorP99: number;
  /** The broker's first SUBSCRIBEs, and the same again once its code is compiled. */
  first: Round;
  again: Round;
}

/** A connected raw MQTT 3.1.1 client; `on` sees every packet's type and body. */
async function client(port: number, clientId: string, on: (type: number, flags: number) => void): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.setNoDelay(true);
  let connected: () => void;
  const connack = new Promise<void>((resolve) => (connected = resolve));
  const reader = new PacketReader((type, flags) => (type === PacketType.connack ? connected() : on(type, flags)));
  socket.on('data', (chunk: Buffer) => reader.push(chunk));
  socket.write(encodeConnect(clientId, 0));
  await connack;
  return socket;
}

/** Waits (at most 120 s) for the next packet of `type` that `waiters` is told of. */
function next(waiters: Map<number, () => void>, type: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no packet of type ${type} within 120 s`)), 120_000);
    waiters.set(type, () => (clearTimeout(timer), resolve()));
  });
}

/** Round-trip samples of the pingers: when each was sent, and how long it took. */
class Pingers {
  readonly samples: { at: number; ms: number }[] = [];
  private running = true;
  private readonly sockets: net.Socket[] = [];
  private readonly loops: Promise<void>[] = [];

  async start(port: number): Promise<void> {
    for (let k = 0; k < PINGERS; k++) {
      let arrived: () => void = () => undefined;
      const socket = await client(port, `pinger-${k}`, (type) =>
        type === PacketType.publish || type === PacketType.suback ? arrived() : undefined,
      );
      this.sockets.push(socket);
      const topic = `ping/${k}`;
      await new Promise<void>((resolve) => ((arrived = resolve), socket.write(encodeSubscribe(1, topic, 0))));
      const message = encodePublish(topic, Buffer.alloc(16), 0);
      this.loops.push(
        (async () => {
          while (this.running) {
            const at = performance.now();
            await new Promise<void>((resolve) => ((arrived = resolve), socket.write(message)));
            this.samples.push({ at, ms: performance.now() - at });
            await new Promise((r) => setTimeout(r, 1));
          }
        })(),
      );
    }
  }

  /** p50, p99 and the worst of the round trips sent between `from` and `to`. */
  percentiles(from: number, to: number): { p50: number; p99: number; max: number } {
    const ms = this.samples
      .filter((s) => s.at >= from && s.at <= to)
      .map((s) => s.ms)
      .sort((a, b) => a - b);
    const at = (p: number): number => ms[Math.min(ms.length - 1, Math.floor(p * ms.length))] ?? NaN;
    return { p50: at(0.5), p99: at(0.99), max: at(1) };
  }

  async stop(): Promise<void> {
    this.running = false;
    for (const s of this.sockets) s.destroy();
    await Promise.race([Promise.all(this.loops), new Promise((r) => setTimeout(r, 1000))]);
  }
}

/**
 * Keeps one core busy for IDLE_MS in a process that is neither broker nor client. A broker handling a burst is busy
 * at least that much, so the pingers' p99 meanwhile is the floor under every broker's ratio on this machine: what
 * its scheduling alone adds when a core is taken (bench/README.md).
 */
async function spinElsewhere(): Promise<void> {
  const spin = `process.once('message', () => { const end = Date.now() + ${IDLE_MS}; while (Date.now() < end); process.exit(0); }); process.send('up');`;
  const child = spawn(process.execPath, ['-e', spin], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  await once(child, 'message');
  const exited = once(child, 'exit');
  child.send('go');
  await exited;
}

async function preload(port: number): Promise<void> {
  const waiters = new Map<number, () => void>();
  const socket = await client(port, 'loader', (type) => waiters.get(type)?.());
  const payload = Buffer.alloc(16, 1);
  for (let i = 0; i < RETAINED; i += 1000) {
    const batch: Buffer[] = [];
    for (let j = i; j < Math.min(RETAINED, i + 1000); j++) batch.push(retainedPublish(`r/${j}/x`, payload));
    if (!socket.write(Buffer.concat(batch))) await new Promise((r) => socket.once('drain', r));
  }
  // A QoS 1 publish after them: its PUBACK comes once the broker has handled every one before it.
  const acked = next(waiters, PacketType.puback);
  socket.write(encodePublish('fence', payload, 1, 1));
  await acked;
  socket.destroy();
}

function retainedPublish(topic: string, payload: Buffer): Buffer {
  const bytes = encodePublish(topic, payload, 0);
  bytes[0] |= 0x01; // RETAIN
  return bytes;
}

/** One round: the 50 SUBSCRIBEs of filters matching none (a client of its own), then a `#` subscriber reading all. */
async function subscribeRound(port: number, pingers: Pingers, name: string): Promise<Round> {
  const waiters = new Map<number, () => void>();
  const subscriber = await client(port, `no-match-${name}`, (type) => waiters.get(type)?.());
  const subscribe = generate({
    cmd: 'subscribe',
    messageId: 1,
    subscriptions: Array.from({ length: FILTERS }, (_, j) => ({ topic: `r/${j}/y`, qos: 0 as const })),
  } as Packet);
  const subacks: number[] = [];
  const noMatchFrom = performance.now();
  // As long as the idle window: both p99 then come from about as many round trips (a window of a few hundred
  // makes the p99 the worst few, which a single pause sets, as every pinger waits for it).
  while (performance.now() - noMatchFrom < IDLE_MS) {
    const started = performance.now();
    const acked = next(waiters, PacketType.suback);
    subscriber.write(subscribe);
    await acked;
    subacks.push(performance.now() - started);
  }
  const noMatch = pingers.percentiles(noMatchFrom, performance.now());
  subscriber.destroy();

  let delivered = 0;
  let lastAt = performance.now();
  const all = await client(port, `wildcard-${name}`, (type, flags) => {
    // Retained messages only (RETAIN flag): the pingers' messages match `#` too.
    if (type !== PacketType.publish || (flags & 0x01) === 0) return;
    delivered++;
    lastAt = performance.now();
  });
  const wildcardFrom = performance.now();
  all.write(encodeSubscribe(1, '#', 0));
  // Until every one arrived, or none for 2 s (a broker that drops some).
  while (delivered < RETAINED && performance.now() - lastAt < 2000) await new Promise((r) => setTimeout(r, 5));
  const wildcard = pingers.percentiles(wildcardFrom, lastAt);
  all.destroy();
  return {
    subackMs: median(subacks),
    subscribes: subacks.length,
    noMatchP99: noMatch.p99,
    noMatchMax: noMatch.max,
    wildcardMs: lastAt - wildcardFrom,
    wildcardDelivered: delivered,
    wildcardP99: wildcard.p99,
  };
}

async function runOne(broker: BrokerName, rep: number, tmpDir: string): Promise<Run> {
  const b = await startBroker(broker, {
    rootDir,
    tmpDir,
    cpuProfDir: CPU_PROF,
    edgeferryBroker: `maxRetainedMessages: ${RETAINED * 2}, sysIntervalS: 0`,
  });
  const pingers = new Pingers();
  try {
    await preload(b.port);
    await pingers.start(b.port);
    // The baseline is the broker at rest: right after the preload a Node broker still collects its garbage
    // (scavenges of 4-7 ms promoting the index, mark-compacts), which would inflate the idle p99 several times.
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const idleFrom = performance.now();
    await new Promise((r) => setTimeout(r, IDLE_MS));
    const idle = pingers.percentiles(idleFrom, performance.now());
    const floorFrom = performance.now();
    await spinElsewhere();
    const floor = pingers.percentiles(floorFrom, performance.now());

    const first = await subscribeRound(b.port, pingers, 'first');
    // The same again: the code the first round ran is compiled by now (V8's optimizing compiler works through it
    // during the first round, on threads of its own), which is how every later SUBSCRIBE of the gateway's life runs.
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const again = await subscribeRound(b.port, pingers, 'again');
    return { broker, rep, idleP50: idle.p50, idleP99: idle.p99, floorP99: floor.p99, first, again };
  } finally {
    await pingers.stop();
    await b.stop();
  }
}

/** One broker's medians over its runs (`main`), each round's keyed as `roundSummary` names them. */
interface BrokerSummary {
  idleP50: number;
  idleP99: number;
  floorP99VsIdle: number;
  first: Record<string, number>;
  again: Record<string, number>;
}

async function main(): Promise<void> {
  const startedAt = new Date();
  const { tmpDir, cleanup } = scratchDir('edgeferry-retained-bench-', killAllBrokers, 'retained bench interrupted');
  const runs: Run[] = [];
  try {
    for (let rep = 0; rep < REPS; rep++) {
      // The order rotates each repetition, so a slow phase of the machine hits every broker alike.
      for (let i = 0; i < BROKERS.length; i++) {
        const broker = BROKERS[(i + rep) % BROKERS.length];
        try {
          const run = await runOne(broker, rep, tmpDir);
          process.stderr.write(`  ${broker} rep ${rep + 1}: ${JSON.stringify(run)}\n`);
          runs.push(run);
        } catch (err) {
          process.stderr.write(
            `  ${broker} rep ${rep + 1} failed: ${err instanceof Error ? err.message : String(err)}\n`,
          );
        }
      }
    }
  } finally {
    cleanup();
  }
  /** Per broker and round, medians over its runs, and the pingers' p99 as ratios to each run's idle p99. */
  const roundSummary = (mine: Run[], round: 'first' | 'again'): Record<string, number> => {
    const m = (key: keyof Round): number => median(mine.map((r) => r[round][key]));
    const vsIdle = (key: keyof Round): number => median(mine.map((r) => r[round][key] / r.idleP99));
    return {
      subackMs: m('subackMs'),
      subscribes: m('subscribes'),
      noMatchP99: m('noMatchP99'),
      noMatchP99VsIdle: vsIdle('noMatchP99'),
      noMatchMax: m('noMatchMax'),
      wildcardMs: m('wildcardMs'),
      wildcardDelivered: m('wildcardDelivered'),
      wildcardP99: m('wildcardP99'),
      wildcardP99VsIdle: vsIdle('wildcardP99'),
    };
  };
  const summary = Object.fromEntries(
    BROKERS.map((broker) => {
      const mine = runs.filter((r) => r.broker === broker);
      return [
        broker,
        {
          idleP50: median(mine.map((r) => r.idleP50)),
          idleP99: median(mine.map((r) => r.idleP99)),
          floorP99VsIdle: median(mine.map((r) => r.floorP99 / r.idleP99)),
          first: roundSummary(mine, 'first'),
          again: roundSummary(mine, 'again'),
        },
      ];
    }),
  ) as Partial<Record<BrokerName, BrokerSummary>>;
  const f = (n: number, digits = 2): string => (Number.isFinite(n) ? n.toFixed(digits) : 'n/a');
  const vsMosquitto = (round: 'first' | 'again', s: Record<string, number>, key: string): string => {
    const ref = summary.mosquitto?.[round];
    return ref === undefined ? 'n/a' : `${f(s[key] / ref[key])}x`;
  };
  const row = (broker: BrokerName, round: 'first' | 'again'): string[] => {
    const { idleP50, idleP99, floorP99VsIdle, [round]: s } = summary[broker]!;
    return [
      broker,
      round,
      `${f(idleP50)} / ${f(idleP99)}`,
      `${f(floorP99VsIdle)}x`,
      f(s.subackMs),
      vsMosquitto(round, s, 'subackMs'),
      `${f(s.noMatchP99VsIdle)}x`,
      f(s.noMatchMax),
      f(s.wildcardMs / 1000),
      String(s.wildcardDelivered),
      vsMosquitto(round, s, 'wildcardMs'),
      `${f(s.wildcardP99VsIdle)}x`,
    ];
  };
  process.stdout.write(
    `\nretained: ${RETAINED} retained messages, SUBSCRIBEs of ${FILTERS} filters matching none for ${IDLE_MS / 1000} s, then #, in two rounds; ${PINGERS} pingers; medians of ${REPS}\n` +
      table(
        [
          'broker',
          'round',
          'idle p50/p99 ms',
          'p99 core busy elsewhere / idle',
          'SUBACK ms',
          'vs mosquitto',
          'p99 during / idle',
          'worst ms',
          '# all delivered s',
          'delivered',
          'vs mosquitto',
          'p99 during # / idle',
        ],
        BROKERS.flatMap((broker) => [row(broker, 'first'), row(broker, 'again')]),
      ) +
      '\n',
  );
  writeResults(OUT, startedAt, { brokers: BROKERS, reps: REPS, retained: RETAINED }, summary, runs);
}

runMain('retained bench', main, killAllBrokers);
