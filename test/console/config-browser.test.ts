/**
 * The Configuration view in a real browser (Debian's chromium, headless, playwright-core) against the gateway
 * process: an engineer browses the node-opcua fixture and adds three variables, which then appear in the DBIRTH
 * upstream with their units; test-reads pymodbus registers and picks a CDAB float; imports a CSV of 200 tags with
 * two bad rows (both named), then a good one; undoes; a viewer and an operator see it read-only. Screenshots go to
 * test/artifacts/console/ (docs/console.md's `config-*` are copied to docs/img/).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { startOpcuaFixture } from '../fixtures/opcua-fixture.js';
import { useDisposer } from '../helpers/disposer.js';
import { float32Words, modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { sparkplugSection, sparkplugUplink, startSparkplugHost } from '../helpers/sparkplug-host.js';
import { tagDatatypes } from '../../connectors/opcua/schema.js';
import { logIn, openBrowser, optionsOf, screenshot, waitForText } from './browser.js';
import { PASSWORDS, startConsoleGateway } from './console-setup.js';

const d = useDisposer();

describe('Configuration view in chromium', { timeout: 180_000 }, () => {
  it('browses OPC UA into tags, test-reads Modbus into a tag, imports a CSV, undoes, and is read-only for others', async () => {
    const server = d.add(await startOpcuaFixture({ dir: d.tempDir('edgeferry-opcua-page-') }));
    const sim = d.add(await startModbusSim({ units: [1] }));
    const [hi, lo] = float32Words(21.5);
    await sim.set(1, 'hr', 10, [lo, hi]); // a float32 in CDAB
    const central = d.add(await startMosquitto());
    const host = d.add(await startSparkplugHost(central.url, 'plant'));
    const press = modbusPress(sim, [{ name: 'count', table: 'holding', address: 0, datatype: 'uint16' }]);
    const oven = {
      id: 'oven',
      type: 'opcua',
      endpoint: server.endpoint,
      tags: [{ name: 'counter', nodeId: 'ns=1;s=Fixture.Changing.Counter', datatype: 'UInt32' }],
    };
    const { gw, base } = d.add(
      await startConsoleGateway({
        sparkplug: sparkplugSection('plant', 'line4', { uplink: 'central' }),
        bridges: [sparkplugUplink(central.url, { group: 'plant', node: 'line4' })],
        connectors: [press, oven],
      }),
    );
    writeFileSync(gw.configFile, `# line 4\n${stringify(JSON.parse(readFileSync(gw.configFile, 'utf8')))}`);
    await host.waitFor((h) => h.isDeviceOnline('line4', 'oven'), 30_000, 'oven born');
    const browser = d.add(await openBrowser());

    // Viewer and operator: the file, read-only, no way to change it.
    for (const user of ['shift', 'maint'] as const) {
      const page = await logIn(browser, base, user, PASSWORDS[user]);
      await page.click('a[href="#configuration"]');
      await page.waitForSelector('[data-testid=read-only]');
      expect(
        await page
          .locator(
            '[data-testid=undo], [data-testid=apply], [data-testid=test-read], [data-testid=browse], ' +
              '[data-testid=add-tag], [data-testid^=edit-tag-], [data-testid=make-profile]',
          )
          .count(),
      ).toBe(0);
      if (user === 'shift') await screenshot(page, 'config-read-only');
      await page.close();
    }

    const page = await logIn(browser, base, 'eng', PASSWORDS.eng);
    await page.click('a[href="#configuration"]');
    await page.click('[data-testid=device-oven]');
    // The tag form's choices are the OPC UA schema's, not the Modbus ones.
    await page.click('[data-testid=add-tag]');
    expect(await optionsOf(page, '[data-testid=tag-form] select[name=datatype]')).toEqual(tagDatatypes);
    await page.click('[data-testid=tag-form] button:text("Close")');
    // Browse: Objects → Fixture → Analog, pick three variables.
    await page.click('[data-testid=browse] a:text("Fixture/")');
    await page.click('[data-testid=browse] a:text("Analog/")');
    for (const name of ['Pressure', 'Temperature', 'Flow']) await page.check(`[data-testid=pick-${name}]`);
    await waitForText(
      page,
      '[data-testid=browse-table]',
      (t) => t.includes('bar') && t.includes('120.5'),
      10_000,
      'values and units shown',
    );
    await screenshot(page, 'config-browse');
    await page.click('[data-testid=add-picked]');
    await waitForText(
      page,
      '[data-testid=diff]',
      (t) => t.includes('Pressure') && t.includes('m³/h'),
      10_000,
      'the diff of three tags',
    );
    await screenshot(page, 'config-diff');
    await page.click('[data-testid=apply]');
    await waitForText(page, '[data-testid=config-message]', (t) => t.startsWith('applied'), 15_000, 'applied');
    const birth = await host.waitFor(
      (h) => h.births('DBIRTH', 'oven').find((m) => m.payload.metrics.some((x) => x.name === 'Flow')),
      30_000,
      'a DBIRTH of oven with the three new tags',
    );
    const unitOf = (name: string) => birth.payload.metrics.find((x) => x.name === name)?.properties.engUnit;
    expect([unitOf('Pressure'), unitOf('Temperature'), unitOf('Flow')]).toEqual(['bar', '°C', 'm³/h']);

    // Modbus: read the registers, pick the CDAB float at 10.
    await page.click('[data-testid=device-press-1]');
    await page.fill('[data-testid=test-read] input[name=address]', '8');
    await page.fill('[data-testid=test-read] input[name=count]', '6');
    await page.fill('[data-testid=test-read] input[name=tag-name]', 'temperature');
    await page.click('[data-testid=test-read] button[type=submit]');
    await waitForText(page, '[data-testid=pick-10-float32-CDAB]', (t) => t === '21.5', 10_000, 'CDAB float shown');
    await screenshot(page, 'config-test-read');
    await page.click('[data-testid=pick-10-float32-CDAB]');
    await waitForText(
      page,
      '[data-testid=diff]',
      (t) => t.includes('byteOrder: CDAB'),
      10_000,
      'the diff of the picked tag',
    );
    await page.click('[data-testid=apply]');
    await waitForText(page, '[data-testid=config-message]', (t) => t.startsWith('applied'), 15_000, 'applied');
    await host.waitFor((h) => h.value('line4', 'press-1', 'temperature') === 21.5, 20_000, 'temperature 21.5 upstream');

    // CSV: 200 tags, two bad rows named; then the good file.
    const rows = Array.from({ length: 200 }, (_, i) => `r${i},holding,${i},uint16`);
    rows[9] = 'r9,holding,nine,uint16';
    rows[99] = 'r99,holding,99,float128';
    await page.fill('[data-testid=csv-import] textarea', `name,table,address,datatype\n${rows.join('\n')}\n`);
    await page.click('[data-testid=csv-preview]');
    const problems = await waitForText(
      page,
      '[data-testid=config-problems]',
      (t) => t.includes('line 101'),
      10_000,
      'both bad rows named',
    );
    expect(problems).toContain('line 11');
    expect(await page.textContent('[data-testid=config-message]')).toBe('2 bad rows: nothing was applied');
    await screenshot(page, 'config-csv-refused');
    rows[9] = 'r9,holding,9,uint16';
    rows[99] = 'r99,holding,99,uint16';
    await page.fill('[data-testid=csv-import] textarea', `name,table,address,datatype\n${rows.join('\n')}\n`);
    await page.click('[data-testid=csv-preview]');
    await page.waitForSelector('[data-testid=diff]');
    await page.click('[data-testid=apply]');
    await waitForText(page, '[data-testid=tag-table]', (t) => t.includes('r199'), 15_000, '200 tags listed');
    expect(await page.locator('[data-testid=tag-table] tbody tr').count()).toBe(200);

    // A device's own setting, refused beside its field; the file is not touched.
    await page.click('[data-testid=device-settings] summary');
    await page.fill('[data-testid=device-settings] input[name=port]', '70000');
    await page.click('[data-testid=device-settings] button[type=submit]');
    await waitForText(
      page,
      '[data-testid=problem-port]',
      (t) => t.includes('65535'),
      10_000,
      'the port refused beside it',
    );
    await screenshot(page, 'config-field-error');

    // Undo: the import goes, the tags before it are back.
    await page.click('[data-testid=undo]');
    await waitForText(
      page,
      '[data-testid=tag-table]',
      (t) => t.includes('temperature') && !t.includes('r199'),
      15_000,
      'undone',
    );
    expect(readFileSync(gw.configFile, 'utf8')).toContain('name: temperature');
    expect(host.violations).toEqual([]);
  });
});
