/**
 * The Modbus connector against pymodbus (Debian python3-pymodbus) in its own process: Modbus TCP, and RTU over
 * a socat pseudo-terminal pair. Each test reads known register images, counts the requests the server saw,
 * and checks what the connector reported.
 */
import { spawnSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pino } from 'pino';
import { beforeEach, describe, expect, it } from 'vitest';
import type { TagSample, TagSink } from '../../connectors/contract.js';
import { ConnectorError } from '../../src/util/errors.js';
import { createModbusFactory } from '../../connectors/modbus/factory.js';
import type { ModbusConnectorFactory } from '../../connectors/modbus/factory.js';
import { modbusConnectorSchema } from '../../connectors/modbus/schema.js';
import type { Connector } from '../../connectors/contract.js';
import { useDisposer } from '../helpers/disposer.js';
import { captureLogger, type LogLine } from '../helpers/logger.js';
import { hasSocat, startModbusSim } from '../helpers/modbus-sim.js';
import type { ModbusSim } from '../helpers/modbus-sim.js';
import { freePort } from '../helpers/ports.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

/** The built CLI, as the `edgeferry` bin runs it (`npm run build` first). */
const CLI = join(import.meta.dirname, '../../dist/src/cli.js');

interface Recorder {
  readonly batches: TagSample[][];
  readonly lost: ConnectorError[];
  latest(name: string): TagSample | undefined;
}

function recorder(): Recorder {
  const batches: TagSample[][] = [];
  return {
    batches,
    lost: [],
    latest: (name) => {
      for (let i = batches.length - 1; i >= 0; i--) {
        const s = batches[i].find((x) => x.name === name);
        if (s) return s;
      }
      return undefined;
    },
  };
}

function sinkFor(rec: Recorder): TagSink {
  return { data: (samples) => rec.batches.push([...samples]), lost: (err) => rec.lost.push(err) };
}

let factory: ModbusConnectorFactory;
beforeEach(() => {
  factory = createModbusFactory();
});

type LogLines = LogLine[];

function connector(sim: ModbusSim, config: Record<string, unknown>, logs: LogLines = []): Connector {
  const transport = config.transport === 'rtu' ? {} : { transport: 'tcp', host: '127.0.0.1', port: sim.port };
  const parsed = modbusConnectorSchema.parse({
    id: 'dev',
    type: 'modbus',
    addressBase: 0,
    pollIntervalMs: 100,
    timeoutMs: 300,
    retries: 0,
    ...transport,
    ...config,
  });
  const c = factory.create(parsed, { log: captureLogger(logs), dataDir: d.tempDir('edgeferry-modbus-') });
  d.defer(() => c.stop());
  return c;
}

const reads = async (sim: ModbusSim) => (await sim.requests()).filter((r) => r.op === 'read');

