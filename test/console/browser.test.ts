/**
 * The web console in a real browser (Debian's chromium, headless, driven by playwright-core) against the gateway
 * process: log in through the form; a Modbus device (pymodbus) goes down and comes back; a bridge's backlog grows
 * while its Mosquitto is stopped and drains once it is back; a tag written from the page changes the register in
 * the simulator; dead letters are sent again from the bridge card; a viewer sees no action and cannot act. Screenshots of the main views: test/artifacts/console/.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { collect } from '../helpers/collector.js';
import { useDisposer } from '../helpers/disposer.js';
import { bridgePatch } from '../helpers/gateway.js';
import { modbusPress, startModbusSim } from '../helpers/modbus-sim.js';
import { startMosquitto } from '../helpers/mosquitto.js';
import { openClient } from '../helpers/mqtt-client.js';
import { waitFor } from '../helpers/wait.js';
import { logIn, openBrowser, screenshot, waitForText } from './browser.js';
import { loggedIn, PASSWORDS, startConsoleGateway } from './console-setup.js';

const d = useDisposer();

const SPARKPLUG = { groupId: 'plant', edgeNodeId: 'line4', deviceReconnect: { minDelayMs: 200, maxDelayMs: 400 } };

describe('web console in chromium', { timeout: 120_000 }, () => {
  it('shows a Modbus device going down (on the overview too, its values kept as stale) and coming back, and writes a tag the simulator then holds', async () => {
    const sim = d.add(await startModbusSim({ units: [1] }));
    await sim.set(1, 'hr', 0, [42, 100]);
    const press = modbusPress(sim, [
      { name: 'count', table: 'holding', address: 0, datatype: 'uint16' },
      { name: 'setpoint', table: 'holding', address: 1, datatype: 'uint16', writable: true },
    ]);
    const { gw, base } = d.add(await startConsoleGateway({ sparkplug: SPARKPLUG, connectors: [press] }));
    const browser = d.add(await openBrowser());
    const page = await logIn(browser, base, 'maint', PASSWORDS.maint);
    expect(await page.textContent('[data-testid=whoami]')).toBe('maint (operator)');
    await waitForText(page, '[data-testid=ready]', (t) => t === 'ready', 10_000, 'overview says ready');
    await waitForText(page, '[data-testid=devices-up]', (t) => t === '1 of 1', 10_000, 'overview counts the device up');
    await screenshot(page, 'overview');

    await page.click('a[href="#devices"]');
    const state = '[data-testid=device-press-1] [data-testid=device-state]';
    await waitForText(page, state, (t) => t === 'up', 15_000, 'press-1 up');
    await waitForText(page, '[data-testid=value-press-1-count]', (t) => t === '42', 5000, 'count 42 shown');
    await screenshot(page, 'devices');

    await sim.mute(1);
    await waitForText(page, state, (t) => t === 'down', 15_000, 'press-1 shown down once it stops answering');
    // Its last values stay, marked stale.
    await waitForText(page, '[data-testid=quality-press-1-count]', (t) => t === 'stale', 5000, 'count marked stale');
    expect(await page.textContent('[data-testid=value-press-1-count]')).toBe('42');
    await screenshot(page, 'devices-down');
    // On a phone, the tags table fits the width: nothing to scroll sideways.
    const phone = await logIn(browser, base, 'maint', PASSWORDS.maint, { width: 390, height: 844 });
    await phone.click('a[href="#devices"]');
    await waitForText(
      phone,
      '[data-testid=quality-press-1-count]',
      (t) => t === 'stale',
      5000,
      'count stale on the phone',
    );
    const overflow = await phone
      .locator('[data-testid=device-press-1] .scroll')
      .evaluate((el) => el.scrollWidth - el.clientWidth);
    expect(overflow).toBe(0);
    expect(await phone.evaluate<number>('document.documentElement.scrollWidth')).toBeLessThanOrEqual(390);
    await screenshot(phone, 'phone-devices-down');
    await phone.click('a[href="#overview"]');
    await waitForText(
      phone,
      '[data-testid=devices-down]',
      (t) => t.startsWith('press-1 does not answer'),
      5000,
      "press-1 down on the phone's overview",
    );
    await phone.waitForSelector('.chart canvas');
    await screenshot(phone, 'phone-overview-device-down');
    await phone.close();
    // The overview names the device that does not answer.
    await page.click('a[href="#overview"]');
    await waitForText(
      page,
      '[data-testid=devices-down]',
      (t) => t.startsWith('press-1 does not answer since'),
      5000,
      'press-1 down on the overview',
    );
    expect(await page.textContent('[data-testid=devices-up]')).toBe('0 of 1');
    await screenshot(page, 'overview-device-down');
    await page.click('a[href="#devices"]');
    await sim.unmute(1);
    await waitForText(page, state, (t) => t === 'up', 15_000, 'press-1 shown up again');

    await page.fill('[data-testid=write-press-1-setpoint]', '321');
    await page.click('[data-testid=device-press-1] form.write button');
    await waitForText(
      page,
      '[data-testid=write-press-1-setpoint-result]',
      (t) => t === 'read back 321',
      10_000,
      'the page shows the read-back',
    );
    expect(await sim.get(1, 'hr', 1, 1)).toEqual([321]);
    await waitForText(page, '[data-testid=value-press-1-setpoint]', (t) => t === '321', 5000, 'the live value follows');

    await page.click('a[href="#sparkplug"]');
    await waitForText(
      page,
      'main',
      (t) => t.includes('console spBv1.0/plant/DCMD/line4/press-1 from maint'),
      5000,
      'the last command names the console user',
    );
    await screenshot(page, 'sparkplug');
    await page.click('a[href="#log"]');
    await waitForText(
      page,
      '[data-testid=log-table]',
      (t) => t.includes('console write done') && t.includes('device lost'),
      5000,
      'the write and the loss in the log',
    );
    // Each line's details as fields to read, not JSON.
    const lost = page.locator('[data-testid=log-table] tr', { hasText: 'device lost' }).first();
    expect(await lost.locator('.field').allTextContents()).toEqual(
      expect.arrayContaining([expect.stringMatching(/^device press-1$/), expect.stringMatching(/^retryInMs \d+$/)]),
    );
    expect(await page.textContent('[data-testid=log-table]')).not.toMatch(/[{}"]/);
    await screenshot(page, 'log');
    await page.click('a[href="#devices"]');

    // The filter keeps the matching tags only.
    await page.fill('[data-testid=tag-filter]', 'setp');
    await waitFor(async () => (await page.locator('[data-testid=value-press-1-count]').count()) === 0, 5000, {
      message: 'count filtered out',
    });
    expect(await page.locator('[data-testid=value-press-1-setpoint]').count()).toBe(1);

    // A reload with a change that applies only after a restart says so, and names it.
    const config = JSON.parse(readFileSync(gw.configFile, 'utf8')) as { broker?: object };
    writeFileSync(gw.configFile, JSON.stringify({ ...config, broker: { ...config.broker, maxInflight: 7 } }));
    await page.click('a[href="#overview"]');
    page.once('dialog', (dialog) => void dialog.accept());
    await page.click('[data-testid=reload]');
    await waitForText(
      page,
      '[data-testid=reload-result]',
      (t) => t === 'done; a restart is needed for broker',
      10_000,
      'the reload names what needs a restart',
    );
    await waitForText(
      page,
      '[data-testid=needs-restart]',
      (t) => t.endsWith('except what needs a restart of edgeferry: broker'),
      5000,
      'and the last reload too',
    );
    await screenshot(page, 'overview-reload-restart');
  });

  it('shows a bridge backlog growing while Mosquitto is stopped, and draining once it is back', async () => {
    const central = d.add(await startMosquitto());
    const { gw, base } = d.add(await startConsoleGateway(bridgePatch(central.url)));
    const browser = d.add(await openBrowser());
    const page = await logIn(browser, base, 'maint', PASSWORDS.maint);
    await page.click('a[href="#bridges"]');
    const card = '[data-testid=bridge-central]';
    await waitForText(page, `${card} [data-testid=bridge-state]`, (t) => t === 'online', 10_000, 'bridge online');

    await central.stop();
    await waitForText(
      page,
      `${card} [data-testid=bridge-state]`,
      (t) => t !== 'online',
      10_000,
      'bridge no longer online',
    );
    const plc = d.add(await openClient(gw.url, { clientId: 'plc-sim' }));
    for (let i = 0; i < 300; i++) await plc.publish(`plant/line4/count`, String(i), { qos: 1 });
    await waitForText(page, `${card} [data-testid=backlog]`, (t) => t === '300', 10_000, 'backlog of 300 shown');
    expect(await page.textContent(card)).toMatch(/offline|connecting/);
    // For the screenshot: once the chart history has sampled the backlog, a reload draws it at once.
    const api = await loggedIn(base, 'maint');
    await waitFor(
      async () =>
        (await api.get<{ backlog: Partial<Record<string, number[]>> }>('history')).body.backlog.central?.includes(300),
      10_000,
      {
        message: 'history sampled the backlog',
      },
    );
    await page.reload();
    await page.waitForSelector(`${card} .chart canvas`);
    await waitForText(
      page,
      `${card} [data-testid=backlog]`,
      (t) => t === '300',
      5000,
      'backlog still 300 after the reload',
    );
    await screenshot(page, 'bridges-backlog');

    await central.restart();
    await waitForText(page, `${card} [data-testid=backlog]`, (t) => t === '0', 20_000, 'backlog drained');
    await waitForText(page, `${card} [data-testid=bridge-state]`, (t) => t === 'online', 5000, 'bridge online again');
    await screenshot(page, 'bridges-drained');

    // A phone, in the light theme: one column, still readable.
    const phone = await logIn(browser, base, 'maint', PASSWORDS.maint, { width: 390, height: 844 });
    await phone.click('header button[title=Theme]');
    // The page sets the theme in an effect after its render: wait for it rather than read it at once. A selector
    // wait, not waitForFunction: Playwright evaluates that predicate with eval(), which the console's CSP forbids.
    await phone.locator('html[data-theme="light"]').waitFor({ state: 'attached', timeout: 5000 });
    expect(await phone.evaluate<string>('document.documentElement.dataset.theme')).toBe('light');
    await phone.click('a[href="#bridges"]');
    await waitForText(
      phone,
      `${card} [data-testid=bridge-state]`,
      (t) => t === 'online',
      5000,
      'bridge card on the phone',
    );
    const width = await phone.evaluate<number>('document.documentElement.scrollWidth');
    expect(width).toBeLessThanOrEqual(390);
    await screenshot(phone, 'phone-bridges-light');
  });

  it("sends a bridge's dead letters again from its card once Mosquitto's ACL allows them; the buttons go with them", async () => {
    const aclFile = join(d.tempDir(), 'acl');
    writeFileSync(aclFile, 'topic readwrite plant/ok/#\n');
    const central = d.add(await startMosquitto({ extraConf: `acl_file ${aclFile}` }));
    const { gw, base } = d.add(await startConsoleGateway(bridgePatch(central.url)));
    const browser = d.add(await openBrowser());
    const page = await logIn(browser, base, 'maint', PASSWORDS.maint);
    await page.click('a[href="#bridges"]');
    const card = '[data-testid=bridge-central]';
    await waitForText(page, `${card} [data-testid=bridge-state]`, (t) => t === 'online', 10_000, 'bridge online');
    expect(await page.locator('[data-testid=requeue-central]').count()).toBe(0);

    const plc = d.add(await openClient(gw.url, { clientId: 'plc-sim' }));
    for (const payload of ['1', '2', '3']) await plc.publish('plant/held/count', payload, { qos: 1 });
    await waitForText(
      page,
      `${card} [data-testid=dead-letters]`,
      (t) => t === '3',
      15_000,
      'three dead letters on the card',
    );
    await screenshot(page, 'bridges-dead-letters');

    writeFileSync(aclFile, 'topic readwrite plant/#\n');
    await central.restart();
    const up = d.add(await collect(central.url, 'plant/#', { qos: 1 }));
    page.once('dialog', (dialog) => void dialog.accept());
    await page.click('[data-testid=requeue-central]');
    await waitForText(page, `${card} [data-testid=dead-letters]`, (t) => t === '0', 15_000, 'no dead letters left');
    await waitFor(() => up.payloads().length === 3, 15_000, {
      message: () => `upstream got [${up.payloads().join(', ')}]`,
    });
    expect(up.payloads()).toEqual(['1', '2', '3']);
    expect(await page.locator('[data-testid=requeue-central], [data-testid=delete-dead-central]').count()).toBe(0);
  });

  it('a viewer sees no action and cannot act, even by calling the API from the page', async () => {
    const { gw, base } = d.add(await startConsoleGateway());
    const hmi = d.add(await openClient(gw.url, { clientId: 'hmi-3', protocolVersion: 5 }));
    const browser = d.add(await openBrowser());
    const page = await logIn(browser, base, 'shift', PASSWORDS.shift);
    expect(await page.textContent('[data-testid=whoami]')).toBe('shift (viewer)');
    await waitForText(page, '[data-testid=ready]', (t) => t === 'ready', 10_000, 'overview shown');
    expect(await page.locator('[data-testid=reload]').count()).toBe(0);
    await page.click('a[href="#clients"]');
    await waitForText(page, '[data-testid=clients-table]', (t) => t.includes('hmi-3'), 5000, 'hmi-3 listed');
    expect(await page.locator('button:text("Disconnect")').count()).toBe(0);
    await screenshot(page, 'clients-viewer');

    // The page's own session, with its CSRF token: still a viewer.
    const status = await page.evaluate(async () => {
      const session = (await (await fetch('/api/session')).json()) as { csrf: string };
      const res = await fetch('/api/actions/disconnect-client', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-csrf-token': session.csrf },
        body: JSON.stringify({ clientId: 'hmi-3' }),
      });
      return res.status;
    });
    expect(status).toBe(403);
    expect(hmi.closed).toBe(false);
  });
});
