import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { build, waitForRun, rowsOf } from '../helpers.js';
import { sql } from 'drizzle-orm';
import { RUN_RENDER_BUDGET_MS } from '../../src/engine/render.js';

async function setUp(t: Parameters<typeof build>[0], steps: unknown[], webhook: Record<string, unknown> = {}, env: NodeJS.ProcessEnv = {}) {
  const s = await build(t, { engine: { pollMs: 50 }, env });
  const token = await s.login(s.owner.email, s.owner.password);
  const template = await s.request('POST', '/templates', {
    token,
    body: {
      name: 'welcome',
      channel: 'EMAIL',
      content: { subject: 'Hi {{ contact.firstName }}', text: 'Order {{ trigger.order.id }} for {{ trigger.fields[0].value }}' },
    },
  });
  assert.equal(template.status, 201, template.text);
  const resolved = JSON.parse(JSON.stringify(steps).replaceAll('"TEMPLATE_ID"', String(template.body.id)));
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'flow',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: resolved,
      webhook: { lookup: 'email', path: 'customer.email', createIfNotFound: true, ...webhook },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const path = new URL(wf.body.webhook.url).pathname;
  const post = async (body: unknown) => {
    const res = await s.request('POST', path, { body });
    assert.equal(res.status, 202, res.text);
    return res.body as { runId: number; contactId: number };
  };
  return { s, token, post, templateId: template.body.id as number, workflowId: wf.body.id as number };
}

const BODY = { customer: { email: 'jane@example.com', name: 'Jane' }, order: { id: 'A-17' }, fields: [{ value: 'the blue one' }] };

test('a webhook leads to a COMPLETED run: contact updated, tagged, email recorded by the outbox', async (t) => {
  const { s, token, post, templateId } = await setUp(t, [
    { type: 'update_contact', set: { firstName: '{{ trigger.customer.name }}', 'attributes.lastOrder': '{{ trigger.order.id }}' } },
    { type: 'send_email', templateId: 'TEMPLATE_ID' },
    { type: 'add_tags', tags: ['customer', 'VIP'] },
  ]);
  const { runId, contactId } = await post(BODY);
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  assert.deepEqual(
    run.steps.map((st: { status: string }) => st.status),
    ['COMPLETED', 'COMPLETED', 'COMPLETED'],
  );
  for (const st of run.steps) assert.ok(st.startedAt && st.finishedAt && st.finishedAt >= st.startedAt);
  assert.ok(run.finishedAt);

  const contact = await s.request('GET', `/contacts/${contactId}`, { token });
  assert.equal(contact.body.firstName, 'Jane');
  assert.equal(contact.body.attributes.lastOrder, 'A-17');
  assert.deepEqual(contact.body.tags, ['customer', 'VIP']);

  const attempts = await s.request('GET', `/messages/delivery-attempts?runId=${runId}`, { token });
  assert.equal(attempts.status, 200, attempts.text);
  assert.equal(attempts.body.data.length, 1);
  const [attempt] = attempts.body.data;
  assert.equal(attempt.status, 'SENT');
  assert.equal(attempt.provider, 'outbox');
  assert.equal(attempt.to, 'jane@example.com');
  assert.equal(attempt.stepIndex, 1);
  assert.equal(attempt.templateId, templateId);
  assert.equal(attempt.rendered.subject, 'Hi Jane');
  assert.equal(attempt.rendered.text, 'Order A-17 for the blue one');
});

test('filter false ends the run early; later steps are SKIPPED', async (t) => {
  const { s, token, post } = await setUp(t, [
    { type: 'filter', condition: 'trigger.total > 100' },
    { type: 'add_tags', tags: ['big-spender'] },
  ]);
  const small = await post({ ...BODY, total: 20 });
  const big = await post({ ...BODY, customer: { email: 'rich@example.com' }, total: 500 });
  const smallRun = await waitForRun(s, token, small.runId, ['COMPLETED', 'FAILED']);
  const bigRun = await waitForRun(s, token, big.runId, ['COMPLETED', 'FAILED']);
  assert.deepEqual(
    smallRun.steps.map((st: { status: string }) => st.status),
    ['COMPLETED', 'SKIPPED'],
  );
  assert.deepEqual(
    bigRun.steps.map((st: { status: string }) => st.status),
    ['COMPLETED', 'COMPLETED'],
  );
  assert.deepEqual((await s.request('GET', `/contacts/${small.contactId}`, { token })).body.tags, []);
  assert.deepEqual((await s.request('GET', `/contacts/${big.contactId}`, { token })).body.tags, ['big-spender']);
});

test('wait parks the run (WAITING) and resumes it on time', async (t) => {
  const { s, token, post } = await setUp(t, [
    { type: 'wait', seconds: 1 },
    { type: 'add_tags', tags: ['after-wait'] },
  ]);
  const started = Date.now();
  const { runId } = await post(BODY);
  const waiting = await waitForRun(s, token, runId, ['WAITING']);
  assert.equal(waiting.steps[0].status, 'WAITING');
  const done = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(done.status, 'COMPLETED');
  assert.ok(Date.now() - started >= 1000, 'not before the wait is over');
});

test('a failing step fails the run with its error and leaves later steps PENDING', async (t) => {
  const { s, token, post } = await setUp(t, [
    // The trigger's order id is no phone number: the step fails when the run executes.
    { type: 'update_contact', set: { phone: '{{ trigger.order.id }}' } },
    { type: 'add_tags', tags: ['never'] },
  ]);
  const { runId } = await post(BODY);
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'FAILED');
  assert.equal(run.steps[0].status, 'FAILED');
  assert.match(run.steps[0].error, /"A-17" is not a phone number/);
  assert.equal(run.steps[1].status, 'PENDING');
});

