/**
 * `npm run bench:console`: what the web console costs the gateway. The gateway runs with the console on while a
 * publisher sends 20,000 QoS 0 messages/s (64-byte payloads) to one subscriber; the gateway's CPU (user + system,
 * /proc/<pid>/stat) is measured over each window with no console stream open, then with 10 open SSE streams (10
 * browsers on the live views), interleaved, medians over the repetitions. Prints the figures and writes them to
 * bench/results/console-cost.json.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { generate } from 'mqtt-packet';
import { freePort, readCpuS } from './brokers.js';
import { rootDir } from './harness.js';

const RATE_PER_S = 20_000;
const TICK_MS = 10;
const WINDOW_S = Number(process.env.WINDOW_S ?? 15);
const REPS = Number(process.env.REPS ?? 3);
const STREAMS = 10;
const CLI = path.join(rootDir, 'dist', 'src', 'cli.js');

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

async function mqttSocket(port: number, clientId: string): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.setNoDelay(true);
  socket.write(
    generate({ cmd: 'connect', protocolId: 'MQTT', protocolVersion: 4, clean: true, clientId, keepalive: 0 }),
  );
  return socket;
}

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'edgeferry-console-bench-'));
  const passwordFile = path.join(dir, 'passwd');
  spawnSync(process.execPath, [CLI, 'passwd', passwordFile, 'shift'], { input: 'bench-pw\n' });
  const mqttPort = await freePort();
  const httpPort = await freePort();
  const configFile = path.join(dir, 'edgeferry.yaml');
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      listeners: [{ type: 'tcp', host: '127.0.0.1', port: mqttPort, allowAnonymous: true }],
      storage: { path: path.join(dir, 'data') },
      auth: { passwordFile },
      metrics: { port: httpPort },
      console: { viewers: ['shift'] },
      log: { level: 'warn', format: 'json' },
    }),
  );
  const gw = spawn(process.execPath, [CLI, '--config', configFile], { stdio: ['ignore', 'ignore', 'inherit'] });
  const base = `http://127.0.0.1:${httpPort}`;
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${base}/healthz`)).ok) break;
    } catch {
      if (i > 100) throw new Error('the gateway did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  const subscriber = await mqttSocket(mqttPort, 'bench-sub');
  let received = 0;
  subscriber.on('data', (chunk: Buffer) => (received += chunk.length));
  subscriber.write(generate({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: 'bench/#', qos: 0 }] }));
  const publisher = await mqttSocket(mqttPort, 'bench-pub');
  publisher.on('data', () => undefined);
  const one = generate({
    cmd: 'publish',
    topic: 'bench/load',
    payload: Buffer.alloc(64, 7),
    qos: 0,
    retain: false,
    dup: false,
  });
  const batch = Buffer.concat(Array.from({ length: (RATE_PER_S * TICK_MS) / 1000 }, () => one));
  const load = setInterval(() => publisher.write(batch), TICK_MS);

  const login = await fetch(`${base}/api/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ user: 'shift', password: 'bench-pw' }),
  });
  const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0];

  const measure = async (streams: number): Promise<{ cpuPct: number; events: number }> => {
    const aborts: AbortController[] = [];
    let events = 0;
    for (let i = 0; i < streams; i++) {
      const abort = new AbortController();
      aborts.push(abort);
      const res = await fetch(`${base}/api/events`, { headers: { cookie }, signal: abort.signal });
      void (async () => {
        try {
          for await (const chunk of res.body as AsyncIterable<Uint8Array>)
            events += (
              Buffer.from(chunk)
                .toString()
                .match(/^data: /gm) ?? []
            ).length;
        } catch {
          // aborted at the end of the window
        }
      })();
    }
    await new Promise((r) => setTimeout(r, 2000)); // settle
    const cpu0 = readCpuS(gw.pid!);
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, WINDOW_S * 1000));
    const cpuPct = ((readCpuS(gw.pid!) - cpu0) / ((performance.now() - t0) / 1000)) * 100;
    for (const abort of aborts) abort.abort();
    return { cpuPct, events };
  };

  await new Promise((r) => setTimeout(r, 3000)); // warm up
  const runs: { streams: number; cpuPct: number; events: number }[] = [];
  for (let rep = 0; rep < REPS; rep++) {
    for (const streams of [0, STREAMS]) {
      const r = await measure(streams);
      runs.push({ streams, ...r });
      process.stdout.write(
        `rep ${rep + 1}: ${streams} streams: gateway CPU ${r.cpuPct.toFixed(1)} % of one core${streams ? `, ${r.events} events` : ''}\n`,
      );
    }
  }
  clearInterval(load);
  const none = median(runs.filter((r) => r.streams === 0).map((r) => r.cpuPct));
  const ten = median(runs.filter((r) => r.streams === STREAMS).map((r) => r.cpuPct));
  const summary = {
    ratePerS: RATE_PER_S,
    windowS: WINDOW_S,
    reps: REPS,
    cpuPctNoStreams: Number(none.toFixed(1)),
    cpuPctTenStreams: Number(ten.toFixed(1)),
    extraPctOfOneCore: Number((ten - none).toFixed(1)),
    bytesDelivered: received,
    loadAverage: os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' '),
  };
  process.stdout.write(
    `median gateway CPU: ${summary.cpuPctNoStreams} % without console streams, ${summary.cpuPctTenStreams} % with ${STREAMS}: +${summary.extraPctOfOneCore} % of one core\n`,
  );
  fs.mkdirSync(path.join(rootDir, 'bench', 'results'), { recursive: true });
  fs.writeFileSync(
    path.join(rootDir, 'bench', 'results', 'console-cost.json'),
    JSON.stringify({ at: new Date().toISOString(), summary, runs }, null, 2) + '\n',
  );
  publisher.destroy();
  subscriber.destroy();
  gw.kill('SIGTERM');
  await new Promise((r) => gw.once('exit', r));
  fs.rmSync(dir, { recursive: true, force: true });
}

await main();
