/**
 * Lists and pickers of the console reach every item, not only the first page (each list a
 * "Load more" on the API's cursor; the contact pickers a search; the template pickers and the
 * tag filter their next pages), shown here with pages of 2 (the test rewrites the `limit` of
 * the console's list requests); the runs page keeps its status filter in the address and
 * does not poll every few seconds for a waiting run; a run or delivery address that is not an
 * id is not found without a request; Replay is offered for every event the API replays and
 * refreshes Recent runs; a manual workflow says truthfully that nothing starts it; a VIEWER
 * gets a notice instead of a new-item form; Starter's API keys offer only the roles the plan
 * allows; and a run's skipped nodes keep readable text.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import AxeBuilder from '@axe-core/playwright';
import type { Page } from 'playwright-core';
import { waitForRun } from '../helpers.js';
import { assertAccessible, assertOneH1, logIn, newContext, startBrowser } from './browser.js';
import { consoleServer, type ConsoleServer } from './server.js';

const { browser, skipOutsideCI } = await startBrowser();

/** The console's list requests (GET with a `limit`) ask for pages of `size` instead, so that a few items fill several pages. */
async function smallPages(page: Page, size: number): Promise<void> {
  await page.route(
    (url) => !url.pathname.startsWith('/app') && url.searchParams.has('limit'),
    (route) => {
      const url = new URL(route.request().url());
      url.searchParams.set('limit', String(size));
      return route.continue({ url: url.toString() });
    },
  );
}

const ok = (res: { status: number; text: string }) => assert.ok(res.status < 300, res.text);

/** The rows of the table with this caption. */
const rowsOf = (page: Page, caption: string) => page.getByRole('table', { name: caption, exact: true }).locator('tbody tr');

/** The table shows 2 rows, then `all` after "Load more" (named `button`), which then goes away. */
async function pagesThrough(page: Page, caption: string, all: number, button = 'Load more'): Promise<void> {
  const rows = rowsOf(page, caption);
  await rows.nth(1).waitFor();
  assert.equal(await rows.count(), 2, `${caption}: the first page`);
  for (let shown = 2; shown < all; shown = Math.min(shown + 2, all)) {
    await page.getByRole('button', { name: button, exact: true }).click();
    await rows.nth(Math.min(shown + 2, all) - 1).waitFor();
  }
  await page
    .getByRole('button', { name: button, exact: true })
    .waitFor({ state: 'detached', timeout: 5000 })
    .catch(async () => assert.fail(`${caption}: ${(await rows.allTextContents()).join(' | ')}`));
  assert.equal(await rows.count(), all, `${caption}: every item after Load more`);
}

async function seedLists(s: ConsoleServer, token: string): Promise<void> {
  for (const n of [1, 2, 3]) {
    ok(
      await s.request('POST', '/workflows', {
        token,
        body: { name: `Flow ${n}`, triggerSource: 'WEBHOOK', webhook: { lookup: 'email', createIfNotFound: false } },
      }),
    );
    ok(await s.request('POST', '/templates', { token, body: { name: `Mail ${n}`, channel: 'EMAIL', content: { subject: `Hi ${n}`, text: 'Hello' } } }));
    ok(await s.request('POST', '/api-keys', { token, body: { name: `Key ${n}`, role: 'VIEWER' } }));
    ok(await s.request('POST', '/memberships/invitations', { token, body: { email: `invitee${n}@example.com`, role: 'MEMBER' } }));
    ok(await s.request('POST', '/messages/test-email', { token, body: { to: `to${n}@example.com`, subject: `Test ${n}`, text: 'Test' } }));
  }
  const graph = { nodes: [{ id: 't', type: 'trigger', data: { source: 'MANUAL' } }], edges: [] };
  let automationId = 0;
  for (const n of [1, 2, 3]) {
    const a = await s.request('POST', '/automations', { token, body: { name: `Auto ${n}`, graph } });
    ok(a);
    automationId = a.body.id;
  }
  ok(await s.request('PATCH', `/automations/${automationId}`, { token, body: { status: 'ACTIVE' } }));
  for (const n of [1, 2, 3]) {
    const c = await s.request('POST', '/contacts', { token, body: { email: `c${n}@example.com` } });
    ok(c);
    ok(await s.request('POST', `/automations/${automationId}/runs`, { token, body: { contactId: c.body.id } }));
  }
  await s.userWithRole('MEMBER');
  await s.userWithRole('VIEWER');
  await s.otherWorkspace();
  await s.otherWorkspace();
}