test('update_contact with a value holding U+0000 (a webhook may send one) fails the step and leaves the contact as it was, on every store', async (t) => {
  const { s, token, post } = await setUp(t, [
    { type: 'update_contact', set: { firstName: '{{ trigger.customer.name }}' } },
    { type: 'add_tags', tags: ['never'] },
  ]);
  const { runId, contactId } = await post({ ...BODY, customer: { ...BODY.customer, name: 'Ada\u0000Lovelace' } });
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'FAILED');
  assert.match(run.steps[0].error, /firstName contains U\+0000/);
  assert.equal(run.steps[1].status, 'PENDING');
  const contact = (await s.request('GET', `/contacts/${contactId}`, { token })).body;
  assert.ok(!String(contact.firstName).includes('\u0000'));
  assert.deepEqual(contact.tags, []);
});

test('update_contact cannot grow a contact past the 64 KiB of attributes the API allows: the step fails, the contact stays', async (t) => {
  const { s, token, post } = await setUp(t, [
    { type: 'update_contact', set: { 'attributes.a': '{{ trigger.note }}', 'attributes.b': '{{ trigger.note }}' } },
    { type: 'add_tags', tags: ['never'] },
  ]);
  // Each value alone is well under the bound; together they are over it.
  const { runId, contactId } = await post({ ...BODY, note: 'x'.repeat(40_000) });
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'FAILED');
  assert.match(run.steps[0].error, /attributes would be more than 65536 bytes of JSON/);
  assert.equal(run.steps[1].status, 'PENDING');
  const contact = (await s.request('GET', `/contacts/${contactId}`, { token })).body;
  assert.deepEqual(contact.attributes, {});
  assert.deepEqual(contact.tags, []);
});

test("a run's templates share one render budget: a run of many slow fields holds the engine's thread no longer than one template may", async (t) => {
  // Each field alone runs into the render limit of a string (1 s); without a budget for the
  // whole run, fifty such fields in each of many steps would hold the thread a second each.
  const slow = '{% for i in (1..3000) %}{% for j in (1..3000) %}{% endfor %}{% endfor %}';
  const step = { type: 'update_contact', set: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`attributes.f${i}`, slow])) };
  const { s, token, post } = await setUp(t, [step, step, { type: 'add_tags', tags: ['never'] }]);
  const { runId, contactId } = await post(BODY);
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED'], 30_000);
  assert.equal(run.status, 'FAILED', JSON.stringify(run.steps));
  assert.match(run.steps[0].error, new RegExp(`the run's templates took more than their ${RUN_RENDER_BUDGET_MS} ms of rendering`));
  assert.deepEqual([run.steps[1].status, run.steps[2].status], ['PENDING', 'PENDING']);
  assert.deepEqual((await s.request('GET', `/contacts/${contactId}`, { token })).body.attributes, {});
});

test('http_request to a loopback address is refused and fails the step', async (t) => {
  // A literal one is refused as the workflow is saved (workflows.test.ts); a host the run
  // renders, or a name resolving to loopback, only at the call.
  for (const url of ['http://{{ "127.0.0.1" }}:9/hook', 'http://localhost:9/hook']) {
    const { s, token, post } = await setUp(t, [{ type: 'http_request', method: 'POST', url, body: { id: '{{ trigger.order.id }}' } }]);
    const { runId } = await post(BODY);
    const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
    assert.equal(run.status, 'FAILED', url);
    assert.match(run.steps[0].error, /block|private|loopback|refused/i, url);
  }
});

test("a failed http_request's error names the URL past its host masked: its path may be the credential (a Slack webhook's)", async (t) => {
  const hits: string[] = [];
  const service = createServer((req, res) => {
    hits.push(req.url ?? '');
    res.writeHead(500).end('no');
  });
  await new Promise<void>((resolve) => service.listen(0, '127.0.0.1', resolve));
  t.after(() => service.close());
  const host = `127.0.0.1:${(service.address() as AddressInfo).port}`;
  const { s, token, post } = await setUp(
    t,
    [{ type: 'http_request', method: 'POST', url: `http://${host}/services/T0001/B0001/secretPathPart?token=secretQuery` }],
    {},
    {
      SVC_HTTP_ALLOWED_HOSTS: host,
    },
  );
  const accepted = await post(BODY);
  const run = await waitForRun(s, token, accepted.runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'FAILED');
  assert.deepEqual(hits, ['/services/T0001/B0001/secretPathPart?token=secretQuery'], 'the call itself went to the whole URL');
  assert.equal(run.steps[0].error, `http_request: POST http://${host}/•••• answered 500`);
  const viewer = await s.userWithRole('VIEWER');
  assert.ok(!(await s.request('GET', `/runs/${run.runId}`, { token: viewer.token })).text.includes('secret'));
});

test('many webhooks: every run completes exactly once', async (t) => {
  const { s, token, post } = await setUp(t, [
    { type: 'add_tags', tags: ['seen'] },
    { type: 'send_email', templateId: 'TEMPLATE_ID' },
  ]);
  const accepted = await Promise.all(Array.from({ length: 120 }, (_, i) => post({ ...BODY, customer: { email: `c${i}@example.com` } })));
  for (const { runId } of accepted) {
    const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
    assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  }
  const rows = await rowsOf<{ run_id: number; n: number }>(s, sql`SELECT run_id, COUNT(*) AS n FROM delivery_attempts GROUP BY run_id`);
  assert.equal(rows.length, 120);
  assert.ok(
    rows.every((r) => r.n === 1),
    'one delivery per run',
  );
});
