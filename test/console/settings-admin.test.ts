/**
 * The administrative settings (issue 11, item 9) as a user clicks them, against a real
 * `svc serve`: Channels (write-only credentials: stored, replaced, cleared, never sent back;
 * 422s at their fields; a test email), Billing (plan and usage as the API says; a manual
 * checkout completed by the operator's CLI; a Stripe checkout's redirect), the Audit log
 * (filters, cursor pages; an upgrade message on Starter), and what each role is shown.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import type { Page } from 'playwright-core';
import { resolveChannel } from '../../src/core/services/channels.js';
import { signStripePayload } from '../../src/engine/stripe.js';
import { runCli, show } from '../cli/helpers.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';
import { consoleServer } from './server.js';

const { browser, skipOutsideCI } = await startBrowser();

/** The error shown next to the field with this label, inside `scope`. */
function errorAt(page: Page, scope: ReturnType<Page['locator']>, label: string) {
  return scope
    .locator('.field-invalid')
    .filter({ has: page.getByLabel(label, { exact: true }) })
    .locator('.field-error');
}

test('channels: SMTP credentials are write-only (stored, replaced, cleared), 422s are shown at their fields, a test email is sent', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s, token } = await consoleServer(t);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  const USER = 'mailer-user-4411';
  const PASSWORD = 'smtp-Pa55word-never-shown-7f3a';
  const NEW_PASSWORD = 'second-smtp-secret-91be';
  const secrets = [USER, PASSWORD, NEW_PASSWORD];

  // Every response body the page receives, and every channel update it sends.
  const bodies: Promise<string>[] = [];
  page.on('response', (res) => bodies.push(res.text().catch(() => '')));
  const puts: Record<string, unknown>[] = [];
  page.on('request', (req) => {
    if (req.method() === 'PUT' && new URL(req.url()).pathname === '/settings/channels') puts.push(req.postDataJSON() as Record<string, unknown>);
  });
  const stored = () => resolveChannel(s.db, s.config, s.workspaceId, 'EMAIL');

  await page.goto('/app/settings/channels');
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByRole('heading', { name: 'Channels', level: 2 }).waitFor();
  await assertOneH1(page, 'Settings');
  assert.equal(await page.getByRole('link', { name: 'Channels' }).getAttribute('aria-current'), 'page');

  // A test email through the default outbox.
  const testForm = page.getByRole('form', { name: 'Send a test email' });
  assert.equal(await testForm.getByLabel('Send to').inputValue(), s.owner.email, 'addressed to the signed-in person by default');
  await testForm.getByRole('button', { name: 'Send test email' }).click();
  await page.getByText(`The test email to ${s.owner.email} was sent through the built-in outbox.`).waitFor();
  const attempts = await s.request('GET', '/messages/delivery-attempts', { token });
  assert.equal(attempts.body.data[0].status, 'SENT');
  assert.equal(attempts.body.data[0].to, s.owner.email);
  assert.equal(await page.getByRole('link', { name: 'View the delivery' }).getAttribute('href'), `/app/deliveries/${attempts.body.data[0].id}`);

  // SMTP with a bad From address: the 422 is shown at that field, nothing is stored.
  const email = page.getByRole('form', { name: 'Email channel' });
  const save = email.getByRole('button', { name: 'Save email settings' });
  assert.ok(await save.isDisabled(), 'nothing to save before a change');
  await email.getByLabel('Provider').selectOption('smtp');
  await email.getByText('not set').waitFor();
  await email.getByLabel('SMTP host').fill('smtp.example.com');
  await email.getByLabel('Port').fill('587');
  await email.getByLabel('From address').fill('not-an-email');
  await email.getByLabel('Username').fill(USER);
  await email.getByLabel('Password').fill(PASSWORD);
  await save.click();
  assert.match((await errorAt(page, email, 'From address').textContent()) ?? '', /email address/);
  assert.equal((await stored()).provider, 'outbox');

  // Fixed: saved; the credentials show as "stored", the inputs are gone.
  await email.getByLabel('From address').fill('mail@acme.test');
  await save.click();
  await email.getByText('The email settings are saved.').waitFor();
  await email.getByText('stored', { exact: true }).waitFor();
  assert.equal(await email.getByLabel('Password').count(), 0, 'no password input once stored');
  assert.deepEqual((await stored()).credentials, { user: USER, pass: PASSWORD });
  assert.deepEqual((await stored()).settings, { host: 'smtp.example.com', port: 587, secure: false, from: 'mail@acme.test', requireTLS: false });
  assert.deepEqual(Object.keys(puts.at(-1)!), ['EMAIL'], 'only the changed channel is sent');

  // After a reload: "stored", and the values are nowhere in the page.
  await page.reload();
  await email.getByText('stored', { exact: true }).waitFor();
  assert.equal(await email.getByLabel('SMTP host').inputValue(), 'smtp.example.com');
  assert.equal(await email.getByLabel('Port').inputValue(), '587');
  let html = await page.content();
  for (const secret of secrets) assert.ok(!html.includes(secret), 'no credential in the page');
  await assertAccessible(page, 'channels with stored SMTP credentials');
  await screenshot(page, 'settings-channels');

  // Changing a setting that is not a destination sends no credentials and keeps them.
  await email.getByLabel('From address').fill('news@acme.test');
  await save.click();
  await email.getByText('The email settings are saved.').waitFor();
  assert.equal('credentials' in (puts.at(-1)!.EMAIL as object), false, 'credentials not sent when unchanged');
  assert.deepEqual((await stored()).credentials, { user: USER, pass: PASSWORD });
  assert.equal((await stored()).settings.from, 'news@acme.test');

  // Replace.
  await email.getByRole('button', { name: 'Replace credentials' }).click();
  await email.getByLabel('Username').fill(USER);
  await email.getByLabel('Password').fill(NEW_PASSWORD);
  await save.click();
  await email.getByText('The email settings are saved.').waitFor();
  assert.deepEqual((await stored()).credentials, { user: USER, pass: NEW_PASSWORD });
  assert.equal(await email.getByLabel('Password').count(), 0);

  // A new destination needs the credentials again: the API's 422 is shown with them.
  await email.getByLabel('Port').fill('2525');
  await email.getByText('needs the credentials again').waitFor();
  await save.click();
  assert.match((await email.getByRole('group', { name: 'Credentials' }).locator('.field-error').textContent()) ?? '', /required again/);
  assert.equal((await stored()).settings.port, 587, 'nothing changed');
  await email.getByLabel('Port').fill('587');

  // Clear, after a confirmation: the settings stay, the credentials go.
  await email.getByRole('button', { name: 'Clear credentials of the email channel' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Clear credentials' }).click();
  await email.getByText('The credentials are cleared.').waitFor();
  await email.getByText('not set', { exact: true }).waitFor();
  assert.deepEqual((await stored()).credentials, {});
  assert.equal((await stored()).settings.host, 'smtp.example.com');

  // Twilio needs its token: the 422 names it.
  const sms = page.getByRole('form', { name: 'SMS channel' });
  await sms.getByLabel('Provider').selectOption('twilio');
  await sms.getByLabel('Account SID').fill('AC123');
  await sms.getByLabel('From number or sender ID').fill('+15551234567');
  await sms.getByRole('button', { name: 'Save SMS settings' }).click();
  await sms.getByRole('group', { name: 'Credentials' }).locator('.field-error').getByText('required for twilio').waitFor();
  assert.equal((await resolveChannel(s.db, s.config, s.workspaceId, 'SMS')).provider, 'outbox');

  // No response the page received, nor the API, carries a credential.
  const api = await s.request('GET', '/settings/channels', { token });
  assert.equal(api.body.EMAIL.hasCredentials, false);
  html = await page.content();
  for (const body of [...(await Promise.all(bodies)), api.text, html])
    for (const secret of secrets) assert.ok(!body.includes(secret), 'a credential was sent back');
  assert.ok(bodies.length > 10, 'responses were watched');
  assert.deepEqual(problems, []);
});

