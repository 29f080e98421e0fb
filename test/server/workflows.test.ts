/**
 * Workflows (the legacy step-array shape) through the real server: create/read/update, the
 * step catalog's validation, activation and the webhook URL it mints, the write-only
 * signing secret, roles, workspace isolation, audit rows, and the read side of runs.
 * Contract: SPEC.md sections 2-8, API.md sections 1 and 3 ("Workflow").
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { and, asc, eq } from 'drizzle-orm';
import { auditLogs, workflows } from '../../src/core/db/schema.js';
import { build, type HttpResult, type TestServer, assertProblem, buildAsOwner } from '../helpers.js';

// ---------------------------------------------------------------------------------------
// Helpers local to this file
// ---------------------------------------------------------------------------------------

const WORKFLOW_KEYS = ['createdAt', 'id', 'name', 'status', 'steps', 'triggerSource', 'updatedAt', 'webhook'];
const WEBHOOK_KEYS = ['createIfNotFound', 'defaults', 'hasSigningSecret', 'lookup', 'path', 'url'];
const RUN_KEYS = ['contactId', 'createdAt', 'finishedAt', 'runId', 'status', 'steps', 'trigger', 'workflowId'];
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const TOKEN_RE = /^[0-9A-Za-z]{30}$/;

const setup = (t: TestContext) => buildAsOwner(t);

/** Asserts a 422 problem whose errors[] names every one of `paths`. */
function assertErrorPaths(res: HttpResult, paths: string[], code?: string): void {
  assertProblem(res, 422, code);
  assert.ok(Array.isArray(res.body.errors), `errors[] present: ${res.text}`);
  for (const e of res.body.errors) {
    assert.equal(typeof e.path, 'string');
    assert.equal(typeof e.message, 'string');
  }
  const got = res.body.errors.map((e: { path: string }) => e.path);
  for (const p of paths) assert.ok(got.includes(p), `errors[] names ${p}: ${JSON.stringify(res.body.errors)}`);
}

function assertWorkflowShape(w: any): void {
  assert.deepEqual(Object.keys(w).sort(), WORKFLOW_KEYS);
  assert.ok(Number.isInteger(w.id) && w.id > 0);
  assert.equal(typeof w.name, 'string');
  assert.ok(['DRAFT', 'ACTIVE', 'PAUSED'].includes(w.status));
  assert.ok(['WEBHOOK', 'MANUAL'].includes(w.triggerSource));
  assert.ok(Array.isArray(w.steps));
  assert.deepEqual(Object.keys(w.webhook).sort(), WEBHOOK_KEYS);
  assert.ok(w.webhook.url === null || typeof w.webhook.url === 'string');
  assert.equal(typeof w.webhook.createIfNotFound, 'boolean');
  assert.equal(typeof w.webhook.hasSigningSecret, 'boolean');
  assert.ok(w.webhook.defaults && typeof w.webhook.defaults === 'object');
  assert.match(w.createdAt, ISO_UTC);
  assert.match(w.updatedAt, ISO_UTC);
}

async function createWorkflow(s: TestServer, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await s.request('POST', '/workflows', { token, body });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

async function patch(s: TestServer, token: string, id: number, body: Record<string, unknown>): Promise<HttpResult> {
  return s.request('PATCH', `/workflows/${id}`, { token, body });
}

async function createContact(s: TestServer, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await s.request('POST', '/contacts', { token, body });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

/** The path part of a webhook URL, for posting to the test server. */
function hookPath(url: string): string {
  return new URL(url).pathname;
}

async function postHook(s: TestServer, url: string, body: unknown): Promise<HttpResult> {
  return s.request('POST', hookPath(url), { body });
}

async function auditRows(s: TestServer, workflowId: number) {
  return s.db
    .select({ action: auditLogs.action, actorType: auditLogs.actorType, actorId: auditLogs.actorId })
    .from(auditLogs)
    .where(and(eq(auditLogs.targetType, 'workflow'), eq(auditLogs.targetId, String(workflowId))))
    .orderBy(asc(auditLogs.id));
}

/** The signing secret as stored (encrypted). */
async function storedSecret(s: TestServer, workflowId: number): Promise<string | null> {
  return (await s.db.select({ secret: workflows.signingSecret }).from(workflows).where(eq(workflows.id, workflowId)))[0]!.secret;
}

async function auditDump(s: TestServer): Promise<string> {
  return JSON.stringify(await s.db.select().from(auditLogs));
}

/** One valid step of every type in the catalog (API.md section 3). */
const EVERY_STEP_TYPE = [
  { type: 'send_email', templateId: 1 },
  { type: 'send_email', templateId: 2, to: '{{ contact.email }}' },
  { type: 'send_sms', templateId: 3, to: '{{ trigger.phone }}' },
  { type: 'send_whatsapp', templateId: 4 },
  { type: 'wait', seconds: 60 },
  { type: 'add_tags', tags: ['vip', 'webhook'] },
  { type: 'remove_tags', tags: ['lead'] },
  { type: 'update_contact', set: { firstName: '{{ trigger.first_name }}', 'attributes.plan': 'pro' } },
  {
    type: 'http_request',
    method: 'POST',
    url: 'https://example.com/hook',
    headers: { 'x-id': '{{ contact.id }}' },
    body: { email: '{{ contact.email }}', n: 1 },
  },
  { type: 'http_request', method: 'GET', url: 'https://example.com/ping' },
  { type: 'filter', condition: 'contact.email != blank and trigger.score > 5' },
];

const webhookDraft = (extra: Record<string, unknown> = {}) => ({
  name: 'Inbound',
  triggerSource: 'WEBHOOK',
  steps: [{ type: 'wait', seconds: 5 }],
  ...extra,
});

// ---------------------------------------------------------------------------------------
// Create, read, update
// ---------------------------------------------------------------------------------------

test('POST /workflows creates a DRAFT workflow (201) with the documented shape', async (t) => {
  const { s, token } = await setup(t);
  const res = await s.request('POST', '/workflows', {
    token,
    body: {
      name: '  Welcome flow  ',
      triggerSource: 'WEBHOOK',
      steps: [{ type: 'add_tags', tags: ['new'] }],
      webhook: { lookup: 'email', createIfNotFound: true, defaults: { firstName: 'Friend', tags: ['lead'] } },
    },
  });
  assert.equal(res.status, 201, res.text);
  const w = res.body;
  assertWorkflowShape(w);
  assert.equal(w.name, 'Welcome flow', 'name is trimmed');
  assert.equal(w.status, 'DRAFT');
  assert.equal(w.triggerSource, 'WEBHOOK');
  assert.deepEqual(w.steps, [{ type: 'add_tags', tags: ['new'] }]);
  assert.deepEqual(w.webhook, {
    url: null,
    lookup: 'email',
    path: 'email',
    createIfNotFound: true,
    defaults: { firstName: 'Friend', tags: ['lead'] },
    hasSigningSecret: false,
  });
  assert.equal(w.createdAt, w.updatedAt);
});

test('a minimal workflow defaults to MANUAL, no steps, no lookup, no path', async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, { name: 'Bare' });
  assertWorkflowShape(w);
  assert.equal(w.triggerSource, 'MANUAL');
  assert.equal(w.status, 'DRAFT');
  assert.deepEqual(w.steps, []);
  assert.deepEqual(w.webhook, { url: null, lookup: null, path: null, createIfNotFound: false, defaults: {}, hasSigningSecret: false });
});