test('every list pages on: workflows, templates, automations, runs, deliveries, API keys, members, invitations, admin', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  await seedLists(s, token);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await smallPages(page, 2);
  await page.goto('/app/workflows');
  await logIn(page, s.owner.email, s.owner.password);
  await pagesThrough(page, 'Workflows', 3);
  await page.goto('/app/templates');
  await pagesThrough(page, 'Templates', 3);
  await page.goto('/app/automations');
  await pagesThrough(page, 'Automations', 3);
  await page.goto('/app/runs');
  await pagesThrough(page, 'Runs', 3);
  await page.goto('/app/deliveries');
  // The test emails, and the invitations' emails.
  const deliveries = await s.request('GET', '/messages/delivery-attempts', { token });
  assert.equal(deliveries.body.data.length, 6);
  await pagesThrough(page, 'Deliveries', 6);
  await page.goto('/app/settings/api-keys');
  await pagesThrough(page, 'API keys', 3);
  await page.goto('/app/settings/members');
  await pagesThrough(page, 'Members', 3, 'Load more members');
  await pagesThrough(page, 'Pending invitations', 3, 'Load more invitations');
  await page.goto('/app/admin');
  await pagesThrough(page, 'Workspaces', 3, 'Load more workspaces');
  await assertAccessible(page, 'admin with Load more');
  // Users: the owner, the member, the viewer and the two other workspaces' owners.
  await pagesThrough(page, 'Users', 5, 'Load more users');
  assert.deepEqual(problems, []);
});

test('runs: the status filter is in the address, a waiting run is not polled every few seconds; runs/abc and deliveries/abc are not found', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s } = await consoleServer(t);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  const now = new Date().toISOString();
  const waiting = {
    runId: 7,
    workflowId: null,
    automationId: 1,
    contactId: 1,
    status: 'WAITING',
    steps: [],
    trigger: {},
    createdAt: now,
    updatedAt: now,
    finishedAt: null,
  };
  let runLists = 0;
  const asked: string[] = [];
  page.on('request', (req) => {
    const path = new URL(req.url()).pathname;
    if (!path.startsWith('/app')) asked.push(path);
  });
  await page.route(
    (url) => url.pathname === '/runs',
    (route) => {
      runLists++;
      return route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ data: [waiting], nextCursor: null }) });
    },
  );
  await page.goto('/app/runs');
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByRole('link', { name: 'Run 7' }).waitFor();
  const before = runLists;
  await page.waitForTimeout(7_000);
  assert.equal(runLists, before, 'no new request for a waiting run within 7 s');

  await page.getByLabel('Status').selectOption('FAILED');
  await page.waitForURL(/\/app\/runs\/?\?status=FAILED$/);
  await page.reload();
  await assertOneH1(page, 'Runs');
  assert.equal(await page.getByLabel('Status').inputValue(), 'FAILED', 'the filter survives a reload');

  for (const address of ['/app/runs/abc', '/app/deliveries/abc', '/app/workflows/abc', '/app/templates/1x', '/app/automations/0']) {
    asked.length = 0;
    await page.goto(address);
    await assertOneH1(page, 'Page not found');
    assert.deepEqual(
      asked.filter((p) => /NaN|abc|1x|\/0$/.test(p)),
      [],
      `${address}: no request for it`,
    );
  }
  assert.deepEqual(problems, []);
});