test('billing on Starter: plan and usage as the API says, the audit log offers the upgrade, a manual checkout completed by the operator changes the plan', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s, token } = await consoleServer(t, { plan: 'STARTER' });
  for (const e of ['a@x.test', 'b@x.test', 'c@x.test']) assert.equal((await s.request('POST', '/contacts', { token, body: { email: e } })).status, 201);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());

  // The audit log is refused on Starter: the tab says so and links to Billing.
  const refused = await s.request('GET', '/audit-logs', { token });
  assert.equal(refused.status, 403);
  assert.equal(refused.body.code, 'plan_upgrade_required');
  await page.goto('/app/settings/audit-log');
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByText('It is part of the Growth and Pro plans').waitFor();
  assert.equal(await page.getByRole('alert').count(), 0, 'not shown as an error');
  await assertAccessible(page, 'audit log on Starter');
  await screenshot(page, 'settings-audit-starter');
  await page.getByRole('link', { name: 'See plans and upgrade' }).click();
  await page.waitForURL('**/app/settings/billing');

  // Plan and usage match GET /billing/plan.
  const plan = (await s.request('GET', '/billing/plan', { token })).body;
  assert.equal(plan.plan, 'STARTER');
  assert.equal(plan.usage.contacts, 3);
  const current = page.locator('.billing-current .plan-name');
  assert.equal(await current.textContent(), 'Starter');
  const usage: Record<string, string> = {
    contacts: 'Contacts',
    workflows: 'Workflows',
    templates: 'Templates',
    apiKeys: 'Active API keys',
    members: 'Members',
    runsThisMonth: 'Runs this month',
  };
  for (const [key, label] of Object.entries(usage)) {
    const shown = await page
      .locator('.usage div')
      .filter({ has: page.getByText(label, { exact: true }) })
      .locator('dd')
      .textContent();
    assert.equal(shown, String(plan.usage[key]), label);
  }
  assert.equal(await page.locator('.billing-current dd').first().textContent(), 'Not included (Growth and Pro)');
  assert.equal(await page.getByRole('button', { name: /^Change to/ }).count(), 0, 'nothing lower than the current paid plans');
  await assertAccessible(page, 'billing on Starter');
  await screenshot(page, 'settings-billing');

  // Upgrade to Pro: a manual checkout waits for the operator.
  await page.getByRole('button', { name: 'Upgrade to Pro' }).click();
  const waiting = page.getByText(/Checkout \d+ for the Pro plan is waiting/);
  await waiting.waitFor();
  const checkoutId = /Checkout (\d+)/.exec((await waiting.textContent())!)![1]!;
  assert.equal(await page.getByText(`svc checkout complete ${checkoutId}`).count(), 1);
  assert.ok(await page.getByRole('button', { name: 'Upgrade to Growth' }).isDisabled(), 'one checkout at a time');
  await screenshot(page, 'settings-billing-pending');
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.plan, 'STARTER');

  // The operator completes it; the page follows the plan without a reload.
  const done = await runCli(s.dataDir, ['checkout', 'complete', checkoutId, '--json']);
  assert.equal(done.code, 0, show(done));
  assert.deepEqual(done.json(), { workspaceId: s.workspaceId, plan: 'PRO' });
  await page.getByText('The workspace is now on the Pro plan.').waitFor({ timeout: 15_000 });
  assert.equal(await current.textContent(), 'Pro');
  assert.equal(await page.locator('.billing-current dd').first().textContent(), 'Included');
  await page.getByRole('button', { name: 'Change to Growth' }).waitFor();

  // Now the audit log lists what was just done, and a filter narrows it.
  await page.getByRole('navigation', { name: 'Settings' }).getByRole('link', { name: 'Audit log' }).click();
  const actions = page.locator('table.audit tbody tr td:nth-child(3)');
  await page.locator('table.audit').getByText('billing.checkout_completed').waitFor();
  const all = await actions.allTextContents();
  for (const a of ['billing.checkout_created', 'billing.checkout_completed', 'workspace.plan_changed', 'contact.created'])
    assert.ok(all.includes(a), `${a} in ${all}`);
  const completed = page.getByRole('row').filter({ hasText: 'billing.checkout_completed' });
  assert.match((await completed.textContent())!, /Command line/, 'completed by the CLI');
  await page.getByLabel('Action').fill('billing.*');
  await page.waitForURL(/action=billing/);
  await assertEventually(async () => {
    const shown = await actions.allTextContents();
    return shown.length === 2 && shown.every((a) => a.startsWith('billing.'));
  });
  assert.deepEqual(problems, []);
});