test('webhook.path defaults to the lookup kind name, and an explicit path is kept', async (t) => {
  const { s, token } = await setup(t);
  for (const lookup of ['email', 'phone', 'contactId']) {
    const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup } }));
    assert.equal(w.webhook.lookup, lookup);
    assert.equal(w.webhook.path, lookup, `default path for ${lookup}`);
  }
  for (const path of ['customer.email', 'form_response.answers[1].phone_number', 'fields[0].value', 'a[0][1].b', 'data.object.customer_details.email']) {
    const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email', path } }));
    assert.equal(w.webhook.path, path);
  }
  // Changing the lookup kind moves a defaulted path with it; clearing an explicit path
  // falls back to the default again.
  const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email' } }));
  let res = await patch(s, token, w.id, { webhook: { lookup: 'phone' } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.webhook.path, 'phone');
  res = await patch(s, token, w.id, { webhook: { path: 'customer.phone' } });
  assert.equal(res.body.webhook.path, 'customer.phone');
  res = await patch(s, token, w.id, { webhook: { path: null } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.webhook.path, 'phone');
});

test('GET /workflows lists newest first with a cursor; GET /workflows/:id returns one', async (t) => {
  const { s, token } = await setup(t);
  const created = [];
  for (let i = 0; i < 3; i++) created.push(await createWorkflow(s, token, { name: `wf ${i}` }));

  const all = await s.request('GET', '/workflows', { token });
  assert.equal(all.status, 200, all.text);
  assert.deepEqual(Object.keys(all.body).sort(), ['data', 'nextCursor']);
  assert.equal(all.body.nextCursor, null);
  assert.deepEqual(
    all.body.data.map((w: any) => w.id),
    created.map((w) => w.id).reverse(),
  );
  all.body.data.forEach(assertWorkflowShape);

  const page1 = await s.request('GET', '/workflows?limit=2', { token });
  assert.equal(page1.body.data.length, 2);
  assert.equal(typeof page1.body.nextCursor, 'string');
  const page2 = await s.request('GET', `/workflows?limit=2&cursor=${encodeURIComponent(page1.body.nextCursor)}`, { token });
  assert.equal(page2.status, 200, page2.text);
  assert.deepEqual(
    page2.body.data.map((w: any) => w.id),
    [created[0].id],
  );
  assert.equal(page2.body.nextCursor, null);

  const one = await s.request('GET', `/workflows/${created[1].id}`, { token });
  assert.equal(one.status, 200, one.text);
  assert.deepEqual(one.body, created[1]);

  assertProblem(await s.request('GET', '/workflows/999999', { token }), 404);
  assertProblem(await s.request('GET', '/workflows/abc', { token }), 404);
  assertProblem(await s.request('GET', '/workflows?limit=0', { token }), 400);
  assertProblem(await s.request('GET', '/workflows?limit=201', { token }), 400);
  assertProblem(await s.request('GET', '/workflows?cursor=not-a-cursor', { token }), 400);
  assertProblem(await s.request('GET', `/workflows?cursor=${Buffer.from('v1:abc').toString('base64url')}`, { token }), 400);
});

test('PATCH /workflows/:id updates the given fields and answers 200 with the whole resource', async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email', defaults: { firstName: 'A' } } }));
  await new Promise((r) => setTimeout(r, 5));
  const res = await patch(s, token, w.id, {
    name: 'Renamed',
    steps: [
      { type: 'wait', seconds: 10 },
      { type: 'add_tags', tags: ['x'] },
    ],
    webhook: { createIfNotFound: true, defaults: { firstName: 'B', lastName: 'C', attributes: { source: 'hook' }, tags: ['t1'] } },
  });
  assert.equal(res.status, 200, res.text);
  assertWorkflowShape(res.body);
  assert.equal(res.body.id, w.id);
  assert.equal(res.body.name, 'Renamed');
  assert.equal(res.body.status, 'DRAFT');
  assert.equal(res.body.triggerSource, 'WEBHOOK');
  assert.equal(res.body.steps.length, 2);
  assert.equal(res.body.webhook.lookup, 'email', 'untouched webhook fields are kept');
  assert.equal(res.body.webhook.createIfNotFound, true);
  assert.deepEqual(res.body.webhook.defaults, { firstName: 'B', lastName: 'C', attributes: { source: 'hook' }, tags: ['t1'] });
  assert.equal(res.body.createdAt, w.createdAt);
  assert.ok(res.body.updatedAt > w.updatedAt, 'updatedAt moves forward');

  const again = await s.request('GET', `/workflows/${w.id}`, { token });
  assert.deepEqual(again.body, res.body);

  // An empty PATCH changes nothing.
  const empty = await patch(s, token, w.id, {});
  assert.equal(empty.status, 200, empty.text);
  assert.equal(empty.body.name, 'Renamed');

  assertProblem(await patch(s, token, 999999, { name: 'x' }), 404);
});

test('there is no DELETE /workflows/:id: it answers 404 or 405 (never 5xx) and deletes nothing', async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, { name: 'Keep me' });
  const res = await s.request('DELETE', `/workflows/${w.id}`, { token });
  assert.ok(res.status === 404 || res.status === 405, `DELETE answered ${res.status}: ${res.text}`);
  const still = await s.request('GET', `/workflows/${w.id}`, { token });
  assert.equal(still.status, 200);
});

// ---------------------------------------------------------------------------------------
// Step validation
// ---------------------------------------------------------------------------------------

/** Templates for the send steps of EVERY_STEP_TYPE (ids 1 to 4 in a fresh database), so it can be activated. */
async function catalogTemplates(s: TestServer, token: string): Promise<void> {
  const made = [];
  for (const [channel, content] of [
    ['EMAIL', { subject: 's', text: 't' }],
    ['EMAIL', { subject: 's', html: '<p>h</p>' }],
    ['SMS', { text: 't' }],
    ['WHATSAPP', { text: 't' }],
  ] as const) {
    const res = await s.request('POST', '/templates', { token, body: { name: `${channel} template`, channel, content } });
    assert.equal(res.status, 201, res.text);
    made.push(res.body.id);
  }
  assert.deepEqual(made, [1, 2, 3, 4]);
}

test('every step type of the catalog is accepted', async (t) => {
  const { s, token } = await setup(t);
  await catalogTemplates(s, token);
  const w = await createWorkflow(s, token, { name: 'Everything', steps: EVERY_STEP_TYPE });
  assert.deepEqual(w.steps, EVERY_STEP_TYPE);
  // And each one alone, through PATCH.
  for (const step of EVERY_STEP_TYPE) {
    const res = await patch(s, token, w.id, { steps: [step] });
    assert.equal(res.status, 200, `${JSON.stringify(step)}: ${res.text}`);
    assert.deepEqual(res.body.steps, [step]);
  }
  // The steps validate again on activation (MANUAL needs no lookup).
  const act = await patch(s, token, w.id, { steps: EVERY_STEP_TYPE, status: 'ACTIVE' });
  assert.equal(act.status, 200, act.text);
  assert.equal(act.body.status, 'ACTIVE');
  assert.equal(act.body.webhook.url, null, 'a MANUAL workflow gets no webhook URL');
});

