/**
 * 20 S7 CPUs of 200 tags each, polled every 100 ms, through the real connectors, edge node and broker (in this
 * process), against 20 snap7 S7 servers (test/fixtures/s7-server.mjs, a child process) whose memory all changes
 * every 100 ms (the worst case for report by exception).
 *
 *   npm run bench:s7 [-- --devices 20] [--tags 200] [--poll-ms 100] [--seconds 10] [--pdu 480]
 *
 * Each CPU: 3/4 of the tags in DB1 (REAL, DINT, INT in turn, back to back), 1/4 BOOLs in the marker area (M0.0…).
 * Reports tags/s read, Read Var requests/s actually sent, tags per request (the coalescing gain against one tag per
 * request), DDATA messages and metrics/s, the poll-cycle p50/p99 and this process's CPU share (the gateway side).
 */
import { spawn } from 'node:child_process';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { s7Factory } from '../connectors/s7/factory.js';
import type { S7Connector } from '../connectors/s7/s7-connector.js';
import { s7ConnectorSchema } from '../connectors/s7/schema.js';
import { silentLogger } from '../src/util/logger.js';
import { freePort } from '../test/helpers/ports.js';
import { benchStateDir, measure } from './polled-devices.js';

const { values: args } = parseArgs({
  options: {
    devices: { type: 'string', default: '20' },
    tags: { type: 'string', default: '200' },
    'poll-ms': { type: 'string', default: '100' },
    seconds: { type: 'string', default: '10' },
    'warmup-s': { type: 'string', default: '3' },
    pdu: { type: 'string', default: '480' },
  },
});

const rootDir = resolve(fileURLToPath(new URL('../..', import.meta.url)));
const serverScript = join(rootDir, 'test/fixtures/s7-server.mjs');

/** The tags of one CPU, and the bytes of DB1 and M they need. */
function layout(count: number): { tags: { name: string; address: string }[]; dbBytes: number; mBytes: number } {
  const tags: { name: string; address: string }[] = [];
  const bits = Math.floor(count / 4);
  let byte = 0;
  for (let i = 0; i < count - bits; i++) {
    const type = ['REAL', 'DINT', 'INT'][i % 3];
    tags.push({ name: `t${i}`, address: `DB1,${type}${byte}` });
    byte += type === 'INT' ? 2 : 4;
  }
  for (let i = 0; i < bits; i++) tags.push({ name: `b${i}`, address: `M${i >> 3}.${i & 7}` });
  return { tags, dbBytes: byte, mBytes: Math.ceil(bits / 8) + 1 };
}

/** The servers' process: every CPU with DB1 and M registered, every byte changing every `tickMs`. */
async function startServers(devices: number, dbBytes: number, mBytes: number, pdu: number, tickMs: number) {
  const ports: number[] = [];
  for (let i = 0; i < devices; i++) ports.push(await freePort());
  const child = spawn(process.execPath, [serverScript, '--ports', ports.join(','), '--pdu', String(pdu)], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const answers = new Map<number, () => void>();
  const listening = new Promise<void>((resolveListening) => {
    lines.on('line', (line) => {
      const msg = JSON.parse(line) as { event?: string; id?: number; error?: string };
      if (msg.error !== undefined) throw new Error(`s7 server: ${msg.error}`);
      if (msg.event === 'listening') resolveListening();
      if (msg.id !== undefined) answers.get(msg.id)?.();
    });
  });
  await listening;
  let id = 0;
  const ask = (cmd: object): Promise<void> =>
    new Promise((done) => {
      answers.set(++id, done);
      child.stdin.write(`${JSON.stringify({ id, ...cmd })}\n`);
    });
  await ask({ cmd: 'register', area: 'DB', db: 1, size: dbBytes });
  await ask({ cmd: 'register', area: 'M', size: mBytes });
  await ask({ cmd: 'tick', ms: tickMs });
  return { ports, stop: () => child.stdin.end() };
}

async function run(): Promise<void> {
  const devices = Number(args.devices);
  const tagsPerDevice = Number(args.tags);
  const pollMs = Number(args['poll-ms']);
  const seconds = Number(args.seconds);
  const warmupS = Number(args['warmup-s']);
  const { tags, dbBytes, mBytes } = layout(tagsPerDevice);
  const servers = await startServers(devices, dbBytes, mBytes, Number(args.pdu), pollMs);

  const stateDir = benchStateDir();
  const connectors = servers.ports.map(
    (port, i) =>
      s7Factory.create(
        s7ConnectorSchema.parse({
          id: `cpu-${i}`,
          type: 's7',
          host: '127.0.0.1',
          port,
          pduSize: 960,
          pollIntervalMs: pollMs,
          tags,
        }),
        { log: silentLogger, dataDir: stateDir },
      ) as S7Connector,
  );
  const counters = () => ({
    requests: connectors.reduce((n, c) => n + c.stats.requests, 0),
    cycles: connectors.reduce((n, c) => n + c.stats.poll.cycles, 0),
  });
  const { wallS, start, end, tagsPerS, common } = await measure(stateDir, connectors, { warmupS, seconds, counters });
  const requestsPerS = (end.requests - start.requests) / wallS;
  const result = {
    devices,
    tagsPerDevice,
    pollMs,
    serverPduSize: Number(args.pdu),
    targetTagsPerS: (devices * tagsPerDevice * 1000) / pollMs,
    ...common,
    readRequestsPerS: Math.round(requestsPerS),
    requestsPerPoll: Number(((end.requests - start.requests) / (end.cycles - start.cycles)).toFixed(2)),
    requestsPerPollOneTagEach: tagsPerDevice,
    coalescingGain: Number((tagsPerS / requestsPerS).toFixed(1)),
  };
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  servers.stop();
}

run().catch((err: unknown) => {
  process.stderr.write(`${String(err)}\n`);
  process.exit(1);
});