test('billing with Stripe: the checkout sends the browser to the payment page; the signed webhook changes the shown plan', {
  skip: skipOutsideCI,
}, async (t) => {
  const stripe = await fakeStripe(t);
  const SECRET = 'whsec_console_test_0123456789';
  const { s } = await consoleServer(t, {
    plan: 'STARTER',
    env: {
      SVC_BILLING_PROVIDER: 'stripe',
      SVC_STRIPE_BASE_URL: stripe.base,
      SVC_STRIPE_SECRET_KEY: 'sk_test_console',
      SVC_STRIPE_WEBHOOK_SECRET: SECRET,
      SVC_STRIPE_PRICE_GROWTH: 'price_growth_1',
      SVC_STRIPE_PRICE_PRO: 'price_pro_1',
    },
  });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/settings/billing');
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByRole('button', { name: 'Upgrade to Growth' }).click();
  await page.waitForURL(`${stripe.base}/pay/**`);
  await page.getByRole('heading', { name: 'Fake Stripe checkout' }).waitFor();
  assert.equal(stripe.sessions.length, 1);
  assert.equal(stripe.sessions[0]!.get('line_items[0][price]'), 'price_growth_1');

  const checkoutId = stripe.sessions[0]!.get('metadata[checkoutId]')!;
  // Stripe sends the payer back to Billing, which waits for the signed webhook.
  const back = new URL(stripe.sessions[0]!.get('success_url')!);
  assert.equal(`${back.pathname}${back.search}`, `/app/settings/billing?checkout=${checkoutId}`);
  await page.goto(`${s.url}${back.pathname}${back.search}`);
  await page.getByText(`Stripe is confirming checkout ${checkoutId}`).waitFor();
  await page.locator('.billing-current .plan-name').getByText('Starter').waitFor();
  const raw = JSON.stringify({
    id: 'evt_1',
    type: 'checkout.session.completed',
    data: { object: { id: 'cs_test_1', object: 'checkout.session', payment_status: 'paid', metadata: { checkoutId } } },
  });
  const hook = await s.request('POST', '/billing/stripe/webhook', {
    raw,
    headers: { 'content-type': 'application/json', 'stripe-signature': signStripePayload(raw, SECRET) },
  });
  assert.equal(hook.status, 200, hook.text);

  // The page notices the new plan on its own.
  await page.getByText('The workspace is now on the Growth plan.').waitFor();
  await page.locator('.billing-current .plan-name').getByText('Growth').waitFor();
  // A payer who cancelled is told nothing changed.
  const cancel = new URL(stripe.sessions[0]!.get('cancel_url')!);
  await page.goto(`${s.url}${cancel.pathname}${cancel.search}`);
  await page.getByText(`Checkout ${checkoutId} was cancelled: the plan has not changed.`).waitFor();
  await page.getByRole('button', { name: 'Upgrade to Pro' }).waitFor();
  assert.deepEqual(problems, []);
});

