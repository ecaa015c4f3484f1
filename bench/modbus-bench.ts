/**
 * 20 Modbus TCP devices of 200 tags each, polled every 100 ms, through the real
 * connectors, edge node and broker (in this process), against 20 Modbus servers (modbus-serial's ServerTCP) in a
 * child process whose registers all change every 100 ms (the worst case for report by exception).
 *
 *   npm run build:bench && node dist/bench/modbus-bench.js [--devices 20] [--tags 200] [--poll-ms 100] [--seconds 10]
 *
 * Reports tags/s read, read requests/s actually sent (the coalescing gain), DDATA messages and metrics/s,
 * the poll-cycle p99 and this process's CPU share (the gateway side; the servers run elsewhere).
 */
import { fork } from 'node:child_process';
import { createServer } from 'node:net';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import modbusSerial from 'modbus-serial';
import { createModbusFactory } from '../connectors/modbus/factory.js';
import type { ModbusConnector } from '../connectors/modbus/modbus-connector.js';
import { modbusConnectorSchema } from '../connectors/modbus/schema.js';
import { silentLogger } from '../src/util/logger.js';
import { benchStateDir, measure } from './polled-devices.js';

const { values: args } = parseArgs({
  options: {
    serve: { type: 'string' },
    devices: { type: 'string', default: '20' },
    tags: { type: 'string', default: '200' },
    'poll-ms': { type: 'string', default: '100' },
    seconds: { type: 'string', default: '10' },
    'warmup-s': { type: 'string', default: '3' },
  },
});

/** Register layout of one device: 1/2 int16, 1/4 float32, 1/4 uint32, contiguous from address 0. */
function tagList(count: number): { name: string; table: 'holding'; address: number; datatype: string }[] {
  const tags: { name: string; table: 'holding'; address: number; datatype: string }[] = [];
  let address = 0;
  for (let i = 0; i < count; i++) {
    const datatype = i % 4 === 0 ? 'float32' : i % 4 === 1 ? 'uint32' : 'int16';
    tags.push({ name: `tag${i}`, table: 'holding', address, datatype });
    address += datatype === 'int16' ? 1 : 2;
  }
  return tags;
}

// ---------------------------------------------------------------------------------------------------------------
// Server side (child process)

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      probe.close(() => resolve(port));
    });
  });
}

async function serve(devices: number): Promise<void> {
  const { ServerTCP } = modbusSerial as unknown as {
    ServerTCP: new (vector: object, options: object) => { close(cb: () => void): void };
  };
  let tick = 0;
  let requests = 0;
  setInterval(() => tick++, 100);
  const vector = {
    getMultipleHoldingRegisters: (addr: number, length: number) => {
      requests++;
      return Array.from({ length }, (_, i) => (tick * 7 + addr + i) & 0x7fff);
    },
    getHoldingRegister: (addr: number) => {
      requests++;
      return (tick * 7 + addr) & 0x7fff;
    },
  };
  const ports: number[] = [];
  for (let i = 0; i < devices; i++) {
    const port = await freePort();
    const server = new ServerTCP(vector, { host: '127.0.0.1', port, unitID: 1 });
    await new Promise<void>((resolve, reject) => {
      (server as unknown as NodeJS.EventEmitter).once('initialized', () => resolve());
      (server as unknown as NodeJS.EventEmitter).once('serverError', reject);
    });
    ports.push(port);
  }
  process.send?.({ ports });
  process.on('message', (msg: { type: string }) => {
    if (msg.type === 'requests')
      process.send?.({ requests, cpuMs: (process.cpuUsage().user + process.cpuUsage().system) / 1000 });
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Gateway side (this process)

async function run(): Promise<void> {
  const devices = Number(args.devices);
  const tagsPerDevice = Number(args.tags);
  const pollMs = Number(args['poll-ms']);
  const seconds = Number(args.seconds);
  const warmupS = Number(args['warmup-s']);

  const child = fork(fileURLToPath(import.meta.url), ['--serve', String(devices)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const ask = (type: string, key: string): Promise<Record<string, unknown>> =>
    new Promise((resolve) => {
      const onMessage = (msg: Record<string, unknown>) => {
        if (key in msg) {
          child.off('message', onMessage);
          resolve(msg);
        }
      };
      child.on('message', onMessage);
      if (type) child.send({ type });
    });
  const ports = (await ask('', 'ports')).ports as number[];
  const serverCounters = async () => {
    const msg = await ask('requests', 'requests');
    return { requests: msg.requests as number, cpuMs: msg.cpuMs as number };
  };

  const stateDir = benchStateDir();
  const factory = createModbusFactory();
  const tags = tagList(tagsPerDevice);
  const connectors = ports.map(
    (port, i) =>
      factory.create(
        modbusConnectorSchema.parse({
          id: `dev-${i}`,
          type: 'modbus',
          transport: 'tcp',
          host: '127.0.0.1',
          port,
          addressBase: 0,
          pollIntervalMs: pollMs,
          timeoutMs: 1000,
          tags,
        }),
        { log: silentLogger, dataDir: stateDir },
      ) as ModbusConnector,
  );
  const counters = async () => ({ server: await serverCounters(), clientRequests: factory.requestCount });
  const { wallS, start, end, tagsPerS, common } = await measure(stateDir, connectors, { warmupS, seconds, counters });
  const requestsPerS = (end.server.requests - start.server.requests) / wallS;
  const result = {
    devices,
    tagsPerDevice,
    pollMs,
    targetTagsPerS: (devices * tagsPerDevice * 1000) / pollMs,
    ...common,
    readRequestsPerS: Math.round(requestsPerS),
    clientRequestsPerS: Math.round((end.clientRequests - start.clientRequests) / wallS),
    coalescingGain: Number((tagsPerS / requestsPerS).toFixed(1)),
    serverCpuSharePercentOfOneCore: Number(
      (((end.server.cpuMs - start.server.cpuMs) / (wallS * 1000)) * 100).toFixed(1),
    ),
  };
  process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  child.kill();
}

if (args.serve !== undefined) {
  void serve(Number(args.serve));
} else {
  run().catch((err: unknown) => {
    process.stderr.write(`${String(err)}\n`);
    process.exit(1);
  });
}