const INVALID_STEPS: [string, unknown, string][] = [
  ['unknown type', { type: 'send_pigeon' }, '/steps/0/type'],
  ['missing type', { templateId: 1 }, '/steps/0/type'],
  ['send_email without templateId', { type: 'send_email' }, '/steps/0/templateId'],
  ['send_sms with a string templateId', { type: 'send_sms', templateId: '1' }, '/steps/0/templateId'],
  ['send_whatsapp templateId 0', { type: 'send_whatsapp', templateId: 0 }, '/steps/0/templateId'],
  ['wait 0 seconds', { type: 'wait', seconds: 0 }, '/steps/0/seconds'],
  ['wait negative', { type: 'wait', seconds: -5 }, '/steps/0/seconds'],
  ['wait fractional', { type: 'wait', seconds: 1.5 }, '/steps/0/seconds'],
  ['wait as string', { type: 'wait', seconds: '60' }, '/steps/0/seconds'],
  ['wait without seconds', { type: 'wait' }, '/steps/0/seconds'],
  ['add_tags tags not an array', { type: 'add_tags', tags: 'vip' }, '/steps/0/tags'],
  ['add_tags empty', { type: 'add_tags', tags: [] }, '/steps/0/tags'],
  ['remove_tags with a blank tag', { type: 'remove_tags', tags: ['ok', '  '] }, '/steps/0/tags/1'],
  ['update_contact unknown field', { type: 'update_contact', set: { favouriteColour: 'blue' } }, '/steps/0/set/favouriteColour'],
  ['update_contact empty set', { type: 'update_contact', set: {} }, '/steps/0/set'],
  ['update_contact set not an object', { type: 'update_contact', set: ['firstName'] }, '/steps/0/set'],
  ['update_contact attribute named __proto__', { type: 'update_contact', set: { 'attributes.__proto__': 'x' } }, '/steps/0/set/attributes.__proto__'],
  ['http_request bad method', { type: 'http_request', method: 'FETCH', url: 'https://example.com' }, '/steps/0/method'],
  ['http_request without url', { type: 'http_request', method: 'GET' }, '/steps/0/url'],
  ['http_request non-http url', { type: 'http_request', method: 'GET', url: 'ftp://example.com' }, '/steps/0/url'],
  // A literal private, loopback or reserved host is refused as it is saved (every call would be
  // refused), in any spelling the URL parser reads as one; Liquid in the path does not hide it.
  ['http_request to loopback', { type: 'http_request', method: 'GET', url: 'http://127.0.0.1:8080/x' }, '/steps/0/url'],
  ['http_request to a v4-mapped loopback', { type: 'http_request', method: 'GET', url: 'http://[::ffff:127.0.0.1]/' }, '/steps/0/url'],
  ['http_request to a decimal loopback', { type: 'http_request', method: 'GET', url: 'http://2130706433/' }, '/steps/0/url'],
  ['http_request to the metadata address', { type: 'http_request', method: 'GET', url: 'http://169.254.169.254/latest/meta-data' }, '/steps/0/url'],
  ['http_request to a private host, templated path', { type: 'http_request', method: 'POST', url: 'https://10.0.0.1/c/{{ contact.id }}' }, '/steps/0/url'],
  ['http_request headers array', { type: 'http_request', method: 'GET', url: 'https://example.com', headers: ['a'] }, '/steps/0/headers'],
  ['filter empty', { type: 'filter', condition: '' }, '/steps/0/condition'],
  ['filter blank', { type: 'filter', condition: '   ' }, '/steps/0/condition'],
  ['filter missing', { type: 'filter' }, '/steps/0/condition'],
  ['unknown field on a step', { type: 'wait', seconds: 5, minutes: 1 }, '/steps/0/minutes'],
  ['Liquid syntax error in to', { type: 'send_email', templateId: 1, to: '{{ contact.name' }, '/steps/0/to'],
  ['Liquid syntax error in update_contact', { type: 'update_contact', set: { firstName: '{{ contact.name' } }, '/steps/0/set/firstName'],
  ['Liquid syntax error in http body', { type: 'http_request', method: 'POST', url: 'https://example.com', body: { a: ['{% if x %}'] } }, '/steps/0/body/a/0'],
  ['Liquid syntax error in a filter', { type: 'filter', condition: '{{ contact.email' }, '/steps/0/condition'],
];

test('invalid steps are refused with 422 and a path per problem, on POST and on PATCH', async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, { name: 'Valid', steps: [{ type: 'wait', seconds: 1 }] });
  for (const [label, step, path] of INVALID_STEPS) {
    const created = await s.request('POST', '/workflows', { token, body: { name: label, steps: [step] } });
    assertErrorPaths(created, [path]);
    const patched = await patch(s, token, w.id, { steps: [step] });
    assertErrorPaths(patched, [path]);
  }
  // Nothing was created and the valid workflow is unchanged.
  const list = await s.request('GET', '/workflows', { token });
  assert.deepEqual(
    list.body.data.map((x: any) => x.id),
    [w.id],
  );
  assert.deepEqual(list.body.data[0].steps, [{ type: 'wait', seconds: 1 }]);
});

test('an http_request URL is checked against the outbound policy as it is saved, when its host is literal', async (t) => {
  const { s, token } = await setup(t);
  // Names and templated hosts are known only at the call, and checked there.
  for (const url of ['http://localhost:9/x', 'https://{{ trigger.host }}/x', '{{ trigger.url }}', 'http://{{ trigger.ip }}:8080/', 'https://93.184.216.34/x']) {
    const res = await s.request('POST', '/workflows', { token, body: { name: url, steps: [{ type: 'http_request', method: 'GET', url }] } });
    assert.equal(res.status, 201, `${url}: ${res.text}`);
  }
  const refused = await s.request('POST', '/workflows', {
    token,
    body: { name: 'x', steps: [{ type: 'http_request', method: 'GET', url: 'http://[::1]:3000/' }] },
  });
  assertErrorPaths(refused, ['/steps/0/url']);
  assert.match(refused.body.errors[0].message, /private, loopback or reserved address.*SVC_HTTP_ALLOWED_HOSTS/);

  // What the operator allows is saved.
  const allowed = await buildAsOwner(t, { env: { SVC_HTTP_ALLOWED_HOSTS: '127.0.0.1:8080' } });
  const ok = await allowed.s.request('POST', '/workflows', {
    token: allowed.token,
    body: { name: 'allowed', steps: [{ type: 'http_request', method: 'GET', url: 'http://127.0.0.1:8080/hook' }] },
  });
  assert.equal(ok.status, 201, ok.text);
  const otherPort = await allowed.s.request('POST', '/workflows', {
    token: allowed.token,
    body: { name: 'other port', steps: [{ type: 'http_request', method: 'GET', url: 'http://127.0.0.1:8081/hook' }] },
  });
  assertErrorPaths(otherPort, ['/steps/0/url']);
});

