/**
 * Changing the configuration from the console (docs/console.md#configuration) over HTTP against the gateway process:
 * who may, the file kept as written (comments, other lines byte for byte), secrets never sent, validation as
 * `--check-config` gives it, the etag that keeps a file changed on disk, ten versions and undo, the audit line, and
 * the change applied by reload: only the device that changed gets DDEATH and DBIRTH upstream.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { jsonSchema } from '../../src/config/json-schema.js';
import { useDisposer } from '../helpers/disposer.js';
import { logLines, type Gateway } from '../helpers/gateway.js';
import { float32Words, modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { freePort } from '../helpers/ports.js';
import { sparkplugSection, sparkplugUplink, startSparkplugHost } from '../helpers/sparkplug-host.js';
import { waitFor } from '../helpers/wait.js';
import { ConsoleClient, loggedIn, startConsoleGateway } from './console-setup.js';

const d = useDisposer();

const HEADER = '# line 4 gateway: commissioned from the console\n';

/** Rewrites the test's JSON config as block YAML with a comment, as a person keeps it. */
function asYaml(gw: Gateway): string {
  const text = HEADER + stringify(JSON.parse(readFileSync(gw.configFile, 'utf8')));
  writeFileSync(gw.configFile, text);
  return text;
}

async function configOf(client: ConsoleClient) {
  const answer = await client.get<{ etag: string; text: string; config: Record<string, unknown>; editable: boolean }>(
    'config',
  );
  expect(answer.status).toBe(200);
  return answer.body;
}