test('pickers reach every item: template pickers page on, contact pickers search, the tag filter pages on', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const templates: number[] = [];
  for (const n of [1, 2, 3]) {
    const tpl = await s.request('POST', '/templates', {
      token,
      body: { name: `Mail ${n}`, channel: 'EMAIL', content: { subject: `Hi {{ contact.firstName }}`, text: 'Hello' } },
    });
    ok(tpl);
    templates.push(tpl.body.id);
  }
  for (const [email, firstName, tag] of [
    ['zed@example.com', 'Zed', 'alpha'],
    ['amy@example.com', 'Amy', 'beta'],
    ['bo@example.com', 'Bo', 'gamma'],
  ] as const)
    ok(await s.request('POST', '/contacts', { token, body: { email, firstName, tags: [tag] } }));
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'Mailer',
      triggerSource: 'WEBHOOK',
      webhook: { lookup: 'email', createIfNotFound: false },
      steps: [{ type: 'send_email', templateId: templates[2] }],
    },
  });
  ok(wf);
  const auto = await s.request('POST', '/automations', {
    token,
    body: {
      name: 'Auto mail',
      graph: {
        nodes: [
          { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
          { id: 'm', type: 'send_email', data: { templateId: templates[2] } },
        ],
        edges: [{ from: 't', to: 'm' }],
      },
    },
  });
  ok(auto);
  ok(await s.request('PATCH', `/automations/${auto.body.id}`, { token, body: { status: 'ACTIVE' } }));

  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await smallPages(page, 2);
  const oldest = `Mail 1 (#${templates[0]})`;

  // The workflow's send step: the oldest template after "Load more templates".
  await page.goto(`/app/workflows/${wf.body.id}`);
  await logIn(page, s.owner.email, s.owner.password);
  const step = page.getByRole('form', { name: 'Steps' });
  const picker = step.getByLabel('Template', { exact: true });
  await picker.locator('option', { hasText: 'Mail 3' }).waitFor({ state: 'attached' });
  assert.equal(await picker.locator('option', { hasText: oldest }).count(), 0, (await picker.locator('option').allTextContents()).join('|'));
  await step.getByRole('button', { name: 'Load more templates' }).click();
  await picker.locator('option', { hasText: oldest }).waitFor({ state: 'attached' });
  await picker.selectOption({ label: oldest });
  await assertAccessible(page, 'a send step with Load more templates');

  // The automation editor's send node.
  await page.goto(`/app/automations/${auto.body.id}`);
  await page.locator('.react-flow__node[data-id="m"]').click();
  const inspector = page.getByLabel('Template', { exact: true });
  await inspector.locator('option', { hasText: 'Mail 3' }).waitFor({ state: 'attached' });
  assert.equal(await inspector.locator('option', { hasText: 'Mail 1' }).count(), 0, 'automation: not on the first page');
  await page.getByRole('button', { name: 'Load more templates' }).click();
  await inspector.locator('option', { hasText: 'Mail 1' }).waitFor({ state: 'attached' });

  // Run on a contact: the first contact made is found by a search.
  const run = page.getByRole('form', { name: 'Run on a contact' });
  await run.getByLabel('Contact', { exact: true }).locator('option', { hasText: 'bo@example.com' }).waitFor({ state: 'attached' });
  assert.equal(await run.getByLabel('Contact', { exact: true }).locator('option', { hasText: 'zed@example.com' }).count(), 0, 'contact: not on the first page');
  await run.getByLabel('Find by email, phone or name').fill('zed');
  await run.getByLabel('Contact', { exact: true }).locator('option', { hasText: 'zed@example.com' }).waitFor({ state: 'attached' });
  await run.getByLabel('Contact', { exact: true }).selectOption({ label: 'zed@example.com' });
  await run.getByRole('button', { name: 'Run on a contact' }).click();
  await run.getByRole('link', { name: /^run \d+$/ }).waitFor();

  // The template preview's contact, found by a search.
  await page.goto(`/app/templates/${templates[0]}`);
  const preview = page.getByRole('form', { name: 'Preview settings' });
  await preview.getByLabel('Find by email, phone or name').fill('Zed');
  await preview.getByLabel('Contact', { exact: true }).selectOption({ label: 'zed@example.com' });
  await preview.getByRole('button', { name: 'Preview' }).click();
  await page.getByText('Hi Zed').waitFor();
  await assertAccessible(page, 'template preview with a contact search');

  // The contacts' tag filter: every tag, a page at a time.
  await page.goto('/app/contacts');
  const tagFilter = page.getByLabel('Tag', { exact: true });
  await tagFilter.locator('option', { hasText: 'beta' }).waitFor({ state: 'attached' });
  assert.equal(await tagFilter.locator('option', { hasText: 'gamma' }).count(), 0, 'tag: not on the first page');
  await page.getByRole('button', { name: 'More tags' }).click();
  await tagFilter.selectOption('gamma');
  await page.getByRole('link', { name: 'Bo' }).waitFor();
  assert.deepEqual(problems, []);
});

