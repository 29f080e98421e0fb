/**
 * The Contacts page (issue 11, item 4) as a user clicks it: create, edit (fields and tags),
 * a 409 and a 422 shown at their field, search and tag filter, paging, delete with
 * confirmation.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { eq } from 'drizzle-orm';
import { contacts } from '../../src/core/db/schema.js';
import { consoleServer } from './server.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

test('create and edit a contact; a 409 and a 422 are shown at their field; delete asks first', { skip: skipOutsideCI }, async (t) => {
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
  // As with the tag filter below: the unfiltered rows may still show until the search answers.
  await page.getByRole('link', { name: 'Taken' }).waitFor({ state: 'detached' });
  await page.getByRole('link', { name: 'Ann Lee-Smith' }).waitFor();
  await rows.first().waitFor();
  assert.equal(await rows.count(), 1);
  await page.getByRole('searchbox', { name: 'Search' }).fill('');
  await page.waitForURL((u) => !u.search.includes('q='));
  await page.getByLabel('Tag').selectOption('customer');
  await page.waitForURL(/tag=customer/);
  await page.getByRole('link', { name: 'Taken' }).waitFor({ state: 'detached' });
  // Taken leaves while the filtered page loads (the table is replaced by "Loading…"): wait for the rows.
  await page.getByRole('link', { name: 'Ann Lee-Smith' }).waitFor();
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

test('the list pages by cursor with Load more', { skip: skipOutsideCI }, async (t) => {
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

test('a search matching few contacts far down a long list: the page goes on by itself through short pages until it finds them', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s, token } = await consoleServer(t);
  // 25,000 contacts; the two that match `zq` are the oldest, past two of GET /contacts's
  // bounded parts (LIST_SCAN_ROWS), so the first answers are empty pages with a next cursor.
  const rows = [
    { email: 'zq-first@example.com' },
    { email: 'zq-second@example.com' },
    ...Array.from({ length: 24_998 }, (_, i) => ({ email: `c${i}@example.com` })),
  ];
  const imported = await s.request('POST', '/contacts/import', {
    token,
    raw: rows.map((r) => JSON.stringify(r)).join('\n'),
    headers: { 'content-type': 'application/x-ndjson' },
  });
  assert.ok(imported.status === 200 || imported.status === 202, imported.text);
  for (let i = 0; i < 200 && (await s.request('GET', '/billing/plan', { token })).body.usage.contacts < 25_000; i++)
    await new Promise((r) => setTimeout(r, 100));
  const first = await s.request('GET', '/contacts?q=zq', { token });
  assert.deepEqual([first.body.data.length, typeof first.body.nextCursor], [0, 'string'], 'the API answers an empty page that goes on');
  const { context, page } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts?q=zq');
  await logIn(page, s.owner.email, s.owner.password);
  const table = page.locator('tbody tr');
  await table.nth(1).waitFor();
  assert.deepEqual(await table.locator('td:nth-child(2)').allTextContents(), ['zq-second@example.com', 'zq-first@example.com']);
  assert.equal(await page.getByRole('button', { name: 'Load more' }).count(), 0);
});

/** The inputs of the attributes editor, row by row: [name, value]. */
async function attributeRows(page: import('playwright-core').Page): Promise<[string, string][]> {
  const count = await page.getByLabel(/^Name of attribute \d+$/).count();
  const rows: [string, string][] = [];
  for (let n = 1; n <= count; n++)
    rows.push([await page.getByLabel(`Name of attribute ${n}`).inputValue(), await page.getByLabel(`Value of attribute ${n}`).inputValue()]);
  return rows;
}

