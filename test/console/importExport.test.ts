/**
 * Importing and exporting contacts in the console (issue 9) as a user clicks it: a CSV file
 * chosen in the page is imported in the background and followed to its end, its refused rows
 * listed; a gzip NDJSON file, a file whose name does not say its format, a header that can
 * import nothing; then the list, filtered, exported as CSV and saved by the browser.
 */
import assert from 'node:assert/strict';
import { text } from 'node:stream/consumers';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { consoleServer } from './server.js';
import type { Download } from 'playwright-core';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

/** What the browser saved (read through Playwright: the browser may run apart from the test). */
async function saved(download: Download): Promise<string> {
  return text(await download.createReadStream());
}

test('import a CSV, a gzip NDJSON and a file named without its format; refused rows are listed; the filtered list exports as CSV', {
  skip: skipOutsideCI,
}, async (t) => {
  // Every import runs in the background (202), so the page follows the job by polling it.
  const { s, token } = await consoleServer(t, { env: { SVC_IMPORT_SYNC_BYTES: '0' } });
  await s.request('POST', '/contacts', { token, body: { email: 'old@example.com', firstName: 'Old', tags: ['vip'] } });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts');
  await logIn(page, s.owner.email, s.owner.password);

  await page.getByRole('link', { name: 'Import' }).click();
  await assertOneH1(page, 'Import contacts');
  await page.getByText('No imports yet.').waitFor();
  await assertAccessible(page, 'import page');

  // Nothing chosen: said at the field, nothing sent.
  await page.getByRole('button', { name: 'Import' }).click();
  await page.getByText('Choose a file to import.').waitFor();
  assert.equal(await page.getByLabel('File', { exact: true }).getAttribute('aria-invalid'), 'true');

  const csv = 'email,firstName,tags,plan\r\nann@example.com,Ann,vip;beta,gold\r\nold@example.com,Oldie,,\r\nbad-email,Bad,,\r\n';
  await page.getByLabel('File', { exact: true }).setInputFiles({ name: 'people.csv', mimeType: 'text/csv', buffer: Buffer.from(csv) });
  await page.getByText('people.csv: 104 bytes, CSV').waitFor();
  await page.getByRole('button', { name: 'Import' }).click();
  const finished = page.getByRole('status').filter({ hasText: 'Import finished: 1 created, 1 updated, 0 skipped, 1 error (4 lines).' });
  await finished.waitFor();
  assert.match(page.url(), /\/app\/contacts\/import\?job=\d+$/);
  const refused = page.getByRole('table', { name: 'Rows not imported' });
  assert.deepEqual(await refused.locator('tbody tr').first().locator('td').allTextContents(), [
    '4',
    'email',
    await refused.locator('tbody td').nth(2).textContent(),
  ]);
  assert.match((await refused.locator('tbody td').nth(2).textContent()) ?? '', /email/i);
  await assertAccessible(page, 'a finished import with a refused row');
  await screenshot(page, 'contacts-import');
  const ann = (await s.request('GET', '/contacts?email=ann@example.com', { token })).body.data[0];
  assert.equal(ann.firstName, 'Ann');
  assert.deepEqual([...ann.tags].sort(), ['beta', 'vip']);
  assert.deepEqual(ann.attributes, { plan: 'gold' });
  assert.equal((await s.request('GET', '/contacts?email=old@example.com', { token })).body.data[0].firstName, 'Oldie');

  // A gzip-compressed NDJSON file, imported with "only create new ones": the known contact is skipped.
  const ndjson = `${JSON.stringify({ email: 'zed@example.com', tags: ['vip'] })}\n${JSON.stringify({ email: 'ann@example.com', firstName: 'Changed' })}\n`;
  await page.getByLabel('File', { exact: true }).setInputFiles({ name: 'more.ndjson.gz', mimeType: 'application/gzip', buffer: gzipSync(ndjson) });
  await page.getByLabel('Existing contacts').selectOption('create');
  await page.getByRole('button', { name: 'Import' }).click();
  await page.getByRole('status').filter({ hasText: 'Import finished: 1 created, 0 updated, 1 skipped, 0 errors (2 lines).' }).waitFor();
  assert.equal((await s.request('GET', '/contacts?email=ann@example.com', { token })).body.data[0].firstName, 'Ann');

  // A name that does not say the format: asked for, then imported as the format chosen.
  await page
    .getByLabel('File', { exact: true })
    .setInputFiles({ name: 'list.txt', mimeType: 'text/plain', buffer: Buffer.from('email\r\ntxt@example.com\r\n') });
  await page.getByRole('button', { name: 'Import' }).click();
  await page.getByText(/does not say its format/).waitFor();
  await page.getByLabel('Format').selectOption('csv');
  await page.getByRole('button', { name: 'Import' }).click();
  await page.getByRole('status').filter({ hasText: 'Import finished: 1 created' }).waitFor();

  // A header that can import nothing: the job fails, saying why.
  await page
    .getByLabel('File', { exact: true })
    .setInputFiles({ name: 'no-email.csv', mimeType: 'text/csv', buffer: Buffer.from('Mail,First Name\r\nmc@example.com,M\r\n') });
  await page.getByRole('button', { name: 'Import' }).click();
  await page
    .getByRole('alert')
    .filter({ hasText: /The import stopped: The CSV header has no email or phone column/ })
    .waitFor();
  await screenshot(page, 'contacts-import-failed');

  // The recent imports, newest first, each a link to its result.
  const recent = page.getByRole('table', { name: 'Recent imports' });
  await recent.locator('tbody tr').nth(3).waitFor();
  assert.equal(await recent.locator('tbody tr').count(), 4);
  assert.match((await recent.locator('tbody tr').first().textContent()) ?? '', /failed/);
  await recent.locator('tbody tr').last().getByRole('link').click();
  await finished.waitFor();

  // Export: the list filtered by a tag, saved by the browser as CSV.
  await page.getByRole('link', { name: 'Back to contacts' }).click();
  await assertOneH1(page, 'Contacts');
  await page.getByRole('row', { name: /zed@example\.com/ }).waitFor();
  await page.getByLabel('Tag').selectOption('beta');
  await page.getByRole('row', { name: /ann@example\.com/ }).waitFor();
  const [filtered] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export these as CSV' }).click()]);
  assert.match(filtered.suggestedFilename(), /^contacts-\d{4}-\d{2}-\d{2}\.csv$/);
  const rows = (await saved(filtered)).trim().split(/\r?\n/);
  assert.match(rows[0]!, /^id,email,phone,firstName,lastName,tags,attributes/);
  assert.equal(rows.length, 2, rows.join('\n'));
  assert.match(rows[1]!, /ann@example\.com,,Ann,,"?beta;vip"?,/);

  // The whole list, unfiltered.
  await page.getByLabel('Tag').selectOption('');
  const [all] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()]);
  assert.equal((await saved(all)).trim().split(/\r?\n/).length, 1 + 4);
  assert.deepEqual(problems, []);
});