test('Replay: offered for events refused for their contact, not for a bad signature; it refreshes Recent runs; a refusal is shown', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s, token } = await consoleServer(t, { engine: true });
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'Orders',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      webhook: { lookup: 'email', path: 'email', createIfNotFound: false },
      steps: [{ type: 'add_tags', tags: ['buyer'] }],
    },
  });
  ok(wf);
  const target = new URL(new URL(wf.body.webhook.url).pathname, s.url).toString();
  const post = (body: unknown, headers: Record<string, string> = {}) =>
    fetch(target, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const unknown = await post({ email: 'late@example.com' });
  assert.ok(unknown.status >= 400, `refused for its contact: ${unknown.status}`);
  // A signing secret, then an unsigned post: refused for its signature.
  ok(await s.request('PATCH', `/workflows/${wf.body.id}`, { token, body: { webhook: { signingSecret: 'a-long-enough-signing-secret-1234' } } }));
  assert.equal((await post({ email: 'late@example.com' })).status, 401);
  ok(await s.request('PATCH', `/workflows/${wf.body.id}`, { token, body: { webhook: { signingSecret: null } } }));
  const events = await s.request('GET', `/workflows/${wf.body.id}/webhook-events`, { token });
  const [signed, refused] = events.body.data as { id: number; code: string }[];
  assert.equal(signed!.code, 'signature_invalid');
  // The contact exists now: the refused event can be replayed.
  ok(await s.request('POST', '/contacts', { token, body: { email: 'late@example.com' } }));

  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto(`/app/workflows/${wf.body.id}`);
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByRole('button', { name: `Replay event ${refused!.id}` }).waitFor();
  assert.equal(await page.getByRole('button', { name: `Replay event ${signed!.id}` }).count(), 0, 'no Replay for a bad signature');
  const recent = rowsOf(page, 'Recent runs');
  assert.equal(await recent.count(), 0);
  await page.getByRole('button', { name: `Replay event ${refused!.id}` }).click();
  await page.getByText(/^Replayed: run \d+/).waitFor();
  // Recent runs shows the new run at once (its own refresh is every 10 s).
  await recent.first().waitFor({ timeout: 4_000 });
  const runId = Number(/run (\d+)/.exec((await page.getByText(/^Replayed: run \d+/).textContent()) ?? '')![1]);
  await waitForRun(s, token, runId, ['COMPLETED']);

  // Paused, the API refuses a replay: its reason is shown.
  await page.getByRole('button', { name: 'Pause' }).click();
  await page.getByRole('button', { name: 'Activate' }).waitFor();
  await page.getByRole('button', { name: `Replay event ${refused!.id}` }).click();
  await page
    .getByRole('alert')
    .filter({ hasText: `Event ${refused!.id} was not replayed` })
    .filter({ hasText: 'activate it' })
    .waitFor();
  await assertAccessible(page, 'received events with a refused replay');
  assert.deepEqual(problems, []);
});