test('audit log: entries newest first, filters by action, actor and dates narrow it, cursor pages load on demand', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  for (let i = 0; i < 55; i++) assert.equal((await s.request('POST', '/contacts', { token, body: { email: `p${i}@x.test` } })).status, 201);
  const key = await s.mintKey('MEMBER');
  for (const e of ['k1@x.test', 'k2@x.test']) assert.equal((await s.request('POST', '/contacts', { token: key, body: { email: e } })).status, 201);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/settings/audit-log');
  await logIn(page, s.owner.email, s.owner.password);

  const rows = page.locator('table.audit tbody tr');
  const actions = page.locator('table.audit tbody tr td:nth-child(3)');
  await rows.first().waitFor();
  assert.equal(await rows.count(), 50, 'one page of 50');
  assert.equal(await actions.first().textContent(), 'auth.login', 'newest first: this sign-in');
  await assertAccessible(page, 'audit log');
  await screenshot(page, 'settings-audit-log');
  const total = (await s.request('GET', '/audit-logs?limit=200', { token })).body.data.length;
  assert.ok(total > 50);
  await page.getByRole('button', { name: 'Load more' }).click();
  await assertEventually(async () => (await rows.count()) === total);
  assert.equal(await page.getByRole('button', { name: 'Load more' }).count(), 0);

  // Actor: the two contacts created with the API key.
  await page.getByLabel('Actor').selectOption('API_KEY');
  await assertEventually(async () => (await rows.count()) === 2);
  for (const row of await rows.all()) assert.match((await row.textContent())!, /member key.*API key.*contact\.created/);
  assert.match(page.url(), /actor=API_KEY/);

  // Action, exact, with the actor filter removed.
  await page.getByLabel('Actor').selectOption('');
  await page.getByLabel('Action').fill('auth.login');
  await assertEventually(async () => {
    const shown = await actions.allTextContents();
    return shown.length > 0 && shown.every((a) => a === 'auth.login');
  });

  // Dates (UTC days, both included): up to yesterday matches nothing; from today, everything.
  const today = new Date().toISOString().slice(0, 10);
  const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
  await page.getByLabel('To (UTC)').fill(yesterday);
  await page.getByText('No entry matches.').waitFor();
  await page.getByLabel('To (UTC)').fill(today);
  await page.getByLabel('From (UTC)').fill(today);
  await actions.first().waitFor();
  assert.ok((await actions.allTextContents()).every((a) => a === 'auth.login'));

  // The filters live in the address: a reload keeps them; Clear filters removes them.
  await page.reload();
  await actions.first().waitFor();
  assert.equal(await page.getByLabel('Action').inputValue(), 'auth.login');
  assert.equal(await page.getByLabel('From (UTC)').inputValue(), today);
  await page.getByRole('button', { name: 'Clear filters' }).click();
  await assertEventually(async () => (await rows.count()) === 50);
  assert.deepEqual(problems, []);
});

