/**
 * Commissioning reads from the console (docs/console.md#modbus-test-read, #opc-ua-browse) against real devices: a
 * register range of the pymodbus simulator decoded every way a tag can lay it out, a unit id scan, the node-opcua
 * fixture browsed node by node with values and units, its certificate trusted by thumbprint, and who may ask.
 */
import { describe, expect, it } from 'vitest';
import { startOpcuaFixture } from '../fixtures/opcua-fixture.js';
import { useDisposer } from '../helpers/disposer.js';
import { logLines } from '../helpers/gateway.js';
import { float32Words, modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { waitFor } from '../helpers/wait.js';
import { loggedIn, startConsoleGateway } from './console-setup.js';

const d = useDisposer();

describe('Modbus test read from the console', { timeout: 60_000 }, () => {
  it('reads a range of a unit now and decodes it in every layout, and scans for the units that answer', async () => {
    const sim = d.add(await startModbusSim({ units: [1, 2, 5] }));
    const [hi, lo] = float32Words(21.5);
    const u64 = Buffer.alloc(8);
    u64.writeBigUInt64BE(1_234_567_890_123n);
    await sim.set(1, 'hr', 0, [
      0xfffe, // int16 -2
      0,
      lo, // float32 21.5, word-swapped (CDAB)
      hi,
      ...[0, 2, 4, 6].map((i) => u64.readUInt16BE(i)), // uint64 ABCDEFGH
      0x4142, // "ABCD"
      0x4344,
    ]);
    await sim.set(1, 'co', 3, [true, false, true]);
    // The connector polls the same simulator meanwhile: the read shares its link.
    const press = modbusPress(sim, [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }]);
    const { gw, base } = d.add(
      await startConsoleGateway({ sparkplug: { groupId: 'plant', edgeNodeId: 'line4' }, connectors: [press] }),
    );
    const engineer = await loggedIn(base, 'eng');
    const link = { transport: 'tcp', host: '127.0.0.1', port: sim.port };

    // Addresses as the device's tags write them: 1-based here.
    const read = await engineer.post('config/modbus-read', {
      link,
      unitId: 1,
      table: 'holding',
      address: 1,
      addressBase: 1,
      count: 10,
    });
    expect(read.status, JSON.stringify(read.body)).toBe(200);
    type Row = Record<string, unknown> & { address: number; float32?: Record<string, unknown> };
    const rows = read.body.rows as Row[];
    expect(rows.map((r) => r.address)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(rows[0]).toMatchObject({ raw: 0xfffe, hex: '0xfffe', int16: -2, uint16: 65_534, bits: '1111111111111110' });
    expect(rows[2].float32).toMatchObject({ CDAB: 21.5 });
    expect(rows[2].float32?.ABCD).not.toBe(21.5);
    expect(rows[4]).toMatchObject({ uint64: { ABCDEFGH: '1234567890123' } });
    expect(rows[8]).toMatchObject({ string: { ABCD: 'ABCD', BADC: 'BADC' } });
    expect(rows[9].int32).toBeUndefined(); // one register left: no 32-bit layout starts there

    const coils = await engineer.post('config/modbus-read', { link, unitId: 1, table: 'coil', address: 3, count: 3 });
    expect(coils.body.bits).toEqual([
      { address: 3, value: true },
      { address: 4, value: false },
      { address: 5, value: true },
    ]);

    // A refusal of the device, a request past the protocol's limit, by key.
    await sim.bad(1, 'hr', [50]);
    const refused = await engineer.post('config/modbus-read', {
      link,
      unitId: 1,
      table: 'holding',
      address: 50,
      count: 1,
    });
    expect(refused.status).toBe(502);
    expect(refused.body.error).toMatch(/exception 2 "illegal data address"/);
    const tooMany = await engineer.post('config/modbus-read', {
      link,
      unitId: 1,
      table: 'holding',
      address: 0,
      count: 126,
    });
    expect(tooMany.status).toBe(400);
    expect(tooMany.body.problems).toEqual([expect.objectContaining({ path: 'count' })]);

    const scan = await engineer.post('config/modbus-scan', { link, from: 1, to: 6, timeoutMs: 300 });
    expect(scan.status, JSON.stringify(scan.body)).toBe(200);
    const units = scan.body.units as { unitId: number; present: boolean }[];
    expect(units.filter((u) => u.present).map((u) => u.unitId)).toEqual([1, 2, 5]);
    expect(units).toHaveLength(6);
    const wide = await engineer.post('config/modbus-scan', { link, from: 1, to: 100 });
    expect(wide.status).toBe(400);
    expect(wide.body.error).toMatch(/at most 32 units/);

    for (const user of ['shift', 'maint'] as const) {
      const other = await loggedIn(base, user);
      expect(
        (await other.post('config/modbus-read', { link, unitId: 1, table: 'holding', address: 0, count: 1 })).status,
      ).toBe(403);
    }
    const audit = await waitFor(() => logLines(gw).find((l) => l.msg === 'console commissioning'), 5000, {
      message: 'the audit line of the read',
    });
    expect(audit).toMatchObject({ user: 'eng', action: 'modbus-read', target: { unitId: 1, address: 1 } });
  });
});

describe('OPC UA browse from the console', { timeout: 120_000 }, () => {
  it('browses node by node with values, types, units and access, and trusts an untrusted server by its thumbprint', async () => {
    const server = d.add(await startOpcuaFixture({ dir: d.tempDir('edgeferry-opcua-console-') }));
    const { base } = d.add(await startConsoleGateway());
    const engineer = await loggedIn(base, 'eng');

    const top = await engineer.post('config/opcua-browse', { endpoint: server.endpoint });
    expect(top.status, JSON.stringify(top.body)).toBe(200);
    expect(top.body.browsePath).toBe('/Objects');
    type Child = { nodeId: string; displayName: string; nodeClass: string; variable?: Record<string, unknown> };
    const fixture = (top.body.children as Child[]).find((c) => c.displayName === 'Fixture');
    expect(fixture).toMatchObject({ nodeId: 'ns=1;s=Fixture', nodeClass: 'Object' });
    // The standard Server object (namespace 0) is left out.
    expect((top.body.children as Child[]).map((c) => c.displayName)).not.toContain('Server');

    const analog = await engineer.post('config/opcua-browse', {
      endpoint: server.endpoint,
      node: 'ns=1;s=Fixture.Analog',
    });
    expect(analog.status, JSON.stringify(analog.body)).toBe(200);
    const byName = new Map((analog.body.children as Child[]).map((c) => [c.displayName, c]));
    expect(byName.get('Pressure')?.variable).toMatchObject({
      nodeId: 'ns=1;s=Fixture.Analog.Pressure',
      browsePath: '/Objects/1:Fixture/1:Analog/1:Pressure',
      dataType: 'Double',
      datatype: 'Double',
      access: 'r',
      value: '120.5',
      engUnit: 'bar',
      engLow: 0,
      engHigh: 250,
      description: 'Hydraulic pressure',
    });
    expect(byName.get('Flow')?.variable).toMatchObject({ datatype: 'Float', value: '12.25', engUnit: 'm³/h' });
    const scalars = await engineer.post('config/opcua-browse', {
      endpoint: server.endpoint,
      node: 'ns=1;s=Fixture.Scalars',
    });
    const int64 = (scalars.body.children as Child[]).find((c) => c.displayName === 'Int64');
    expect(int64?.variable).toMatchObject({
      datatype: 'Int64',
      value: String(BigInt.asIntN(64, (0xfffffeffn << 32n) | 0xfffffffbn)),
    });
    const missing = await engineer.post('config/opcua-browse', { endpoint: server.endpoint, node: 'ns=1;s=Nowhere' });
    expect(missing.status).toBe(502);
    expect(missing.body.error).toMatch(/does not exist/);

    // Secured: the server's certificate is not trusted yet; the answer shows it, trusting another thumbprint fails.
    const secured = { endpoint: server.endpoint, securityMode: 'SignAndEncrypt', node: 'ns=1;s=Fixture.Analog' };
    const untrusted = await engineer.post('config/opcua-browse', secured);
    expect(untrusted.status, JSON.stringify(untrusted.body)).toBe(200);
    expect(untrusted.body.untrusted).toMatchObject({ thumbprint: server.thumbprint, endpoint: server.endpoint });
    const wrong = await engineer.post('config/opcua-trust', { endpoint: server.endpoint, thumbprint: '0'.repeat(40) });
    expect(wrong.status).toBe(502);
    expect(wrong.body.error).toMatch(/not the expected thumbprint/);
    const operator = await loggedIn(base, 'maint');
    const notAllowed = await operator.post('config/opcua-trust', {
      endpoint: server.endpoint,
      thumbprint: server.thumbprint,
    });
    expect(notAllowed.status).toBe(403);
    const trusted = await engineer.post('config/opcua-trust', {
      endpoint: server.endpoint,
      thumbprint: server.thumbprint,
    });
    expect(trusted.status, JSON.stringify(trusted.body)).toBe(200);
    expect(trusted.body.trusted).toEqual([
      expect.objectContaining({ thumbprint: server.thumbprint, alreadyTrusted: false }),
    ]);
    const browsed = await engineer.post('config/opcua-browse', secured);
    expect(browsed.body.untrusted).toBeUndefined();
    expect((browsed.body.children as Child[]).map((c) => c.displayName).sort()).toEqual([
      'Flow',
      'Pressure',
      'Temperature',
    ]);
  });
});