describe('Modbus TCP against pymodbus', () => {
  it('reads every datatype and byte order from known register images', async () => {
    const sim = d.add(await startModbusSim());
    // float32 12.5 = 0x41480000; int32 -123456789 = 0xF8A432EB; uint64 0x0102030405060708; float64 -1.5
    await sim.set(1, 'hr', 0, [0x4148, 0x0000, 0x0000, 0x4148, 0x4841, 0x0000, 0x0000, 0x4841]);
    await sim.set(1, 'hr', 10, [0xf8a4, 0x32eb, 0x32eb, 0xf8a4, 0xfffe, 0x1234]);
    await sim.set(1, 'hr', 20, [0x0102, 0x0304, 0x0506, 0x0708, 0x0708, 0x0506, 0x0304, 0x0102]);
    await sim.set(1, 'hr', 30, [0xbff8, 0, 0, 0, 0x0807, 0x0605, 0x0403, 0x0201]);
    await sim.set(1, 'hr', 40, [0x4845, 0x4c4c, 0x4f00, 0x0008, 250]);
    await sim.set(1, 'ir', 0, [0xffff, 0xffff]);
    await sim.set(1, 'co', 0, [true, false, true]);
    await sim.set(1, 'di', 5, [true]);
    const rec = recorder();
    const c = connector(sim, {
      tags: [
        { name: 'f_abcd', table: 'holding', address: 0, datatype: 'float32', byteOrder: 'ABCD' },
        { name: 'f_cdab', table: 'holding', address: 2, datatype: 'float32', byteOrder: 'CDAB' },
        { name: 'f_badc', table: 'holding', address: 4, datatype: 'float32', byteOrder: 'BADC' },
        { name: 'f_dcba', table: 'holding', address: 6, datatype: 'float32', byteOrder: 'DCBA' },
        { name: 'i32_abcd', table: 'holding', address: 10, datatype: 'int32' },
        { name: 'i32_cdab', table: 'holding', address: 12, datatype: 'int32', byteOrder: 'CDAB' },
        { name: 'i16', table: 'holding', address: 14, datatype: 'int16' },
        { name: 'u16', table: 'holding', address: 15, datatype: 'uint16' },
        { name: 'u64_abcdefgh', table: 'holding', address: 20, datatype: 'uint64', byteOrder: 'ABCDEFGH' },
        { name: 'i64_ghefcdab', table: 'holding', address: 24, datatype: 'int64', byteOrder: 'GHEFCDAB' },
        { name: 'f64', table: 'holding', address: 30, datatype: 'float64' },
        { name: 'u64_hgfedcba', table: 'holding', address: 34, datatype: 'uint64', byteOrder: 'HGFEDCBA' },
        { name: 'text', table: 'holding', address: 40, datatype: 'string', length: 3 },
        { name: 'bit3', table: 'holding', address: 43, datatype: 'bit', bit: 3 },
        { name: 'scaled', table: 'holding', address: 44, datatype: 'uint16', scale: 0.1, offset: -10 },
        { name: 'u32_input', table: 'input', address: 0, datatype: 'uint32' },
        { name: 'coil0', table: 'coil', address: 0, datatype: 'bool' },
        { name: 'coil1', table: 'coil', address: 1, datatype: 'bool' },
        { name: 'di5', table: 'discrete', address: 5, datatype: 'bool' },
      ],
    });
    expect(c.tags.find((t) => t.name === 'scaled')?.datatype).toBe('Double');
    await c.start(sinkFor(rec));
    const v = (name: string) => rec.latest(name)?.value;
    expect([v('f_abcd'), v('f_cdab'), v('f_badc'), v('f_dcba')]).toEqual([12.5, 12.5, 12.5, 12.5]);
    expect([v('i32_abcd'), v('i32_cdab'), v('i16'), v('u16')]).toEqual([-123456789, -123456789, -2, 0x1234]);
    expect([v('u64_abcdefgh'), v('i64_ghefcdab'), v('u64_hgfedcba')]).toEqual([
      0x0102030405060708n,
      0x0102030405060708n,
      0x0102030405060708n,
    ]);
    expect(v('f64')).toBe(-1.5);
    expect([v('text'), v('bit3'), v('u32_input')]).toEqual(['HELLO', true, 0xffffffff]);
    expect(v('scaled')).toBeCloseTo(15);
    expect([v('coil0'), v('coil1'), v('di5')]).toEqual([true, false, true]);
    expect(rec.batches[0].every((s) => s.quality === 'good' && s.timestamp > 0)).toBe(true);
  });

  it('coalesces near tags into the fewest requests (counted by the server) within the max gap', async () => {
    const sim = d.add(await startModbusSim());
    const rec = recorder();
    const tags = [
      ...Array.from({ length: 20 }, (_, i) => ({ name: `t${i}`, table: 'holding', address: i * 2, datatype: 'int32' })),
      { name: 'near', table: 'holding', address: 50, datatype: 'int16' }, // gap 10 <= 16: same request
      { name: 'far', table: 'holding', address: 500, datatype: 'int16' },
      { name: 'c1', table: 'coil', address: 0, datatype: 'bool' },
      { name: 'c2', table: 'coil', address: 100, datatype: 'bool' },
    ];
    const c = connector(sim, { tags, pollIntervalMs: 60_000 });
    await sim.resetRequests();
    await c.start(sinkFor(rec));
    const seen = await reads(sim);
    expect(seen.map((r) => [r.table, r.address, r.count])).toEqual([
      ['hr', 0, 51],
      ['hr', 500, 1],
      ['co', 0, 101],
    ]);
    expect(rec.batches[0]).toHaveLength(tags.length);
  });

  it('splits a block refused with "illegal data address", reports only the bad tag as bad, names it in the log and reads around it from then on', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [1, 2, 3, 4, 5, 6, 7, 8]);
    await sim.bad(1, 'hr', [5]);
    const logs: LogLines = [];
    const rec = recorder();
    const tags = Array.from({ length: 8 }, (_, i) => ({
      name: `r${i}`,
      table: 'holding',
      address: i,
      datatype: 'uint16',
    }));
    const c = connector(sim, { tags, pollIntervalMs: 150 }, logs);
    await c.start(sinkFor(rec));
    const first = rec.batches[0];
    expect(first.filter((s) => s.quality === 'bad').map((s) => s.name)).toEqual(['r5']);
    expect(first.filter((s) => s.quality === 'good').map((s) => [s.name, s.value])).toEqual([
      ['r0', 1],
      ['r1', 2],
      ['r2', 3],
      ['r3', 4],
      ['r4', 6 - 1],
      ['r6', 7],
      ['r7', 8],
    ]);
    expect(logs.filter((l) => l.level === 'warn').map((l) => [l.msg, l.fields.tag, l.fields.exception])).toEqual([
      ['device refuses tag; reported with bad quality', 'r5', 2],
    ]);
    // The next cycles read [0..4], [5] alone and [6..7]: one bad tag does not blind its neighbours.
    await sim.resetRequests();
    await waitFor(async () => (await reads(sim)).length >= 6, 5000);
    const cycle = (await reads(sim)).slice(0, 3).map((r) => [r.address, r.count]);
    expect(cycle).toEqual([
      [0, 5],
      [5, 1],
      [6, 2],
    ]);
    // When the address becomes readable again, the tag recovers and the blocks merge again.
    await sim.bad(1, 'hr', []);
    await waitFor(() => rec.latest('r5')?.quality === 'good', 5000);
    await sim.resetRequests();
    await waitFor(async () => (await reads(sim)).length >= 2, 5000);
    expect((await reads(sim)).slice(-1).map((r) => [r.address, r.count])).toEqual([[0, 8]]);
  });

  it('writes with FC 5, 6, 15 and 16, in the tag encoding, range-checked, and reads each written tag back', async () => {
    const sim = d.add(await startModbusSim());
    const rec = recorder();
    const tags = [
      { name: 'valve', table: 'coil', address: 3, datatype: 'bool', writable: true },
      { name: 'speed', table: 'holding', address: 10, datatype: 'int16', writable: true },
      { name: 'setpoint', table: 'holding', address: 12, datatype: 'float32', byteOrder: 'CDAB', writable: true },
      { name: 'total', table: 'holding', address: 20, datatype: 'uint64', writable: true },
      { name: 'ro', table: 'holding', address: 30, datatype: 'int16' },
    ];
    const c = connector(sim, { tags, pollIntervalMs: 60_000 });
    await c.start(sinkFor(rec));
    await sim.resetRequests();
    // Each write is followed by a read of the same address: the value the device holds now.
    expect(await c.write('valve', true)).toMatchObject({ value: true, matches: true });
    expect(await c.write('speed', -300)).toMatchObject({ value: -300, matches: true });
    expect(await c.write('setpoint', 12.5)).toMatchObject({ value: 12.5, matches: true });
    expect(await c.write('total', 2n ** 40n + 5n)).toMatchObject({ value: 2n ** 40n + 5n, matches: true });
    const requests = await sim.requests();
    expect(requests.map((r) => [r.op, r.table, r.address, r.count])).toEqual([
      ['write', 'co', 3, 1],
      ['read', 'co', 3, 1],
      ['write', 'hr', 10, 1],
      ['read', 'hr', 10, 1],
      ['write', 'hr', 12, 2],
      ['read', 'hr', 12, 2],
      ['write', 'hr', 20, 4],
      ['read', 'hr', 20, 4],
    ]);
    expect(await sim.get(1, 'co', 3, 1)).toEqual([1]);
    expect(await sim.get(1, 'hr', 10, 1)).toEqual([0x10000 - 300]);
    expect(await sim.get(1, 'hr', 12, 2)).toEqual([0x0000, 0x4148]);
    expect(await sim.get(1, 'hr', 20, 4)).toEqual([0, 0x0100, 0, 5]);

    const refusal = (p: Promise<unknown>) =>
      p.then(
        () => 'accepted',
        (e: unknown) => (e instanceof ConnectorError ? `${e.code}: ${e.message}` : String(e)),
      );
    await sim.resetRequests();
    expect(await refusal(c.write('speed', 40_000))).toBe(
      'EF_CONNECTOR_WRITE: write speed refused: 40000 is outside int16 (-32768..32767)',
    );
    expect(await refusal(c.write('speed', 70_000))).toBe(
      'EF_CONNECTOR_WRITE: write speed refused: 70000 is outside int16 (-32768..32767)',
    );
    expect(await refusal(c.write('speed', Number.NaN))).toBe(
      'EF_CONNECTOR_WRITE: write speed refused: NaN is not a finite number',
    );
    expect(await refusal(c.write('ro', 1))).toMatch(/read-only/);
    expect(await refusal(c.write('nope', 1))).toMatch(/no such tag/);
    expect(await refusal(c.write('valve', 1))).toMatch(/expects a boolean/);
    // Refused before the wire: the device saw no request.
    expect(await sim.requests()).toEqual([]);
    expect(await sim.get(1, 'hr', 10, 1)).toEqual([0x10000 - 300]);

    // FC 15/16 for devices without the single-write functions.
    const multi = connector(sim, { id: 'multi', tags, pollIntervalMs: 60_000, writeMultiple: true });
    await multi.start(sinkFor(recorder()));
    await sim.resetRequests();
    await multi.write('valve', false);
    await multi.write('speed', 7);
    const multiWrites = (await sim.requests()).filter((r) => r.op === 'write');
    expect(multiWrites.map((r) => [r.table, r.address, r.count])).toEqual([
      ['co', 3, 1],
      ['hr', 10, 1],
    ]);
    expect(await sim.get(1, 'hr', 10, 1)).toEqual([7]);
  });

  it('rejects start() for an unreachable device and reports a unit that stops answering as lost, without stalling another unit on the same server', async () => {
    const sim = d.add(await startModbusSim({ units: [1, 2] }));
    const tags = [{ name: 'x', table: 'holding', address: 0, datatype: 'uint16' }];
    const dead = connector(sim, { id: 'dead', port: 1, tags });
    await expect(dead.start(sinkFor(recorder()))).rejects.toMatchObject({
      code: 'EF_CONNECTOR_UNREACHABLE',
      connectorId: 'dead',
    });

    const rec1 = recorder();
    const rec2 = recorder();
    const u1 = connector(sim, { id: 'u1', unitId: 1, tags });
    const u2 = connector(sim, { id: 'u2', unitId: 2, tags });
    await u1.start(sinkFor(rec1));
    await u2.start(sinkFor(rec2));
    await sim.mute(2);
    await waitFor(() => rec2.lost.length === 1, 5000);
    expect(rec2.lost[0]).toMatchObject({ code: 'EF_CONNECTOR_UNREACHABLE', connectorId: 'u2' });
    await u2.stop();
    const before = rec1.batches.length;
    await sim.set(1, 'hr', 0, [42]);
    await waitFor(() => rec1.latest('x')?.value === 42 && rec1.batches.length > before + 3, 5000);
    expect(rec1.lost).toEqual([]);
    // The muted unit comes back: start() succeeds again.
    await sim.unmute(2);
    await u2.start(sinkFor(rec2));
  });

  it('reports the device lost when the server goes away', async () => {
    const sim = d.add(await startModbusSim());
    const rec = recorder();
    const c = connector(sim, { tags: [{ name: 'x', table: 'holding', address: 0, datatype: 'uint16' }] });
    await c.start(sinkFor(rec));
    await sim.kill();
    await waitFor(() => rec.lost.length === 1, 5000);
  });
});