test('step errors name the right index and every problem at once', async (t) => {
  const { s, token } = await setup(t);
  const res = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'Many problems',
      steps: [{ type: 'wait', seconds: 5 }, { type: 'send_email' }, { type: 'wait', seconds: 0 }, { type: 'filter', condition: '' }],
    },
  });
  assertErrorPaths(res, ['/steps/1/templateId', '/steps/2/seconds', '/steps/3/condition']);
  assert.ok(!res.body.errors.some((e: any) => e.path.startsWith('/steps/0')), 'the valid step is not blamed');
  const syntax = res.body.errors.find((e: any) => e.path === '/steps/1/templateId');
  assert.ok(syntax.message.length > 0);

  const liquid = await s.request('POST', '/workflows', {
    token,
    body: { name: 'Liquid', steps: [{ type: 'send_sms', templateId: 1, to: 'Hi {{ contact.name' }] },
  });
  assertErrorPaths(liquid, ['/steps/0/to']);
  assert.match(JSON.stringify(liquid.body.errors), /syntax|line|col/i, 'the message describes the template error');
});

// ---------------------------------------------------------------------------------------
// Activation and the webhook URL
// ---------------------------------------------------------------------------------------

test('activating a WEBHOOK workflow without a lookup is 422 webhook_lookup_required and changes nothing', async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, webhookDraft());
  const res = await patch(s, token, w.id, { status: 'ACTIVE' });
  assertProblem(res, 422, 'webhook_lookup_required');
  const after = await s.request('GET', `/workflows/${w.id}`, { token });
  assert.equal(after.body.status, 'DRAFT');
  assert.equal(after.body.webhook.url, null);

  // Creating it ACTIVE straight away is refused the same way, and creates nothing.
  const direct = await s.request('POST', '/workflows', { token, body: webhookDraft({ name: 'Direct', status: 'ACTIVE' }) });
  assertProblem(direct, 422, 'webhook_lookup_required');
  const list = await s.request('GET', '/workflows', { token });
  assert.equal(list.body.data.length, 1);

  // Clearing the lookup of an ACTIVE workflow is refused too.
  await patch(s, token, w.id, { webhook: { lookup: 'email' } });
  assert.equal((await patch(s, token, w.id, { status: 'ACTIVE' })).status, 200);
  assertProblem(await patch(s, token, w.id, { webhook: { lookup: null } }), 422, 'webhook_lookup_required');
  assert.equal((await s.request('GET', `/workflows/${w.id}`, { token })).body.webhook.lookup, 'email');
});

test('activation mints {publicUrl}/v1/webhooks/in/<30 base62> and the URL accepts posts', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email' } }));
  assert.equal(w.webhook.url, null, 'no URL before activation');
  const res = await patch(s, token, w.id, { status: 'ACTIVE' });
  assert.equal(res.status, 200, res.text);
  assertWorkflowShape(res.body);
  assert.equal(res.body.status, 'ACTIVE');
  const url: string = res.body.webhook.url;
  const prefix = `${s.config.publicUrl}/v1/webhooks/in/`;
  assert.ok(url.startsWith(prefix), `${url} starts with ${prefix}`);
  assert.match(url.slice(prefix.length), TOKEN_RE);
  assert.equal((await s.request('GET', `/workflows/${w.id}`, { token })).body.webhook.url, url);

  const hook = await postHook(s, url, { email: 'ann@example.com' });
  assert.equal(hook.status, 202, hook.text);
  assert.equal(hook.body.contactId, contact.id);

  // Created ACTIVE directly also gets a URL; every workflow gets its own token.
  const other = await createWorkflow(s, token, webhookDraft({ status: 'ACTIVE', webhook: { lookup: 'phone' } }));
  assert.equal(other.status, 'ACTIVE');
  assert.match(other.webhook.url.slice(prefix.length), TOKEN_RE);
  assert.notEqual(other.webhook.url, url);
});

test('the webhook URL is built from the configured public URL (SVC_PUBLIC_URL)', async (t) => {
  const s = await build(t, { env: { SVC_PUBLIC_URL: 'https://hooks.example.com/' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const w = await createWorkflow(s, token, webhookDraft({ status: 'ACTIVE', webhook: { lookup: 'email' } }));
  assert.match(w.webhook.url, /^https:\/\/hooks\.example\.com\/v1\/webhooks\/in\/[0-9A-Za-z]{30}$/);
});

test('pausing keeps the token and URL but the URL answers 404; re-activating reuses the same token', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const w = await createWorkflow(s, token, webhookDraft({ status: 'ACTIVE', webhook: { lookup: 'email' } }));
  const url = w.webhook.url;
  assert.equal((await postHook(s, url, { email: 'ann@example.com' })).status, 202);

  const paused = await patch(s, token, w.id, { status: 'PAUSED' });
  assert.equal(paused.status, 200, paused.text);
  assert.equal(paused.body.status, 'PAUSED');
  assert.equal(paused.body.webhook.url, url, 'the URL is still shown while paused');
  assertProblem(await postHook(s, url, { email: 'ann@example.com' }), 404, 'webhook_not_found');

  // Edits while paused do not touch the token.
  await patch(s, token, w.id, { name: 'Edited while paused', webhook: { path: 'email' } });

  const again = await patch(s, token, w.id, { status: 'ACTIVE' });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.body.webhook.url, url, 'same token after re-activation');
  assert.equal((await postHook(s, url, { email: 'ann@example.com' })).status, 202);

  // Back to DRAFT also keeps the token and refuses posts.
  const draft = await patch(s, token, w.id, { status: 'DRAFT' });
  assert.equal(draft.body.webhook.url, url);
  assertProblem(await postHook(s, url, { email: 'ann@example.com' }), 404);
  assert.equal((await patch(s, token, w.id, { status: 'ACTIVE' })).body.webhook.url, url);
});

test('an ACTIVE workflow switched to MANUAL no longer resolves its webhook URL (404)', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const w = await createWorkflow(s, token, webhookDraft({ status: 'ACTIVE', webhook: { lookup: 'email' } }));
  const res = await patch(s, token, w.id, { triggerSource: 'MANUAL' });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.status, 'ACTIVE');
  assertProblem(await postHook(s, w.webhook.url, { email: 'ann@example.com' }), 404);
});

// ---------------------------------------------------------------------------------------
// The signing secret
// ---------------------------------------------------------------------------------------