test('attributes: typed values keep their JSON type; edit, remove, add; a duplicate name and a 422 at their field', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts/new');
  await logIn(page, s.owner.email, s.owner.password);
  await assertOneH1(page, 'New contact');

  await page.getByLabel('Email').fill('attr@example.com');
  const attributes = page.getByRole('group', { name: 'Attributes' });
  const fillRow = async (n: number, name: string, value: string) => {
    await attributes.getByRole('button', { name: 'Add attribute' }).click();
    await page.getByLabel(`Name of attribute ${n}`).fill(name);
    await page.getByLabel(`Value of attribute ${n}`).fill(value);
  };
  await fillRow(1, 'plan', 'gold');
  await fillRow(2, 'seats', '12');
  await fillRow(3, 'trial', 'true');
  await fillRow(4, 'code', '"42"');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  await page.waitForURL(/\/app\/contacts\/\d+$/);
  const id = Number(page.url().split('/').pop());
  const created = await s.request('GET', `/contacts/${id}`, { token });
  assert.deepEqual(created.body.attributes, { plan: 'gold', seats: 12, trial: true, code: '42' }, 'a number and a boolean as JSON, quoted text as text');
  // Shown back so that each reads as itself: the string "42" in quotes, the number bare.
  assert.deepEqual(await attributeRows(page), [
    ['plan', 'gold'],
    ['seats', '12'],
    ['trial', 'true'],
    ['code', '"42"'],
  ]);
  await assertAccessible(page, 'contact with attributes');
  await screenshot(page, 'contact-attributes');

  // Edit one (seats), remove one (trial), add one (region).
  await page.getByLabel('Value of attribute 2').fill('15');
  await page.getByRole('button', { name: 'Remove attribute 3' }).click();
  assert.equal(await page.getByLabel('Name of attribute 3').inputValue(), 'code', 'the rows after it move up');
  await fillRow(4, 'region', 'eu');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const edited = await s.request('GET', `/contacts/${id}`, { token });
  assert.deepEqual(edited.body.attributes, { plan: 'gold', seats: 15, code: '42', region: 'eu' }, 'the removed attribute is gone');

  await page.reload();
  await page.getByLabel('Name of attribute 4').waitFor();
  assert.deepEqual(await attributeRows(page), [
    ['plan', 'gold'],
    ['seats', '15'],
    ['code', '"42"'],
    ['region', 'eu'],
  ]);
  const wide = page.viewportSize()!;
  await page.setViewportSize({ width: 390, height: 900 });
  await screenshot(page, 'contact-attributes-narrow');
  await page.setViewportSize(wide);

  // A duplicate name and an empty one are refused in the browser, at their field; nothing is sent.
  await fillRow(5, 'plan', 'silver');
  await attributes.getByRole('button', { name: 'Add attribute' }).click();
  // The new row's name has the focus as soon as the click is handled, not a frame later,
  // when it would take the focus from the field typed into next (the value, here).
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), 'Name of attribute 6');
  await page.getByLabel('Value of attribute 6').fill('orphan');
  assert.equal(await page.getByLabel('Name of attribute 6').inputValue(), '', 'the value went where it was typed');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('alert').filter({ hasText: 'Check the fields marked below.' }).waitFor();
  const duplicate = page.getByLabel('Name of attribute 5');
  // Both marks come with one render; wait for it rather than read the row before it.
  await page.getByLabel('Name of attribute 6').and(page.locator('[aria-invalid="true"]')).waitFor();
  assert.equal(await duplicate.getAttribute('aria-invalid'), 'true');
  assert.match(await page.locator(`#${await duplicate.getAttribute('aria-describedby')}`).innerText(), /already named “plan”/);
  const empty = page.getByLabel('Name of attribute 6');
  assert.equal(await empty.getAttribute('aria-invalid'), 'true');
  assert.match(await page.locator(`#${await empty.getAttribute('aria-describedby')}`).innerText(), /Enter a name/);
  assert.equal(await page.getByLabel('Name of attribute 1').getAttribute('aria-invalid'), null, 'the first "plan" is fine');
  assert.equal((await s.request('GET', `/contacts/${id}`, { token })).body.updatedAt, edited.body.updatedAt, 'nothing was sent');
  await assertAccessible(page, 'attributes with a duplicate name');
  await screenshot(page, 'contact-attributes-duplicate');
  await page.getByRole('button', { name: 'Remove attribute 6' }).click();
  await page.getByRole('button', { name: 'Remove attribute 5' }).click();

  // The API's limit (64 KiB of JSON in all): its 422 (pointer /attributes) is shown at the attributes.
  await fillRow(5, 'notes', 'x'.repeat(70_000));
  await page.getByRole('button', { name: 'Save' }).click();
  const groupError = attributes.locator('.field-error');
  await groupError.waitFor();
  assert.match(await groupError.innerText(), /^Must be at most 65536 bytes of JSON/);
  assert.match((await attributes.getAttribute('aria-describedby')) ?? '', /attributes-error/);
  assert.deepEqual((await s.request('GET', `/contacts/${id}`, { token })).body.attributes, edited.body.attributes);
  await assertAccessible(page, 'attributes with an API error');
  await screenshot(page, 'contact-attributes-422');
  assert.deepEqual(
    problems.filter((p) => !/422/.test(p)),
    [],
  );
});

