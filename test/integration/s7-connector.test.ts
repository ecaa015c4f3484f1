/**
 * The S7 connector against snap7's S7 server (npm node-snap7, built from source) in its own process: data blocks,
 * inputs, outputs and markers the test registers and changes, reads of every type, coalescing counted in PDUs,
 * refused items, writes checked in the server's memory, and a CPU that stops and comes back. The last suite runs
 * the real gateway process: DBIRTH with the tags' types and properties, DCMD writes through the Sparkplug path,
 * DDEATH and DBIRTH when the CPU goes away and returns. Run `npm run build` first.
 */
import { describe, expect, it } from 'vitest';
import type { TagSample, TagSink } from '../../connectors/contract.js';
import { ValueRefusedError } from '../../connectors/contract.js';
import { s7Factory } from '../../connectors/s7/factory.js';
import type { S7Connector } from '../../connectors/s7/s7-connector.js';
import { s7ConnectorSchema } from '../../connectors/s7/schema.js';
import { encodePayload } from '../../src/sparkplug/payload.js';
import { ConnectorError } from '../../src/util/errors.js';
import { startS7Fixture } from '../fixtures/s7-fixture.js';
import type { S7Fixture } from '../fixtures/s7-fixture.js';
import { useDisposer } from '../helpers/disposer.js';
import { captureLogger, type LogLine } from '../helpers/logger.js';
import { logLines, reloadGateway, startGateway } from '../helpers/gateway.js';
import { hostsMayCommand, sparkplugSection, startSparkplugHost } from '../helpers/sparkplug-host.js';
import { waitFor } from '../helpers/wait.js';

const d = useDisposer();

type LogLines = LogLine[];

class Recorder implements TagSink {
  readonly batches: TagSample[][] = [];
  readonly losses: ConnectorError[] = [];
  data(samples: readonly TagSample[]): void {
    this.batches.push([...samples]);
  }
  lost(err: ConnectorError): void {
    this.losses.push(err);
  }
  latest(name: string): TagSample | undefined {
    for (let i = this.batches.length - 1; i >= 0; i--) {
      const s = this.batches[i].find((x) => x.name === name);
      if (s) return s;
    }
    return undefined;
  }
}

async function plcWith(areas: [area: 'I' | 'Q' | 'M' | 'DB', db: number, size: number][], pduSize?: number) {
  const plc = d.add(await startS7Fixture({ pduSize }));
  for (const [area, db, size] of areas) await plc.register(area, db, size);
  return plc;
}

function connector(plc: S7Fixture, config: Record<string, unknown>, logs: LogLines = []): S7Connector {
  const parsed = s7ConnectorSchema.parse({
    id: 'cpu',
    type: 's7',
    host: '127.0.0.1',
    port: plc.port,
    pollIntervalMs: 100,
    timeoutMs: 500,
    retries: 0,
    ...config,
  });
  const c = s7Factory.create(parsed, { log: captureLogger(logs), dataDir: d.tempDir('edgeferry-s7-') }) as S7Connector;
  d.defer(() => c.stop());
  return c;
}

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s/g, ''), 'hex');