describe('configuration from the console', { timeout: 90_000 }, () => {
  it('lets engineers change the file and nobody else, never sends a password, and keeps what it does not change', async () => {
    const deadPort = await freePort();
    const { gw, base } = d.add(
      await startConsoleGateway({
        bridges: [
          {
            name: 'central',
            remote: { urls: [`mqtt://127.0.0.1:${deadPort}`], username: 'edge', password: 's3cret-pw' },
            topics: [{ filter: 'plant/#', direction: 'out' }],
          },
        ],
      }),
    );
    const original = asYaml(gw);
    const viewer = await loggedIn(base, 'shift');
    const operator = await loggedIn(base, 'maint');
    const engineer = await loggedIn(base, 'eng');

    const seen = await configOf(viewer);
    expect(seen.editable).toBe(false);
    expect(seen.text.startsWith(HEADER)).toBe(true);
    expect(seen.text).not.toContain('s3cret');
    expect(seen.text).toContain('password: ********');
    expect(JSON.stringify(seen.config)).not.toContain('s3cret');
    expect((await configOf(engineer)).editable).toBe(true);

    const change = {
      etag: seen.etag,
      ops: [{ op: 'set', path: ['bridges', 0, 'remote', 'username'], value: 'edge2' }],
    };
    for (const client of [viewer, operator]) {
      for (const route of ['config/preview', 'config/apply', 'config/undo']) {
        const refused = await client.post(route, change);
        expect(refused.status, `${route} as ${client.csrf === viewer.csrf ? 'viewer' : 'operator'}`).toBe(403);
        expect(refused.body.error).toMatch(/console\.engineers/);
      }
    }
    // Without the CSRF token an engineer is refused too.
    expect((await engineer.post('config/apply', change, { csrf: false })).status).toBe(403);
    expect(readFileSync(gw.configFile, 'utf8')).toBe(original);

    const preview = await engineer.post('config/preview', change);
    expect(preview.status, JSON.stringify(preview.body)).toBe(200);
    expect(preview.body.diff).toMatch(/^-\s+username: edge$/m);
    expect(preview.body.diff).toMatch(/^\+\s+username: edge2$/m);
    expect(readFileSync(gw.configFile, 'utf8')).toBe(original);

    // The whole remote sent back as the page has it (password masked): the stored password stays.
    const remote = (seen.config.bridges as { remote: Record<string, unknown> }[])[0].remote;
    const applied = await engineer.post('config/apply', {
      etag: seen.etag,
      ops: [{ op: 'set', path: ['bridges', 0, 'remote'], value: { ...remote, username: 'edge2' } }],
    });
    expect(applied.status, JSON.stringify(applied.body)).toBe(200);
    expect(applied.body).toMatchObject({ done: true, added: 1, removed: 1, reload: { ok: true } });
    const written = readFileSync(gw.configFile, 'utf8');
    expect(written).toBe(original.replace('username: edge\n', 'username: edge2\n'));
    expect(written).toContain('s3cret-pw');
    const audit = await waitFor(() => logLines(gw).find((l) => l.msg === 'console config change'), 5000, {
      message: 'the audit line of the change',
    });
    expect(audit).toMatchObject({ user: 'eng', action: 'apply', added: 1, removed: 1, paths: ['bridges.0.remote'] });
    await waitFor(() => logLines(gw).some((l) => l.msg === 'config reloaded'), 5000, { message: 'the reload' });
    expect(gw.output()).not.toContain('s3cret');

    // A stale etag (the page read the file before the change) is refused, and so is one for a file edited by hand.
    expect((await engineer.post('config/apply', change)).status).toBe(409);
    writeFileSync(gw.configFile, `${written}# edited by hand\n`);
    const stale = await engineer.post('config/apply', { ...change, etag: applied.body.etag });
    expect(stale.status).toBe(409);
    expect(stale.body.error).toMatch(/changed since this page read it/);
    expect(readFileSync(gw.configFile, 'utf8')).toBe(`${written}# edited by hand\n`);
    // Undo refuses to throw away the hand edit.
    const handEdited = await configOf(engineer);
    const undoRefused = await engineer.post('config/undo', { etag: handEdited.etag });
    expect(undoRefused.status).toBe(409);
    expect(undoRefused.body.error).toMatch(/by hand/);
    writeFileSync(gw.configFile, written);

    // Invalid: refused with the key and the message --check-config gives, the file untouched.
    const now = await configOf(engineer);
    const invalid = await engineer.post('config/apply', {
      etag: now.etag,
      ops: [{ op: 'set', path: ['bridges', 0, 'remote', 'urls'], value: ['http://central'] }],
    });
    expect(invalid.status).toBe(422);
    expect(invalid.body.problems).toEqual([
      expect.objectContaining({ path: 'bridges.0.remote.urls.0', message: expect.stringMatching(/mqtt/) }),
    ]);
    expect(invalid.body.diff).toMatch(/\+\s+- http:\/\/central/);
    expect(readFileSync(gw.configFile, 'utf8')).toBe(written);
    const missing = await engineer.post('config/apply', {
      etag: now.etag,
      ops: [{ op: 'remove', path: ['bridges', 4] }],
    });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatch(/bridges\.4: nothing to remove/);

    // Undo: the text before the change, byte for byte; then nothing more to undo.
    const undone = await engineer.post('config/undo', { etag: now.etag });
    expect(undone.status, JSON.stringify(undone.body)).toBe(200);
    expect(readFileSync(gw.configFile, 'utf8')).toBe(original);
    expect((await engineer.post('config/undo', { etag: undone.body.etag })).status).toBe(409);

    // Twelve changes keep the last ten versions.
    let etag = undone.body.etag as string;
    for (let i = 0; i < 12; i++) {
      const step = await engineer.post('config/apply', {
        etag,
        ops: [{ op: 'set', path: ['bridges', 0, 'remote', 'clientId'], value: `gw-${i}` }],
      });
      expect(step.status, JSON.stringify(step.body)).toBe(200);
      etag = step.body.etag as string;
    }
    expect(readdirSync(join(gw.dataDir, 'config-history'))).toHaveLength(10);
    expect((await configOf(viewer)).text).toContain('clientId: gw-11');
  });

  it('imports a CSV of 200 tags: two bad rows refused by line with nothing applied, then the good file applied and exported', async () => {
    const sim = d.add(await startModbusSim({ units: [1] }));
    await sim.set(1, 'hr', 199, [4242]);
    const central = d.add(await startMosquitto());
    const host = d.add(await startSparkplugHost(central.url, 'plant'));
    const press = modbusPress(sim, [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }]);
    const { gw, base } = d.add(
      await startConsoleGateway({
        sparkplug: sparkplugSection('plant', 'line4', { uplink: 'central' }),
        bridges: [sparkplugUplink(central.url, { group: 'plant', node: 'line4' })],
        connectors: [press],
      }),
    );
    const before = asYaml(gw);
    const engineer = await loggedIn(base, 'eng');
    const rows = Array.from({ length: 200 }, (_, i) => `r${i},holding,${i},uint16,,`);
    rows[41] = 'r41,holding,forty-one,uint16,,'; // line 43: not a number
    rows[150] = 'r150,holding,150,float32,,yes'; // line 152: the schema refuses it (float32 at 150 overlaps r151)
    const csv = `name,table,address,datatype,engUnit,writable\n${rows.join('\n')}\n`;
    const { etag } = await configOf(engineer);
    const refused = await engineer.post('config/tags-import', { etag, device: 'press-1', csv, apply: true });
    expect(refused.status, JSON.stringify(refused.body)).toBe(422);
    expect(refused.body.error).toBe('2 bad rows: nothing was applied');
    expect(refused.body.problems).toEqual([
      { path: 'line 43', message: 'address "forty-one" is not a number' },
      { path: 'line 152', message: expect.stringMatching(/r151/) },
    ]);
    expect(readFileSync(gw.configFile, 'utf8')).toBe(before);

    rows[41] = 'r41,holding,41,uint16,rpm,';
    rows[150] = 'r150,holding,150,uint16,,';
    const good = `name,table,address,datatype,engUnit,writable\n${rows.join('\n')}\n`;
    const preview = await engineer.post('config/tags-import', { etag, device: 'press-1', csv: good });
    expect(preview.status, JSON.stringify(preview.body)).toBe(200);
    expect(readFileSync(gw.configFile, 'utf8')).toBe(before);
    const applied = await engineer.post('config/tags-import', { etag, device: 'press-1', csv: good, apply: true });
    expect(applied.status, JSON.stringify(applied.body)).toBe(200);
    const birth = await host.waitFor(
      (h) => h.births('DBIRTH', 'press-1').find((m) => m.payload.metrics.some((x) => x.name === 'r199')),
      20_000,
      'a DBIRTH of press-1 with the 200 imported tags',
    );
    expect(birth.payload.metrics.filter((x) => /^r\d+$/.test(x.name ?? ''))).toHaveLength(200);
    expect(birth.payload.metrics.find((x) => x.name === 'r41')?.properties.engUnit).toBe('rpm');
    await host.waitFor((h) => h.value('line4', 'press-1', 'r199') === 4242, 10_000, 'r199 read from the simulator');

    const exported = await engineer.post('config/tags-export', { device: 'press-1' });
    expect(exported.status).toBe(200);
    const lines = (exported.body.csv as string).trimEnd().split('\r\n');
    expect(lines).toHaveLength(201);
    expect(lines[42]).toBe('r41,holding,41,uint16,rpm');
  });

  it('applies a change by reload: the changed device gets DDEATH and a DBIRTH with its new tag, the other none', async () => {
    const sim = d.add(await startModbusSim({ units: [1, 2] }));
    await sim.set(1, 'hr', 10, float32Words(21.5));
    const central = d.add(await startMosquitto());
    const host = d.add(await startSparkplugHost(central.url, 'plant'));
    const count = { name: 'count', table: 'holding', address: 0, datatype: 'uint16' };
    const press1 = modbusPress(sim, [count]);
    const press2 = { ...modbusPress(sim, [count]), id: 'press-2', unitId: 2 };
    const { gw, base } = d.add(
      await startConsoleGateway({
        sparkplug: sparkplugSection('plant', 'line4', { uplink: 'central' }),
        bridges: [sparkplugUplink(central.url, { group: 'plant', node: 'line4' })],
        connectors: [press1, press2],
      }),
    );
    asYaml(gw);
    await host.waitFor((h) => h.isDeviceOnline('line4', 'press-1') && h.isDeviceOnline('line4', 'press-2'), 20_000);
    const engineer = await loggedIn(base, 'eng');
    const { etag } = await configOf(engineer);
    const applied = await engineer.post('config/apply', {
      etag,
      ops: [
        {
          op: 'add',
          path: ['connectors', 0, 'tags'],
          value: { name: 'temperature', table: 'holding', address: 10, datatype: 'float32', engUnit: '°C' },
        },
      ],
    });
    expect(applied.status, JSON.stringify(applied.body)).toBe(200);
    const birth = await host.waitFor(
      (h) => h.births('DBIRTH', 'press-1').find((m) => m.payload.metrics.some((x) => x.name === 'temperature')),
      20_000,
      'a DBIRTH of press-1 with the new tag',
    );
    expect(host.of('DDEATH', 'press-1').length).toBe(1);
    expect(host.value('line4', 'press-1', 'temperature')).toBe(21.5);
    expect(birth.payload.metrics.find((x) => x.name === 'temperature')?.properties.engUnit).toBe('°C');
    // A later value of press-2 arrives: by then any rebirth of it would have come first.
    await sim.set(2, 'hr', 0, [77]);
    await host.waitFor((h) => h.value('line4', 'press-2', 'count') === 77, 10_000, 'press-2 still publishing');
    expect(host.of('DDEATH', 'press-2')).toHaveLength(0);
    expect(host.births('DBIRTH', 'press-2')).toHaveLength(1);
    expect(host.violations).toEqual([]);
  });

  it("names a problem in a profile's tag at the profile's key path and one in a list at its entry; a list is reordered in place", async () => {
    const [deadPlc, deadA, deadB] = [await freePort(), await freePort(), await freePort()];
    const count = { name: 'count', table: 'holding', address: 0, datatype: 'uint16' };
    const level = { name: 'level', table: 'holding', address: 1, datatype: 'uint16' };
    const urls = [`mqtt://127.0.0.1:${deadA}`, `mqtt://127.0.0.1:${deadB}`];
    const { gw, base } = d.add(
      await startConsoleGateway({
        sparkplug: sparkplugSection('plant', 'line4'),
        bridges: [{ name: 'archive', remote: { urls }, topics: [{ filter: 'archive/#', direction: 'out' }] }],
        profiles: {
          press: {
            type: 'modbus',
            transport: 'tcp',
            host: '127.0.0.1',
            port: deadPlc,
            addressBase: 0,
            tags: [count, level],
          },
        },
        connectors: [{ id: 'press-2', type: 'modbus', profile: 'press', unitId: 2 }],
      }),
    );
    const original = asYaml(gw);
    const engineer = await loggedIn(base, 'eng');
    const { etag, config } = await configOf(engineer);
    expect(config.profiles).toEqual({ press: expect.objectContaining({ tags: [count, level] }) });

    const duplicate = await engineer.post('config/preview', {
      etag,
      ops: [{ op: 'set', path: ['profiles', 'press', 'tags', 1, 'name'], value: 'count' }],
    });
    expect(duplicate.status).toBe(422);
    expect(duplicate.body.problems).toEqual([
      expect.objectContaining({
        path: 'profiles.press.tags.1.name',
        message: expect.stringMatching(/already the name/),
      }),
    ]);

    const badEntry = await engineer.post('config/preview', {
      etag,
      ops: [{ op: 'set', path: ['bridges', 0, 'remote', 'urls'], value: [urls[0], 'http://central', urls[1]] }],
    });
    expect(badEntry.status).toBe(422);
    expect(badEntry.body.problems).toEqual([
      expect.objectContaining({ path: 'bridges.0.remote.urls.1', message: expect.stringMatching(/mqtt:\/\//) }),
    ]);

    const reordered = await engineer.post('config/apply', {
      etag,
      ops: [{ op: 'set', path: ['bridges', 0, 'remote', 'urls'], value: [urls[1], urls[0]] }],
    });
    expect(reordered.status, JSON.stringify(reordered.body)).toBe(200);
    expect(reordered.body).toMatchObject({ added: 1, removed: 1, reload: { ok: true } });
    expect(readFileSync(gw.configFile, 'utf8')).toBe(
      original.replace(`- ${urls[0]}\n        - ${urls[1]}`, `- ${urls[1]}\n        - ${urls[0]}`),
    );
  });

  it('serves the config schema the forms take their keys and choices from; a bad topic filter is named at its entry', async () => {
    const deadPort = await freePort();
    const topics = [{ filter: 'plant/#', direction: 'out' }];
    const { gw, base } = d.add(
      await startConsoleGateway({
        bridges: [{ name: 'central', remote: { urls: [`mqtt://127.0.0.1:${deadPort}`] }, topics }],
      }),
    );
    asYaml(gw);
    const anonymous = new ConsoleClient(base);
    expect((await anonymous.get('config/schema')).status).toBe(401);
    const viewer = await loggedIn(base, 'shift');
    const served = await viewer.get<{ properties: Record<string, unknown> }>('config/schema');
    expect(served.status).toBe(200);
    expect(served.body).toEqual(JSON.parse(jsonSchema()));
    expect(served.body).toEqual(JSON.parse(readFileSync('config/edgeferry.schema.json', 'utf8')));

    const engineer = await loggedIn(base, 'eng');
    const { etag } = await configOf(engineer);
    const badFilter = await engineer.post('config/preview', {
      etag,
      ops: [{ op: 'set', path: ['bridges', 0, 'topics'], value: [...topics, { filter: 'plant/#/x', qos: 1 }] }],
    });
    expect(badFilter.status).toBe(422);
    expect(badFilter.body.problems).toEqual([
      expect.objectContaining({ path: 'bridges.0.topics.1.filter', message: expect.stringMatching(/topic filter/) }),
    ]);
    const moved = await engineer.post('config/apply', {
      etag,
      ops: [
        { op: 'set', path: ['bridges', 0, 'topics'], value: [{ filter: 'line4/#', qos: 1 }, ...topics] },
        { op: 'set', path: ['bridges', 0, 'replay'], value: { messagesPerS: 100 } },
      ],
    });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    expect(moved.body).toMatchObject({ reload: { ok: true, needsRestart: [] } });
    expect(parse(readFileSync(gw.configFile, 'utf8'))).toMatchObject({
      bridges: [{ topics: [{ filter: 'line4/#', qos: 1 }, ...topics], replay: { messagesPerS: 100 } }],
    });
  });
});