describe.skipIf(!hasSocat())('Modbus RTU over a socat pty pair against pymodbus', () => {
  it('polls two units on one shared bus; a unit that stops answering is lost and the other keeps its rate', async () => {
    const sim = d.add(await startModbusSim({ rtu: true, units: [1, 2] }));
    await sim.set(1, 'hr', 0, [0x4148, 0x0000]);
    await sim.set(2, 'hr', 0, [7]);
    const base = {
      transport: 'rtu',
      path: sim.clientPath,
      baudRate: 19200,
      pollIntervalMs: 100,
      timeoutMs: 200,
      retries: 0,
    };
    const rec1 = recorder();
    const rec2 = recorder();
    const u1 = connector(sim, {
      ...base,
      id: 'u1',
      unitId: 1,
      tags: [{ name: 'f', table: 'holding', address: 0, datatype: 'float32' }],
    });
    const u2 = connector(sim, {
      ...base,
      id: 'u2',
      unitId: 2,
      tags: [{ name: 'n', table: 'holding', address: 0, datatype: 'uint16', writable: true }],
    });
    await u1.start(sinkFor(rec1));
    await u2.start(sinkFor(rec2));
    expect(rec1.latest('f')?.value).toBe(12.5);
    expect(rec2.latest('n')?.value).toBe(7);
    await u2.write('n', 9);
    expect(await sim.get(2, 'hr', 0, 1)).toEqual([9]);
    await sim.mute(2);
    await waitFor(() => rec2.lost.length === 1, 5000);
    await u2.stop();
    // From here a request for unit 2 would show in the simulator's log.
    await sim.unmute(2);
    await sim.resetRequests();
    const start = rec1.batches.length;
    await waitFor(() => rec1.batches.length >= start + 10, 5000);
    // The stopped unit does not hold the bus: ten cycles of unit 1, and not one request for unit 2.
    expect((await sim.requests()).filter((r) => r.unit === 2)).toEqual([]);
    expect(rec1.lost).toEqual([]);
  });
});