describe('S7 connector against snap7', () => {
  it('reads every type from known memory images, in DBs, inputs, outputs and markers', async () => {
    const plc = await plcWith([
      ['DB', 10, 100],
      ['I', 0, 4],
      ['Q', 0, 4],
      ['M', 0, 32],
    ]);
    // REAL 12.5 @0, INT -2 @4, WORD 0xBEEF @6, DINT -123456789 @8, DWORD 0xDEADBEEF @12, LREAL -1.5 @16,
    // BYTE 0xA5 @24 (bits 0, 2, 5, 7), CHAR 'Z' @25, STRING[8] 'hello' @26, DT 2024-02-29 13:45:56.789 Thu @36,
    // INT[3] 1,2,3 @44, CHAR[4] 'ab' @50
    await plc.set(
      'DB',
      10,
      0,
      hex(`41480000 fffe beef f8a432eb deadbeef bff8000000000000 a5 5a 0805 68656c6c6f000000
           24022913455678 95 000100020003 6162 0000`),
    );
    await plc.set('I', 0, 0, hex('08'));
    await plc.set('Q', 0, 0, hex('0002'));
    await plc.set('M', 0, 20, hex('0102 3f800000'));
    const rec = new Recorder();
    const c = connector(plc, {
      tags: [
        { name: 'real', address: 'DB10,REAL0' },
        { name: 'int', address: 'DB10,INT4' },
        { name: 'word', address: 'DB10.DBW6' },
        { name: 'dint', address: 'DB10.DBD8', datatype: 'DINT' },
        { name: 'dword', address: 'DB10,DWORD12' },
        { name: 'lreal', address: 'DB10,LREAL16' },
        { name: 'byte', address: 'DB10.DBB24' },
        { name: 'bit5', address: 'DB10.DBX24.5' },
        { name: 'bit1', address: 'DB10,X24.1' },
        { name: 'bits', address: 'DB10,X24.0[8]' },
        { name: 'char', address: 'DB10,CHAR25' },
        { name: 'text', address: 'DB10,STRING26.8' },
        { name: 'when', address: 'DB10,DT36' },
        { name: 'ints', address: 'DB10,INT44[3]' },
        { name: 'chars', address: 'DB10,C50[4]' },
        { name: 'input3', address: 'I0.3' },
        { name: 'output', address: 'QW0' },
        { name: 'mw20', address: 'MW20' },
        { name: 'md22', address: 'MD22', datatype: 'REAL', engUnit: 'bar', engLow: 0, engHigh: 10 },
      ],
    });
    expect(c.tags.map((t) => [t.name, t.datatype])).toEqual([
      ['real', 'Float'],
      ['int', 'Int16'],
      ['word', 'UInt16'],
      ['dint', 'Int32'],
      ['dword', 'UInt32'],
      ['lreal', 'Double'],
      ['byte', 'UInt8'],
      ['bit5', 'Boolean'],
      ['bit1', 'Boolean'],
      ['bits', 'BooleanArray'],
      ['char', 'String'],
      ['text', 'String'],
      ['when', 'DateTime'],
      ['ints', 'Int16Array'],
      ['chars', 'String'],
      ['input3', 'Boolean'],
      ['output', 'UInt16'],
      ['mw20', 'UInt16'],
      ['md22', 'Float'],
    ]);
    expect(c.tags.at(-1)?.properties).toEqual({ engUnit: 'bar', engLow: 0, engHigh: 10 });
    await c.start(rec);
    const values = Object.fromEntries(rec.batches[0].map((s) => [s.name, s.value]));
    expect(values).toEqual({
      real: 12.5,
      int: -2,
      word: 0xbeef,
      dint: -123456789,
      dword: 0xdeadbeef,
      lreal: -1.5,
      byte: 0xa5,
      bit5: true,
      bit1: false,
      bits: [true, false, true, false, false, true, false, true],
      char: 'Z',
      text: 'hello',
      when: Date.UTC(2024, 1, 29, 13, 45, 56, 789),
      ints: [1, 2, 3],
      chars: 'ab',
      input3: true,
      output: 2,
      mw20: 0x0102,
      md22: 1,
    });
    expect(rec.batches[0].every((s) => s.quality === 'good')).toBe(true);
    // The program changes a value: the next cycle reads it.
    await plc.set('DB', 10, 0, hex('42c80000'));
    await waitFor(() => rec.latest('real')?.value === 100, 5000);
  });

  it('coalesces tags into the fewest PDUs the negotiated PDU size allows: 200 tags in 4 DBs, 2 requests a cycle', async () => {
    const plc = await plcWith([
      ['DB', 1, 400],
      ['DB', 2, 400],
      ['DB', 3, 400],
      ['DB', 4, 400],
    ]);
    const tags = [1, 2, 3, 4].flatMap((db) =>
      Array.from({ length: 50 }, (_, i) => ({ name: `db${db}_${i}`, address: `DB${db},REAL${i * 4}` })),
    );
    const rec = new Recorder();
    const c = connector(plc, { pduSize: 480, tags });
    await c.start(rec);
    expect(rec.batches[0]).toHaveLength(200);
    // 800 bytes of values; an answer of 480 bytes carries at most 480 - 14 - 4 items × 4 header bytes.
    expect(c.stats.requestsPerCycle).toBe(2);
    const before = c.stats.requests;
    await waitFor(() => c.stats.poll.cycles >= 5, 5000);
    await c.stop();
    expect((c.stats.requests - before) / c.stats.poll.cycles).toBe(2);
    // Every other tag, none coalesced: 100 items of one tag each, 5 requests of 20 items (the CPU's limit).
    const alone = connector(plc, {
      pduSize: 480,
      maxGapBytes: 0,
      maxItemsPerRead: 20,
      tags: tags.filter((_, i) => i % 2 === 0),
    });
    await alone.start(new Recorder());
    expect(alone.stats.requestsPerCycle).toBe(5);
  });

  it('reports only the tag the CPU refuses as bad (no such DB, beyond its end), names it once, and keeps its neighbours', async () => {
    const plc = await plcWith([['DB', 10, 20]]);
    await plc.set('DB', 10, 0, hex('0007 0009'));
    const logs: LogLines = [];
    const rec = new Recorder();
    const c = connector(
      plc,
      {
        tags: [
          { name: 'a', address: 'DB10,INT0' },
          { name: 'beyond', address: 'DB10,INT20' },
          { name: 'b', address: 'DB10,INT2' },
          { name: 'missing', address: 'DB11,INT0' },
        ],
      },
      logs,
    );
    await c.start(rec);
    await waitFor(() => rec.latest('beyond')?.quality === 'bad' && rec.latest('a')?.quality === 'good', 5000);
    await waitFor(() => c.stats.badTags === 2, 5000);
    const cycles = c.stats.poll.cycles;
    await waitFor(() => c.stats.poll.cycles >= cycles + 3, 5000);
    expect(rec.latest('a')).toMatchObject({ value: 7, quality: 'good' });
    expect(rec.latest('b')).toMatchObject({ value: 9, quality: 'good' });
    expect(rec.latest('missing')?.quality).toBe('bad');
    const warnings = logs.filter((l) => l.msg === 'device refuses tag; reported with bad quality');
    expect(warnings.map((w) => [w.fields.tag, w.fields.reason])).toEqual(
      expect.arrayContaining([
        ['beyond', 'return code 0x05 (address out of range (beyond the end of the area or block))'],
        ['missing', 'return code 0x0a (object does not exist (no such DB, or a DB with optimized block access))'],
      ]),
    );
    expect(warnings).toHaveLength(2);
    // a and b are read together again, the bad ones alone: 1 request (3 items).
    expect(c.stats.requestsPerCycle).toBe(1);
  });

  it('writes every type in the S7 encoding, checked in the server memory, and reads each back; a bit alone', async () => {
    const plc = await plcWith([
      ['DB', 5, 64],
      ['M', 0, 8],
    ]);
    await plc.set('DB', 5, 0, hex('ff'));
    await plc.set('DB', 5, 10, hex('0a03 414243')); // STRING[10] 'ABC'
    const c = connector(plc, {
      tags: [
        { name: 'bit2', address: 'DB5.DBX0.2', writable: true },
        { name: 'int', address: 'DB5,INT2', writable: true },
        { name: 'real', address: 'DB5,REAL4', writable: true },
        { name: 'text', address: 'DB5,S10.10', writable: true },
        { name: 'when', address: 'DB5,DT24', writable: true },
        { name: 'dints', address: 'DB5,DI32[2]', writable: true },
        { name: 'lreal', address: 'DB5,LR40', writable: true },
        { name: 'flags', address: 'M1.0[8]', writable: true },
        { name: 'readonly', address: 'DB5,INT48' },
      ],
    });
    await c.start(new Recorder());
    expect(await c.write('bit2', false)).toMatchObject({ value: false, matches: true });
    expect(await plc.get('DB', 5, 0, 1)).toEqual(hex('fb')); // only bit 2 changed
    expect(await c.write('int', -300)).toMatchObject({ value: -300, matches: true });
    expect(await plc.get('DB', 5, 2, 2)).toEqual(hex('fed4'));
    expect(await c.write('real', 2.5)).toMatchObject({ value: 2.5, matches: true });
    expect(await plc.get('DB', 5, 4, 4)).toEqual(hex('40200000'));
    expect(await c.write('text', 'hi')).toMatchObject({ value: 'hi', matches: true });
    expect(await plc.get('DB', 5, 10, 5)).toEqual(hex('0a02 6869 43')); // the max stays, the rest is untouched
    const when = Date.UTC(2031, 11, 24, 18, 30, 15, 250);
    expect(await c.write('when', when)).toMatchObject({ value: when, matches: true });
    expect(await plc.get('DB', 5, 24, 8)).toEqual(hex('3112241830152504')); // weekday 4: Wednesday
    expect(await c.write('dints', [70_000, -1])).toMatchObject({ value: [70_000, -1], matches: true });
    expect(await plc.get('DB', 5, 32, 8)).toEqual(hex('00011170 ffffffff'));
    expect(await c.write('lreal', 1e300)).toMatchObject({ value: 1e300, matches: true });
    const flags = [true, false, false, false, false, false, false, true];
    expect(await c.write('flags', flags)).toMatchObject({ value: flags, matches: true });
    expect(await plc.get('M', 0, 1, 1)).toEqual(hex('81'));
    // Refused before any I/O: the memory keeps its value.
    for (const [tag, value] of [
      ['int', 40_000],
      ['int', 1.5],
      ['real', 'x'],
      ['text', 'much too long'],
      ['text', 'snow ☃'],
      ['when', Date.UTC(2100, 0, 1)],
      ['dints', [1]],
      ['bit2', 1],
    ] as const) {
      await expect(c.write(tag, value), `${tag} ${String(value)}`).rejects.toBeInstanceOf(ValueRefusedError);
    }
    expect(await plc.get('DB', 5, 2, 2)).toEqual(hex('fed4'));
    await expect(c.write('readonly', 1)).rejects.toThrow(/read-only/);
  });

  it('rejects start for a CPU that is not there, naming it, and reports a CPU that stops as lost once', async () => {
    const plc = await plcWith([['DB', 1, 4]]);
    const c = connector(plc, { tags: [{ name: 'x', address: 'DB1,INT0' }] });
    await plc.stop();
    await expect(c.start(new Recorder())).rejects.toThrow(
      new RegExp(`^CPU at 127\\.0\\.0\\.1:${plc.port} \\(rack 0, slot 1\\): connect: connection refused$`),
    );
    await plc.start();
    const rec = new Recorder();
    await c.start(rec);
    await plc.stop();
    await waitFor(() => rec.losses.length > 0, 5000);
    expect(rec.losses).toHaveLength(1);
    expect(rec.losses[0].message).toMatch(/^CPU at 127\.0\.0\.1:\d+ \(rack 0, slot 1\): /);
    await c.stop();
    await plc.start();
    const again = new Recorder();
    await c.start(again);
    expect(again.latest('x')?.quality).toBe('good');
    // The CPU stops answering, its connection open: the request times out and the CPU is lost.
    await plc.lock('DB', 1);
    try {
      await waitFor(() => again.losses.length > 0, 5000);
      expect(again.losses[0].message).toMatch(/^CPU at .*: read 1 item: no answer within 500 ms$/);
    } finally {
      await plc.unlock('DB', 1);
    }
  });
});

