/**
 * Issue 11's "done when", as a self-hoster meets it: `svc serve` on an empty data folder
 * prints the owner's generated password; the browser opens the server's root, is taken to
 * the console, logs in with what was printed, survives a reload, and logs out.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { startServe, tempDir } from '../cli/helpers.js';
import { assertAccessible, assertOneH1, ensureConsoleBuilt, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

test('first start: open the root address, log in with the printed password, reload, log out', { skip: skipOutsideCI }, async (t) => {
  const consoleDir = await ensureConsoleBuilt();
  const server = await startServe(t, join(tempDir(t), 'data'), ['--port', '0'], { env: { SVC_CONSOLE_DIR: consoleDir, SVC_ENGINE: 'false' } });
  const printed = /password\s+(\S+)\s+<- shown once/.exec(server.stdout());
  assert.ok(printed, `the generated password is printed:\n${server.stdout()}`);
  const email = /(\S+@svc\.local)/.exec(server.stdout())?.[1];
  assert.equal(email, 'admin@svc.local');

  const { context, page, problems } = await newContext(browser!, server.url);
  t.after(() => context.close());
  await page.goto('/');
  await page.waitForURL(/\/app\/$/);
  await assertOneH1(page, 'Log in');
  await assertAccessible(page, 'login page');
  await logIn(page, email, printed[1]!);
  await assertOneH1(page, 'Contacts');
  // The super-admin sees every part of the console, Admin included.
  const nav = page.getByRole('navigation', { name: 'Main' });
  for (const name of ['Contacts', 'Templates', 'Automations', 'Workflows', 'Runs', 'Deliveries', 'Settings', 'Admin'])
    assert.equal(await nav.getByRole('link', { name, exact: true }).count(), 1, `${name} in the navigation`);
  await screenshot(page, 'first-run-contacts');

  // The access token lives in memory only; a reload signs in again through the refresh cookie.
  assert.deepEqual(await page.evaluate(() => [localStorage.length, sessionStorage.length]), [0, 0]);
  await page.reload();
  await assertOneH1(page, 'Contacts');
  await page.getByRole('button', { name: 'Log out' }).click();
  await assertOneH1(page, 'Log in');
  await page.reload();
  await assertOneH1(page, 'Log in');
  assert.deepEqual(problems, []);
  const stopped = await server.stop();
  assert.equal(stopped.code, 0, server.stderr());
});
