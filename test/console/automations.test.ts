/**
 * Automations in the console (issue 11, items 6 and 8): the graph drawn from the stored
 * one, Activate, Run on a contact, and the run's page with the path taken highlighted.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';
import { consoleServer } from './server.js';

const { browser, skipOutsideCI } = await startBrowser();

test('activate an automation, run it on a contact, and see the branch it took', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t, { engine: true });
  const ann = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com', firstName: 'Ann' } });
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' }, position: { x: 200, y: 0 } },
      { id: 'c', type: 'condition', data: { condition: 'contact.firstName == "Ann"' }, position: { x: 200, y: 120 } },
      { id: 'yes', type: 'add_tags', data: { tags: ['is-ann'] }, position: { x: 60, y: 260 } },
      { id: 'no', type: 'add_tags', data: { tags: ['not-ann'] }, position: { x: 340, y: 260 } },
    ],
    edges: [
      { from: 't', to: 'c' },
      { from: 'c', to: 'yes', branch: true },
      { from: 'c', to: 'no', branch: false },
    ],
  };
  const created = await s.request('POST', '/automations', { token, body: { name: 'Greet Ann', graph } });
  assert.equal(created.status, 201, created.text);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto(`/app/automations/${created.body.id}`);
  await logIn(page, s.owner.email, s.owner.password);
  await assertOneH1(page, 'Greet Ann');
  await page.locator('.react-flow__node').nth(3).waitFor();

  const run = page.getByRole('form', { name: 'Run on a contact' });
  await run.getByLabel('Contact').selectOption({ label: 'ann@example.com' });
  assert.equal(await run.getByRole('button', { name: 'Run on a contact' }).isDisabled(), true, 'a draft cannot run');
  await page.getByRole('button', { name: 'Activate' }).click();
  await page.getByRole('button', { name: 'Pause' }).waitFor();
  await run.getByRole('button', { name: 'Run on a contact' }).click();
  await run.getByRole('link', { name: /^run \d+$/ }).click();
  await page.getByText('completed').first().waitFor();
  const path = page.getByRole('region', { name: /^Path taken/ });
  await path.locator('.react-flow__node').nth(3).waitFor();
  assert.equal(await path.locator('.react-flow__node.node-taken').count(), 3);
  assert.deepEqual(await path.locator('.react-flow__node.node-skipped').evaluateAll((els) => els.map((e) => e.getAttribute('data-id'))), ['no']);
  await assertAccessible(page, 'automation run');
  await screenshot(page, 'automation-run');
  const contact = await s.request('GET', `/contacts/${ann.body.id}`, { token });
  assert.deepEqual(contact.body.tags, ['is-ann']);
  assert.deepEqual(problems, []);
});
