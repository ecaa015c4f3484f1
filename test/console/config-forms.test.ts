/**
 * The Configuration view's forms in a real browser (Debian's chromium, headless, playwright-core) against the
 * gateway process, a pymodbus simulator and a Sparkplug host behind a real Mosquitto (docs/console.md#configuration):
 * a device that takes its tags from a profile shows them, the profile is edited (a tag added: only its devices get
 * DDEATH and DBIRTH upstream), copied and removed; a tag is edited in place (a duplicate name refused beside its
 * field, then renamed with a new address and type: its value upstream); a bridge's `remote.urls` edited as a list
 * (a bad entry named, entries removed and moved); a device's own tags made a profile it uses. Screenshots go to test/artifacts/console/.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { useDisposer } from '../helpers/disposer.js';
import { float32Words, modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { BYTE_ORDERS, MODBUS_DATATYPES, MODBUS_TABLES } from '../../connectors/modbus/schema.js';
import { jsonSchema } from '../../src/config/json-schema.js';
import { freePort } from '../helpers/ports.js';
import { sparkplugSection, sparkplugUplink, startSparkplugHost } from '../helpers/sparkplug-host.js';
import { logIn, openBrowser, optionsOf, screenshot, waitForText } from './browser.js';
import { PASSWORDS, startConsoleGateway } from './console-setup.js';

const d = useDisposer();

interface SchemaDoc {
  properties: {
    bridges: {
      items: { properties: { topics: { items: { properties: Record<'direction' | 'qos', { enum: unknown[] }> } } } };
    };
  };
}

describe('Configuration forms in chromium', { timeout: 180_000 }, () => {
  it('edits a profile (only its devices rebirth), a tag in place, and a list of URLs', async () => {
    const sim = d.add(await startModbusSim({ units: [1, 2, 3] }));
    for (const [unit, value] of [
      [1, 21.5],
      [2, 22.5],
      [3, 23.5],
    ]) {
      const [hi, lo] = float32Words(value);
      await sim.set(unit, 'hr', 10, [lo, hi]); // a float32 in CDAB
    }
    const central = d.add(await startMosquitto());
    const host = d.add(await startSparkplugHost(central.url, 'plant'));
    const count = { name: 'count', table: 'holding', address: 0, datatype: 'uint16' };
    // The profile: press-1's settings (the simulator's address, poll interval, timeout) but its id.
    const pressSettings = Object.fromEntries(Object.entries(modbusPress(sim, [count])).filter(([k]) => k !== 'id'));
    const deadPort = await freePort();
    const { gw, base } = d.add(
      await startConsoleGateway({
        sparkplug: sparkplugSection('plant', 'line4', { uplink: 'central' }),
        bridges: [
          sparkplugUplink(central.url, { group: 'plant', node: 'line4' }),
          {
            name: 'archive',
            remote: { urls: [`mqtt://127.0.0.1:${deadPort}`] },
            topics: [{ filter: 'archive/#', direction: 'out' }],
          },
        ],
        profiles: { press: pressSettings },
        connectors: [
          modbusPress(sim, [count, { name: 'level', table: 'holding', address: 1, datatype: 'uint16' }]),
          { id: 'press-2', type: 'modbus', profile: 'press', unitId: 2 },
          { id: 'press-3', type: 'modbus', profile: 'press', unitId: 3 },
        ],
      }),
    );
    writeFileSync(gw.configFile, `# line 4\n${stringify(JSON.parse(readFileSync(gw.configFile, 'utf8')))}`);
    await host.waitFor(
      (h) => ['press-1', 'press-2', 'press-3'].every((id) => h.isDeviceOnline('line4', id)),
      30_000,
      'the three presses born',
    );
    const browser = d.add(await openBrowser());
    const page = await logIn(browser, base, 'eng', PASSWORDS.eng);
    await page.click('a[href="#configuration"]');

    // A device of the profile: the profile's tags, read-only, and the way to the profile.
    await page.click('[data-testid=device-press-2]');
    await waitForText(page, '[data-testid=device-profile]', (t) => t.includes('profile press'), 10_000, 'press-2');
    expect(await page.textContent('[data-testid=tag-table] tbody')).toContain('count');
    await screenshot(page, 'config-profile-device');
    expect(await page.locator('[data-testid=tag-table] [data-testid^=edit-tag-]').count()).toBe(0);
    await page.click('[data-testid=open-profile]');

    // The profile's form: a bad setting refused beside its field.
    await page.fill('[data-testid=profile-settings] input[name=pollIntervalMs]', '5');
    await page.click('[data-testid=profile-settings] button[type=submit]');
    await waitForText(page, '[data-testid=problem-pollIntervalMs]', (t) => t.includes('10'), 10_000, 'refused');
    await screenshot(page, 'config-profile');
    expect(await page.textContent('[data-testid=profile-users]')).toMatch(/press-2.*press-3/);

    // A tag added to the profile: press-2 and press-3 get DDEATH and a DBIRTH with it, press-1 nothing.
    await page.click('[data-testid=add-tag]');
    const form = '[data-testid=tag-form]';
    // The fixed-choice keys are dropdowns of exactly the Modbus schema's choices.
    for (const [key, choices] of [
      ['table', MODBUS_TABLES],
      ['datatype', MODBUS_DATATYPES],
      ['byteOrder', BYTE_ORDERS],
    ] as const)
      expect(await optionsOf(page, `${form} select[name=${key}]`)).toEqual(choices);
    for (const [key, value] of [
      ['name', 'temperature'],
      ['address', '10'],
      ['engUnit', '°C'],
    ])
      await page.fill(`${form} input[name=${key}]`, value);
    await page.selectOption(`${form} select[name=table]`, 'holding');
    await page.selectOption(`${form} select[name=datatype]`, 'float32');
    await page.selectOption(`${form} select[name=byteOrder]`, 'CDAB');
    await page.click(`${form} button[type=submit]`);
    await waitForText(page, '[data-testid=diff]', (t) => t.includes('name: temperature'), 10_000, 'the diff');
    await page.click('[data-testid=apply]');
    await waitForText(page, '[data-testid=config-message]', (t) => t.startsWith('applied'), 15_000, 'applied');
    for (const [id, value] of [
      ['press-2', 22.5],
      ['press-3', 23.5],
    ] as const)
      await host.waitFor((h) => h.value('line4', id, 'temperature') === value, 20_000, `${id}'s temperature`);
    expect(host.of('DDEATH', 'press-2')).toHaveLength(1);
    expect(host.of('DDEATH', 'press-3')).toHaveLength(1);
    // A later value of press-1 arrives: by then any rebirth of it would have come first.
    await sim.set(1, 'hr', 0, [77]);
    await host.waitFor((h) => h.value('line4', 'press-1', 'count') === 77, 10_000, 'press-1 still publishing');
    expect(host.of('DDEATH', 'press-1')).toHaveLength(0);
    expect(host.births('DBIRTH', 'press-1')).toHaveLength(1);

    // Copied, then the copy removed.
    await page.click('[data-testid=profile-settings] button:text("Copy profile")');
    await page.click('[data-testid=apply]');
    await page.click('[data-testid=profile-press-copy]');
    await waitForText(page, '[data-testid=tag-table]', (t) => t.includes('temperature'), 10_000, "the copy's tags");
    await page.click('[data-testid=profile-settings] button:text("Remove profile")');
    await page.click('[data-testid=apply]');
    await waitForText(page, '[data-testid=config-message]', (t) => t.includes('remove profile'), 15_000, 'removed');
    expect(await page.locator('[data-testid=profile-press-copy]').count()).toBe(0);
    expect(Object.keys(parse(readFileSync(gw.configFile, 'utf8')).profiles as object)).toEqual(['press']);

    // A tag edited in place: a duplicate name refused beside the field; renamed, moved and retyped.
    await page.click('[data-testid=device-press-1]');
    // A device's fixed choices too: its transport is one of the Modbus schema's two.
    expect(await optionsOf(page, '[data-testid=device-settings] select[name=transport]')).toEqual(['tcp', 'rtu']);
    await page.click('[data-testid=edit-tag-level]');
    expect(await page.inputValue(`${form} input[name=address]`)).toBe('1');
    await page.fill(`${form} input[name=name]`, 'count');
    await page.click(`${form} button[type=submit]`);
    await waitForText(page, `${form} [data-testid=problem-name]`, (t) => t.includes('already'), 10_000, 'refused');
    await screenshot(page, 'config-tag-edit');
    await page.fill(`${form} input[name=name]`, 'temperature');
    await page.fill(`${form} input[name=address]`, '10');
    await page.selectOption(`${form} select[name=datatype]`, 'float32');
    await page.selectOption(`${form} select[name=byteOrder]`, 'CDAB');
    await page.click(`${form} button[type=submit]`);
    await waitForText(page, '[data-testid=diff]', (t) => t.includes('address: 10'), 10_000, 'the diff');
    await page.click('[data-testid=apply]');
    const birth = await host.waitFor(
      (h) => h.births('DBIRTH', 'press-1').find((m) => m.payload.metrics.some((x) => x.name === 'temperature')),
      20_000,
      'a DBIRTH of press-1 with the edited tag',
    );
    expect(birth.payload.metrics.some((x) => x.name === 'level')).toBe(false);
    await host.waitFor((h) => h.value('line4', 'press-1', 'temperature') === 21.5, 10_000, 'temperature 21.5');
    await waitForText(page, '[data-testid=tag-table]', (t) => t.includes('float32'), 10_000, 'the table updated');

    // A list: a bad entry named by its key path, then entries removed and moved.
    const bridge = '[data-testid=bridge-settings-archive]';
    await page.click(`${bridge} summary`);
    await page.click(`${bridge} [data-testid="add-remote.urls"]`);
    await page.fill(`${bridge} input[name="remote.urls.1"]`, 'http://central');
    await page.click(`${bridge} [data-testid="add-remote.urls"]`);
    await page.fill(`${bridge} input[name="remote.urls.2"]`, central.url);
    await page.click(`${bridge} button[type=submit]`);
    const named = await waitForText(
      page,
      `${bridge} [data-testid="problem-remote.urls.1"]`,
      (t) => t !== '',
      10_000,
      'named',
    );
    expect(named).toMatch(/^bridges\.1\.remote\.urls\.1: .*mqtt:\/\//);
    expect(await page.locator(`${bridge} [data-testid="problem-remote.urls.0"]`).count()).toBe(0);
    await screenshot(page, 'config-list');
    const urls = `${bridge} [data-testid="list-remote.urls"]`;
    await page.click(`${urls} li:nth-child(2) button[title="Remove this entry"]`);
    await page.click(`${urls} li:nth-child(2) button[title="Move up"]`);
    await page.click(`${bridge} button[type=submit]`);
    await page.click('[data-testid=apply]');
    await waitForText(page, '[data-testid=config-message]', (t) => t.startsWith('applied'), 15_000, 'applied');
    const bridges = parse(readFileSync(gw.configFile, 'utf8')).bridges as { remote: { urls: string[] } }[];
    expect(bridges[1].remote.urls).toEqual([central.url, `mqtt://127.0.0.1:${deadPort}`]);

    // The Sparkplug uplink's topics: a new entry with a bad filter is named beside it, then fixed (its direction a
    // dropdown of the schema's choices), with a nested setting (replay) in the same save.
    const uplink = '[data-testid=bridge-settings-central]';
    await page.click(`${uplink} summary`);
    const topics = `${uplink} [data-testid=list-topics]`;
    expect(await page.locator(`${topics} > ol > li`).count()).toBe(5); // four entries and "Add entry"
    await page.click(`${uplink} [data-testid=add-topics]`);
    const topicSchema = (JSON.parse(jsonSchema()) as SchemaDoc).properties.bridges.items.properties.topics.items;
    expect(await optionsOf(page, `${uplink} select[name="topics.4.direction"]`)).toEqual(
      topicSchema.properties.direction.enum,
    );
    expect(await optionsOf(page, `${uplink} select[name="topics.4.qos"]`)).toEqual(
      topicSchema.properties.qos.enum.map(String),
    );
    await page.fill(`${uplink} input[name="topics.4.filter"]`, 'line4/local/#/x');
    await page.click(`${uplink} button[type=submit]`);
    const badFilter = await waitForText(
      page,
      `${uplink} [data-testid="problem-topics.4"]`,
      (t) => t !== '',
      10_000,
      'bad',
    );
    expect(badFilter).toMatch(/^bridges\.0\.topics\.4\.filter: not a valid MQTT topic filter/);
    expect(await page.locator(`${uplink} [data-testid="problem-topics.3"]`).count()).toBe(0);
    await page.fill(`${uplink} input[name="topics.4.filter"]`, 'spBv1.0/plant/NCMD/line9');
    await page.selectOption(`${uplink} select[name="topics.4.direction"]`, 'in');
    // Nested groups are collapsed until opened.
    expect(await page.getAttribute(`${uplink} [data-testid=group-replay]`, 'open')).toBeNull();
    await page.click(`${uplink} [data-testid=group-replay] > summary`);
    await page.fill(`${uplink} input[name="replay.messagesPerS"]`, '500');
    await page.click(`${uplink} [data-testid=group-reconnect] > summary`);
    await page.click(`${uplink} button[type=submit]`);
    await waitForText(page, '[data-testid=diff]', (t) => t.includes('line9'), 10_000, 'the diff');
    await page.click('[data-testid=apply]');
    // The uplink carries the Sparkplug session: its change waits for a restart, and the page says so.
    const restart = await waitForText(page, '[data-testid=config-message]', (t) => t.includes('central'), 15_000, 'ok');
    expect(restart).toMatch(/^applied: change bridge central; a restart is needed for bridges \(central/);
    const uplinkSaved = parse(readFileSync(gw.configFile, 'utf8')).bridges[0] as {
      topics: { filter: string }[];
      replay: unknown;
    };
    expect(uplinkSaved.topics.map((t) => t.filter)).toEqual([
      'spBv1.0/#',
      'spBv1.0/plant/NCMD/line4',
      'spBv1.0/plant/DCMD/line4/#',
      'spBv1.0/STATE/+',
      'spBv1.0/plant/NCMD/line9',
    ]);
    expect(uplinkSaved.replay).toEqual({ messagesPerS: 500 });

    // A topic added to the archive bridge (its urls now start with the central broker), given a QoS and a remote
    // prefix and moved first: a message published on the gateway arrives upstream under the prefix.
    await page.click(`${bridge} [data-testid=add-topics]`);
    await page.fill(`${bridge} input[name="topics.1.filter"]`, 'line4/local/#');
    await page.selectOption(`${bridge} select[name="topics.1.qos"]`, '1');
    await page.fill(`${bridge} input[name="topics.1.remotePrefix"]`, 'site/');
    await page.click(`${bridge} [data-testid=list-topics] li:nth-child(2) button[title="Move up"]`);
    await page.$eval(`${bridge} [data-testid=list-topics]`, (list) => list.scrollIntoView({ block: 'center' }));
    await screenshot(page, 'config-bridge');
    await page.click(`${bridge} button[type=submit]`);
    await waitForText(page, '[data-testid=diff]', (t) => t.includes('line4/local/#'), 10_000, 'the diff');
    await page.click('[data-testid=apply]');
    await waitForText(
      page,
      '[data-testid=config-message]',
      (t) => t.startsWith('applied: change bridge archive'),
      15_000,
      'ok',
    );
    const archive = parse(readFileSync(gw.configFile, 'utf8')).bridges[1] as { topics: unknown[] };
    expect(archive.topics).toEqual([
      { filter: 'line4/local/#', qos: 1, remotePrefix: 'site/' },
      { filter: 'archive/#', direction: 'out' },
    ]);
    const upstream = d.add(await openClient(central.url));
    await upstream.subscribe('site/line4/local/#', { qos: 1 });
    const local = d.add(await openClient(gw.url));
    await local.publish('line4/local/oven', '180', { qos: 1 });
    const [got] = await upstream.waitForMessages(1, { topic: 'site/line4/local/oven', timeoutMs: 15_000 });
    expect(got.payload).toBe('180');
    expect(got.qos).toBe(1);

    // A new profile made of press-1's own tags, which press-1 then uses.
    await page.fill('[data-testid=make-profile] input[name=profile-name]', 'big-press');
    await page.click('[data-testid=make-profile] button[type=submit]');
    await page.click('[data-testid=apply]');
    await waitForText(page, '[data-testid=device-profile]', (t) => t.includes('big-press'), 15_000, 'made');
    expect(await page.locator('[data-testid=tag-table] [data-testid^=edit-tag-]').count()).toBe(0);
    const made = parse(readFileSync(gw.configFile, 'utf8')) as {
      profiles: Record<string, { tags: { name: string }[] }>;
      connectors: Record<string, unknown>[];
    };
    expect(made.profiles['big-press'].tags.map((t) => t.name)).toEqual(['count', 'temperature']);
    expect(made.connectors[0]).toMatchObject({ id: 'press-1', profile: 'big-press' });
    expect(made.connectors[0].tags).toBeUndefined();
    await host.waitFor(
      (h) => h.births('DBIRTH', 'press-1').length === 3 && h.value('line4', 'press-1', 'temperature') === 21.5,
      20_000,
      'press-1 born again from its profile',
    );
    expect(host.violations).toEqual([]);
  });
});
