/**
 * The workflow editor of the console (issue 11, item 7) as a user clicks it: a template made
 * in the console, a webhook workflow built step by step (add, reorder with the keyboard,
 * remove with a confirmation, a 422 shown at its step's field), the webhook configured
 * (lookup by email at a body path, create if not found, defaults), a signing secret
 * generated and shown once, the workflow activated, its URL copied, a signed POST sent from
 * the test, and the run, its delivery and the received event seen in the console with the
 * email at a real SMTP server; then the secret rotated and cleared. A VIEWER sees the same
 * workflow without a single edit control.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { test } from 'node:test';
import type { Locator, Page } from 'playwright-core';
import { waitForRun } from '../helpers.js';
import { consoleServer } from './server.js';
import { smtpSink } from '../smtpSink.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

const sign = (secret: string, body: string) => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

/** The error shown next to the field with this label, inside `scope`. */
function errorAt(scope: Locator, label: string): Locator {
  return scope
    .locator('.field-invalid')
    .filter({ has: scope.page().getByLabel(label, { exact: true }) })
    .locator('.field-error');
}

async function addStep(page: Page, type: string): Promise<void> {
  await page.getByLabel('New step').selectOption(type);
  await page.getByRole('button', { name: 'Add step' }).click();
}

const stepNames = (page: Page) => page.locator('.step-list > li legend .visually-hidden').allTextContents();

