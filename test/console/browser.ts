/**
 * What the console's browser tests share: the console built once per test file (from the
 * current sources), one headless Chromium per test file, page checks (accessibility, CSP), and
 * screenshots in a folder the tests print.
 */
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after } from 'node:test';
import AxeBuilder from '@axe-core/playwright';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { buildConsole } from '../../src/console/build.mjs';
import { readConsoleFiles, setConsoleSource } from '../../src/server/console.js';
import { skipOutsideCI } from '../ci.js';

let building: Promise<string> | undefined;

/**
 * Builds the console from the current sources, once per test process, into a folder of
 * its own (not dist/console, which other builds may be replacing meanwhile), and makes
 * every app the tests start serve it. Resolves to that folder. Call it at the top level of
 * a test file (the folder is removed after the file's tests).
 */
export function ensureConsoleBuilt(): Promise<string> {
  building ??= (async () => {
    const dir = mkdtempSync(join(tmpdir(), 'svc-console-build-'));
    after(() => rmSync(dir, { recursive: true, force: true }));
    await buildConsole({ outdir: dir, clean: false, quiet: true });
    setConsoleSource(readConsoleFiles(dir));
    return dir;
  })();
  return building;
}

const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--headless',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

function chromiumPath(): string | undefined {
  if (process.env.CHROMIUM_PATH) return process.env.CHROMIUM_PATH;
  for (const path of ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome']) if (existsSync(path)) return path;
  return undefined;
}

export const NO_BROWSER = 'no Chromium found: install it with `apt-get install -y chromium` (or set CHROMIUM_PATH) to run the console tests';

/**
 * One browser for the test file, closed after it; `skipOutsideCI` says why there is none.
 * Under CI=true a browser that cannot start fails the run instead (skipOutsideCI throws).
 */
export async function startBrowser(): Promise<{ browser: Browser; skipOutsideCI: false } | { browser: undefined; skipOutsideCI: string }> {
  await ensureConsoleBuilt();
  const executablePath = chromiumPath();
  try {
    if (!executablePath) throw new Error(NO_BROWSER);
    // A fresh profile folder per browser (Playwright makes and removes one). Launched as a
    // server so that a browser that will not close can be killed, not left holding the file.
    const server = await chromium.launchServer({ executablePath, args: CHROMIUM_ARGS, timeout: 60_000 });
    const browser = await chromium.connect(server.wsEndpoint(), { timeout: 60_000 });
    after(async () => {
      const closed = Promise.all([browser.close(), server.close()]).then(() => true);
      const timedOut = new Promise<false>((resolve) => setTimeout(() => resolve(false), 15_000).unref());
      if (!(await Promise.race([closed, timedOut]))) await server.kill();
    });
    return { browser, skipOutsideCI: false };
  } catch (err) {
    const why = executablePath ? `Chromium did not start (${(err as Error).message.split('\n')[0]}); ${NO_BROWSER}` : NO_BROWSER;
    return { browser: undefined, skipOutsideCI: skipOutsideCI(`the console tests need a browser: ${why}`) };
  }
}

/** A new context (its own cookies) whose pages fail the test on a CSP violation or a page error. */
export async function newContext(browser: Browser, baseURL: string): Promise<{ context: BrowserContext; page: Page; problems: string[] }> {
  const context = await browser.newContext({ baseURL, viewport: { width: 1280, height: 800 } });
  context.setDefaultTimeout(30_000);
  const problems: string[] = [];
  context.on('page', (p) => watch(p, problems));
  const page = await context.newPage();
  return { context, page, problems };
}

function watch(page: Page, problems: string[]): void {
  page.on('console', (msg) => {
    if (msg.type() === 'error' && /Content Security Policy|Refused to/i.test(msg.text())) problems.push(`CSP: ${msg.text()}`);
  });
  page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
}

export const SCREENSHOTS = join(tmpdir(), 'svc-console-screenshots');
let announced = false;

/** Saves a full-page screenshot as <name>.png in SCREENSHOTS (printed once). */
export async function screenshot(page: Page, name: string): Promise<string> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  if (!announced) {
    announced = true;
    console.log(`console screenshots: ${SCREENSHOTS}`);
  }
  const path = join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/** No serious or critical accessibility violation on the page as it is now (axe-core, WCAG 2.1 A/AA). */
export async function assertAccessible(page: Page, what: string): Promise<void> {
  const result = await new AxeBuilder({ page }).withTags(['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'best-practice']).analyze();
  const bad = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(
    bad.map(
      (v) =>
        `${v.impact} ${v.id}: ${v.help} — ${v.nodes
          .map((n) => n.target.join(' '))
          .slice(0, 3)
          .join(', ')}`,
    ),
    [],
    `${what}: accessibility violations`,
  );
}

/** Exactly one h1 on the page, with this name. */
export async function assertOneH1(page: Page, name: string | RegExp): Promise<void> {
  // Wait for the heading named so (a page may still show the one before it), then count.
  await page
    .getByRole('heading', { level: 1, name, ...(typeof name === 'string' ? { exact: true } : {}) })
    .first()
    .waitFor();
  const h1 = page.locator('h1');
  assert.equal(await h1.count(), 1, 'one h1 on the page');
  const text = (await h1.textContent())?.trim() ?? '';
  if (typeof name === 'string') assert.equal(text, name);
  else assert.match(text, name);
}

/** Signs in through the login page. */
export async function logIn(page: Page, email: string, password: string): Promise<void> {
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('navigation', { name: 'Main' }).waitFor();
}