test('signingSecret is write-only, reported as hasSigningSecret, cleared with null, encrypted at rest', async (t) => {
  const { s, token } = await setup(t);
  const secret = 'whsec-Very-Secret-Value-0123456789';
  const created = await s.request('POST', '/workflows', { token, body: webhookDraft({ webhook: { lookup: 'email', signingSecret: secret } }) });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.webhook.hasSigningSecret, true);
  assert.ok(!('signingSecret' in created.body.webhook));
  assert.ok(!created.text.includes(secret), 'the secret is never in a response');
  const id = created.body.id;

  const activated = await patch(s, token, id, { status: 'ACTIVE' });
  const responses = [
    activated,
    await s.request('GET', `/workflows/${id}`, { token }),
    await s.request('GET', '/workflows', { token }),
    await patch(s, token, id, { name: 'Renamed' }),
  ];
  for (const r of responses) {
    assert.equal(r.status, 200, r.text);
    assert.ok(!r.text.includes(secret), 'the secret is never in a response');
  }
  assert.equal(responses[1]!.body.webhook.hasSigningSecret, true, 'PATCH without webhook keeps the secret');

  // Stored encrypted: the raw secret is nowhere in the workflows table (or the audit log).
  const rows = await s.db.select().from(workflows);
  const dump = JSON.stringify(rows);
  assert.ok(!dump.includes(secret), 'the raw secret is not stored');
  assert.ok(!dump.includes(Buffer.from(secret).toString('base64')), 'not merely base64-encoded either');
  const stored = rows.find((r) => r.id === id)!.signingSecret;
  assert.equal(typeof stored, 'string');
  assert.notEqual(stored, secret);
  assert.ok(!(await auditDump(s)).includes(secret), 'the secret is not in the audit log');

  // Rotating keeps it hidden; clearing with null says false.
  const rotated = await patch(s, token, id, { webhook: { signingSecret: 'another-secret-value' } });
  assert.equal(rotated.status, 200, rotated.text);
  assert.equal(rotated.body.webhook.hasSigningSecret, true);
  assert.ok(!rotated.text.includes('another-secret-value'));
  assert.notEqual(await storedSecret(s, id), stored);

  const cleared = await patch(s, token, id, { webhook: { signingSecret: null } });
  assert.equal(cleared.status, 200, cleared.text);
  assert.equal(cleared.body.webhook.hasSigningSecret, false);
  assert.equal(await storedSecret(s, id), null);

  // Workflows without one say false.
  const plain = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email' } }));
  assert.equal(plain.webhook.hasSigningSecret, false);
  assertErrorPaths(await patch(s, token, plain.id, { webhook: { signingSecret: '' } }), ['/webhook/signingSecret']);
  assertErrorPaths(await patch(s, token, plain.id, { webhook: { signingSecret: 42 } }), ['/webhook/signingSecret']);
});

// ---------------------------------------------------------------------------------------
// Roles and workspace isolation
// ---------------------------------------------------------------------------------------

test('VIEWER reads workflows and runs but cannot create, edit or activate (403 forbidden)', async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email' } }));
  const viewer = await s.userWithRole('VIEWER');
  const viewerKey = await s.mintKey('VIEWER');
  for (const vt of [viewer.token, viewerKey]) {
    assert.equal((await s.request('GET', '/workflows', { token: vt })).status, 200);
    assert.equal((await s.request('GET', `/workflows/${w.id}`, { token: vt })).status, 200);
    assert.equal((await s.request('GET', `/workflows/${w.id}/runs`, { token: vt })).status, 200);
    assert.equal((await s.request('GET', `/workflows/${w.id}/webhook-events`, { token: vt })).status, 200);
    assertProblem(await s.request('POST', '/workflows', { token: vt, body: { name: 'nope' } }), 403, 'forbidden');
    assertProblem(await patch(s, vt, w.id, { name: 'nope' }), 403, 'forbidden');
    assertProblem(await patch(s, vt, w.id, { status: 'ACTIVE' }), 403, 'forbidden');
  }
  const after = await s.request('GET', `/workflows/${w.id}`, { token });
  assert.equal(after.body.name, w.name);
  assert.equal(after.body.status, 'DRAFT');
  assert.equal((await s.request('GET', '/workflows', { token })).body.data.length, 1);
});

test('MEMBER (user or API key) can create, edit and activate workflows', async (t) => {
  const { s } = await setup(t);
  const member = await s.userWithRole('MEMBER');
  const memberKey = await s.mintKey('MEMBER');
  for (const mt of [member.token, memberKey]) {
    const created = await s.request('POST', '/workflows', { token: mt, body: webhookDraft({ webhook: { lookup: 'email' } }) });
    assert.equal(created.status, 201, created.text);
    const edited = await patch(s, mt, created.body.id, { name: 'By a member', webhook: { signingSecret: 'member-set-secret' } });
    assert.equal(edited.status, 200, edited.text);
    const active = await patch(s, mt, created.body.id, { status: 'ACTIVE' });
    assert.equal(active.status, 200, active.text);
    assert.match(active.body.webhook.url, /\/v1\/webhooks\/in\/[0-9A-Za-z]{30}$/);
  }
  // Unauthenticated is 401.
  assertProblem(await s.request('GET', '/workflows'), 401);
  assertProblem(await s.request('POST', '/workflows', { body: { name: 'x' } }), 401);
});

test("another workspace's workflow is 404 for read, edit, activation, runs and events", async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email' } }));
  const other = await s.otherWorkspace();
  assertProblem(await s.request('GET', `/workflows/${w.id}`, { token: other.token }), 404);
  assertProblem(await patch(s, other.token, w.id, { name: 'hijack' }), 404);
  assertProblem(await patch(s, other.token, w.id, { status: 'ACTIVE' }), 404);
  assertProblem(await s.request('GET', `/workflows/${w.id}/runs`, { token: other.token }), 404);
  assertProblem(await s.request('GET', `/workflows/${w.id}/webhook-events`, { token: other.token }), 404);
  const list = await s.request('GET', '/workflows', { token: other.token });
  assert.deepEqual(list.body.data, []);
  // The other workspace's own workflows do not show up here either.
  await createWorkflow(s, other.token, { name: 'theirs' });
  assert.deepEqual(
    (await s.request('GET', '/workflows', { token })).body.data.map((x: any) => x.id),
    [w.id],
  );
  const mine = await s.request('GET', `/workflows/${w.id}`, { token });
  assert.equal(mine.body.name, w.name);
  assert.equal(mine.body.status, 'DRAFT');
});

// ---------------------------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------------------------

