/**
 * Billing through the real HTTP server: GET /billing/plan, POST /billing/checkout (OWNER
 * only), the manual provider completed in-process, and the Stripe provider against a local
 * node:http stand-in, with its signed webhook. Contract: API.md sections 2 and 5.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { eq } from 'drizzle-orm';
import { auditLogs, checkouts } from '../../src/core/db/schema.js';
import { completeManualCheckout } from '../../src/core/services/billing.js';
import { getWorkspace } from '../../src/core/services/workspaces.js';
import { signStripePayload } from '../../src/engine/stripe.js';
import { assertProblem, build, type TestServer } from '../helpers.js';

const WEBHOOK_SECRET = 'whsec_test_secret_0123456789';
const SECRET_KEY = 'sk_test_abc123';

function systemCtx(s: TestServer) {
  return { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
}

async function planOf(s: TestServer): Promise<string> {
  return (await getWorkspace({ db: s.db }, s.workspaceId)).plan;
}

async function actions(s: TestServer): Promise<string[]> {
  return (await s.db.select().from(auditLogs).where(eq(auditLogs.workspaceId, s.workspaceId))).map((r) => r.action);
}

async function checkoutRow(s: TestServer, checkoutId: number) {
  return (await s.db.select().from(checkouts).where(eq(checkouts.id, checkoutId)))[0]!;
}

async function setCheckout(s: TestServer, checkoutId: number, set: Partial<typeof checkouts.$inferInsert>): Promise<void> {
  await s.store.transaction(async (tx) => {
    await tx.update(checkouts).set(set).where(eq(checkouts.id, checkoutId));
  });
}

interface StripeCall {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  form: URLSearchParams;
}

/** A local stand-in for api.stripe.com that records each call and answers as told. */
async function fakeStripe(t: TestContext): Promise<{ base: string; calls: StripeCall[]; status: number }> {
  const state = { base: '', calls: [] as StripeCall[], status: 200 };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      state.calls.push({ method: req.method!, url: req.url!, headers: req.headers, form: new URLSearchParams(Buffer.concat(chunks).toString('utf8')) });
      if (state.status !== 200) {
        res.writeHead(state.status, { 'content-type': 'application/json' }).end(JSON.stringify({ error: { message: 'internal secret detail' } }));
        return;
      }
      const n = state.calls.length;
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ id: `cs_test_${n}`, object: 'checkout.session', url: `https://checkout.stripe.test/pay/cs_test_${n}` }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  state.base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return state;
}

async function stripeServer(t: TestContext, plan: 'STARTER' | 'GROWTH' | 'PRO' = 'STARTER') {
  const stripe = await fakeStripe(t);
  const s = await build(t, {
    plan,
    env: {
      SVC_BILLING_PROVIDER: 'stripe',
      SVC_STRIPE_BASE_URL: stripe.base,
      SVC_STRIPE_SECRET_KEY: SECRET_KEY,
      SVC_STRIPE_WEBHOOK_SECRET: WEBHOOK_SECRET,
      SVC_STRIPE_PRICE_GROWTH: 'price_growth_1',
      SVC_STRIPE_PRICE_PRO: 'price_pro_1',
      SVC_PUBLIC_URL: 'https://svc.example.test',
    },
  });
  return { s, stripe, token: await s.login(s.owner.email, s.owner.password) };
}

function completedEvent(
  sessionId: string,
  checkoutId: number,
  id = 'evt_1',
  extra: { type?: string; paymentStatus?: string | null; metadata?: unknown; clientReferenceId?: string } = {},
): string {
  const object: Record<string, unknown> = {
    id: sessionId,
    object: 'checkout.session',
    client_reference_id: extra.clientReferenceId ?? String(checkoutId),
    metadata: 'metadata' in extra ? extra.metadata : { checkoutId: String(checkoutId) },
  };
  if (extra.paymentStatus !== null) object.payment_status = extra.paymentStatus ?? 'paid';
  return JSON.stringify({ id, type: extra.type ?? 'checkout.session.completed', data: { object } });
}

function sendWebhook(s: TestServer, raw: string, signature: string | undefined) {
  return s.request('POST', '/billing/stripe/webhook', {
    raw,
    headers: { 'content-type': 'application/json', ...(signature !== undefined ? { 'stripe-signature': signature } : {}) },
  });
}