test('attributes seeded by the API and the store (nested, null, quoted) are shown faithfully and survive an unrelated edit; a VIEWER reads them', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s, token } = await consoleServer(t);
  const seeded = {
    profile: { address: { city: 'Lyon', zip: '69001' }, scores: [1, 2.5, null] },
    note: '007',
    flag: false,
    nothing: null,
    label: 'true',
    'a/b~c': 'slash',
  };
  const res = await s.request('POST', '/contacts', { token, body: { email: 'nested@example.com', firstName: 'Nes', attributes: seeded } });
  assert.equal(res.status, 201);
  const id = res.body.id as number;
  // A new contact takes no top-level null (as PATCH removes one); a contact written before
  // that rule may hold one, and the console shows and keeps it.
  assert.equal('nothing' in res.body.attributes, false);
  await s.store.transaction(async (tx) => {
    await tx.update(contacts).set({ attributes: seeded }).where(eq(contacts.id, id));
  });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto(`/app/contacts/${id}`);
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByLabel('Name of attribute 6').waitFor();
  assert.deepEqual(await attributeRows(page), [
    ['profile', '{"address":{"city":"Lyon","zip":"69001"},"scores":[1,2.5,null]}'],
    ['note', '007'],
    ['flag', 'false'],
    ['nothing', 'null'],
    ['label', '"true"'],
    ['a/b~c', 'slash'],
  ]);

  // An unrelated edit (the first name) leaves every attribute as it was, null included.
  await page.getByLabel('First name').fill('Nestor');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const after = await s.request('GET', `/contacts/${id}`, { token });
  assert.equal(after.body.firstName, 'Nestor');
  assert.deepEqual(after.body.attributes, seeded);

  // An edit cannot store null (PATCH takes it as "remove"): refused at the value, with the way out.
  await page.getByLabel('Value of attribute 3').fill('null');
  await page.getByRole('button', { name: 'Save' }).click();
  const flag = page.getByLabel('Value of attribute 3');
  await page.getByRole('alert').filter({ hasText: 'Check the fields marked below.' }).waitFor();
  assert.equal(await flag.getAttribute('aria-invalid'), 'true');
  assert.match(await page.locator(`#${(await flag.getAttribute('aria-describedby'))!.split(' ')[0]}`).innerText(), /Use Remove/);
  // Editing the nested object keeps its type.
  await flag.fill('true');
  await page.getByLabel('Value of attribute 1').fill('{"address":{"city":"Paris"}}');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  assert.deepEqual((await s.request('GET', `/contacts/${id}`, { token })).body.attributes, {
    ...seeded,
    profile: { address: { city: 'Paris' } },
    flag: true,
  });
  assert.deepEqual(problems, []);

  // A VIEWER reads them as a list: names and values, no inputs, no buttons.
  const viewer = await s.userWithRole('VIEWER');
  const v = await newContext(browser!, s.url);
  t.after(() => v.context.close());
  await v.page.goto(`/app/contacts/${id}`);
  await logIn(v.page, viewer.email, viewer.password);
  const section = v.page.getByRole('region', { name: 'Attributes' });
  await section.waitFor();
  const terms = await section.locator('dt').allInnerTexts();
  const values = await section.locator('dd').allInnerTexts();
  assert.deepEqual(terms, ['profile', 'note', 'flag', 'nothing', 'label', 'a/b~c']);
  assert.deepEqual(values, ['{"address":{"city":"Paris"}}', '007', 'true', 'null', 'true', 'slash']);
  assert.equal(await v.page.getByLabel(/ of attribute /).count(), 0, 'no attribute inputs');
  assert.equal(await v.page.getByRole('button', { name: /attribute/i }).count(), 0, 'no Add or Remove');
  await assertOneH1(v.page, 'Contact');
  await assertAccessible(v.page, 'contact as a viewer');
  await screenshot(v.page, 'contact-attributes-viewer');
  assert.deepEqual(v.problems, []);
});

test('an unrelated edit leaves tags holding a comma and an attribute with an empty name as they are; a VIEWER gets no create or import form', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s, token } = await consoleServer(t);
  const res = await s.request('POST', '/contacts', {
    token,
    body: { email: 'comma@example.com', firstName: 'Com', tags: ['vip, gold', 'plain'], attributes: { '': 'empty name', plan: 'pro' } },
  });
  assert.equal(res.status, 201, res.text);
  const id = res.body.id as number;
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto(`/app/contacts/${id}`);
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByLabel('Name of attribute 2').waitFor();
  await page.getByLabel('First name').fill('Comma');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const after = (await s.request('GET', `/contacts/${id}`, { token })).body;
  assert.equal(after.firstName, 'Comma');
  assert.deepEqual([...after.tags].sort(), ['plain', 'vip, gold']);
  assert.deepEqual(after.attributes, { '': 'empty name', plan: 'pro' });
  // Editing the tags field does change them.
  await page.getByLabel('Tags').fill('plain, new');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  assert.deepEqual([...(await s.request('GET', `/contacts/${id}`, { token })).body.tags].sort(), ['new', 'plain']);
  assert.deepEqual(problems, []);

  const viewer = await s.userWithRole('VIEWER');
  const v = await newContext(browser!, s.url);
  t.after(() => v.context.close());
  await v.page.goto('/app/contacts/new');
  await logIn(v.page, viewer.email, viewer.password);
  await v.page.getByText('Creating contacts needs the MEMBER role or above; you have VIEWER.').waitFor();
  assert.equal(await v.page.getByLabel('Email').count(), 0, 'no form');
  await v.page.goto('/app/contacts/import');
  await v.page.getByText('Importing contacts needs the MEMBER role or above; you have VIEWER.').waitFor();
  assert.equal(await v.page.getByRole('button', { name: 'Import' }).count(), 0);
  assert.deepEqual(v.problems, []);
});