describe('overlapping Modbus tags', () => {
  it('--check-config refuses a writable tag that shares registers with another, naming both and where', () => {
    const dir = d.tempDir('edgeferry-overlap-');
    const file = join(dir, 'edgeferry.yaml');
    writeFileSync(
      file,
      [
        'storage: { path: data }',
        'connectors:',
        '  - { id: press-1, type: modbus, transport: tcp, host: 127.0.0.1, addressBase: 0, tags: [',
        '      { name: temperature, table: holding, address: 0, datatype: float32 },',
        '      { name: mode, table: holding, address: 1, datatype: int16, writable: true } ] }',
        '',
      ].join('\n'),
    );
    const r = spawnSync(process.execPath, [CLI, '--check-config', '-c', file], { encoding: 'utf8' });
    expect(r.status).toBe(2);
    expect(r.stderr).toContain(
      'connectors.0.tags.1.address: "mode" (holding 1) overlaps "temperature" (holding 0..1); a writable tag must not share registers or bits with another tag',
    );
  });

  it('reads overlapping read-only tags each its own way, with a warning naming both', async () => {
    const sim = d.add(await startModbusSim());
    await sim.set(1, 'hr', 0, [0x4148, 0x0000]); // 12.5 as float32; the low word alone is 0
    const logs: LogLines = [];
    const tags = [
      { name: 'temperature', table: 'holding', address: 0, datatype: 'float32' },
      { name: 'low-word', table: 'holding', address: 1, datatype: 'uint16' },
    ];
    const c = connector(sim, { tags }, logs);
    expect(logs.filter((l) => l.level === 'warn').map((l) => [l.msg, l.fields.tags, l.fields.at])).toEqual([
      [
        'tags overlap: both read the shared registers, each its own way',
        ['temperature', 'low-word'],
        ['holding 0..1', 'holding 1'],
      ],
    ]);
    const rec = recorder();
    await c.start(sinkFor(rec));
    expect([rec.latest('temperature')?.value, rec.latest('low-word')?.value]).toEqual([12.5, 0]);
  });
});

