/**
 * Drives `test/fixtures/modbus-sim.py` (Debian's pymodbus) in its own process: a Modbus TCP server on a free
 * port, or an RTU server on one end of a `socat` pseudo-terminal pair.
 *
 *   const sim = d.add(await startModbusSim({ units: [1, 2] }));
 *   await sim.set(1, 'hr', 0, [0x4148, 0x0000]);            // 12.5 as float32 ABCD
 *   const reads = (await sim.requests()).filter((r) => r.op === 'read');
 *   await sim.mute(2);                                        // unit 2 stops answering
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { removeDir, tempDir } from './temp.js';
import { delay, waitFor } from './wait.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/modbus-sim.py', import.meta.url));
/** From the sources (vitest), or from dist/test/helpers when a bench runs this helper compiled. */
const SIM = existsSync(FIXTURE)
  ? FIXTURE
  : resolve(fileURLToPath(new URL('../../../test/fixtures/modbus-sim.py', import.meta.url)));
/** Debian's python3, where python3-pymodbus lives (a pyenv python on PATH would not have it). */
const PYTHON = existsSync('/usr/bin/python3') ? '/usr/bin/python3' : 'python3';

export type SimTable = 'hr' | 'ir' | 'co' | 'di';

export interface SimRequest {
  readonly unit: number;
  readonly table: SimTable;
  readonly op: 'read' | 'write';
  readonly address: number;
  readonly count: number;
}

export interface ModbusSim {
  /** TCP port (0 for RTU). */
  readonly port: number;
  /** RTU: the device path the client opens (the other end of the pty pair). */
  readonly clientPath?: string;
  set(unit: number, table: SimTable, address: number, values: readonly (number | boolean)[]): Promise<void>;
  get(unit: number, table: SimTable, address: number, count: number): Promise<number[]>;
  /** Every request the server saw (reads and writes), oldest first. */
  requests(): Promise<SimRequest[]>;
  resetRequests(): Promise<void>;
  /**
   * Resolves once the device answered `count` reads from now on (it clears the request log): a poller reads in
   * turn, so what every read but the last returned has been handled by then. The marker for "the gateway has read
   * the value set before" (docs/development.md#asserting-absence).
   */
  polled(count?: number, timeoutMs?: number): Promise<void>;
  /** Addresses that answer with exception 2 (illegal data address) whenever a request touches them. */
  bad(unit: number, table: SimTable, addresses: readonly number[]): Promise<void>;
  /** Writes to this address store at most `max` (a PLC program limiting a setpoint); the write succeeds. */
  clamp(unit: number, table: SimTable, address: number, max: number): Promise<void>;
  mute(unit: number): Promise<void>;
  unmute(unit: number): Promise<void>;
  /** Kills the server process (a device that disappears entirely). */
  kill(): Promise<void>;
  dispose(): Promise<void>;
}

/** Whether `socat` is installed (RTU tests need a pty pair). */
export function hasSocat(): boolean {
  return spawnSync('socat', ['-V'], { stdio: 'ignore' }).status === 0;
}