test('bad workflow bodies are refused with 422 naming the field', async (t) => {
  const { s, token } = await setup(t);
  const cases: [string, Record<string, unknown>, string][] = [
    ['unknown top-level field', { name: 'x', colour: 'red' }, '/colour'],
    ['unknown webhook field', { name: 'x', webhook: { lookup: 'email', secret: 'x' } }, '/webhook/secret'],
    ['missing name', { triggerSource: 'MANUAL' }, '/name'],
    ['empty name', { name: '' }, '/name'],
    ['blank name', { name: '   ' }, '/name'],
    ['name too long', { name: 'n'.repeat(201) }, '/name'],
    ['name not a string', { name: 42 }, '/name'],
    ['unknown status', { name: 'x', status: 'RUNNING' }, '/status'],
    ['unknown trigger source', { name: 'x', triggerSource: 'EMAIL' }, '/triggerSource'],
    ['steps not an array', { name: 'x', steps: { type: 'wait' } }, '/steps'],
    ['a step that is not an object', { name: 'x', steps: [42] }, '/steps/0'],
    ['unknown lookup kind', { name: 'x', webhook: { lookup: 'sms' } }, '/webhook/lookup'],
    ['createIfNotFound not a boolean', { name: 'x', webhook: { createIfNotFound: 'yes' } }, '/webhook/createIfNotFound'],
    ['path not a string', { name: 'x', webhook: { path: 5 } }, '/webhook/path'],
    ['path with an empty segment', { name: 'x', webhook: { lookup: 'email', path: 'a..b' } }, '/webhook/path'],
    ['path with an open bracket', { name: 'x', webhook: { lookup: 'email', path: 'x[' } }, '/webhook/path'],
    ['path with a leading dot', { name: 'x', webhook: { lookup: 'email', path: '.email' } }, '/webhook/path'],
    ['path with a trailing dot', { name: 'x', webhook: { lookup: 'email', path: 'email.' } }, '/webhook/path'],
    ['path with a non-numeric index', { name: 'x', webhook: { lookup: 'email', path: 'fields[a]' } }, '/webhook/path'],
    ['path with a negative index', { name: 'x', webhook: { lookup: 'email', path: 'fields[-1]' } }, '/webhook/path'],
    ['path starting with an index', { name: 'x', webhook: { lookup: 'email', path: '[0].email' } }, '/webhook/path'],
    ['empty path', { name: 'x', webhook: { lookup: 'email', path: '' } }, '/webhook/path'],
    ['defaults unknown field', { name: 'x', webhook: { defaults: { nickname: 'x' } } }, '/webhook/defaults/nickname'],
    ['defaults tags not an array', { name: 'x', webhook: { defaults: { tags: 'vip' } } }, '/webhook/defaults/tags'],
    ['defaults firstName not a string', { name: 'x', webhook: { defaults: { firstName: 7 } } }, '/webhook/defaults/firstName'],
    ['webhook not an object', { name: 'x', webhook: 'email' }, '/webhook'],
    ['defaults with a blank tag', { name: 'x', webhook: { defaults: { tags: ['ok', '   '] } } }, '/webhook/defaults/tags/1'],
    [
      'defaults attributes nested too deeply',
      { name: 'x', webhook: { defaults: { attributes: JSON.parse(`${'{"a":'.repeat(40)}1${'}'.repeat(40)}`) } } },
      '/webhook/defaults/attributes',
    ],
    ['more than 100 steps', { name: 'x', steps: Array.from({ length: 101 }, () => ({ type: 'wait', seconds: 1 })) }, '/steps'],
  ];
  for (const [label, body, path] of cases) {
    const res = await s.request('POST', '/workflows', { token, body });
    assert.equal(res.status, 422, `${label}: ${res.status} ${res.text}`);
    assertErrorPaths(res, [path]);
  }
  // The same field rules hold on PATCH.
  const w = await createWorkflow(s, token, { name: 'ok' });
  assertErrorPaths(await patch(s, token, w.id, { colour: 'red' }), ['/colour']);
  assertErrorPaths(await patch(s, token, w.id, { webhook: { path: 'a..b' } }), ['/webhook/path']);
  assertErrorPaths(await patch(s, token, w.id, { name: null }), ['/name']);
  assertErrorPaths(await patch(s, token, w.id, { id: 5 }), ['/id']);
  // Nothing but the one valid workflow exists.
  assert.equal((await s.request('GET', '/workflows', { token })).body.data.length, 1);
});

test('malformed JSON is 400 and a non-JSON content type is 415', async (t) => {
  const { s, token } = await setup(t);
  const bad = await s.request('POST', '/workflows', { token, raw: '{"name": "x",', headers: { 'content-type': 'application/json' } });
  assertProblem(bad, 400);
  const text = await s.request('POST', '/workflows', { token, raw: 'name=x', headers: { 'content-type': 'text/plain' } });
  assertProblem(text, 415);
  const array = await s.request('POST', '/workflows', { token, body: [{ name: 'x' }] });
  assertProblem(array, 422);
  assert.equal((await s.request('GET', '/workflows', { token })).body.data.length, 0);
});

// ---------------------------------------------------------------------------------------
// Audit
// ---------------------------------------------------------------------------------------

test('audit rows record creation, activation and secret changes, never the secret itself', async (t) => {
  const { s, token } = await setup(t);
  const secret = 'audit-me-not-secret-123';
  const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email', signingSecret: secret } }));
  await patch(s, token, w.id, { status: 'ACTIVE' });
  await patch(s, token, w.id, { webhook: { signingSecret: 'second-secret-456' } });
  await patch(s, token, w.id, { webhook: { signingSecret: null } });
  await patch(s, token, w.id, { status: 'PAUSED' });

  const rows = await auditRows(s, w.id);
  const actions = rows.map((r) => r.action);
  for (const a of ['workflow.created', 'workflow.activated', 'workflow.signing_secret_changed']) assert.ok(actions.includes(a), `${a} in ${actions}`);
  assert.equal(actions.filter((a) => a === 'workflow.created').length, 1);
  assert.equal(actions.filter((a) => a === 'workflow.activated').length, 1);
  assert.equal(actions.filter((a) => a === 'workflow.signing_secret_changed').length, 3, 'set at creation, rotated, cleared');
  for (const r of rows) {
    assert.equal(r.actorType, 'USER');
    assert.equal(r.actorId, s.owner.id);
  }
  const dump = await auditDump(s);
  assert.ok(!dump.includes(secret) && !dump.includes('second-secret-456'), 'no secret in any audit row');

  // An API key actor is recorded as such.
  const key = await s.mintKey('MEMBER');
  const w2 = (await s.request('POST', '/workflows', { token: key, body: webhookDraft({ status: 'ACTIVE', webhook: { lookup: 'phone' } }) })).body;
  const rows2 = await auditRows(s, w2.id);
  assert.deepEqual(rows2.map((r) => r.action).sort(), ['workflow.activated', 'workflow.created']);
  assert.ok(rows2.every((r) => r.actorType === 'API_KEY'));

  // A refused change writes no audit row.
  const before = (await auditRows(s, w.id)).length;
  await patch(s, token, w.id, { steps: [{ type: 'wait', seconds: 0 }] });
  await patch(s, (await s.userWithRole('VIEWER')).token, w.id, { name: 'x' });
  assert.equal((await auditRows(s, w.id)).length, before);
});

// ---------------------------------------------------------------------------------------
// Runs (read side)
// ---------------------------------------------------------------------------------------

function assertRunShape(r: any): void {
  for (const k of RUN_KEYS) assert.ok(k in r, `run has ${k}: ${JSON.stringify(r)}`);
  assert.ok(Number.isInteger(r.runId) && r.runId > 0);
  assert.ok(Number.isInteger(r.workflowId));
  assert.ok(r.contactId === null || Number.isInteger(r.contactId));
  assert.ok(['QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED'].includes(r.status));
  assert.ok(Array.isArray(r.steps));
  r.steps.forEach((st: any, i: number) => {
    for (const k of ['index', 'type', 'status', 'startedAt', 'finishedAt']) assert.ok(k in st, `step has ${k}`);
    assert.equal(st.index, i);
    assert.equal(typeof st.type, 'string');
    assert.equal(typeof st.status, 'string');
    assert.ok(st.startedAt === null || ISO_UTC.test(st.startedAt));
    assert.ok(st.finishedAt === null || ISO_UTC.test(st.finishedAt));
  });
  assert.ok(r.trigger && typeof r.trigger === 'object' && !Array.isArray(r.trigger));
  assert.match(r.createdAt, ISO_UTC);
  assert.ok(r.finishedAt === null || ISO_UTC.test(r.finishedAt));
}

