/**
 * Subscription amplification: one client holds many overlapping subscriptions (every one of them matches the
 * flooded topic), another floods that topic with QoS 0 for a few seconds, and a prober opens a new connection
 * every 50 ms and times its CONNECT → CONNACK. The figure is the prober's latency (p50/p99/max) during the flood
 * and until the gateway has worked through it.
 *
 *   node dist/bench/amplification.js [--subscriptions 16384] [--flood-s 3] [--max-subscriptions 1000] [--cpu-prof DIR]
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import mqttPacket, { type Packet } from 'mqtt-packet';
import { GATEWAY_NODE_FLAGS } from './brokers.js';
import { rootDir, positiveInt } from './harness.js';

const { values } = parseArgs({
  options: {
    subscriptions: { type: 'string' },
    'flood-s': { type: 'string' },
    'max-subscriptions': { type: 'string' },
    'cpu-prof': { type: 'string' },
  },
});
const SUBSCRIPTIONS = positiveInt(values.subscriptions, 16_384, 'subscriptions');
const FLOOD_MS = positiveInt(values['flood-s'], 3, 'flood-s') * 1000;
const MAX_SUBSCRIPTIONS =
  values['max-subscriptions'] === undefined
    ? undefined
    : positiveInt(values['max-subscriptions'], 1000, 'max-subscriptions');
/** Levels of the flooded topic: each filter is a mix of `+` and the exact level, so 2^LEVELS filters all match it. */
const LEVELS = Math.ceil(Math.log2(SUBSCRIPTIONS));
const TOPIC = Array.from({ length: LEVELS }, () => 'x').join('/');

function filter(i: number): string {
  return Array.from({ length: LEVELS }, (_, level) => ((i >> level) & 1 ? '+' : 'x')).join('/');
}

/** A client on a raw socket that parses what the gateway sends (v3.1.1). */
function open(port: number, onPacket: (p: Packet) => void): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => resolve(socket));
    socket.setNoDelay(true);
    socket.once('error', reject);
    const parser = mqttPacket.parser({ protocolVersion: 4 });
    parser.on('packet', onPacket);
    socket.on('data', (chunk: Buffer) => parser.parse(chunk));
  });
}

const encode = (p: Packet): Buffer => mqttPacket.generate(p, { protocolVersion: 4 });
const connectPacket = (clientId: string): Packet =>
  ({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, keepalive: 0, clientId }) as Packet;