describe('Modbus connector errors an operator can read', () => {
  /** The message as the JSON log shows it: pino appends the messages of an error's causes. */
  const logged = (err: unknown): string => pino.stdSerializers.err(err as Error).message;

  it('one short message each: what, which unit and address, why (refused connection, timeout after N ms, Modbus exception by name)', async () => {
    const sim = d.add(await startModbusSim());
    const tags = [
      { name: 'x', table: 'holding', address: 0, datatype: 'uint16', writable: true },
      { name: 'y', table: 'holding', address: 4, datatype: 'uint16', writable: true },
    ];
    const refusedPort = await freePort();
    const dead = connector(sim, { id: 'dead', port: refusedPort, tags });
    const startErr = await dead.start(sinkFor(recorder())).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(logged(startErr)).toBe(`unit 1 at tcp://127.0.0.1:${refusedPort}: connect: connection refused`);

    const rec = recorder();
    const c = connector(sim, { tags, timeoutMs: 300 });
    await c.start(sinkFor(rec));
    // A device that refuses an address: exception 2 (Modbus Application Protocol v1.1b3 §7), named.
    await sim.bad(1, 'hr', [4]);
    const writeErr = await c.write('y', 1).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(logged(writeErr)).toBe(
      `write y: unit 1 at tcp://127.0.0.1:${sim.port} refused: write holding 4+1: exception 2 "illegal data address"`,
    );
    await sim.bad(1, 'hr', []);
    // A hung device: the timeout and its length, once, no [object Object].
    await sim.mute(1);
    await waitFor(() => rec.lost.length === 1, 5000);
    expect(logged(rec.lost[0])).toBe(
      `unit 1 at tcp://127.0.0.1:${sim.port}: read holding 0+5: no answer within 300 ms`,
    );
  });
});

describe('a write during a poll cycle', () => {
  it("is never followed by that cycle's older reading of the tag: after each write, samples of it carry the written value", async () => {
    const sim = d.add(await startModbusSim());
    // One register per request, so a cycle takes many requests and a write nearly always lands inside one.
    const tags = Array.from({ length: 40 }, (_, i) => ({
      name: `r${i}`,
      table: 'holding',
      address: i,
      datatype: 'uint16',
      writable: i === 0,
    }));
    const rec = recorder();
    const c = connector(sim, { tags, pollIntervalMs: 10, maxGapRegisters: 0, maxRegistersPerRead: 1 });
    await c.start(sinkFor(rec));
    for (let value = 1; value <= 30; value++) {
      expect(await c.write('r0', value)).toMatchObject({ value, matches: true });
      const from = rec.batches.length;
      // Let a few cycles complete: every reading of r0 delivered after the write must be the written value.
      await waitFor(() => rec.batches.length >= from + 2, 5000);
      const later = rec.batches.slice(from).flatMap((b) => b.filter((s) => s.name === 'r0').map((s) => s.value));
      expect(
        later.every((v) => v === value),
        `after writing ${value}: ${later.join(', ')}`,
      ).toBe(true);
    }
  });
});
