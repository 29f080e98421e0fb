/**
 * Every page of the console (issue 11, item 3): the main navigation, one h1 per page, no
 * serious accessibility violation, a screenshot each; the graph editor's code is loaded
 * only when a graph is shown; a VIEWER gets no write control anywhere.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { consoleServer, type ConsoleServer } from './server.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

const PAGES = [
  { link: 'Contacts', h1: 'Contacts', shot: 'contacts-list' },
  { link: 'Templates', h1: 'Templates', shot: 'templates' },
  { link: 'Automations', h1: 'Automations', shot: 'automations' },
  { link: 'Workflows', h1: 'Workflows', shot: 'workflows' },
  { link: 'Runs', h1: 'Runs', shot: 'runs' },
  { link: 'Deliveries', h1: 'Deliveries', shot: 'deliveries' },
  { link: 'Settings', h1: 'Settings', shot: 'settings' },
  { link: 'Admin', h1: 'Admin', shot: 'admin' },
];

/** Something on every page, through the API. */
async function seed(s: ConsoleServer, token: string): Promise<{ automationId: number }> {
  const ok = (res: { status: number; text: string }) => assert.ok(res.status < 300, res.text);
  for (const [email, firstName, tags] of [
    ['ann@example.com', 'Ann', ['vip']],
    ['bob@example.com', 'Bob', ['newsletter']],
    ['cy@example.com', 'Cy', []],
  ] as const)
    ok(await s.request('POST', '/contacts', { token, body: { email, firstName, tags: [...tags] } }));
  const welcome = await s.request('POST', '/templates', {
    token,
    body: { name: 'Welcome', channel: 'EMAIL', content: { subject: 'Hi {{ data.name }}', text: 'Welcome!' } },
  });
  ok(welcome);
  ok(await s.request('POST', '/messages/test-email', { token, body: { to: 'ann@example.com', templateId: welcome.body.id, data: { name: 'Ann' } } }));
  ok(await s.request('POST', '/templates', { token, body: { name: 'Reminder', channel: 'SMS', content: { text: 'See you soon' } } }));
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
      { id: 'c', type: 'condition', data: { condition: 'trigger.total > 100' } },
      { id: 'yes', type: 'add_tags', data: { tags: ['big'] } },
      { id: 'no', type: 'add_tags', data: { tags: ['small'] } },
    ],
    edges: [
      { from: 't', to: 'c' },
      { from: 'c', to: 'yes', branch: true },
      { from: 'c', to: 'no', branch: false },
    ],
  };
  const automation = await s.request('POST', '/automations', { token, body: { name: 'Order size', graph } });
  ok(automation);
  ok(
    await s.request('POST', '/workflows', {
      token,
      body: {
        name: 'Signup',
        triggerSource: 'WEBHOOK',
        status: 'ACTIVE',
        webhook: { lookup: 'email', createIfNotFound: true },
        steps: [{ type: 'add_tags', tags: ['signed-up'] }],
      },
    }),
  );
  return { automationId: automation.body.id };
}

test('each page: the main navigation, one h1, no serious accessibility violation; the editor loads on demand', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const { automationId } = await seed(s, token);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  const scripts: string[] = [];
  page.on('request', (req) => {
    if (req.resourceType() === 'script') scripts.push(new URL(req.url()).pathname);
  });
  await page.goto('/app/');
  await logIn(page, s.owner.email, s.owner.password);
  const nav = page.getByRole('navigation', { name: 'Main' });
  for (const p of PAGES) {
    await nav.getByRole('link', { name: p.link, exact: true }).click();
    await assertOneH1(page, p.h1);
    assert.equal(await nav.getByRole('link', { name: p.link, exact: true }).getAttribute('aria-current'), 'page');
    await page.locator('.loading').first().waitFor({ state: 'detached' });
    await assertAccessible(page, `${p.link} page`);
    await screenshot(page, p.shot);
  }
  assert.ok(!scripts.some((path) => /GraphView/.test(path)), `no editor code before a graph is shown: ${scripts.join(', ')}`);

  await nav.getByRole('link', { name: 'Automations' }).click();
  await page.getByRole('link', { name: 'Order size' }).click();
  await page.waitForURL(`**/app/automations/${automationId}`);
  await assertOneH1(page, 'Order size');
  await page.locator('.react-flow__node').nth(3).waitFor();
  assert.equal(await page.locator('.react-flow__node').count(), 4);
  assert.equal(await page.locator('.react-flow__edge').count(), 3);
  assert.ok(
    scripts.some((path) => /GraphView/.test(path)),
    'the editor code was loaded for the graph',
  );
  await assertAccessible(page, 'automation graph');
  await screenshot(page, 'automation');

  // A delivery, and the content it sent.
  await nav.getByRole('link', { name: 'Deliveries' }).click();
  await page.getByRole('link', { name: 'email' }).first().click();
  await assertOneH1(page, /^Delivery \d+$/);
  await page.getByText('Hi Ann').waitFor();
  await page.getByText('sent', { exact: true }).waitFor();
  await assertAccessible(page, 'delivery');
  await screenshot(page, 'delivery');

  // A client route reloaded is the console again, and an unknown one says so.
  await page.goto('/app/no-such-page');
  await assertOneH1(page, 'Page not found');
  assert.deepEqual(problems, []);
});