describe('S7 CPU in the gateway', () => {
  it('DBIRTH with types and properties, DCMD writes landing in the CPU memory, DDEATH and DBIRTH when it goes and returns', async () => {
    const plc = await plcWith([['DB', 10, 16]]);
    await plc.set('DB', 10, 0, hex('41a00000 0005'));
    const gw = d.add(
      await startGateway(
        {
          auth: hostsMayCommand(d.tempDir()),
          sparkplug: sparkplugSection('plant1', 'gw'),
          connectors: [
            {
              id: 'line-3',
              type: 's7',
              host: '127.0.0.1',
              port: plc.port,
              pollIntervalMs: 100,
              timeoutMs: 500,
              tags: [
                { name: 'temperature', address: 'DB10,REAL0', engUnit: '°C', deadband: 0.5 },
                { name: 'setpoint', address: 'DB10.DBW4', datatype: 'INT', writable: true, engLow: 0, engHigh: 100 },
              ],
            },
          ],
        },
        { logLevel: 'info' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, 'plant1'));
    await host.rebirth('gw'); // a host that joins late asks for the births
    await host.waitFor((h) => h.births('DBIRTH', 'line-3').length >= 1, 15_000, 'DBIRTH');
    const birth = host.births('DBIRTH', 'line-3')[0].payload.metrics;
    const name = (m: (typeof birth)[number]) => host.nameOf('gw', m);
    expect(birth.find((m) => name(m) === 'temperature')).toMatchObject({ datatype: 'Float', value: 20 });
    expect(birth.find((m) => name(m) === 'setpoint')).toMatchObject({ datatype: 'Int16', value: 5 });
    expect(birth.find((m) => name(m) === 'temperature')?.properties).toEqual({ engUnit: '°C', readOnly: true });
    expect(birth.find((m) => name(m) === 'setpoint')?.properties).toEqual({ engLow: 0, engHigh: 100, readOnly: false });
    expect(host.value('gw', 'line-3', 'temperature')).toBe(20);
    // A change beyond the deadband is published.
    await plc.set('DB', 10, 0, hex('41a80000'));
    await host.waitFor((h) => h.value('gw', 'line-3', 'temperature') === 21, 10_000, 'temperature 21');
    await host.write('gw', 'line-3', [{ name: 'setpoint', datatype: 'Int16', value: 42 }]);
    await waitFor(async () => (await plc.get('DB', 10, 4, 2)).equals(hex('002a')), 10_000);
    await host.waitFor((h) => h.value('gw', 'line-3', 'setpoint') === 42, 10_000, 'setpoint 42');
    expect(logLines(gw).find((l) => l.msg === 'DCMD write done')).toMatchObject({ value: '42' });
    // A value out of the Int16 range is refused, audited, and never reaches the CPU.
    await host.client.publishAsync(
      'spBv1.0/plant1/DCMD/gw/line-3',
      encodePayload({ timestamp: Date.now(), metrics: [{ name: 'setpoint', datatype: 'Int16', value: 70_000 }] }),
    );
    await waitFor(() => logLines(gw).some((l) => l.msg === 'command refused'), 10_000);
    expect(await plc.get('DB', 10, 4, 2)).toEqual(hex('002a'));
    // The CPU goes away: DDEATH; it comes back: DBIRTH with its current values.
    await plc.stop();
    await host.waitFor((h) => h.of('DDEATH', 'line-3').length >= 1, 15_000, 'DDEATH');
    await plc.set('DB', 10, 0, hex('42480000'));
    await plc.start();
    await host.waitFor((h) => h.births('DBIRTH', 'line-3').length >= 2, 15_000, 'DBIRTH after the return');
    expect(host.value('gw', 'line-3', 'temperature')).toBe(50);
    expect(host.violations).toEqual([]);
  });

  it('a reload reconfigures one CPU (DDEATH, DBIRTH with the new tags) and leaves the other untouched', async () => {
    const plc = d.add(await startS7Fixture({ servers: 2 }));
    await plc.register('DB', 1, 8);
    await plc.set('DB', 1, 0, hex('0001 0002'), 0);
    await plc.set('DB', 1, 0, hex('0003 0004'), 1);
    const cpu = (id: string, port: number, tags: object[]) => ({
      id,
      type: 's7',
      host: '127.0.0.1',
      port,
      pollIntervalMs: 100,
      tags,
    });
    const gw = d.add(
      await startGateway(
        {
          auth: hostsMayCommand(d.tempDir()),
          sparkplug: sparkplugSection('plant1', 'gw'),
          connectors: [
            cpu('line-3', plc.ports[0], [{ name: 'a', address: 'DB1,INT0' }]),
            cpu('line-4', plc.ports[1], [{ name: 'a', address: 'DB1,INT0' }]),
          ],
        },
        { logLevel: 'info' },
      ),
    );
    const host = d.add(await startSparkplugHost(gw.url, 'plant1'));
    await host.rebirth('gw');
    await host.waitFor(
      (h) => h.births('DBIRTH', 'line-4').length === 1 && h.births('DBIRTH', 'line-3').length === 1,
      15_000,
      'births',
    );
    const reconfigured = await reloadGateway<{ connectors: { tags: object[] }[] }>(
      gw,
      (c) => c.connectors[1].tags.push({ name: 'b', address: 'DB1,INT2' }),
      'connector reconfigured',
    );
    expect(reconfigured.connector).toBe('line-4');
    await host.waitFor((h) => h.births('DBIRTH', 'line-4').length === 2, 15_000, 'DBIRTH of the reconfigured line-4');
    expect(host.of('DDEATH', 'line-4')).toHaveLength(1);
    expect(host.births('DBIRTH', 'line-4')[1].payload.metrics.map((m) => m.name)).toEqual(['a', 'b']);
    expect(host.value('gw', 'line-4', 'b')).toBe(4);
    // line-3 carried on: one birth, no death, and its data still flows.
    await plc.set('DB', 1, 0, hex('0009'), 0);
    await host.waitFor((h) => h.value('gw', 'line-3', 'a') === 9, 10_000, 'data of line-3');
    expect(host.births('DBIRTH', 'line-3')).toHaveLength(1);
    expect(host.of('DDEATH', 'line-3')).toEqual([]);
    expect(host.violations).toEqual([]);
  });
});
