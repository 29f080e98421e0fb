/**
 * Signing in to the console (issue 11, item 2) in a real Chromium against a real server:
 * log in, a reload keeps the session (refresh cookie, no token in storage), log out, and
 * the messages for a wrong password, too many attempts and an unreachable server.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { consoleServer } from './server.js';
import { addMembership, addWorkspace } from './seed.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

test('log in, reload without losing the session, switch workspace, log out', { skip: skipOutsideCI }, async (t) => {
  const { s } = await consoleServer(t);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());

  await page.goto('/');
  assert.equal(new URL(page.url()).pathname, '/app/');
  await assertOneH1(page, 'Log in');
  await assertAccessible(page, 'login page');
  await screenshot(page, 'login');

  await logIn(page, s.owner.email, s.owner.password);
  await page.waitForURL('**/app/contacts');
  await assertOneH1(page, 'Contacts');
  // The token is in memory only.
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }));
  assert.equal(stored, '{}{}');
  const cookies = await context.cookies();
  const refresh = cookies.find((c) => c.name === 'svc_refresh');
  assert.ok(refresh?.httpOnly, 'the refresh cookie is HttpOnly');
  assert.equal(await page.evaluate(() => document.cookie), '', 'no cookie readable by script');

  await page.reload();
  await assertOneH1(page, 'Contacts');
  await page.getByRole('navigation', { name: 'Main' }).waitFor();
  assert.ok(await page.getByText(s.owner.email).isVisible());

  // A second workspace of the same user appears in the switcher.
  const other = await addWorkspace(s, 'Second shop');
  await addMembership(s, other, s.owner.id, 'VIEWER');
  await page.reload();
  const switcher = page.getByLabel('Workspace');
  await switcher.selectOption({ label: 'Second shop (viewer)' });
  await page.getByText('viewer', { exact: true }).waitFor();
  await page.getByRole('link', { name: 'Contacts' }).click();
  assert.equal(await page.getByRole('link', { name: 'New contact' }).count(), 0, 'a viewer gets no New contact');
  await page.reload();
  assert.equal(await switcher.inputValue(), String(other), 'the switch survives a reload');

  await page.getByRole('button', { name: 'Log out' }).click();
  await assertOneH1(page, 'Log in');
  await page.reload();
  await assertOneH1(page, 'Log in');
  assert.deepEqual(problems, []);
});

test('a workspace switched in another tab: this tab writes nothing into it, and shows it', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const other = await addWorkspace(s, 'Second shop');
  await addMembership(s, other, s.owner.id, 'ADMIN');
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts');
  await logIn(page, s.owner.email, s.owner.password);
  await assertOneH1(page, 'Contacts');
  // The switcher is readable (the header's light text on the field's white was not).
  await assertAccessible(page, 'the header with a workspace switcher');
  const second = await context.newPage();
  await second.goto('/app/contacts/new');
  await assertOneH1(second, 'New contact');

  await page.getByLabel('Workspace').selectOption({ label: 'Second shop (admin)' });
  await page.getByText('admin', { exact: true }).waitFor();
  await second.getByLabel('Email').fill('wrong-place@example.com');
  await second.getByRole('button', { name: 'Save' }).click();
  await second.getByRole('alert').filter({ hasText: 'Another tab switched to another workspace, so nothing was done here.' }).waitFor();
  await second.getByLabel('Workspace').waitFor();
  // The alert comes with the renewed token; the switcher follows once /auth/me is read again.
  const shown = () => second.getByLabel('Workspace').inputValue();
  for (let i = 0; i < 100 && (await shown()) !== String(other); i++) await second.waitForTimeout(100);
  assert.equal(await shown(), String(other), 'the tab now shows the workspace it is in');
  const anywhere = await s.request('GET', '/contacts?email=wrong-place@example.com', { token });
  assert.deepEqual(anywhere.body.data, [], 'nothing in the first workspace');
  const inOther = await s.request('GET', '/contacts?email=wrong-place@example.com', { token: await s.mintKey('VIEWER', other) });
  assert.deepEqual(inOther.body.data, [], 'nor in the second');
  assert.deepEqual(
    problems.filter((p) => !/401/.test(p)),
    [],
  );
});

test('wrong password, too many attempts (with the wait) and an unreachable server are told apart', { skip: skipOutsideCI }, async (t) => {
  const { s } = await consoleServer(t, { env: { SVC_LOGIN_RATE_LIMIT: '2' } });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/');
  await page.getByLabel('Email').fill(s.owner.email);
  await page.getByLabel('Password').fill('not the password');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('alert').filter({ hasText: 'The email or password is not right.' }).waitFor();
  await screenshot(page, 'login-error');
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('alert').filter({ hasText: 'The email or password is not right.' }).waitFor();
  await page.getByRole('button', { name: 'Log in' }).click();
  const limited = page.getByRole('alert').filter({ hasText: /Too many attempts\. Try again in \d+ minutes?\./ });
  await limited.waitFor();

  await context.setOffline(true);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('alert').filter({ hasText: 'The server could not be reached' }).waitFor();
  await context.setOffline(false);
  assert.deepEqual(problems, []);
});