test('a webhook workflow built in the step editor: reorder, remove, a 422 at its field, webhook settings, a secret shown once, a signed POST, the run and its email', {
  skip: skipOutsideCI,
}, async (t) => {
  const sink = await smtpSink(t);
  const { s, token } = await consoleServer(t, { engine: true, env: { SVC_HTTP_ALLOWED_HOSTS: `127.0.0.1:${sink.port}` } });
  // The email channel, as an admin sets it in Settings (its page is tested elsewhere).
  const channels = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port: sink.port, secure: false, from: 'shop@example.test' } } },
  });
  assert.equal(channels.status, 200, channels.text);

  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: s.url });
  await page.goto('/app/templates');
  await logIn(page, s.owner.email, s.owner.password);

  // A template, made in the console.
  await page.getByRole('link', { name: 'New template' }).click();
  await page.getByLabel('Name').fill('Welcome');
  await page.getByLabel('Channel').selectOption('EMAIL');
  await page.getByLabel('Subject').fill('Welcome {{ contact.firstName }}');
  await page.getByLabel('Text').fill('Hello {{ contact.firstName }}, order {{ trigger.order }} is in.');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.waitForURL(/\/app\/templates\/\d+$/);
  const templateId = Number(new URL(page.url()).pathname.split('/').pop());

  // A new webhook workflow from the list.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Workflows' }).click();
  await assertOneH1(page, 'Workflows');
  await page.getByRole('link', { name: 'New workflow' }).click();
  await assertOneH1(page, 'New workflow');
  await assertAccessible(page, 'new workflow');
  await page.getByLabel('Name').fill('Shop orders');
  await page.getByLabel('Trigger').selectOption('WEBHOOK');
  await page.getByRole('button', { name: 'Create workflow' }).click();
  await page.getByRole('heading', { level: 1, name: 'Shop orders' }).waitFor();
  await assertOneH1(page, 'Shop orders');
  await page.getByText('No steps yet').waitFor();
  const workflowId = Number(new URL(page.url()).pathname.split('/').pop());
  await assertAccessible(page, 'an empty workflow');
  await screenshot(page, 'workflow-empty');

  // Steps: a send, tags, a wait and a filter; the new step's first input gets the focus.
  await addStep(page, 'send_email');
  await addStep(page, 'add_tags');
  await page.getByRole('group', { name: 'Step 2: Add tags' }).getByLabel('Tags').fill('buyer, shop');
  await addStep(page, 'wait');
  await addStep(page, 'filter');
  const filter = page.getByRole('group', { name: 'Step 4: Filter' });
  assert.equal(
    await page.evaluate(() => (document.activeElement as HTMLInputElement | null)?.closest('fieldset')?.querySelector('legend .visually-hidden')?.textContent),
    'Step 4: Filter',
  );
  await filter.getByLabel('Condition').fill('trigger.order != blank');
  assert.deepEqual(await stepNames(page), ['Step 1: Send email', 'Step 2: Add tags', 'Step 3: Wait', 'Step 4: Filter']);
  await page.getByText('Unsaved changes').waitFor();

  // Reorder with the keyboard: the moved step keeps the focus.
  await page.getByRole('button', { name: 'Move up step 2' }).focus();
  await page.keyboard.press('Enter');
  assert.deepEqual(await stepNames(page), ['Step 1: Add tags', 'Step 2: Send email', 'Step 3: Wait', 'Step 4: Filter']);
  // At the top its Move up is disabled: the focus went to its Move down.
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), 'Move down step 1');
  await page.keyboard.press('Enter');
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), 'Move down step 2');
  assert.deepEqual(await stepNames(page), ['Step 1: Send email', 'Step 2: Add tags', 'Step 3: Wait', 'Step 4: Filter']);
  // And with the mouse: the filter goes first.
  for (const n of [4, 3, 2]) await page.getByRole('button', { name: `Move up step ${n}` }).click();
  assert.deepEqual(await stepNames(page), ['Step 1: Filter', 'Step 2: Send email', 'Step 3: Add tags', 'Step 4: Wait']);

  // Remove asks first; Cancel keeps the step.
  await page.getByRole('button', { name: 'Remove step 4' }).click();
  const confirm = page.getByRole('dialog', { name: 'Confirm: Remove' });
  await confirm.getByText('Remove step 4 (Wait)?').waitFor();
  await assertAccessible(page, 'the remove-step confirmation');
  await confirm.getByRole('button', { name: 'Cancel' }).click();
  assert.equal((await stepNames(page)).length, 4);
  await page.getByRole('button', { name: 'Remove step 4' }).click();
  await confirm.getByRole('button', { name: 'Remove' }).click();
  await confirm.waitFor({ state: 'hidden' });
  assert.deepEqual(await stepNames(page), ['Step 1: Filter', 'Step 2: Send email', 'Step 3: Add tags']);

  // Saving without a template: the API's 422 (/steps/1/templateId) at that step's Template field.
  await page.getByRole('button', { name: 'Save steps' }).click();
  const send = page.getByRole('group', { name: 'Step 2: Send email' });
  await errorAt(send, 'Template').waitFor();
  assert.match((await errorAt(send, 'Template').textContent()) ?? '', /required/i);
  assert.equal(await page.getByRole('group', { name: 'Step 1: Filter' }).locator('.field-error').count(), 0, 'only the faulty step is marked');
  await assertAccessible(page, 'steps with a 422');
  await screenshot(page, 'workflow-steps-error');
  // The error follows its step when the step moves.
  await page.getByRole('button', { name: 'Move up step 2' }).click();
  await errorAt(page.getByRole('group', { name: 'Step 1: Send email' }), 'Template').waitFor();
  await page.getByRole('button', { name: 'Move down step 1' }).click();
  assert.deepEqual(await stepNames(page), ['Step 1: Filter', 'Step 2: Send email', 'Step 3: Add tags']);
  // The filter is not wanted after all: the send goes first.
  await page.getByRole('button', { name: 'Remove step 1' }).click();
  await confirm.getByRole('button', { name: 'Remove' }).click();

  // The template picker lists the workspace's email templates.
  const first = page.getByRole('group', { name: 'Step 1: Send email' });
  await first.getByLabel('Template').selectOption({ label: `Welcome (#${templateId})` });
  await first.getByRole('link', { name: 'Open the template' }).waitFor();
  await page.getByRole('button', { name: 'Save steps' }).click();
  await page.getByRole('form', { name: 'Steps' }).getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  assert.equal(await page.getByText('Unsaved changes').count(), 0);
  const afterSteps = await s.request('GET', `/workflows/${workflowId}`, { token });
  assert.deepEqual(afterSteps.body.steps, [
    { type: 'send_email', templateId },
    { type: 'add_tags', tags: ['buyer', 'shop'] },
  ]);

  // Webhook settings: a path that is no dot path is refused at its field, then lookup by email at customer.email, create, defaults.
  const settings = page.getByRole('form', { name: 'Webhook settings' });
  await settings.getByLabel('Contact lookup').selectOption('email');
  await settings.getByLabel('Path in the body').fill('customer..email');
  await settings.getByRole('button', { name: 'Save webhook settings' }).click();
  await errorAt(settings, 'Path in the body').waitFor();
  await settings.getByLabel('Path in the body').fill('customer.email');
  await settings.getByLabel('Create the contact when none matches').check();
  await settings.getByLabel('Default first name').fill('Friend');
  await settings.getByLabel('Default tags').fill('from-shop');
  await settings.getByLabel('Default attributes (JSON)').fill('{"source": "shop"}');
  await settings.getByRole('button', { name: 'Save webhook settings' }).click();
  await settings.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const hook = (await s.request('GET', `/workflows/${workflowId}`, { token })).body.webhook;
  assert.deepEqual(
    { lookup: hook.lookup, path: hook.path, createIfNotFound: hook.createIfNotFound, defaults: hook.defaults },
    { lookup: 'email', path: 'customer.email', createIfNotFound: true, defaults: { firstName: 'Friend', tags: ['from-shop'], attributes: { source: 'shop' } } },
  );

  // A generated signing secret: shown once with Copy and a warning, then never again.
  const signing = page.getByRole('region', { name: 'Request signing' });
  await signing.getByText('Unsigned', { exact: true }).waitFor();
  await signing.getByRole('button', { name: 'Generate secret' }).click();
  const secret = await signing.getByLabel('New signing secret').inputValue();
  assert.match(secret, /^[A-Za-z0-9_-]{43}$/);
  await signing.getByRole('status').filter({ hasText: 'not shown again' }).waitFor();
  await signing.getByRole('button', { name: 'Copy' }).click();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret);
  await assertAccessible(page, 'a new signing secret');
  await screenshot(page, 'workflow-secret');
  await signing.getByRole('button', { name: 'Done' }).click();
  await signing.getByText('Signed', { exact: true }).waitFor();
  assert.equal(await page.getByLabel('New signing secret').count(), 0);
  assert.ok(!(await page.content()).includes(secret), 'the secret is gone from the page');

  // Activate: the URL appears, Copy puts it on the clipboard.
  await page.getByRole('button', { name: 'Activate' }).click();
  await page.getByRole('button', { name: 'Pause' }).waitFor();
  const endpoint = page.getByRole('region', { name: 'Endpoint' });
  const url = await endpoint.getByLabel('Webhook URL').inputValue();
  assert.match(url, /\/v1\/webhooks\/in\/[A-Za-z0-9]{30}$/);
  await endpoint.getByRole('button', { name: 'Copy' }).click();
  await endpoint.getByRole('status').filter({ hasText: 'Copied' }).waitFor();
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  assert.equal(copied, url);
  await page.reload();
  await assertOneH1(page, 'Shop orders');
  assert.ok(!(await page.content()).includes(secret), 'the secret is not shown after a reload');
  await assertAccessible(page, 'an active workflow');
  await screenshot(page, 'workflow-active');

  // A signed POST to the copied URL, as the sender would make it.
  const target = new URL(new URL(copied).pathname, s.url).toString();
  const post = (body: string, headers: Record<string, string> = {}) =>
    fetch(target, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
  const body = JSON.stringify({ customer: { email: 'buyer@example.com' }, order: 'A-17' });
  const unsigned = await post(body);
  assert.equal(unsigned.status, 401, 'unsigned is refused');
  const accepted = await post(body, { 'x-service-signature': sign(secret, body) });
  assert.equal(accepted.status, 202, await accepted.clone().text());
  const { runId, contactId } = (await accepted.json()) as { runId: number; contactId: number };
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  // The new contact has the defaults; the email went out with them.
  const contact = (await s.request('GET', `/contacts/${contactId}`, { token })).body;
  assert.equal(contact.firstName, 'Friend');
  assert.deepEqual([...contact.tags].sort(), ['buyer', 'from-shop', 'shop']);
  assert.deepEqual(contact.attributes, { source: 'shop' });
  assert.equal(sink.received.length, 1);
  assert.deepEqual(sink.received[0]!.to, ['buyer@example.com']);
  assert.match(sink.received[0]!.raw, /Subject: Welcome Friend/);
  assert.match(sink.received[0]!.raw, /order A-17 is in/);

  // In the console: the received events (the refused and the accepted POST), the recent runs.
  await page.reload();
  const events = page.getByRole('region', { name: 'Received events' });
  await events.getByRole('cell', { name: String(runId), exact: true }).waitFor();
  await events.getByText('signature_invalid').waitFor();
  const runs = page.getByRole('region', { name: 'Recent runs' });
  await runs.getByRole('link', { name: `Run ${runId}` }).waitFor();
  await runs.getByText('completed').waitFor();
  await assertAccessible(page, 'a workflow with its runs and events');
  await screenshot(page, 'workflow-events');

  // The run page, from the Runs list: its steps and the delivery.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Runs' }).click();
  await assertOneH1(page, 'Runs');
  await page.getByRole('link', { name: `Run ${runId}` }).click();
  await assertOneH1(page, `Run ${runId}`);
  await page.getByRole('cell', { name: 'send email', exact: true }).waitFor();
  await page.getByRole('cell', { name: 'add tags', exact: true }).waitFor();
  const delivery = page.getByRole('table', { name: 'Deliveries' }).getByRole('row').filter({ hasText: 'buyer@example.com' });
  await delivery.getByText('sent', { exact: true }).waitFor();
  await delivery.getByText('Welcome Friend').waitFor();
  await assertAccessible(page, 'the run page');
  await screenshot(page, 'workflow-run');

  // Rotate: confirmed, a new secret shown once; the old one is refused at once.
  await page.goBack();
  await page.goBack();
  await assertOneH1(page, 'Shop orders');
  await signing.getByRole('button', { name: 'Rotate secret' }).click();
  const rotate = page.getByRole('dialog', { name: 'Confirm: Rotate secret' });
  await rotate.getByText(/stops working at once/).waitFor();
  await rotate.getByRole('button', { name: 'Rotate secret' }).click();
  const rotated = await signing.getByLabel('New signing secret').inputValue();
  assert.notEqual(rotated, secret);
  const again = JSON.stringify({ customer: { email: 'buyer@example.com' }, order: 'A-18' });
  assert.equal((await post(again, { 'x-service-signature': sign(secret, again) })).status, 401, 'the old secret is stale');
  assert.equal((await post(again, { 'x-service-signature': sign(rotated, again) })).status, 202, 'the new one signs');
  await signing.getByRole('button', { name: 'Done' }).click();

  // Clear: confirmed; unsigned posts are accepted again.
  await signing.getByRole('button', { name: 'Clear secret' }).click();
  await page.getByRole('dialog', { name: 'Confirm: Clear secret' }).getByRole('button', { name: 'Clear secret' }).click();
  await signing.getByText('The signing secret is cleared.').waitFor();
  await signing.getByText('Unsigned', { exact: true }).waitFor();
  await signing.getByRole('button', { name: 'Generate secret' }).waitFor();
  const last = JSON.stringify({ customer: { email: 'buyer@example.com' }, order: 'A-19' });
  assert.equal((await post(last)).status, 202);
  assert.equal((await s.request('GET', `/workflows/${workflowId}`, { token })).body.webhook.hasSigningSecret, false);
  await assertAccessible(page, 'a cleared secret');
  assert.deepEqual(problems, []);
});