test('runs: GET /workflows/:id/runs and GET /runs/:runId show a QUEUED run with its steps and trigger', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'runner@example.com' });
  await catalogTemplates(s, token);
  const steps = [
    { type: 'wait', seconds: 30 },
    { type: 'add_tags', tags: ['hooked'] },
    { type: 'send_email', templateId: 1 },
  ];
  const w = await createWorkflow(s, token, webhookDraft({ status: 'ACTIVE', steps, webhook: { lookup: 'email', path: 'customer.email' } }));
  const trigger = { customer: { email: 'runner@example.com', name: 'R' }, items: [1, 2, 3], ok: true };
  const hook = await postHook(s, w.webhook.url, trigger);
  assert.equal(hook.status, 202, hook.text);

  const one = await s.request('GET', `/runs/${hook.body.runId}`, { token });
  assert.equal(one.status, 200, one.text);
  assertRunShape(one.body);
  assert.equal(one.body.runId, hook.body.runId);
  assert.equal(one.body.workflowId, w.id);
  assert.equal(one.body.contactId, contact.id);
  assert.equal(one.body.status, 'QUEUED');
  assert.deepEqual(one.body.trigger, trigger);
  assert.equal(one.body.finishedAt, null);
  assert.deepEqual(
    one.body.steps.map((st: any) => [st.index, st.type, st.startedAt, st.finishedAt]),
    [
      [0, 'wait', null, null],
      [1, 'add_tags', null, null],
      [2, 'send_email', null, null],
    ],
  );

  // Later edits of the workflow do not change a run that already started.
  await patch(s, token, w.id, { steps: [{ type: 'filter', condition: 'true' }] });
  const again = await s.request('GET', `/runs/${hook.body.runId}`, { token });
  assert.deepEqual(
    again.body.steps.map((st: any) => st.type),
    ['wait', 'add_tags', 'send_email'],
  );

  const second = await postHook(s, w.webhook.url, { customer: { email: 'runner@example.com' } });
  assert.equal(second.status, 202);
  const list = await s.request('GET', `/workflows/${w.id}/runs`, { token });
  assert.equal(list.status, 200, list.text);
  assert.deepEqual(Object.keys(list.body).sort(), ['data', 'nextCursor']);
  assert.deepEqual(
    list.body.data.map((r: any) => r.runId),
    [second.body.runId, hook.body.runId],
    'newest first',
  );
  list.body.data.forEach(assertRunShape);
  assert.deepEqual(
    list.body.data[0].steps.map((st: any) => st.type),
    ['filter'],
  );

  const page = await s.request('GET', `/workflows/${w.id}/runs?limit=1`, { token });
  assert.equal(page.body.data.length, 1);
  assert.equal(typeof page.body.nextCursor, 'string');
  const rest = await s.request('GET', `/workflows/${w.id}/runs?limit=1&cursor=${encodeURIComponent(page.body.nextCursor)}`, { token });
  assert.deepEqual(
    rest.body.data.map((r: any) => r.runId),
    [hook.body.runId],
  );

  const queued = await s.request('GET', `/workflows/${w.id}/runs?status=QUEUED`, { token });
  assert.equal(queued.body.data.length, 2);
  const done = await s.request('GET', `/workflows/${w.id}/runs?status=COMPLETED`, { token });
  assert.deepEqual(done.body.data, []);

  // A workflow with no runs lists none; unknown ids are 404.
  const empty = await createWorkflow(s, token, { name: 'No runs' });
  assert.deepEqual((await s.request('GET', `/workflows/${empty.id}/runs`, { token })).body, { data: [], nextCursor: null });
  assertProblem(await s.request('GET', '/runs/999999', { token }), 404);
  assertProblem(await s.request('GET', '/runs/abc', { token }), 404);
  assertProblem(await s.request('GET', '/workflows/999999/runs', { token }), 404);
});

test("another workspace's run is 404, and VIEWER may read runs", async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'runner@example.com' });
  const w = await createWorkflow(s, token, webhookDraft({ status: 'ACTIVE', webhook: { lookup: 'email' } }));
  const hook = await postHook(s, w.webhook.url, { email: 'runner@example.com' });
  assert.equal(hook.status, 202, hook.text);

  const other = await s.otherWorkspace();
  assertProblem(await s.request('GET', `/runs/${hook.body.runId}`, { token: other.token }), 404);
  assertProblem(await s.request('GET', `/workflows/${w.id}/runs`, { token: other.token }), 404);

  const viewer = await s.userWithRole('VIEWER');
  const read = await s.request('GET', `/runs/${hook.body.runId}`, { token: viewer.token });
  assert.equal(read.status, 200, read.text);
  assert.equal(read.body.runId, hook.body.runId);
  assertProblem(await s.request('GET', `/runs/${hook.body.runId}`), 401);
});

// ---------------------------------------------------------------------------------------
// Issue 8: masked webhook URL for VIEWER, signing-secret length, activation checks templates
// ---------------------------------------------------------------------------------------

test('webhook.url is whole for MEMBER and above and masked for VIEWER (user or key) in get and list', async (t) => {
  const { s, token } = await setup(t);
  const w = await createWorkflow(s, token, webhookDraft({ status: 'ACTIVE', webhook: { lookup: 'email' } }));
  const url: string = w.webhook.url;
  const tokenPart = url.slice(url.lastIndexOf('/') + 1);
  assert.equal(tokenPart.length, 30);
  const draft = await createWorkflow(s, token, webhookDraft({ name: 'not yet', webhook: { lookup: 'email' } }));

  const masked = `${s.config.publicUrl}/v1/webhooks/in/••••${tokenPart.slice(-4)}`;
  const viewer = await s.userWithRole('VIEWER');
  for (const vt of [viewer.token, await s.mintKey('VIEWER')]) {
    const one = await s.request('GET', `/workflows/${w.id}`, { token: vt });
    assert.equal(one.status, 200, one.text);
    assert.equal(one.body.webhook.url, masked);
    const list = await s.request('GET', '/workflows', { token: vt });
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(
      list.body.data.map((x: any) => [x.id, x.webhook.url]),
      [
        [draft.id, null],
        [w.id, masked],
      ],
    );
    for (const r of [one, list]) assert.ok(!r.text.includes(tokenPart), 'a VIEWER never sees the token');
  }
  for (const role of ['MEMBER', 'ADMIN'] as const) {
    const u = await s.userWithRole(role);
    for (const mt of [u.token, await s.mintKey(role)]) {
      assert.equal((await s.request('GET', `/workflows/${w.id}`, { token: mt })).body.webhook.url, url, role);
      assert.ok(
        (await s.request('GET', '/workflows', { token: mt })).body.data.some((x: any) => x.webhook.url === url),
        role,
      );
    }
  }
  assert.equal((await s.request('GET', `/workflows/${w.id}`, { token })).body.webhook.url, url, 'OWNER');
  // The masked URL is no address: posting to it finds nothing.
  assertProblem(await s.request('POST', new URL(masked).pathname, { body: { email: 'x@example.com' } }), 404);
});