async function startGateway(dir: string): Promise<{ port: number; stop: () => Promise<void> }> {
  const port = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  const config = {
    listeners: [{ type: 'tcp', host: '127.0.0.1', port }],
    storage: { path: path.join(dir, 'data') },
    log: { level: 'warn', format: 'json' },
    broker: {
      maxConnections: 100_000,
      sysIntervalS: 1,
      ...(MAX_SUBSCRIPTIONS === undefined ? {} : { maxSubscriptionsPerClient: MAX_SUBSCRIPTIONS }),
    },
  };
  const configFile = path.join(dir, 'gw.yaml');
  fs.writeFileSync(configFile, JSON.stringify(config));
  const prof =
    values['cpu-prof'] === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${path.resolve(values['cpu-prof'])}`];
  const child = spawn(
    process.execPath,
    [...GATEWAY_NODE_FLAGS, ...prof, path.join(rootDir, 'dist/src/cli.js'), '--config', configFile],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  for (let i = 0; ; i++) {
    const up = await new Promise<boolean>((resolve) => {
      const s = net.connect(port, '127.0.0.1', () => (s.destroy(), resolve(true)));
      s.on('error', () => resolve(false));
    });
    if (up) break;
    if (i > 200) throw new Error('gateway did not start');
    await new Promise((r) => setTimeout(r, 50));
  }
  return {
    port,
    stop: () =>
      new Promise((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}

/** CONNECT → CONNACK of a fresh connection, in ms. */
async function probe(port: number, i: number): Promise<number> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    let socket: net.Socket | undefined;
    open(port, (p) => {
      if (p.cmd !== 'connack') return;
      socket?.destroy();
      resolve(performance.now() - started);
    }).then((s) => {
      socket = s;
      s.write(encode(connectPacket(`probe-${i}`)));
    }, reject);
  });
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'edgeferry-amplification-'));
  const gw = await startGateway(dir);
  try {
    // The subscriber: SUBSCRIBE packets of 256 filters each, QoS 0; it reads everything it gets.
    let granted = 0;
    let refused = 0;
    let delivered = 0;
    let subacks = 0;
    const sub = await open(gw.port, (p) => {
      if (p.cmd === 'suback') {
        subacks++;
        for (const g of p.granted as number[])
          if (g < 0x80) granted++;
          else refused++;
      } else if (p.cmd === 'publish') delivered++;
    });
    sub.write(encode(connectPacket('amplifier')));
    const batches = Math.ceil(SUBSCRIPTIONS / 256);
    for (let b = 0; b < batches; b++) {
      const subscriptions = [];
      for (let i = b * 256; i < Math.min(SUBSCRIPTIONS, (b + 1) * 256); i++)
        subscriptions.push({ topic: filter(i), qos: 0 as const });
      sub.write(encode({ cmd: 'subscribe', messageId: b + 1, subscriptions } as Packet));
    }
    while (subacks < batches) await new Promise((r) => setTimeout(r, 20));
    // The gateway's own counts: a message is through once delivered or dropped (the subscriber may lag behind).
    let received = 0;
    let dropped = 0;
    const sys = await open(gw.port, (p) => {
      if (p.cmd !== 'publish') return;
      if (p.topic === '$SYS/broker/publish/messages/received') received = Number(p.payload.toString());
      if (p.topic === '$SYS/broker/publish/messages/dropped') dropped = Number(p.payload.toString());
    });
    sys.write(encode(connectPacket('sys')));
    sys.write(
      encode({
        cmd: 'subscribe',
        messageId: 1,
        subscriptions: ['received', 'dropped'].map((t) => ({ topic: `$SYS/broker/publish/messages/${t}`, qos: 0 })),
      } as Packet),
    );

    const baseline: number[] = [];
    for (let i = 0; i < 20; i++) baseline.push(await probe(gw.port, i));

    // The flood: QoS 0 PUBLISHes of 16 bytes written as fast as the socket takes them, for FLOOD_MS.
    const pub = await open(gw.port, () => {});
    pub.write(encode(connectPacket('flooder')));
    const one = encode({
      cmd: 'publish',
      topic: TOPIC,
      payload: Buffer.alloc(16),
      qos: 0,
      dup: false,
      retain: false,
    } as Packet);
    const batch = Buffer.concat(Array.from({ length: 256 }, () => one));
    const floodStart = performance.now();
    let published = 0;
    const latencies: number[] = [];
    let probing = true as boolean; // cleared below while the prober runs
    const prober = (async () => {
      for (let i = 0; probing; i++) {
        latencies.push(await probe(gw.port, 1000 + i));
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    let flooderClosed = false as boolean; // set by the close handler
    const closed = new Promise<void>((r) => pub.once('close', () => ((flooderClosed = true), r())));
    while (performance.now() - floodStart < FLOOD_MS && !flooderClosed) {
      published += 256;
      if (!pub.write(batch)) await Promise.race([new Promise((r) => pub.once('drain', r)), closed]);
    }
    if (flooderClosed)
      process.stderr.write(`  the gateway closed the flooder's connection after ${published} messages were written\n`);
    const floodMs = performance.now() - floodStart;
    // Until the gateway has read every message ($SYS, every second), or, if it closed the flooder, until its count
    // stands still for 3 s.
    let lastCount = -1;
    let stillSince = performance.now();
    while (received < published && !(flooderClosed && performance.now() - stillSince > 3000)) {
      if (received !== lastCount) {
        lastCount = received;
        stillSince = performance.now();
      }
      await new Promise((r) => setTimeout(r, 1000));
      process.stderr.write(`  the gateway has read ${received} of ${published} messages\n`);
    }
    const drainedMs = performance.now() - floodStart;
    probing = false;
    await prober;
    pub.destroy();
    sub.destroy();
    sys.destroy();
    const sorted = [...latencies].sort((a, b) => a - b);
    const base = [...baseline].sort((a, b) => a - b);
    const ms = (n: number): string => n.toFixed(1);
    process.stdout.write(
      [
        `subscriptions asked ${SUBSCRIPTIONS}, granted ${granted}, refused ${refused}; topic of ${LEVELS} levels`,
        `flood ${ms(floodMs)} ms, ${published} QoS 0 messages written${flooderClosed ? ` (flooder closed by the gateway; ${received} read)` : ''}, ` +
          `${flooderClosed ? 'reading stopped' : 'all read by the gateway'} after ${ms(drainedMs)} ms (to $SYS's 1 s); ` +
          `delivered ${delivered}, dropped ${dropped} (the subscriber shares a process with the flood and lags)`,
        `CONNECT latency idle:        p50 ${ms(percentile(base, 50))} p99 ${ms(percentile(base, 99))} max ${ms(base.at(-1)!)} ms (n=${base.length})`,
        `CONNECT latency under flood: p50 ${ms(percentile(sorted, 50))} p99 ${ms(percentile(sorted, 99))} max ${ms(sorted.at(-1)!)} ms (n=${sorted.length})`,
        '',
      ].join('\n'),
    );
  } finally {
    await gw.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  process.stderr.write(`amplification failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
