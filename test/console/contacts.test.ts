/**
 * The Contacts page (issue 11, item 4) as a user clicks it: create, edit (fields and tags),
 * a 409 and a 422 shown at their field, search and tag filter, paging, delete with
 * confirmation.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { consoleServer } from './server.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skip } = await startBrowser();

test('create and edit a contact; a 409 and a 422 are shown at their field; delete asks first', { skip }, async (t) => {
  const { s, token } = await consoleServer(t);
  await s.request('POST', '/contacts', { token, body: { email: 'taken@example.com', firstName: 'Taken' } });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts');
  await logIn(page, s.owner.email, s.owner.password);

  await page.getByRole('link', { name: 'New contact' }).click();
  await assertOneH1(page, 'New contact');
  const email = page.getByLabel('Email');
  await email.fill('ann@example.com');
  await page.getByLabel('Phone').fill('+14155550100');
  await page.getByLabel('First name').fill('Ann');
  await page.getByLabel('Last name').fill('Lee');
  await page.getByLabel('Tags').fill('vip, newsletter');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  await page.waitForURL(/\/app\/contacts\/\d+$/);
  const id = Number(page.url().split('/').pop());
  const created = await s.request('GET', `/contacts/${id}`, { token });
  assert.equal(created.body.email, 'ann@example.com');
  assert.equal(created.body.phone, '+14155550100');
  assert.deepEqual([...created.body.tags].sort(), ['newsletter', 'vip']);
  await assertOneH1(page, 'Contact');
  await assertAccessible(page, 'contact form');
  await screenshot(page, 'contact');

  // 409: another contact has this email; the message is at the Email field.
  await email.fill('taken@example.com');
  await page.getByRole('button', { name: 'Save' }).click();
  await assert.doesNotReject(
    page
      .locator('.field-invalid')
      .filter({ has: page.getByLabel('Email') })
      .getByText(/already has this email/)
      .waitFor(),
  );
  assert.equal(await email.getAttribute('aria-invalid'), 'true');
  await assertAccessible(page, 'contact form with a conflict');
  await screenshot(page, 'contact-409');

  // 422: an invalid phone; its pointer (/phone) puts the message at the Phone field.
  await email.fill('ann@example.com');
  await page.getByLabel('Phone').fill('not a phone');
  await page.getByRole('button', { name: 'Save' }).click();
  const phoneError = page
    .locator('.field-invalid')
    .filter({ has: page.getByLabel('Phone') })
    .locator('.field-error');
  await phoneError.waitFor();
  assert.equal(await page.getByLabel('Phone').getAttribute('aria-invalid'), 'true');
  assert.equal(await email.getAttribute('aria-invalid'), null, 'the email field is fine now');
  await screenshot(page, 'contact-422');

  // Edit: a field and the tags (one removed, one added).
  await page.getByLabel('Phone').fill('');
  await page.getByLabel('Last name').fill('Lee-Smith');
  await page.getByLabel('Tags').fill('vip, customer');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const edited = await s.request('GET', `/contacts/${id}`, { token });
  assert.equal(edited.body.lastName, 'Lee-Smith');
  assert.equal(edited.body.phone, null);
  assert.deepEqual([...edited.body.tags].sort(), ['customer', 'vip']);

  // Search (q) and the tag filter narrow the list.
  await page.getByRole('link', { name: /All contacts/ }).click();
  await assertOneH1(page, 'Contacts');
  const rows = page.locator('tbody tr');
  await rows.nth(1).waitFor();
  assert.equal(await rows.count(), 2);
  await page.getByRole('searchbox', { name: 'Search' }).fill('lee-smith');
  await page.waitForURL(/q=lee-smith/);
  await page.getByRole('link', { name: 'Ann Lee-Smith' }).waitFor();
  await rows.first().waitFor();
  assert.equal(await rows.count(), 1);
  await page.getByRole('searchbox', { name: 'Search' }).fill('');
  await page.waitForURL((u) => !u.search.includes('q='));
  await page.getByLabel('Tag').selectOption('customer');
  await page.waitForURL(/tag=customer/);
  await page.getByRole('link', { name: 'Taken' }).waitFor({ state: 'detached' });
  assert.equal(await rows.count(), 1);
  await assertAccessible(page, 'contacts list');
  await screenshot(page, 'contacts');

  // Delete asks first; Cancel keeps the contact.
  await page.getByRole('link', { name: 'Ann Lee-Smith' }).click();
  await page.getByRole('button', { name: 'Delete contact' }).click();
  const dialog = page.getByRole('dialog');
  await dialog.waitFor();
  await dialog.getByRole('button', { name: 'Cancel' }).click();
  assert.equal((await s.request('GET', `/contacts/${id}`, { token })).status, 200);
  await page.getByRole('button', { name: 'Delete contact' }).click();
  await dialog.getByRole('button', { name: 'Delete contact' }).click();
  await page.waitForURL('**/app/contacts');
  assert.equal((await s.request('GET', `/contacts/${id}`, { token })).status, 404);
  assert.deepEqual(problems, []);
});

test('the list pages by cursor with Load more', { skip }, async (t) => {
  const { s, token } = await consoleServer(t);
  for (let i = 0; i < 55; i++) await s.request('POST', '/contacts', { token, body: { email: `c${i}@example.com` } });
  const { context, page } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts');
  await logIn(page, s.owner.email, s.owner.password);
  const rows = page.locator('tbody tr');
  await rows.nth(49).waitFor();
  assert.equal(await rows.count(), 50);
  await page.getByRole('button', { name: 'Load more' }).click();
  await rows.nth(54).waitFor();
  assert.equal(await rows.count(), 55);
  assert.equal(await page.getByRole('button', { name: 'Load more' }).count(), 0);
});