test('a VIEWER sees a workflow, its steps and webhook settings without any edit control', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const template = await s.request('POST', '/templates', { token, body: { name: 'Welcome', channel: 'EMAIL', content: { subject: 'Hi', text: 'Hello' } } });
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'Shop orders',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [
        { type: 'send_email', templateId: template.body.id },
        { type: 'wait', seconds: 7200 },
        { type: 'add_tags', tags: ['buyer'] },
      ],
      webhook: {
        lookup: 'email',
        path: 'customer.email',
        createIfNotFound: true,
        defaults: { firstName: 'Friend' },
        signingSecret: 'a-signing-secret-of-32-characters',
      },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const token30 = wf.body.webhook.url.slice(-30);
  const viewer = await s.userWithRole('VIEWER');
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/workflows');
  await logIn(page, viewer.email, viewer.password);
  await assertOneH1(page, 'Workflows');
  await page.getByRole('link', { name: 'Shop orders' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'New workflow' }).count(), 0);
  await page.getByRole('link', { name: 'Shop orders' }).click();
  await assertOneH1(page, 'Shop orders');

  const steps = page.getByRole('region', { name: 'Steps' });
  await steps.getByText('Welcome').waitFor();
  assert.deepEqual(
    (await steps.getByRole('listitem').allInnerTexts()).map((x) => x.replace(/\s+/g, ' ').trim()),
    ['Send email Welcome', 'Wait for 2 hours', 'Add tags buyer'],
  );
  await page.getByRole('region', { name: 'Webhook settings' }).getByText('customer.email').waitFor();
  const main = page.getByRole('main');
  assert.equal(await main.getByRole('button').count(), 0, 'no button at all');
  assert.equal(await main.locator('input, select, textarea').count(), 0, 'no input at all');
  assert.equal(await page.getByRole('region', { name: 'Request signing' }).count(), 0);
  assert.equal(await page.getByRole('region', { name: 'Test payload' }).count(), 0);
  // The URL is masked for a VIEWER.
  const shown = (await page.getByRole('region', { name: 'Endpoint' }).textContent()) ?? '';
  assert.ok(!shown.includes(token30), 'the token is not shown');
  assert.match(shown, /••••/);
  await assertAccessible(page, 'a workflow as a VIEWER');
  await screenshot(page, 'workflow-viewer');
  assert.deepEqual(problems, []);
});