test('the header values of http_request steps are whole for MEMBER and above and masked for VIEWER (user or key)', async (t) => {
  const { s, token } = await setup(t);
  const secret = 'Bearer sk_live_4eC39HqLyjWDarjtT1zdp7dc';
  const call = {
    type: 'http_request',
    method: 'POST',
    url: 'https://api.example.com/hook',
    headers: { Authorization: secret, 'X-Trace': 'keep-{{ run.id }}' },
    // Some APIs take their token in the body: masked too.
    body: { token: 'body_secret_9f8e', contact: '{{ contact.email }}' },
  };
  const w = await createWorkflow(s, token, { name: 'calls out', triggerSource: 'MANUAL', steps: [{ type: 'add_tags', tags: ['x'] }, call] });
  const viewer = await s.userWithRole('VIEWER');
  for (const vt of [viewer.token, await s.mintKey('VIEWER')]) {
    const one = await s.request('GET', `/workflows/${w.id}`, { token: vt });
    assert.equal(one.status, 200, one.text);
    assert.deepEqual(one.body.steps, [
      { type: 'add_tags', tags: ['x'] },
      { ...call, url: 'https://api.example.com/••••', headers: { Authorization: '••••', 'X-Trace': '••••' }, body: '••••' },
    ]);
    const list = await s.request('GET', '/workflows', { token: vt });
    for (const r of [one, list])
      assert.ok(!r.text.includes('sk_live_') && !r.text.includes('body_secret'), 'a VIEWER never sees the header values nor the body');
  }
  // A URL's path and query are often its credential (a Slack webhook's path, ?token=): a
  // VIEWER sees where it calls, not the rest; a templated URL is masked whole.
  for (const [url, shown] of [
    ['https://hooks.slack.com/services/T0001/B0001/XXXXsecretXXXX', 'https://hooks.slack.com/••••'],
    ['https://api.example.com/x?token=secret-token-1', 'https://api.example.com/••••'],
    ['https://api.example.com', 'https://api.example.com'],
    ['https://api.example.com/', 'https://api.example.com/'],
    ['{{ trigger.callback }}', '••••'],
    // A URL parser reads \ as /; Liquid in the host is known only at the call; a user and
    // password before the host are a credential.
    ['https://hooks.slack.com\\services\\T0001\\XXXXsecretXXXX', 'https://hooks.slack.com/••••'],
    ['https://api.example.com:8443\\x?token=secret-token-2', 'https://api.example.com:8443/••••'],
    ["https://hooks.slack.com{{ '/services/secret' }}", 'https://hooks.slack.com••••'],
    ['https://bot:hunter2-secret@api.example.com/x', 'https://••••@api.example.com/••••'],
    ['https://bot:hunter2-secret@api.example.com', 'https://••••@api.example.com'],
  ]) {
    const one = await createWorkflow(s, token, { name: `url ${url}`, triggerSource: 'MANUAL', steps: [{ ...call, url }] });
    const seen = await s.request('GET', `/workflows/${one.id}`, { token: viewer.token });
    assert.equal(seen.body.steps[0].url, shown, url);
    assert.equal((await s.request('GET', `/workflows/${one.id}`, { token })).body.steps[0].url, url);
  }
  const member = await s.userWithRole('MEMBER');
  for (const mt of [member.token, await s.mintKey('MEMBER'), token]) {
    assert.deepEqual((await s.request('GET', `/workflows/${w.id}`, { token: mt })).body.steps[1], call);
    assert.ok((await s.request('GET', '/workflows', { token: mt })).text.includes('sk_live_'));
  }
});

test('a signing secret has at least 16 characters (422 at /webhook/signingSecret), on POST and PATCH', async (t) => {
  const { s, token } = await setup(t);
  for (const short of ['x', 'fifteen-chars-!', ' '.repeat(15)]) {
    assert.ok(short.length < 16);
    assertErrorPaths(
      await s.request('POST', '/workflows', { token, body: webhookDraft({ webhook: { lookup: 'email', signingSecret: short } }) }),
      ['/webhook/signingSecret'],
      'validation_failed',
    );
  }
  assert.equal((await s.request('GET', '/workflows', { token })).body.data.length, 0, 'nothing was created');
  const w = await createWorkflow(s, token, webhookDraft({ webhook: { lookup: 'email', signingSecret: 'exactly-16-chars' } }));
  assert.equal(w.webhook.hasSigningSecret, true);
  const before = await storedSecret(s, w.id);
  assertErrorPaths(await patch(s, token, w.id, { webhook: { signingSecret: 'fifteen-chars-!' } }), ['/webhook/signingSecret'], 'validation_failed');
  assert.equal(await storedSecret(s, w.id), before, 'the refused PATCH changed nothing');
  // Multi-byte characters count as characters.
  assert.equal((await patch(s, token, w.id, { webhook: { signingSecret: 'ünïcödé-sécrét-✓✓' } })).status, 200);
  assert.equal((await patch(s, token, w.id, { webhook: { signingSecret: null } })).body.webhook.hasSigningSecret, false);
});

test('activation refuses send steps naming a missing template or one of another channel (422 with each step pointer)', async (t) => {
  const { s, token } = await setup(t);
  const email = (await s.request('POST', '/templates', { token, body: { name: 'e', channel: 'EMAIL', content: { subject: 's', text: 't' } } })).body;
  const sms = (await s.request('POST', '/templates', { token, body: { name: 's', channel: 'SMS', content: { text: 't' } } })).body;
  const other = await s.otherWorkspace();
  const foreign = (await s.request('POST', '/templates', { token: other.token, body: { name: 'f', channel: 'EMAIL', content: { subject: 's', text: 't' } } }))
    .body;

  const steps = [
    { type: 'send_email', templateId: email.id },
    { type: 'send_email', templateId: sms.id },
    { type: 'add_tags', tags: ['x'] },
    { type: 'send_sms', templateId: 424242 },
    { type: 'send_whatsapp', templateId: email.id },
    { type: 'send_email', templateId: foreign.id },
  ];
  // A draft may name anything (templates can come later); activation may not.
  const w = await createWorkflow(s, token, { name: 'sender', steps });
  const refused = await patch(s, token, w.id, { status: 'ACTIVE' });
  assertErrorPaths(refused, ['/steps/1/templateId', '/steps/3/templateId', '/steps/4/templateId', '/steps/5/templateId'], 'validation_failed');
  assert.deepEqual(
    refused.body.errors.map((e: any) => e.path),
    ['/steps/1/templateId', '/steps/3/templateId', '/steps/4/templateId', '/steps/5/templateId'],
  );
  assert.match(refused.body.errors[0].message, /SMS/);
  assert.equal((await s.request('GET', `/workflows/${w.id}`, { token })).body.status, 'DRAFT');
  assert.ok(!(await auditRows(s, w.id)).some((r) => r.action === 'workflow.activated'));
  // Created ACTIVE at once: the same refusal, and nothing is created.
  assertErrorPaths(
    await s.request('POST', '/workflows', { token, body: { name: 'at once', status: 'ACTIVE', steps } }),
    ['/steps/1/templateId'],
    'validation_failed',
  );
  assert.equal((await s.request('GET', '/workflows', { token })).body.data.length, 1);

  // Fixed, it activates; then editing the steps of the ACTIVE workflow is checked too.
  const fixed = [steps[0], steps[2], { type: 'send_sms', templateId: sms.id }];
  const ok = await patch(s, token, w.id, { steps: fixed, status: 'ACTIVE' });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.body.status, 'ACTIVE');
  assertErrorPaths(await patch(s, token, w.id, { steps: [{ type: 'send_sms', templateId: email.id }] }), ['/steps/0/templateId'], 'validation_failed');
  assert.deepEqual((await s.request('GET', `/workflows/${w.id}`, { token })).body.steps, fixed);
  // Pausing needs no check, and a rename of an ACTIVE workflow is not refused.
  assert.equal((await patch(s, token, w.id, { name: 'renamed' })).status, 200);
  assert.equal((await patch(s, token, w.id, { status: 'PAUSED' })).status, 200);
});
