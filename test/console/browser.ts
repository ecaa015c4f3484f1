/**
 * Debian's chromium (apt `chromium`, /usr/bin/chromium) driven headless by playwright-core, for the console's
 * browser tests. Screenshots go to test/artifacts/console/ (gitignored; docs/console.md's two are copied to docs/img/).
 */
import { mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type Page } from 'playwright-core';
import { waitFor } from '../helpers/wait.js';

export const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const ARTIFACTS = resolve(fileURLToPath(new URL('../artifacts/console', import.meta.url)));

export async function openBrowser(): Promise<Browser & { dispose(): Promise<void> }> {
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true });
  return Object.assign(browser, { dispose: () => browser.close() });
}

/** A page at the 1366x768 of a panel PC (dark, as the system asks), logged in through the form as `user`. */
export async function logIn(
  browser: Browser,
  base: string,
  user: string,
  password: string,
  viewport = { width: 1366, height: 768 },
): Promise<Page> {
  const page = await browser.newPage({ viewport, colorScheme: 'dark' });
  await page.goto(`${base}/`);
  await page.fill('input[name=user]', user);
  await page.fill('input[name=password]', password);
  await page.click('button[type=submit]');
  await page.waitForSelector('[data-testid=whoami]');
  return page;
}

/** Waits until the text of `selector` satisfies `ok`; returns it. */
export async function waitForText(
  page: Page,
  selector: string,
  ok: (text: string) => boolean,
  timeoutMs: number,
  message: string,
): Promise<string> {
  return waitFor(
    async () => {
      const text = (await page.locator(selector).first().textContent({ timeout: 1000 })) ?? '';
      return ok(text) ? text : undefined;
    },
    timeoutMs,
    { message, intervalMs: 100 },
  );
}

export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(ARTIFACTS, { recursive: true });
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: false });
  return path;
}

/** A dropdown's choices (its first option, "not set" or the default, left out). */
export const optionsOf = (page: Page, select: string): Promise<string[]> =>
  page.$$eval(`${select} option`, (options) => options.slice(1).map((o) => (o as { value: string }).value));