test('a manual workflow says nothing starts it; a VIEWER gets a notice instead of the new workflow and new template forms', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s } = await consoleServer(t);
  const viewer = await s.userWithRole('VIEWER');
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/workflows/new');
  await logIn(page, s.owner.email, s.owner.password);
  await assertOneH1(page, 'New workflow');
  const manual = page.getByLabel('Trigger').locator('option[value="MANUAL"]');
  assert.doesNotMatch((await manual.textContent()) ?? '', /by hand|by the API/);
  await page.getByLabel('Name').fill('Later');
  await page.getByLabel('Trigger').selectOption('MANUAL');
  await page.getByText('Nothing can start a manual workflow').waitFor();
  await page.getByRole('button', { name: 'Create workflow' }).click();
  await assertOneH1(page, 'Later');
  const steps = page.getByRole('region', { name: 'Steps' });
  await steps.getByText('nothing starts its runs').waitFor();
  assert.equal(await steps.getByText('the contact the webhook names').count(), 0);
  await page.getByRole('button', { name: 'Log out' }).click();

  await page.goto('/app/workflows/new');
  await logIn(page, viewer.email, viewer.password);
  await assertOneH1(page, 'New workflow');
  await page.getByText('Creating a workflow needs the MEMBER role').waitFor();
  assert.equal(await page.getByRole('button', { name: 'Create workflow' }).count(), 0);
  await assertAccessible(page, 'new workflow for a viewer');
  await page.goto('/app/templates/new');
  await assertOneH1(page, 'New template');
  await page.getByText('Creating a template needs the MEMBER role').waitFor();
  assert.equal(await page.getByRole('button', { name: 'Save' }).count(), 0);
  assert.equal(await page.getByLabel('Name').count(), 0);
  assert.deepEqual(problems, []);
});

test('on Starter, API keys offer only the roles the plan allows', { skip: skipOutsideCI }, async (t) => {
  const { s } = await consoleServer(t, { plan: 'STARTER' });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/settings/api-keys');
  await logIn(page, s.owner.email, s.owner.password);
  const form = page.getByRole('form', { name: 'Create an API key' });
  await form.getByText('need a higher plan').waitFor();
  assert.deepEqual(await form.getByLabel('Role').locator('option').allTextContents(), ['Viewer']);
  await form.getByLabel('Name').fill('Reporting');
  await form.getByRole('button', { name: 'Create API key' }).click();
  await page.getByLabel('New API key').waitFor();
  await assertAccessible(page, 'API keys on Starter');
  assert.deepEqual(problems, []);
});

test("a run's graph: the nodes it skipped keep text of enough contrast", { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t, { engine: true });
  const c = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com', firstName: 'Ann' } });
  ok(c);
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
      { id: 'c', type: 'condition', data: { condition: 'contact.firstName == "Ann"' } },
      { id: 'yes', type: 'add_tags', data: { tags: ['is-ann'] } },
      { id: 'no', type: 'add_tags', data: { tags: ['not-ann'] } },
      { id: 'w', type: 'wait', data: { seconds: 60 } },
      { id: 'm', type: 'update_contact', data: { set: { lastName: 'X' } } },
    ],
    edges: [
      { from: 't', to: 'c' },
      { from: 'c', to: 'yes', branch: true },
      { from: 'c', to: 'no', branch: false },
      { from: 'no', to: 'w' },
      { from: 'w', to: 'm' },
    ],
  };
  const created = await s.request('POST', '/automations', { token, body: { name: 'Greet Ann', graph } });
  ok(created);
  ok(await s.request('PATCH', `/automations/${created.body.id}`, { token, body: { status: 'ACTIVE' } }));
  const run = await s.request('POST', `/automations/${created.body.id}/runs`, { token, body: { contactId: c.body.id } });
  ok(run);
  await waitForRun(s, token, run.body.runId, ['COMPLETED']);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto(`/app/runs/${run.body.runId}`);
  await logIn(page, s.owner.email, s.owner.password);
  await page.locator('.react-flow__node.node-skipped').nth(2).waitFor();
  const result = await new AxeBuilder({ page }).withRules(['color-contrast']).analyze();
  assert.deepEqual(
    result.violations.flatMap((v) => v.nodes.map((n) => `${n.target.join(' ')}: ${n.failureSummary}`)),
    [],
  );
  assert.deepEqual(problems, []);
});