test('GET /billing/plan: plan, features and usage for every role', async (t) => {
  const s = await build(t, { plan: 'STARTER' });
  const viewer = await s.userWithRole('VIEWER');
  const res = await s.request('GET', '/billing/plan', { token: viewer.token });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.plan, 'STARTER');
  assert.equal(res.body.features.auditLog, false);
  assert.deepEqual(res.body.features.apiKeyRoles, ['VIEWER']);
  for (const k of ['contacts', 'workflows', 'templates', 'apiKeys', 'members', 'runsThisMonth']) assert.equal(typeof res.body.usage[k], 'number', k);
  assert.equal(res.body.usage.members, 2);

  await s.mintKey('VIEWER');
  const again = await s.request('GET', '/billing/plan', { token: viewer.token });
  assert.equal(again.body.usage.apiKeys, 1);

  const pro = await build(t, { plan: 'PRO' });
  const proRes = await pro.request('GET', '/billing/plan', { token: await pro.mintKey('VIEWER') });
  assert.equal(proRes.status, 200, proRes.text);
  assert.equal(proRes.body.features.auditLog, true);
  assert.deepEqual(proRes.body.features.apiKeyRoles, ['VIEWER', 'MEMBER', 'ADMIN']);

  assertProblem(await s.request('GET', '/billing/plan'), 401);
});

