/**
 * Settings (issue 11, items 9 and 10) as a user clicks them: an API key is shown once and
 * can be revoked; a member is invited, accepts from the /invite page in a second browser
 * context (signed in at once), and is listed; roles change and members are removed.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { consoleServer } from './server.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

test('create an API key: the raw key is shown once, works, and is revoked after a confirmation', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/settings');
  await logIn(page, s.owner.email, s.owner.password);
  await page.waitForURL('**/app/settings/api-keys');
  await assertOneH1(page, 'Settings');
  await page.getByRole('heading', { name: 'API keys', level: 2 }).waitFor();

  // A 422 for a missing name is shown at the Name field.
  await page.getByRole('button', { name: 'Create API key' }).click();
  await page
    .locator('.field-invalid')
    .filter({ has: page.getByLabel('Name') })
    .locator('.field-error')
    .waitFor();

  await page.getByLabel('Name').fill('CRM sync');
  await page.getByLabel('Role').selectOption('MEMBER');
  await page.getByRole('button', { name: 'Create API key' }).click();
  const field = page.getByLabel('New API key');
  await field.waitFor();
  const key = await field.inputValue();
  assert.match(key, /^svc_live_[A-Za-z0-9_-]{20,}$/);
  assert.ok(await page.getByText('it will not be shown again').isVisible(), 'a warning goes with the key');
  assert.ok(await page.getByRole('button', { name: 'Copy' }).isVisible());
  await assertAccessible(page, 'API keys with a new key');
  await screenshot(page, 'settings-api-keys');

  const withKey = await s.request('GET', '/contacts', { token: key });
  assert.equal(withKey.status, 200, 'the shown key works');
  const row = page.getByRole('row').filter({ hasText: 'CRM sync' });
  await row.waitFor();
  assert.ok(!(await row.textContent())!.includes(key), 'the list shows no raw key');

  // Shown once: Done removes it, and a reload does not bring it back.
  await page.getByRole('button', { name: 'Done' }).click();
  assert.equal(await page.getByLabel('New API key').count(), 0);
  await page.reload();
  await row.waitFor();
  assert.equal(await page.getByLabel('New API key').count(), 0);
  assert.equal(await page.getByText(key).count(), 0);

  await row.getByRole('button', { name: 'Revoke CRM sync' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Revoke' }).click();
  await row.getByText('revoked').waitFor();
  const after = await s.request('GET', '/contacts', { token: key });
  assert.equal(after.status, 401, 'the revoked key no longer works');
  const listed = await s.request('GET', '/api-keys', { token });
  assert.ok(listed.body.data[0].revokedAt);
  assert.deepEqual(problems, []);
});

test('invite a member; they accept in another browser, are signed in, and are listed; role change and removal', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const admin = await newContext(browser!, s.url);
  t.after(() => admin.context.close());
  const { page } = admin;
  await page.goto('/app/settings/members');
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByRole('heading', { name: 'Members', level: 2 }).waitFor();

  const inviteForm = page.getByRole('form', { name: 'Invite a member' });
  await inviteForm.getByLabel('Email').fill('new.person@example.com');
  await inviteForm.getByLabel('Role').selectOption('MEMBER');
  await inviteForm.getByRole('button', { name: 'Invite' }).click();
  const linkField = page.getByLabel('Invitation link');
  await linkField.waitFor();
  const link = await linkField.inputValue();
  assert.match(link, new RegExp(`^${s.url.replace(/[.]/g, '\\.')}/invite#.+`));
  await page.getByRole('row').filter({ hasText: 'new.person@example.com' }).waitFor();
  await assertAccessible(page, 'members with a pending invitation');
  await screenshot(page, 'settings-members');

  // The invitee, in a browser of their own.
  const invitee = await newContext(browser!, s.url);
  t.after(() => invitee.context.close());
  await invitee.page.goto(link);
  await assertOneH1(invitee.page, 'Accept invitation');
  await invitee.page.getByText('new.person@example.com').waitFor();
  assert.equal(new URL(invitee.page.url()).hash, '', 'the token is taken out of the address bar');
  await assertAccessible(invitee.page, 'invitation page');
  await screenshot(invitee.page, 'invite');
  await invitee.page.getByLabel('Name').fill('New Person');
  await invitee.page.getByLabel('Password').fill('short');
  await invitee.page.getByRole('button', { name: 'Accept invitation' }).click();
  await invitee.page
    .locator('.field-invalid')
    .filter({ has: invitee.page.getByLabel('Password') })
    .locator('.field-error')
    .waitFor();
  await invitee.page.getByLabel('Password').fill('a-good-long-password');
  await invitee.page.getByRole('button', { name: 'Accept invitation' }).click();
  await invitee.page.waitForURL('**/app/contacts');
  await invitee.page.getByRole('navigation', { name: 'Main' }).waitFor();
  await invitee.page.getByText('new.person@example.com').waitFor();
  assert.equal(await invitee.page.getByRole('link', { name: 'New contact' }).count(), 1, 'a MEMBER may add contacts');
  assert.deepEqual(invitee.problems, []);

  // The admin sees the new member; changes the role; removes them.
  await page.reload();
  const row = page.getByRole('row').filter({ hasText: 'new.person@example.com' });
  await row.getByRole('cell', { name: 'New Person' }).waitFor();
  await row.getByLabel('Role of new.person@example.com').selectOption('VIEWER');
  await assertEventually(async () => {
    const list = await s.request('GET', '/memberships', { token });
    return list.body.data.find((m: { email: string }) => m.email === 'new.person@example.com')?.role === 'VIEWER';
  });
  await row.getByRole('button', { name: 'Remove new.person@example.com' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Remove' }).click();
  await row.waitFor({ state: 'detached' });
  const list = await s.request('GET', '/memberships', { token });
  assert.equal(
    list.body.data.some((m: { email: string }) => m.email === 'new.person@example.com'),
    false,
  );
  assert.deepEqual(admin.problems, []);

  // Invited again, now with an account: its own password accepts (a wrong one is refused at
  // the field), and signs them in.
  const again = await s.request('POST', '/memberships/invitations', { token, body: { email: 'new.person@example.com', role: 'VIEWER' } });
  const returning = await newContext(browser!, s.url);
  t.after(() => returning.context.close());
  await returning.page.goto(`/invite#${encodeURIComponent(again.body.token)}`);
  await returning.page.getByText('You already have an account').waitFor();
  assert.equal(await returning.page.getByLabel('Name').count(), 0, 'no name is asked of an account');
  await returning.page.getByLabel('Password').fill('not-the-password');
  await returning.page.getByRole('button', { name: 'Accept invitation' }).click();
  await returning.page
    .getByRole('alert')
    .filter({ hasText: /password/i })
    .waitFor();
  await returning.page.getByLabel('Password').fill('a-good-long-password');
  await returning.page.getByRole('button', { name: 'Accept invitation' }).click();
  await returning.page.waitForURL('**/app/contacts');
  await returning.page.getByRole('navigation', { name: 'Main' }).waitFor();
});

async function assertEventually(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) assert.fail('the change did not happen');
    await new Promise((r) => setTimeout(r, 100));
  }
}