test('a VIEWER may export but is not offered the import', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  await s.request('POST', '/contacts', { token, body: { email: 'seen@example.com' } });
  const viewer = await s.userWithRole('VIEWER');
  const { context, page } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts');
  await logIn(page, viewer.email, viewer.password);
  await page.getByRole('row', { name: /seen@example\.com/ }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'Import' }).count(), 0);
  const [exported] = await Promise.all([page.waitForEvent('download'), page.getByRole('button', { name: 'Export CSV' }).click()]);
  assert.match(await saved(exported), /seen@example\.com/);
});

test('a file on a slow link: the page shows how much of it has been sent while the server imports it, then the result', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/contacts/import');
  await logIn(page, s.owner.email, s.owner.password);
  const n = 40_000;
  const rows = ['email,firstName'];
  for (let i = 0; i < n; i++) rows.push(`many${i}@example.com,Many ${i}`);
  const buffer = Buffer.from(rows.join('\n'));
  // About 1.3 MB sent at 512 KB/s (Chromium's network emulation): a few seconds of upload.
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: 512 * 1024 });
  await page.getByLabel('File', { exact: true }).setInputFiles({ name: 'many.csv', mimeType: 'text/csv', buffer });
  await page.getByRole('button', { name: 'Import' }).click();
  await page.getByRole('progressbar', { name: 'Upload progress' }).waitFor();
  assert.match((await page.getByRole('status').filter({ hasText: 'Sending the file' }).textContent()) ?? '', /of 1\.\d MB; its rows are imported/);
  assert.equal(await page.getByRole('button', { name: 'Uploading…' }).isDisabled(), true);
  await page
    .getByRole('status')
    .filter({ hasText: `Import finished: ${n.toLocaleString('en-US')} created` })
    .waitFor({ timeout: 60_000 });
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.usage.contacts, n);
  assert.deepEqual(problems, []);
});