test('POST /billing/checkout: OWNER only; plan must be GROWTH or PRO and differ from the current one', async (t) => {
  const s = await build(t, { plan: 'GROWTH' });
  const owner = await s.login(s.owner.email, s.owner.password);
  const admin = await s.userWithRole('ADMIN');
  const viewer = await s.userWithRole('VIEWER');
  assertProblem(await s.request('POST', '/billing/checkout', { token: admin.token, body: { plan: 'PRO' } }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/billing/checkout', { token: viewer.token, body: { plan: 'PRO' } }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/billing/checkout', { token: await s.mintKey('ADMIN'), body: { plan: 'PRO' } }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/billing/checkout', { token: owner, body: { plan: 'ENTERPRISE' } }), 422, 'validation_failed');
  assertProblem(await s.request('POST', '/billing/checkout', { token: owner, body: { plan: 'STARTER' } }), 422, 'validation_failed');
  assertProblem(await s.request('POST', '/billing/checkout', { token: owner, body: { plan: 'PRO', extra: 1 } }), 422, 'validation_failed');
  assertProblem(await s.request('POST', '/billing/checkout', { token: owner, body: { plan: 'GROWTH' } }), 422, 'plan_unchanged');
  assert.equal((await s.db.select().from(checkouts)).length, 0);
  assert.equal(await planOf(s), 'GROWTH');
});

test('manual provider: checkout is PENDING until the operator completes it; then ADMIN keys can be minted', async (t) => {
  const s = await build(t, { plan: 'STARTER' });
  const owner = await s.login(s.owner.email, s.owner.password);
  assertProblem(await s.request('POST', '/api-keys', { token: owner, body: { name: 'a', role: 'ADMIN' } }), 403, 'plan_upgrade_required');

  const res = await s.request('POST', '/billing/checkout', { token: owner, body: { plan: 'GROWTH' } });
  assert.equal(res.status, 201, res.text);
  assert.deepEqual(Object.keys(res.body).sort(), ['checkoutId', 'plan', 'status', 'url']);
  assert.equal(res.body.plan, 'GROWTH');
  assert.equal(res.body.status, 'PENDING');
  assert.equal(res.body.url, null);
  assert.equal(await planOf(s), 'STARTER');

  assert.deepEqual(await completeManualCheckout(systemCtx(s), res.body.checkoutId), { workspaceId: s.workspaceId, plan: 'GROWTH' });
  assert.equal(await planOf(s), 'GROWTH');
  await assert.rejects(completeManualCheckout(systemCtx(s), res.body.checkoutId), { code: 'checkout_not_pending' });

  const minted = await s.request('POST', '/api-keys', { token: owner, body: { name: 'a', role: 'ADMIN' } });
  assert.equal(minted.status, 201, minted.text);
  const plan = await s.request('GET', '/billing/plan', { token: owner });
  assert.equal(plan.body.plan, 'GROWTH');
  const logged = await actions(s);
  for (const a of ['billing.checkout_created', 'billing.checkout_completed', 'workspace.plan_changed']) assert.ok(logged.includes(a), `${a} in ${logged}`);
});

test('stripe provider: creates a Checkout Session; a signed completion changes the plan once', async (t) => {
  const { s, stripe, token } = await stripeServer(t);
  const res = await s.request('POST', '/billing/checkout', { token, body: { plan: 'PRO' } });
  assert.equal(res.status, 201, res.text);
  assert.equal(res.body.status, 'PENDING');
  assert.equal(res.body.url, 'https://checkout.stripe.test/pay/cs_test_1');
  const checkoutId: number = res.body.checkoutId;

  assert.equal(stripe.calls.length, 1);
  const call = stripe.calls[0]!;
  assert.equal(call.method, 'POST');
  assert.equal(call.url, '/v1/checkout/sessions');
  assert.equal(call.headers.authorization, `Bearer ${SECRET_KEY}`);
  assert.match(String(call.headers['content-type']), /^application\/x-www-form-urlencoded/);
  assert.equal(call.form.get('mode'), 'subscription');
  assert.equal(call.form.get('line_items[0][price]'), 'price_pro_1');
  assert.equal(call.form.get('line_items[0][quantity]'), '1');
  assert.equal(call.form.get('client_reference_id'), String(checkoutId));
  assert.equal(call.form.get('metadata[checkoutId]'), String(checkoutId));
  assert.match(
    call.form.get('success_url') ?? '',
    /^https:\/\/svc\.example\.test\/app\/settings\/billing\?checkout=\d+$/,
    "back to the console's Billing page",
  );
  assert.match(call.form.get('cancel_url') ?? '', /^https:\/\/svc\.example\.test\/app\/settings\/billing\?checkout=\d+&cancelled=1$/);
  const row = await checkoutRow(s, checkoutId);
  assert.equal(row.providerRef, 'cs_test_1');
  assert.equal(row.provider, 'stripe');

  // Another event type is acknowledged and ignored.
  const other = JSON.stringify({ id: 'evt_0', type: 'invoice.paid', data: { object: {} } });
  const ignored = await sendWebhook(s, other, signStripePayload(other, WEBHOOK_SECRET));
  assert.equal(ignored.status, 200, ignored.text);
  assert.equal(ignored.body.received, true);
  assert.equal(await planOf(s), 'STARTER');

  const raw = completedEvent('cs_test_1', checkoutId);
  const ok = await sendWebhook(s, raw, signStripePayload(raw, WEBHOOK_SECRET));
  assert.equal(ok.status, 200, ok.text);
  assert.deepEqual(ok.body, { received: true });
  assert.equal(await planOf(s), 'PRO');
  const completedAt = (await checkoutRow(s, checkoutId)).completedAt;
  assert.ok(completedAt);

  // Replaying it changes nothing.
  const auditCount = (await actions(s)).length;
  const replay = await sendWebhook(s, raw, signStripePayload(raw, WEBHOOK_SECRET));
  assert.equal(replay.status, 200, replay.text);
  assert.equal(await planOf(s), 'PRO');
  assert.equal((await actions(s)).length, auditCount);
  assert.equal((await checkoutRow(s, checkoutId)).completedAt, completedAt);
  assert.equal((await actions(s)).filter((a) => a === 'billing.checkout_completed').length, 1);

  // The manual CLI path does not complete Stripe checkouts.
  await assert.rejects(completeManualCheckout(systemCtx(s), checkoutId), { code: 'checkout_not_manual' });
});

test('stripe webhook: metadata.checkoutId finds a checkout only while its session id is not stored yet', async (t) => {
  const { s, token } = await stripeServer(t);
  const res = await s.request('POST', '/billing/checkout', { token, body: { plan: 'GROWTH' } });
  assert.equal(res.status, 201, res.text);
  const checkoutId: number = res.body.checkoutId;
  // The checkout's session is cs_test_1: an event for another session does not complete it.
  const other = completedEvent('cs_other', checkoutId);
  assert.equal((await sendWebhook(s, other, signStripePayload(other, WEBHOOK_SECRET))).status, 200);
  assert.equal(await planOf(s), 'STARTER');
  // The webhook overtook the answer that carried the session id: metadata (set by svc's own key) finds it.
  await setCheckout(s, checkoutId, { providerRef: null });
  const early = completedEvent('cs_test_1', checkoutId, 'evt_2');
  assert.equal((await sendWebhook(s, early, signStripePayload(early, WEBHOOK_SECRET))).status, 200);
  assert.equal(await planOf(s), 'GROWTH');
});

test('stripe webhook: only a paid session completes (payment_status paid or no_payment_required); unpaid ones wait for async_payment_succeeded', async (t) => {
  const { s, token } = await stripeServer(t);
  const res = await s.request('POST', '/billing/checkout', { token, body: { plan: 'PRO' } });
  assert.equal(res.status, 201, res.text);
  const checkoutId: number = res.body.checkoutId;
  const send = async (raw: string) => {
    const r = await sendWebhook(s, raw, signStripePayload(raw, WEBHOOK_SECRET));
    assert.equal(r.status, 200, r.text);
    return r;
  };
  for (const paymentStatus of ['unpaid', 'UNPAID', 'Paid', '', null]) {
    const r = await send(completedEvent('cs_test_1', checkoutId, `evt_${paymentStatus}`, { paymentStatus }));
    assert.deepEqual(r.body, { received: true, ignored: true }, `payment_status ${paymentStatus}`);
    assert.equal(await planOf(s), 'STARTER', `payment_status ${JSON.stringify(paymentStatus)} must not change the plan`);
  }
  assert.equal((await checkoutRow(s, checkoutId)).status, 'PENDING');
  // The delayed payment succeeds later.
  await send(completedEvent('cs_test_1', checkoutId, 'evt_async', { type: 'checkout.session.async_payment_succeeded' }));
  assert.equal(await planOf(s), 'PRO');
  assert.equal((await actions(s)).filter((a) => a === 'billing.checkout_completed').length, 1);

  // no_payment_required (a 100% coupon) completes too.
  await setCheckout(s, checkoutId, { status: 'PENDING', completedAt: null });
  const down = await s.request('POST', '/billing/checkout', { token, body: { plan: 'GROWTH' } });
  assert.equal(down.status, 201, down.text);
  await send(completedEvent('cs_test_2', down.body.checkoutId, 'evt_free', { paymentStatus: 'no_payment_required' }));
  assert.equal(await planOf(s), 'GROWTH');
});

test('stripe webhook: client_reference_id never finds a checkout (a Payment Link lets any buyer set it)', async (t) => {
  const { s, token } = await stripeServer(t);
  const res = await s.request('POST', '/billing/checkout', { token, body: { plan: 'PRO' } });
  assert.equal(res.status, 201, res.text);
  const checkoutId: number = res.body.checkoutId;
  await setCheckout(s, checkoutId, { providerRef: null });
  // A paid session of some other product, whose buyer put our checkout id in client_reference_id.
  for (const [i, metadata] of [{}, { checkoutId: '' }, { checkoutId: 'x' }, null].entries()) {
    const raw = completedEvent(`cs_payment_link_${i}`, checkoutId, `evt_pl_${i}`, { metadata, clientReferenceId: String(checkoutId) });
    const r = await sendWebhook(s, raw, signStripePayload(raw, WEBHOOK_SECRET));
    assert.equal(r.status, 200, r.text);
    assert.equal(await planOf(s), 'STARTER', `metadata ${JSON.stringify(metadata)}`);
  }
  assert.equal((await checkoutRow(s, checkoutId)).status, 'PENDING');
  assert.ok(!(await actions(s)).includes('billing.checkout_completed'));
  // A malformed object (no session id) is acknowledged and ignored, never a 500.
  const bare = JSON.stringify({
    id: 'evt_bare',
    type: 'checkout.session.completed',
    data: { object: { payment_status: 'paid', metadata: { checkoutId: String(checkoutId) } } },
  });
  const r = await sendWebhook(s, bare, signStripePayload(bare, WEBHOOK_SECRET));
  assert.equal(r.status, 200, r.text);
  assert.equal(await planOf(s), 'STARTER');
  const weird = JSON.stringify({ id: 'evt_weird', type: 'checkout.session.completed', data: { object: { id: 42, payment_status: 'paid' } } });
  assert.equal((await sendWebhook(s, weird, signStripePayload(weird, WEBHOOK_SECRET))).status, 200);
});

test('stripe webhook: wrong secret, stale timestamp, missing or malformed header → 400 signature_invalid, plan unchanged', async (t) => {
  const { s, token } = await stripeServer(t);
  const res = await s.request('POST', '/billing/checkout', { token, body: { plan: 'PRO' } });
  assert.equal(res.status, 201, res.text);
  const raw = completedEvent('cs_test_1', res.body.checkoutId);
  const now = Math.floor(Date.now() / 1000);
  const bad: (string | undefined)[] = [
    signStripePayload(raw, 'whsec_wrong'),
    signStripePayload(raw, WEBHOOK_SECRET, now - 3600),
    signStripePayload(raw, WEBHOOK_SECRET, now + 3600),
    undefined,
    '',
    'garbage',
    `t=${now}`,
    signStripePayload(`${raw} `, WEBHOOK_SECRET),
  ];
  for (const header of bad) assertProblem(await sendWebhook(s, raw, header), 400, 'signature_invalid');
  assert.equal(await planOf(s), 'STARTER');

  // Several v1 values: any one matching is enough (secret rotation).
  const good = signStripePayload(raw, WEBHOOK_SECRET, now);
  const rotated = `t=${now},v1=${'0'.repeat(64)},${good.split(',')[1]}`;
  const ok = await sendWebhook(s, raw, rotated);
  assert.equal(ok.status, 200, ok.text);
  assert.equal(await planOf(s), 'PRO');
});

test('stripe provider: Stripe answering 500 → 502 payment_provider_error, nothing left behind', async (t) => {
  const { s, stripe, token } = await stripeServer(t);
  stripe.status = 500;
  const res = await s.request('POST', '/billing/checkout', { token, body: { plan: 'GROWTH' } });
  assertProblem(res, 502, 'payment_provider_error');
  assert.doesNotMatch(res.text, /internal secret detail|sk_test/);
  assert.equal(stripe.calls.length, 1);
  assert.equal((await s.db.select().from(checkouts)).length, 0);
  assert.equal(await planOf(s), 'STARTER');
  assert.ok(!(await actions(s)).includes('billing.checkout_created'));
});

test('stripe webhook is not served when the provider is manual', async (t) => {
  const s = await build(t, { plan: 'STARTER' });
  const raw = completedEvent('cs_1', 1);
  assertProblem(await sendWebhook(s, raw, signStripePayload(raw, WEBHOOK_SECRET)), 404);
});

test('runsThisMonth counts every run started: webhooks (also in one batch), replays and automation runs, and no refused POST', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const runs = async () => (await s.request('GET', '/billing/plan', { token })).body.usage.runsThisMonth as number;
  assert.equal(await runs(), 0);
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com' } });
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'w', triggerSource: 'WEBHOOK', status: 'ACTIVE', webhook: { lookup: 'email', path: 'email' } },
  });
  assert.equal(wf.status, 201, wf.text);
  const path = new URL(wf.body.webhook.url).pathname;
  // Ten at once share group commits; two are refused (no such contact) and count nothing.
  const posts = await Promise.all([
    ...Array.from({ length: 10 }, () => s.request('POST', path, { body: { email: 'ann@example.com' } })),
    ...Array.from({ length: 2 }, () => s.request('POST', path, { body: { email: 'nobody@example.com' } })),
  ]);
  assert.deepEqual(
    posts.map((r) => r.status),
    [...Array(10).fill(202), 404, 404],
  );
  assert.equal(await runs(), 10);
  // The run ids answered are the runs inserted (the id is read without RETURNING).
  for (const r of posts.slice(0, 10)) {
    const run = await s.request('GET', `/runs/${r.body.runId}`, { token });
    assert.equal(run.status, 200, run.text);
    assert.equal(run.body.contactId, contact.body.id);
  }

  const events = await s.request('GET', `/workflows/${wf.body.id}/webhook-events`, { token });
  const accepted = events.body.data.find((e: { statusCode: number }) => e.statusCode === 202);
  const replay = await s.request('POST', `/webhook-events/${accepted.id}/replay`, { token });
  assert.equal(replay.status, 202, replay.text);
  const automation = await s.request('POST', '/automations', {
    token,
    body: {
      name: 'a',
      graph: {
        nodes: [
          { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
          { id: 'x', type: 'add_tags', data: { tags: ['x'] } },
        ],
        edges: [{ from: 't', to: 'x' }],
      },
    },
  });
  assert.equal(automation.status, 201, automation.text);
  assert.equal((await s.request('PATCH', `/automations/${automation.body.id}`, { token, body: { status: 'ACTIVE' } })).status, 200);
  const started = await s.request('POST', `/automations/${automation.body.id}/runs`, { token, body: { contactId: contact.body.id } });
  assert.equal(started.status, 202, started.text);
  const run = await s.request('GET', `/runs/${started.body.runId}`, { token });
  assert.equal(run.body.contactId, contact.body.id);
  assert.equal(await runs(), 12);
  // Another workspace's count is its own.
  const other = await s.otherWorkspace();
  assert.equal((await s.request('GET', '/billing/plan', { token: other.token })).body.usage.runsThisMonth, 0);
});