test('a VIEWER gets a read-only console: no write control on any page', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  await seed(s, token);
  const viewer = await s.userWithRole('VIEWER');
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/');
  await logIn(page, viewer.email, viewer.password);
  const nav = page.getByRole('navigation', { name: 'Main' });
  assert.equal(await nav.getByRole('link', { name: 'Admin' }).count(), 0, 'no Admin link for a non-super-admin');
  const writeControls = page.getByRole('button', { name: /^(New|Save|Delete|Create|Revoke|Remove|Invite|Activate|Cancel invitation)/ });
  for (const p of PAGES.filter((x) => x.link !== 'Admin')) {
    await nav.getByRole('link', { name: p.link, exact: true }).click();
    await assertOneH1(page, p.h1);
    await page.locator('.loading').first().waitFor({ state: 'detached' });
    assert.equal(await writeControls.count(), 0, `${p.link}: no write button`);
    assert.equal(await page.getByRole('link', { name: 'New contact' }).count(), 0, `${p.link}: no New contact`);
    assert.equal(await page.locator('main select[aria-label^="Role of"]').count(), 0, `${p.link}: no role changer`);
  }
  // Settings shows Members only, read-only; a contact opens read-only.
  await nav.getByRole('link', { name: 'Settings' }).click();
  await page.waitForURL('**/app/settings/members');
  assert.equal(await page.getByRole('link', { name: 'API keys' }).count(), 0);
  await page.getByRole('row').filter({ hasText: viewer.email }).waitFor();
  await screenshot(page, 'viewer-settings');
  await nav.getByRole('link', { name: 'Contacts' }).click();
  await page.getByRole('link', { name: 'Ann' }).click();
  await assertOneH1(page, 'Contact');
  await page.getByLabel('Email').and(page.locator('[value="ann@example.com"]')).waitFor();
  assert.equal(await page.getByLabel('Email').isDisabled(), true, 'fields are read-only');
  assert.equal(await writeControls.count(), 0);
  await screenshot(page, 'viewer-contact');
  assert.deepEqual(problems, []);
});

test('a page that cannot render shows a readable message, and the rest of the console keeps working', { skip: skipOutsideCI }, async (t) => {
  const { s } = await consoleServer(t);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  // An answer the page does not expect (tags is not a list) makes it throw while rendering.
  await page.route('**/contacts?*', (route) =>
    route.fulfill({
      status: 200,
      contentType: 'application/json',
      body: JSON.stringify({
        data: [{ id: 1, email: 'x@example.com', phone: null, firstName: null, lastName: null, attributes: {}, tags: null, createdAt: '', updatedAt: '' }],
        nextCursor: null,
      }),
    }),
  );
  await page.goto('/app/contacts');
  await logIn(page, s.owner.email, s.owner.password);
  const alert = page.getByRole('alert').filter({ hasText: 'This page could not be shown' });
  await alert.waitFor();
  assert.ok(await page.getByRole('navigation', { name: 'Main' }).isVisible(), 'the navigation stays');
  await screenshot(page, 'error-boundary');
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Templates' }).click();
  await assertOneH1(page, 'Templates');
  assert.equal(await alert.count(), 0);
  assert.ok(
    problems.every((p) => p.startsWith('page error:') || /tags/.test(p)),
    problems.join('\n'),
  );
});