test('roles: MEMBER and VIEWER see no channels, audit log or plan change; an ADMIN manages channels and reads the audit log but cannot check out', {
  skip: skipOutsideCI,
}, async (t) => {
  const { s } = await consoleServer(t);
  for (const role of ['MEMBER', 'VIEWER'] as const) {
    const user = await s.userWithRole(role);
    const { context, page, problems } = await newContext(browser!, s.url);
    await page.goto('/app/settings/billing');
    await logIn(page, user.email, user.password);
    const tabs = page.getByRole('navigation', { name: 'Settings' });
    await tabs.getByRole('link', { name: 'Billing' }).waitFor();
    assert.deepEqual(await tabs.getByRole('link').allTextContents(), ['Members', 'Billing'], role);
    await page.locator('.billing-current .plan-name').getByText('Pro').waitFor();
    assert.equal(await page.getByRole('button', { name: /^(Upgrade|Change) to/ }).count(), 0, `${role}: no checkout`);
    await page.getByText('Only an owner of the workspace can change its plan.').waitFor();
    if (role === 'VIEWER') {
      await assertAccessible(page, 'billing as VIEWER');
      await screenshot(page, 'settings-billing-viewer');
    }
    for (const path of ['channels', 'audit-log']) {
      await page.goto(`/app/settings/${path}`);
      await page.getByText('This part of the settings is not available to your role.').waitFor();
      assert.equal(
        await page
          .getByRole('button')
          .filter({ hasText: /Save|Send test email|Clear/ })
          .count(),
        0,
      );
    }
    assert.deepEqual(problems, [], role);
    await context.close();
  }

  const admin = await s.userWithRole('ADMIN');
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/settings/channels');
  await logIn(page, admin.email, admin.password);
  const tabs = page.getByRole('navigation', { name: 'Settings' });
  await tabs.getByRole('link', { name: 'Audit log' }).waitFor();
  assert.deepEqual(await tabs.getByRole('link').allTextContents(), ['API keys', 'Members', 'Channels', 'Billing', 'Audit log']);
  const whatsapp = page.getByRole('form', { name: 'WhatsApp channel' });
  await whatsapp.getByLabel('Provider').selectOption('whatsapp');
  assert.equal(await whatsapp.getByLabel('API base URL').inputValue(), 'https://graph.facebook.com/v20.0', 'the default base URL');
  await whatsapp.getByLabel('Phone number ID').fill('1234567890');
  await whatsapp.getByLabel('Access token').fill('EAAG-secret-token-xyz');
  await whatsapp.getByRole('button', { name: 'Save WhatsApp settings' }).click();
  await whatsapp.getByText('stored', { exact: true }).waitFor();
  // A required credential can be replaced, not cleared.
  await whatsapp.getByRole('button', { name: 'Replace credentials' }).waitFor();
  assert.equal(await whatsapp.getByRole('button', { name: /Clear/ }).count(), 0);
  assert.deepEqual((await resolveChannel(s.db, s.config, s.workspaceId, 'WHATSAPP')).credentials, { accessToken: 'EAAG-secret-token-xyz' });
  assert.ok(!(await page.content()).includes('EAAG-secret-token-xyz'));

  await tabs.getByRole('link', { name: 'Billing' }).click();
  await page.locator('.billing-current .plan-name').getByText('Pro').waitFor();
  assert.equal(await page.getByRole('button', { name: /^(Upgrade|Change) to/ }).count(), 0, 'ADMIN: checkout is for the OWNER');
  await tabs.getByRole('link', { name: 'Audit log' }).click();
  await page.locator('table.audit').getByText('settings.channels_updated').waitFor();
  assert.deepEqual(problems, []);
});

/** A local stand-in for api.stripe.com: creates Checkout Sessions whose payment page it serves too. */
async function fakeStripe(t: TestContext): Promise<{ base: string; sessions: URLSearchParams[] }> {
  const state = { base: '', sessions: [] as URLSearchParams[] };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/checkout/sessions') {
        state.sessions.push(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
        const id = `cs_test_${state.sessions.length}`;
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id, object: 'checkout.session', url: `${state.base}/pay/${id}` }));
        return;
      }
      if (req.method === 'GET' && req.url?.startsWith('/pay/')) {
        res
          .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
          .end('<!doctype html><html lang="en"><title>Pay</title><h1>Fake Stripe checkout</h1></html>');
        return;
      }
      res.writeHead(404).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  state.base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}

async function assertEventually(check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const start = Date.now();
  while (!(await check())) {
    if (Date.now() - start > timeoutMs) assert.fail('the change did not happen');
    await new Promise((r) => setTimeout(r, 100));
  }
}