export async function startModbusSim(
  options: { units?: readonly number[]; rtu?: boolean; baudRate?: number } = {},
): Promise<ModbusSim> {
  const units = (options.units ?? [1]).join(',');
  let socat: ChildProcess | undefined;
  let dir: string | undefined;
  let args: string[];
  let clientPath: string | undefined;
  if (options.rtu) {
    dir = tempDir('edgeferry-pty-');
    const serverPath = join(dir, 'server');
    clientPath = join(dir, 'client');
    socat = spawn('socat', [`pty,raw,echo=0,link=${serverPath}`, `pty,raw,echo=0,link=${clientPath}`], {
      stdio: 'ignore',
    });
    const deadline = Date.now() + 5000;
    while (!(existsSync(serverPath) && existsSync(clientPath))) {
      if (Date.now() > deadline || socat.exitCode !== null) throw new Error('socat did not create the pty pair');
      await delay(20);
    }
    args = [SIM, '--rtu', serverPath, '--units', units, '--baud', String(options.baudRate ?? 19200)];
  } else {
    args = [SIM, '--tcp', '0', '--units', units];
  }
  const proc = spawn(PYTHON, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  let buffer = '';
  const waiting: ((line: Record<string, unknown>) => void)[] = [];
  proc.stdout.on('data', (chunk: Buffer) => {
    buffer += chunk.toString();
    for (let i = buffer.indexOf('\n'); i >= 0; i = buffer.indexOf('\n')) {
      const line = buffer.slice(0, i);
      buffer = buffer.slice(i + 1);
      waiting.shift()?.(JSON.parse(line) as Record<string, unknown>);
    }
  });
  const next = (timeoutMs = 10_000): Promise<Record<string, unknown>> =>
    new Promise((resolveLine, reject) => {
      const timer = setTimeout(() => reject(new Error(`modbus sim did not answer: ${stderr}`)), timeoutMs);
      waiting.push((line) => {
        clearTimeout(timer);
        resolveLine(line);
      });
    });
  // Commands are answered in order, one line each.
  let chain: Promise<unknown> = Promise.resolve();
  const command = (cmd: Record<string, unknown>): Promise<Record<string, unknown>> => {
    const result = chain.then(async () => {
      const answer = next();
      proc.stdin.write(`${JSON.stringify(cmd)}\n`);
      const line = await answer;
      if (line.ok !== true) throw new Error(`modbus sim refused ${JSON.stringify(cmd)}: ${String(line.error)}`);
      return line;
    });
    chain = result.catch(() => undefined);
    return result;
  };

  const ready = await next().catch((err: unknown) => {
    proc.kill('SIGKILL');
    socat?.kill('SIGKILL');
    throw err;
  });
  const exited = (p: ChildProcess | undefined): boolean => !p || p.exitCode !== null || p.signalCode !== null;
  const stopProc = async (p: ChildProcess | undefined): Promise<void> => {
    if (exited(p)) return;
    const done = new Promise<void>((r) => p?.once('exit', () => r()));
    p?.kill('SIGKILL');
    await done;
  };
  let disposed = false;
  return {
    port: typeof ready.port === 'number' ? ready.port : 0,
    clientPath,
    set: async (unit, table, address, values) => {
      await command({
        cmd: 'set',
        unit,
        table,
        address,
        values: values.map((v) => (typeof v === 'boolean' ? (v ? 1 : 0) : v)),
      });
    },
    get: async (unit, table, address, count) =>
      (await command({ cmd: 'get', unit, table, address, count })).values as number[],
    requests: async () => (await command({ cmd: 'stats' })).requests as SimRequest[],
    resetRequests: async () => {
      await command({ cmd: 'reset' });
    },
    polled: async (count = 2, timeoutMs = 5000) => {
      await command({ cmd: 'reset' });
      const reads = async () =>
        ((await command({ cmd: 'stats' })).requests as SimRequest[]).filter((r) => r.op === 'read').length;
      await waitFor(async () => (await reads()) >= count, timeoutMs, { message: `${count} reads of the device` });
    },
    bad: async (unit, table, addresses) => {
      await command({ cmd: 'bad', unit, table, addresses });
    },
    clamp: async (unit, table, address, max) => {
      await command({ cmd: 'clamp', unit, table, address, max });
    },
    mute: async (unit) => {
      await command({ cmd: 'mute', unit });
    },
    unmute: async (unit) => {
      await command({ cmd: 'unmute', unit });
    },
    kill: () => stopProc(proc),
    dispose: async () => {
      if (disposed) return;
      disposed = true;
      await stopProc(proc);
      await stopProc(socat);
      if (dir) removeDir(dir);
    },
  };
}

/**
 * The connector config of a Modbus TCP device `press-1` (unit 1) on `sim`, polled every 100 ms, with `tags`. Its
 * timeout is generous: two shared cores under load must not make a healthy unit look dead.
 */
export function modbusPress(sim: ModbusSim, tags: readonly object[]) {
  return {
    id: 'press-1',
    type: 'modbus',
    transport: 'tcp',
    host: '127.0.0.1',
    port: sim.port,
    unitId: 1,
    addressBase: 0,
    pollIntervalMs: 100,
    timeoutMs: 1500,
    retries: 0,
    tags,
  };
}

/** A writable register tag of every Modbus datatype at fixed addresses (holding 0-21): DCMD writes of each type. */
export const WRITABLE_REGISTER_TAGS = [
  { name: 'i16', table: 'holding', address: 0, datatype: 'int16', writable: true },
  { name: 'u16', table: 'holding', address: 1, datatype: 'uint16', writable: true },
  { name: 'i32', table: 'holding', address: 2, datatype: 'int32', writable: true },
  { name: 'u32', table: 'holding', address: 4, datatype: 'uint32', writable: true },
  { name: 'i64', table: 'holding', address: 6, datatype: 'int64', writable: true },
  { name: 'u64', table: 'holding', address: 10, datatype: 'uint64', writable: true },
  { name: 'f32', table: 'holding', address: 14, datatype: 'float32', writable: true },
  { name: 'f64', table: 'holding', address: 16, datatype: 'float64', writable: true },
  { name: 'label', table: 'holding', address: 20, datatype: 'string', length: 4, writable: true },
] as const;

/** A float32 as the two big-endian register words a PLC holds it in. */
export function float32Words(v: number): number[] {
  const b = Buffer.alloc(4);
  b.writeFloatBE(v);
  return [b.readUInt16BE(0), b.readUInt16BE(2)];
}
