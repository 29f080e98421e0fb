/**
 * Templates through the real server: CRUD and shapes, each channel's content rules, Liquid
 * syntax errors with their position, roles, workspace isolation, preview (variables,
 * hostile templates), audit rows, and fuzzed bodies that must never cause a 5xx.
 * Contract: API.md sections 1, 2 (role matrix) and 3 ("Template").
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { eq, like } from 'drizzle-orm';
import { auditLogs, automations, templates, workflows } from '../../src/core/db/schema.js';
import { assertProblem, type HttpResult, type TestServer, buildAsOwner, seededRandom, waitForRun } from '../helpers.js';

// ---------------------------------------------------------------------------------------
// Helpers local to this file
// ---------------------------------------------------------------------------------------

const TEMPLATE_KEYS = ['channel', 'content', 'createdAt', 'id', 'name', 'updatedAt'];
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

const EMAIL = { subject: 'Hi {{ contact.firstName | default: "friend" }}', html: '<p>{{ workspace.name }}</p>', text: 'Total {{ trigger.total }}' };

const setup = (t: TestContext) => buildAsOwner(t);

function assertTemplateShape(tpl: any): void {
  assert.deepEqual(Object.keys(tpl).sort(), TEMPLATE_KEYS);
  assert.ok(Number.isInteger(tpl.id) && tpl.id > 0);
  assert.equal(typeof tpl.name, 'string');
  assert.ok(['EMAIL', 'SMS', 'WHATSAPP'].includes(tpl.channel));
  assert.ok(tpl.content && typeof tpl.content === 'object' && !Array.isArray(tpl.content));
  assert.match(tpl.createdAt, ISO_UTC);
  assert.match(tpl.updatedAt, ISO_UTC);
}

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

async function createTemplate(s: TestServer, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await s.request('POST', '/templates', { token, body });
  assert.equal(res.status, 201, res.text);
  assertTemplateShape(res.body);
  return res.body;
}

async function createContact(s: TestServer, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await s.request('POST', '/contacts', { token, body });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

function auditRows(s: TestServer) {
  return s.db.select().from(auditLogs).where(like(auditLogs.action, 'template.%')).orderBy(auditLogs.id);
}

function templateRows(s: TestServer) {
  return s.db.select().from(templates).orderBy(templates.id);
}

const rng = seededRandom;

// ---------------------------------------------------------------------------------------
// CRUD
// ---------------------------------------------------------------------------------------

test('POST /templates creates each channel and form (201) with the documented shape', async (t) => {
  const { s, token } = await setup(t);
  const cases: { channel: string; content: Record<string, unknown>; stored?: Record<string, unknown> }[] = [
    { channel: 'EMAIL', content: EMAIL },
    { channel: 'EMAIL', content: { subject: 'S', html: '<b>only html</b>' } },
    { channel: 'EMAIL', content: { subject: 'S', text: 'only text' } },
    { channel: 'SMS', content: { text: 'Your code: {{ trigger.code }}' } },
    { channel: 'WHATSAPP', content: { text: 'Hi {{ contact.firstName }}' } },
    { channel: 'WHATSAPP', content: { templateName: 'order_update', language: 'en_US', parameters: ['{{ contact.firstName }}', '{{ trigger.orderId }}'] } },
    {
      channel: 'WHATSAPP',
      content: { templateName: 'hello_world', language: 'en_US' },
      stored: { templateName: 'hello_world', language: 'en_US', parameters: [] },
    },
  ];
  for (const c of cases) {
    const res = await s.request('POST', '/templates', { token, body: { name: `  ${c.channel} template  `, channel: c.channel, content: c.content } });
    assert.equal(res.status, 201, res.text);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    assertTemplateShape(res.body);
    assert.equal(res.body.name, `${c.channel} template`, 'name is trimmed');
    assert.equal(res.body.channel, c.channel);
    assert.deepEqual(res.body.content, c.stored ?? c.content);
    assert.equal(res.body.createdAt, res.body.updatedAt);
    const got = await s.request('GET', `/templates/${res.body.id}`, { token });
    assert.equal(got.status, 200);
    assert.deepEqual(got.body, res.body);
  }
});

test('GET /templates lists newest first with a cursor and filters by channel', async (t) => {
  const { s, token } = await setup(t);
  const made: any[] = [];
  for (let i = 0; i < 5; i++) {
    made.push(
      await createTemplate(
        s,
        token,
        i % 2
          ? { name: `sms ${i}`, channel: 'SMS', content: { text: `t${i}` } }
          : { name: `mail ${i}`, channel: 'EMAIL', content: { subject: `s${i}`, text: 't' } },
      ),
    );
  }
  const all = await s.request('GET', '/templates', { token });
  assert.equal(all.status, 200);
  assert.deepEqual(Object.keys(all.body).sort(), ['data', 'nextCursor']);
  assert.deepEqual(
    all.body.data.map((x: any) => x.id),
    made.map((x) => x.id).reverse(),
  );
  assert.equal(all.body.nextCursor, null);
  all.body.data.forEach(assertTemplateShape);

  const first = await s.request('GET', '/templates?limit=2', { token });
  assert.equal(first.body.data.length, 2);
  assert.equal(typeof first.body.nextCursor, 'string');
  const seen = [...first.body.data];
  let cursor = first.body.nextCursor;
  while (cursor) {
    const page = await s.request('GET', `/templates?limit=2&cursor=${encodeURIComponent(cursor)}`, { token });
    assert.equal(page.status, 200);
    seen.push(...page.body.data);
    cursor = page.body.nextCursor;
  }
  assert.deepEqual(
    seen.map((x) => x.id),
    made.map((x) => x.id).reverse(),
  );

  const sms = await s.request('GET', '/templates?channel=SMS', { token });
  assert.deepEqual(
    sms.body.data.map((x: any) => x.name),
    ['sms 3', 'sms 1'],
  );
  const wa = await s.request('GET', '/templates?channel=WHATSAPP', { token });
  assert.deepEqual(wa.body, { data: [], nextCursor: null });
  const smsPage = await s.request('GET', '/templates?channel=SMS&limit=1', { token });
  const smsNext = await s.request('GET', `/templates?channel=SMS&limit=1&cursor=${encodeURIComponent(smsPage.body.nextCursor)}`, { token });
  assert.deepEqual(
    smsNext.body.data.map((x: any) => x.name),
    ['sms 1'],
  );

  for (const q of ['channel=sms', 'channel=FAX', 'limit=0', 'limit=201', 'limit=abc', 'nope=1', 'cursor=garbage!']) {
    assertProblem(await s.request('GET', `/templates?${q}`, { token }), 400);
  }
});

test('PATCH /templates/:id updates name and/or content and answers 200 with the whole resource', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'Welcome', channel: 'EMAIL', content: EMAIL });
  await new Promise((r) => setTimeout(r, 5));

  const renamed = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { name: ' Welcome v2 ' } });
  assert.equal(renamed.status, 200, renamed.text);
  assertTemplateShape(renamed.body);
  assert.equal(renamed.body.name, 'Welcome v2');
  assert.deepEqual(renamed.body.content, EMAIL);
  assert.equal(renamed.body.createdAt, tpl.createdAt);
  assert.ok(renamed.body.updatedAt > tpl.updatedAt, 'updatedAt moves');

  const recontent = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { content: { subject: 'New', text: 'plain' } } });
  assert.equal(recontent.status, 200, recontent.text);
  assert.deepEqual(recontent.body.content, { subject: 'New', text: 'plain' }, 'content is replaced whole, not merged');
  assert.equal(recontent.body.name, 'Welcome v2');

  const sameChannel = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { channel: 'EMAIL' } });
  assert.equal(sameChannel.status, 200, 'naming the current channel without content is fine');

  const empty = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: {} });
  assert.equal(empty.status, 200);
  assert.deepEqual({ ...empty.body, updatedAt: null }, { ...recontent.body, updatedAt: null });

  const got = await s.request('GET', `/templates/${tpl.id}`, { token });
  assert.deepEqual(got.body.content, { subject: 'New', text: 'plain' });
});

test('the channel changes only together with content valid for the new channel', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'Alert', channel: 'SMS', content: { text: 'Hi' } });

  const bare = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { channel: 'WHATSAPP' } });
  assertErrorPaths(bare, ['/content'], 'content_required');

  const wrong = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { channel: 'EMAIL', content: { text: 'Hi' } } });
  assertErrorPaths(wrong, ['/content/subject']);

  const stillSms = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { content: { subject: 'x', text: 'Hi' } } });
  assertErrorPaths(stillSms, ['/content/subject'], 'validation_failed');

  let row = await s.request('GET', `/templates/${tpl.id}`, { token });
  assert.equal(row.body.channel, 'SMS');
  assert.deepEqual(row.body.content, { text: 'Hi' });

  const ok = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { channel: 'EMAIL', content: { subject: 'Alert', text: 'Hi' } } });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.body.channel, 'EMAIL');
  row = await s.request('GET', `/templates/${tpl.id}`, { token });
  assert.equal(row.body.channel, 'EMAIL');
  assert.deepEqual(row.body.content, { subject: 'Alert', text: 'Hi' });
});

test('DELETE /templates/:id answers 204 with no body; then the template is gone', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'Gone', channel: 'SMS', content: { text: 'x' } });
  const keep = await createTemplate(s, token, { name: 'Kept', channel: 'SMS', content: { text: 'y' } });
  const del = await s.request('DELETE', `/templates/${tpl.id}`, { token });
  assert.equal(del.status, 204);
  assert.equal(del.text, '');
  assertProblem(await s.request('GET', `/templates/${tpl.id}`, { token }), 404, 'template_not_found');
  assertProblem(await s.request('DELETE', `/templates/${tpl.id}`, { token }), 404, 'template_not_found');
  assertProblem(await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { name: 'x' } }), 404, 'template_not_found');
  assertProblem(await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: {} }), 404, 'template_not_found');
  const list = await s.request('GET', '/templates', { token });
  assert.deepEqual(
    list.body.data.map((x: any) => x.id),
    [keep.id],
  );
});

test('unknown and malformed ids are 404', async (t) => {
  const { s, token } = await setup(t);
  for (const id of ['999999', '0', '-1', 'abc', '1.5', '0x1', '99999999999999999999']) {
    assertProblem(await s.request('GET', `/templates/${id}`, { token }), 404);
    assertProblem(await s.request('PATCH', `/templates/${id}`, { token, body: { name: 'x' } }), 404);
    assertProblem(await s.request('DELETE', `/templates/${id}`, { token }), 404);
    assertProblem(await s.request('POST', `/templates/${id}/preview`, { token, body: {} }), 404);
  }
  assertProblem(await s.request('GET', '/templates/999999', { token }), 404, 'template_not_found');
});

// ---------------------------------------------------------------------------------------
// Deleting a template that something sends with
// ---------------------------------------------------------------------------------------

const SEND_CHANNELS = { send_email: 'EMAIL', send_sms: 'SMS', send_whatsapp: 'WHATSAPP' } as const;
const SAMPLE_CONTENT = { EMAIL: { subject: 'S', text: 'T' }, SMS: { text: 'T' }, WHATSAPP: { text: 'T' } } as const;

/** A MANUAL workflow (no webhook lookup needed to activate) with one send step. */
async function sendingWorkflow(s: TestServer, token: string, templateId: number, o: { name?: string; status?: string; type?: string } = {}): Promise<any> {
  const res = await s.request('POST', '/workflows', {
    token,
    body: { name: o.name ?? 'Sender', triggerSource: 'MANUAL', status: o.status ?? 'ACTIVE', steps: [{ type: o.type ?? 'send_sms', templateId }] },
  });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

/** An automation whose one node after the trigger sends with the template. */
async function sendingAutomation(s: TestServer, token: string, templateId: number, o: { name?: string; status?: string } = {}): Promise<any> {
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
      { id: 'send', type: 'send_sms', data: { templateId } },
    ],
    edges: [{ from: 't', to: 'send' }],
  };
  const res = await s.request('POST', '/automations', { token, body: { name: o.name ?? 'Flow', status: o.status ?? 'ACTIVE', graph } });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

/** Asserts the 409 template_in_use problem and that the template is still there. */
async function assertInUse(s: TestServer, token: string, templateId: number): Promise<string> {
  const res = await s.request('DELETE', `/templates/${templateId}`, { token });
  assertProblem(res, 409, 'template_in_use');
  assert.equal(res.body.title, 'Conflict');
  assert.deepEqual(Object.keys(res.body).sort(), ['code', 'detail', 'status', 'title', 'type']);
  assert.equal((await s.request('GET', `/templates/${templateId}`, { token })).status, 200, 'the template is kept');
  return res.body.detail;
}

test('DELETE of a template an ACTIVE workflow sends with is 409 template_in_use, for every send step', async (t) => {
  const { s, token } = await setup(t);
  for (const [type, channel] of Object.entries(SEND_CHANNELS)) {
    const tpl = await createTemplate(s, token, { name: `${channel} in use`, channel, content: SAMPLE_CONTENT[channel] });
    const wf = await sendingWorkflow(s, token, tpl.id, { name: `Welcome ${type}`, type });
    const detail = await assertInUse(s, token, tpl.id);
    assert.match(detail, new RegExp(`^Template ${tpl.id} is used by the ACTIVE workflow "Welcome ${type}" \\(id ${wf.id}\\);`), detail);
  }
  assert.deepEqual(
    (await auditRows(s)).map((r) => r.action).filter((a) => a === 'template.deleted'),
    [],
    'a refused delete is not audited',
  );
});

test('a template an ACTIVE workflow sends with keeps its channel (409 template_in_use); its content and name may change', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'Code', channel: 'SMS', content: { text: 'x' } });
  const wf = await sendingWorkflow(s, token, tpl.id, { name: 'Texts' });
  const moved = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { channel: 'EMAIL', content: SAMPLE_CONTENT.EMAIL } });
  assertProblem(moved, 409, 'template_in_use');
  assert.match(moved.body.detail, new RegExp(`workflow "Texts" \\(id ${wf.id}\\) to send SMS; .*before changing its channel`));
  assert.equal((await s.request('GET', `/templates/${tpl.id}`, { token })).body.channel, 'SMS');
  const edited = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { name: 'Code 2', content: { text: 'y' } } });
  assert.equal(edited.status, 200, edited.text);
  // Paused, the workflow holds it no more: activating again checks the channel of its templates.
  assert.equal((await s.request('PATCH', `/workflows/${wf.id}`, { token, body: { status: 'PAUSED' } })).status, 200);
  const now = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { channel: 'EMAIL', content: SAMPLE_CONTENT.EMAIL } });
  assert.equal(now.status, 200, now.text);
  assertProblem(await s.request('PATCH', `/workflows/${wf.id}`, { token, body: { status: 'ACTIVE' } }), 422, 'validation_failed');
});

test('a template is deletable (204) once no ACTIVE workflow uses it: steps changed, paused, or drafted', async (t) => {
  const { s, token } = await setup(t);
  const stopUsing: Record<string, { steps?: unknown[]; status?: string }> = {
    'steps changed': { steps: [{ type: 'add_tags', tags: ['x'] }] },
    paused: { status: 'PAUSED' },
    drafted: { status: 'DRAFT' },
  };
  for (const [how, patch] of Object.entries(stopUsing)) {
    const tpl = await createTemplate(s, token, { name: how, channel: 'SMS', content: { text: 'x' } });
    const wf = await sendingWorkflow(s, token, tpl.id, { name: how });
    await assertInUse(s, token, tpl.id);
    const changed = await s.request('PATCH', `/workflows/${wf.id}`, { token, body: patch });
    assert.equal(changed.status, 200, changed.text);
    const del = await s.request('DELETE', `/templates/${tpl.id}`, { token });
    assert.equal(del.status, 204, `${how}: ${del.text}`);
    assert.equal(del.text, '');
    if (how === 'steps changed') continue;
    // Resuming (or activating) checks the templates again: the run cannot start with the template gone.
    const resumed = await s.request('PATCH', `/workflows/${wf.id}`, { token, body: { status: 'ACTIVE' } });
    assertProblem(resumed, 422, 'validation_failed');
    assert.deepEqual(
      resumed.body.errors.map((e: { path: string }) => e.path),
      ['/steps/0/templateId'],
    );
    assert.equal((await s.request('GET', `/workflows/${wf.id}`, { token })).body.status, patch.status);
  }
});

test("a DRAFT workflow's reference does not hold a template; its activation is refused afterwards", async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'draft only', channel: 'SMS', content: { text: 'x' } });
  const draft = await sendingWorkflow(s, token, tpl.id, { status: 'DRAFT' });
  assert.equal((await s.request('DELETE', `/templates/${tpl.id}`, { token })).status, 204);
  assertProblem(await s.request('PATCH', `/workflows/${draft.id}`, { token, body: { status: 'ACTIVE' } }), 422, 'validation_failed');
});

test('an ACTIVE automation holds its templates; a PAUSED or DRAFT one does not', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'automated', channel: 'SMS', content: { text: 'x' } });
  const active = await sendingAutomation(s, token, tpl.id, { name: 'Onboarding' });
  await sendingAutomation(s, token, tpl.id, { name: 'Drafted', status: 'DRAFT' });
  const detail = await assertInUse(s, token, tpl.id);
  assert.match(detail, new RegExp(`used by the ACTIVE automation "Onboarding" \\(id ${active.id}\\);`), detail);
  assert.doesNotMatch(detail, /Drafted/);
  assert.equal((await s.request('PATCH', `/automations/${active.id}`, { token, body: { status: 'PAUSED' } })).status, 200);
  assert.equal((await s.request('DELETE', `/templates/${tpl.id}`, { token })).status, 204);
  assertProblem(await s.request('PATCH', `/automations/${active.id}`, { token, body: { status: 'ACTIVE' } }), 422, 'validation_failed');
});

test('the 409 names at most three users, workflows first, then "and N more"', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'popular', channel: 'SMS', content: { text: 'x' } });
  const one = await sendingWorkflow(s, token, tpl.id, { name: 'One' });
  const two = await sendingWorkflow(s, token, tpl.id, { name: 'Two "quoted"' });
  const flow = await sendingAutomation(s, token, tpl.id, { name: 'Flow' });
  assert.equal(
    await assertInUse(s, token, tpl.id),
    `Template ${tpl.id} is used by the ACTIVE workflow "One" (id ${one.id}), workflow "Two \\"quoted\\"" (id ${two.id}) and automation "Flow" (id ${flow.id}); change their send steps, or pause them, before deleting it`,
  );
  await sendingWorkflow(s, token, tpl.id, { name: 'Three' });
  await sendingAutomation(s, token, tpl.id, { name: 'Flow 2' });
  const detail = await assertInUse(s, token, tpl.id);
  assert.match(detail, /workflow "One" .*, workflow "Two \\"quoted\\"" .*, workflow "Three" \(id \d+\) and 2 more;/, detail);
  assert.doesNotMatch(detail, /automation/);
});

test("another workspace's workflows and automations never hold a template, even naming its id", async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const tpl = await createTemplate(s, token, { name: 'mine', channel: 'SMS', content: { text: 'x' } });
  // Their own template with a sender of theirs: it does not hold ours either.
  const theirs = await createTemplate(s, other.token, { name: 'theirs', channel: 'SMS', content: { text: 'y' } });
  await sendingWorkflow(s, other.token, theirs.id);
  // Saved as drafts naming our template's id, then made ACTIVE behind the API's back (activation
  // would refuse a template of another workspace): a query unscoped by workspace would see them.
  const wf = await sendingWorkflow(s, other.token, tpl.id, { status: 'DRAFT' });
  const auto = await sendingAutomation(s, other.token, tpl.id, { status: 'DRAFT' });
  await s.store.transaction(async (db) => {
    await db.update(workflows).set({ status: 'ACTIVE' }).where(eq(workflows.id, wf.id));
    await db.update(automations).set({ status: 'ACTIVE' }).where(eq(automations.id, auto.id));
  });
  assert.equal((await s.request('GET', `/workflows/${wf.id}`, { token: other.token })).body.status, 'ACTIVE');
  assert.equal((await s.request('DELETE', `/templates/${tpl.id}`, { token })).status, 204);
  // Theirs is held by their own workflow, and is not ours to delete anyway.
  assertProblem(await s.request('DELETE', `/templates/${theirs.id}`, { token }), 404, 'template_not_found');
  await assertInUse(s, other.token, theirs.id);
});

test('a delete racing an activation: never both succeed', async (t) => {
  const { s, token } = await setup(t);
  for (let i = 0; i < 8; i++) {
    const tpl = await createTemplate(s, token, { name: `race ${i}`, channel: 'SMS', content: { text: 'x' } });
    const draft = await sendingWorkflow(s, token, tpl.id, { name: `race ${i}`, status: 'DRAFT' });
    const [activated, deleted] = await Promise.all([
      s.request('PATCH', `/workflows/${draft.id}`, { token, body: { status: 'ACTIVE' } }),
      s.request('DELETE', `/templates/${tpl.id}`, { token }),
    ]);
    const outcome = `${activated.status} ${deleted.status}`;
    assert.ok(outcome === '200 409' || outcome === '422 204', `activation and delete answered ${outcome}: ${activated.text} ${deleted.text}`);
    const status = (await s.request('GET', `/workflows/${draft.id}`, { token })).body.status;
    const kept = (await s.request('GET', `/templates/${tpl.id}`, { token })).status;
    assert.deepEqual([status, kept], outcome === '200 409' ? ['ACTIVE', 200] : ['DRAFT', 404]);
  }
});

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

test('bad bodies and per-channel content are refused with 422 naming the field', async (t) => {
  const { s, token } = await setup(t);
  const big = 'x'.repeat(100 * 1024 + 1);
  const cases: { label: string; body: unknown; paths: string[] }[] = [
    { label: 'no name', body: { channel: 'SMS', content: { text: 'x' } }, paths: ['/name'] },
    { label: 'empty name', body: { name: '', channel: 'SMS', content: { text: 'x' } }, paths: ['/name'] },
    { label: 'blank name', body: { name: '   ', channel: 'SMS', content: { text: 'x' } }, paths: ['/name'] },
    { label: 'long name', body: { name: 'n'.repeat(201), channel: 'SMS', content: { text: 'x' } }, paths: ['/name'] },
    { label: 'name not string', body: { name: 5, channel: 'SMS', content: { text: 'x' } }, paths: ['/name'] },
    { label: 'no channel', body: { name: 'n', content: { text: 'x' } }, paths: ['/channel'] },
    { label: 'bad channel', body: { name: 'n', channel: 'FAX', content: { text: 'x' } }, paths: ['/channel'] },
    { label: 'lower-case channel', body: { name: 'n', channel: 'sms', content: { text: 'x' } }, paths: ['/channel'] },
    { label: 'no content', body: { name: 'n', channel: 'SMS' }, paths: ['/content'] },
    { label: 'content array', body: { name: 'n', channel: 'SMS', content: ['x'] }, paths: ['/content'] },
    { label: 'content string', body: { name: 'n', channel: 'SMS', content: 'x' }, paths: ['/content'] },
    { label: 'content null', body: { name: 'n', channel: 'SMS', content: null }, paths: ['/content'] },
    { label: 'unknown top-level field', body: { name: 'n', channel: 'SMS', content: { text: 'x' }, status: 'x' }, paths: ['/status'] },
    // EMAIL
    { label: 'email without subject', body: { name: 'n', channel: 'EMAIL', content: { text: 'x' } }, paths: ['/content/subject'] },
    { label: 'email empty subject', body: { name: 'n', channel: 'EMAIL', content: { subject: '', text: 'x' } }, paths: ['/content/subject'] },
    { label: 'email without html or text', body: { name: 'n', channel: 'EMAIL', content: { subject: 's' } }, paths: ['/content'] },
    { label: 'email with empty html and text', body: { name: 'n', channel: 'EMAIL', content: { subject: 's', html: '', text: '' } }, paths: ['/content'] },
    { label: 'email subject not string', body: { name: 'n', channel: 'EMAIL', content: { subject: 1, text: 'x' } }, paths: ['/content/subject'] },
    { label: 'email html null', body: { name: 'n', channel: 'EMAIL', content: { subject: 's', html: null, text: 'x' } }, paths: ['/content/html'] },
    { label: 'email text object', body: { name: 'n', channel: 'EMAIL', content: { subject: 's', text: { a: 1 } } }, paths: ['/content/text'] },
    { label: 'email unknown key', body: { name: 'n', channel: 'EMAIL', content: { subject: 's', text: 'x', from: 'a@b.c' } }, paths: ['/content/from'] },
    { label: 'email body too large', body: { name: 'n', channel: 'EMAIL', content: { subject: 's', html: big } }, paths: ['/content/html'] },
    // SMS
    { label: 'sms without text', body: { name: 'n', channel: 'SMS', content: {} }, paths: ['/content/text'] },
    { label: 'sms empty text', body: { name: 'n', channel: 'SMS', content: { text: '' } }, paths: ['/content/text'] },
    { label: 'sms text number', body: { name: 'n', channel: 'SMS', content: { text: 5 } }, paths: ['/content/text'] },
    { label: 'sms with subject', body: { name: 'n', channel: 'SMS', content: { text: 'x', subject: 's' } }, paths: ['/content/subject'] },
    { label: 'sms text too large', body: { name: 'n', channel: 'SMS', content: { text: big } }, paths: ['/content/text'] },
    { label: 'sms text too large in bytes', body: { name: 'n', channel: 'SMS', content: { text: 'é'.repeat(60 * 1024) } }, paths: ['/content/text'] },
    // WHATSAPP
    { label: 'whatsapp empty', body: { name: 'n', channel: 'WHATSAPP', content: {} }, paths: ['/content/text'] },
    {
      label: 'whatsapp text and templateName',
      body: { name: 'n', channel: 'WHATSAPP', content: { text: 'x', templateName: 't', language: 'en' } },
      paths: ['/content/text'],
    },
    { label: 'whatsapp no language', body: { name: 'n', channel: 'WHATSAPP', content: { templateName: 't' } }, paths: ['/content/language'] },
    {
      label: 'whatsapp empty templateName',
      body: { name: 'n', channel: 'WHATSAPP', content: { templateName: '', language: 'en' } },
      paths: ['/content/templateName'],
    },
    { label: 'whatsapp language only', body: { name: 'n', channel: 'WHATSAPP', content: { language: 'en' } }, paths: ['/content/language'] },
    {
      label: 'whatsapp parameters null',
      body: { name: 'n', channel: 'WHATSAPP', content: { templateName: 't', language: 'en', parameters: null } },
      paths: ['/content/parameters'],
    },
    { label: 'unknown key with a slash', body: { name: 'n', channel: 'SMS', content: { text: 'x', 'a/b~c': 1 } }, paths: ['/content/a~1b~0c'] },
    {
      label: 'whatsapp parameters not array',
      body: { name: 'n', channel: 'WHATSAPP', content: { templateName: 't', language: 'en', parameters: 'x' } },
      paths: ['/content/parameters'],
    },
    {
      label: 'whatsapp parameter not string',
      body: { name: 'n', channel: 'WHATSAPP', content: { templateName: 't', language: 'en', parameters: ['ok', 3] } },
      paths: ['/content/parameters/1'],
    },
    {
      label: 'whatsapp too many parameters',
      body: { name: 'n', channel: 'WHATSAPP', content: { templateName: 't', language: 'en', parameters: Array(101).fill('p') } },
      paths: ['/content/parameters'],
    },
    {
      label: 'whatsapp parameters with text form',
      body: { name: 'n', channel: 'WHATSAPP', content: { text: 'x', parameters: [] } },
      paths: ['/content/parameters'],
    },
    {
      label: 'whatsapp unknown key',
      body: { name: 'n', channel: 'WHATSAPP', content: { templateName: 't', language: 'en', components: [] } },
      paths: ['/content/components'],
    },
    {
      label: 'whatsapp long templateName',
      body: { name: 'n', channel: 'WHATSAPP', content: { templateName: 't'.repeat(513), language: 'en' } },
      paths: ['/content/templateName'],
    },
  ];
  for (const c of cases) {
    const res = await s.request('POST', '/templates', { token, body: c.body });
    assert.equal(res.status, 422, `${c.label}: ${res.status} ${res.text.slice(0, 300)}`);
    assertErrorPaths(res, c.paths);
  }
  assert.deepEqual(await templateRows(s), [], 'nothing was stored');
  assert.deepEqual(await auditRows(s), [], 'nothing was audited');

  // The same rules apply on PATCH.
  const tpl = await createTemplate(s, token, { name: 'n', channel: 'EMAIL', content: EMAIL });
  for (const c of cases.filter((x) => (x.body as any).channel === 'EMAIL' && (x.body as any).name === 'n')) {
    const res = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { content: (c.body as any).content } });
    assert.equal(res.status, 422, `PATCH ${c.label}: ${res.text.slice(0, 300)}`);
    assertErrorPaths(res, c.paths);
  }
  for (const body of [{ name: '' }, { name: ' ' }, { name: 'x'.repeat(201) }, { channel: 'FAX' }, { content: [] }, { nope: 1 }]) {
    assertProblem(await s.request('PATCH', `/templates/${tpl.id}`, { token, body }), 422);
  }
  assert.deepEqual((await s.request('GET', `/templates/${tpl.id}`, { token })).body, tpl);
});

test('each string may hold up to 100 KiB', async (t) => {
  const { s, token } = await setup(t);
  const limit = 'x'.repeat(100 * 1024);
  const tpl = await createTemplate(s, token, { name: 'big', channel: 'EMAIL', content: { subject: 's', html: limit, text: limit } });
  assert.equal(tpl.content.html.length, 100 * 1024);
});

test('a Liquid syntax error is 422 template_syntax_error naming the field and the position', async (t) => {
  const { s, token } = await setup(t);
  const cases: { channel: string; content: Record<string, unknown>; path: string; position: RegExp }[] = [
    { channel: 'EMAIL', content: { subject: 'Hi {{ contact.firstName', text: 'x' }, path: '/content/subject', position: /line 1, column 4/ },
    {
      channel: 'EMAIL',
      content: { subject: 'ok', html: '<p>\n  hello\n  {% if contact.firstName %}\n</p>' },
      path: '/content/html',
      position: /line 3, column 3/,
    },
    { channel: 'EMAIL', content: { subject: 'ok', text: 'line one\nline two {% endfor %}' }, path: '/content/text', position: /line 2, column 10/ },
    { channel: 'SMS', content: { text: 'Hi {% if %}yes{% endif %}' }, path: '/content/text', position: /line 1, column 9/ },
    { channel: 'SMS', content: { text: 'Hi {{ contact.firstName | shout }}' }, path: '/content/text', position: /line 1, column 4/ },
    {
      channel: 'WHATSAPP',
      content: { templateName: 't', language: 'en', parameters: ['fine', '{{ x | nope }}'] },
      path: '/content/parameters/1',
      position: /line 1, column 1/,
    },
    { channel: 'WHATSAPP', content: { text: '{% for %}' }, path: '/content/text', position: /line 1, column 1/ },
  ];
  for (const c of cases) {
    const res = await s.request('POST', '/templates', { token, body: { name: 'bad', channel: c.channel, content: c.content } });
    assertErrorPaths(res, [c.path], 'template_syntax_error');
    const error = res.body.errors.find((e: { path: string }) => e.path === c.path);
    assert.match(error.message, c.position, `${c.path}: ${error.message}`);
    assert.match(error.message, /syntax error/);
  }
  // Every bad string is reported, not only the first.
  const two = await s.request('POST', '/templates', {
    token,
    body: { name: 'bad', channel: 'EMAIL', content: { subject: '{{', html: '{% if %}', text: 'ok' } },
  });
  assertErrorPaths(two, ['/content/subject', '/content/html'], 'template_syntax_error');
  assert.deepEqual(await templateRows(s), []);

  // Tags nested deeper than the parser's stack are a syntax error, told as such (not as a stack overflow).
  const nested = await s.request('POST', '/templates', {
    token,
    body: { name: 'deep', channel: 'EMAIL', content: { subject: 'ok', html: `${'{%if x%}'.repeat(4500)}${'{%endif%}'.repeat(4500)}` } },
  });
  assertErrorPaths(nested, ['/content/html'], 'template_syntax_error');
  assert.match(nested.body.errors[0].message, /nests its tags too deeply/);
  assert.doesNotMatch(nested.text, /stack/i);

  const tpl = await createTemplate(s, token, { name: 'good', channel: 'SMS', content: { text: 'ok' } });
  const patched = await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { content: { text: '{{ a' } } });
  assertErrorPaths(patched, ['/content/text'], 'template_syntax_error');
  assert.deepEqual((await s.request('GET', `/templates/${tpl.id}`, { token })).body.content, { text: 'ok' });
});

test('valid Liquid of every kind is accepted', async (t) => {
  const { s, token } = await setup(t);
  const sources = [
    '{% if trigger.total > 100 and contact.email contains "@example.com" %}big{% else %}small{% endif %}',
    '{% for f in trigger.fields %}{{ f.value | upcase }}{% unless forloop.last %}, {% endunless %}{% endfor %}',
    '{% assign n = contact.firstName | default: "friend" %}{% capture greet %}Hi {{ n }}{% endcapture %}{{ greet }}',
    '{{ "now" | date: "%Y-%m-%d" }} {{ trigger.total | times: 1.2 | round: 2 }} {{ contact.tags | join: ", " }}',
    '{% comment %}ignored {{ x }}{% endcomment %}{% raw %}{{ literally }}{% endraw %}',
    'no liquid at all: 100% {braces} }} %}',
  ];
  for (const text of sources) await createTemplate(s, token, { name: 'ok', channel: 'SMS', content: { text } });
});

// ---------------------------------------------------------------------------------------
// Roles and isolation
// ---------------------------------------------------------------------------------------

test('VIEWER reads, lists and previews templates but cannot write (403 forbidden)', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'Read me', channel: 'SMS', content: { text: 'Hi {{ contact.firstName | default: "friend" }}' } });
  const viewer = await s.userWithRole('VIEWER');
  const viewerKey = await s.mintKey('VIEWER');
  for (const credential of [viewer.token, viewerKey]) {
    assert.equal((await s.request('GET', '/templates', { token: credential })).status, 200);
    assert.equal((await s.request('GET', `/templates/${tpl.id}`, { token: credential })).status, 200);
    const preview = await s.request('POST', `/templates/${tpl.id}/preview`, { token: credential, body: {} });
    assert.equal(preview.status, 200, preview.text);
    assert.deepEqual(preview.body, { channel: 'SMS', rendered: { text: 'Hi friend' } });
    assertProblem(await s.request('POST', '/templates', { token: credential, body: { name: 'x', channel: 'SMS', content: { text: 'x' } } }), 403, 'forbidden');
    assertProblem(await s.request('PATCH', `/templates/${tpl.id}`, { token: credential, body: { name: 'x' } }), 403, 'forbidden');
    assertProblem(await s.request('DELETE', `/templates/${tpl.id}`, { token: credential }), 403, 'forbidden');
  }
  const got = await s.request('GET', `/templates/${tpl.id}`, { token });
  assert.deepEqual(got.body, tpl);
});

test('MEMBER (user or API key) creates, edits and deletes templates', async (t) => {
  const { s } = await setup(t);
  const member = await s.userWithRole('MEMBER');
  const memberKey = await s.mintKey('MEMBER');
  for (const credential of [member.token, memberKey]) {
    const tpl = await createTemplate(s, credential, { name: 'm', channel: 'SMS', content: { text: 'x' } });
    const patched = await s.request('PATCH', `/templates/${tpl.id}`, { token: credential, body: { name: 'm2', content: { text: 'y' } } });
    assert.equal(patched.status, 200, patched.text);
    assert.equal((await s.request('POST', `/templates/${tpl.id}/preview`, { token: credential, body: {} })).status, 200);
    assert.equal((await s.request('DELETE', `/templates/${tpl.id}`, { token: credential })).status, 204);
  }
});

test('without a valid credential every template endpoint is 401 with WWW-Authenticate', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'x', channel: 'SMS', content: { text: 'x' } });
  const calls: [string, string, unknown][] = [
    ['GET', '/templates', undefined],
    ['POST', '/templates', { name: 'x', channel: 'SMS', content: { text: 'x' } }],
    ['GET', `/templates/${tpl.id}`, undefined],
    ['PATCH', `/templates/${tpl.id}`, { name: 'y' }],
    ['DELETE', `/templates/${tpl.id}`, undefined],
    ['POST', `/templates/${tpl.id}/preview`, {}],
  ];
  for (const credential of [undefined, 'not-a-token', 'svc_live_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA']) {
    for (const [method, path, body] of calls) {
      const res = await s.request(method, path, { token: credential, body });
      assertProblem(res, 401);
      assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer/);
    }
  }
  assert.equal((await templateRows(s)).length, 1);
});

test("another workspace's template is 404 everywhere, and its contact is 404 in preview", async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const mine = await createTemplate(s, token, { name: 'mine', channel: 'SMS', content: { text: 'x' } });
  const theirs = await createTemplate(s, other.token, { name: 'theirs', channel: 'SMS', content: { text: 'Hi {{ contact.firstName }}' } });
  const theirContact = await createContact(s, other.token, { email: 'them@other.test', firstName: 'Them' });

  assertProblem(await s.request('GET', `/templates/${theirs.id}`, { token }), 404, 'template_not_found');
  assertProblem(await s.request('PATCH', `/templates/${theirs.id}`, { token, body: { name: 'hijack' } }), 404, 'template_not_found');
  assertProblem(
    await s.request('PATCH', `/templates/${theirs.id}`, { token, body: { channel: 'EMAIL', content: { subject: 's', text: 't' } } }),
    404,
    'template_not_found',
  );
  assertProblem(await s.request('DELETE', `/templates/${theirs.id}`, { token }), 404, 'template_not_found');
  assertProblem(await s.request('POST', `/templates/${theirs.id}/preview`, { token, body: {} }), 404, 'template_not_found');
  const list = await s.request('GET', '/templates', { token });
  assert.deepEqual(
    list.body.data.map((x: any) => x.id),
    [mine.id],
  );

  // A contact of another workspace, or an unknown one, is not found for my preview.
  assertProblem(await s.request('POST', `/templates/${mine.id}/preview`, { token, body: { contactId: theirContact.id } }), 404, 'contact_not_found');
  assertProblem(await s.request('POST', `/templates/${mine.id}/preview`, { token, body: { contactId: 987654 } }), 404, 'contact_not_found');

  const still = await s.request('GET', `/templates/${theirs.id}`, { token: other.token });
  assert.deepEqual(still.body, theirs);
  const theirPreview = await s.request('POST', `/templates/${theirs.id}/preview`, { token: other.token, body: { contactId: theirContact.id } });
  assert.deepEqual(theirPreview.body, { channel: 'SMS', rendered: { text: 'Hi Them' } });
});

// ---------------------------------------------------------------------------------------
// Preview
// ---------------------------------------------------------------------------------------

test('preview renders with a real contact, the given trigger, the workspace, and run = null', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ada@example.com', firstName: 'Ada', attributes: { plan: 'gold' }, tags: ['vip'] });
  const tpl = await createTemplate(s, token, {
    name: 'Order',
    channel: 'EMAIL',
    content: {
      subject: 'Hi {{ contact.firstName | default: "friend" }}, order {{ trigger.fields[0].value }}',
      html: '<p>{{ workspace.name }} ({{ workspace.plan }}) {{ contact.attributes.plan }} {{ contact.tags | join: "," }} {{ contact.email }}</p>',
      text: '[{{ run.id }}]{% if trigger.total > 100 %} big{% endif %} {{ trigger.missing.deep }}|',
    },
  });
  const trigger = { fields: [{ value: 'A-42' }, { value: 'second' }], total: 150 };
  const res = await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: { contactId: contact.id, trigger } });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.body, {
    channel: 'EMAIL',
    rendered: { subject: 'Hi Ada, order A-42', html: '<p>Acme (PRO) gold vip ada@example.com</p>', text: '[] big |' },
  });

  // Without a contact, the contact is {} and defaults apply; without a trigger it is {}.
  const anonymous = await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: {} });
  assert.equal(anonymous.status, 200, anonymous.text);
  assert.deepEqual(anonymous.body.rendered, { subject: 'Hi friend, order ', html: '<p>Acme (PRO)   </p>', text: '[] |' });
});

test('preview answers the same keys as the content, for every channel and form', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { phone: '+16135550138', firstName: 'Bo' });
  const cases: [string, Record<string, unknown>, Record<string, unknown>][] = [
    ['SMS', { text: 'Hi {{ contact.firstName }} {{ contact.phone }}' }, { text: 'Hi Bo +16135550138' }],
    ['WHATSAPP', { text: '{{ trigger.code }}' }, { text: '1234' }],
    [
      'WHATSAPP',
      { templateName: 'otp_{{ trigger.kind }}', language: 'en_US', parameters: ['{{ contact.firstName }}', '{{ trigger.code }}', 'static'] },
      { templateName: 'otp_login', language: 'en_US', parameters: ['Bo', '1234', 'static'] },
    ],
    ['EMAIL', { subject: 'S {{ trigger.code }}', html: '<b>{{ contact.firstName }}</b>' }, { subject: 'S 1234', html: '<b>Bo</b>' }],
  ];
  for (const [channel, content, rendered] of cases) {
    const tpl = await createTemplate(s, token, { name: 'p', channel, content });
    const res = await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: { contactId: contact.id, trigger: { code: 1234, kind: 'login' } } });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.body, { channel, rendered });
  }
});

test('preview bodies: trigger must be an object, contactId an id, unknown fields refused', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'p', channel: 'SMS', content: { text: 'x' } });
  const path = `/templates/${tpl.id}/preview`;
  const cases: [unknown, string][] = [
    [{ trigger: [] }, '/trigger'],
    [{ trigger: 'x' }, '/trigger'],
    [{ trigger: null }, '/trigger'],
    [{ trigger: 5 }, '/trigger'],
    [{ contactId: 'abc' }, '/contactId'],
    [{ contactId: 0 }, '/contactId'],
    [{ contactId: 1.5 }, '/contactId'],
    [{ contactId: null }, '/contactId'],
    [{ contact: {} }, '/contact'],
    [{ run: {} }, '/run'],
  ];
  for (const [body, p] of cases) assertErrorPaths(await s.request('POST', path, { token, body }), [p]);
  let deep: Record<string, unknown> = {};
  for (let i = 0; i < 40; i++) deep = { a: deep };
  assertErrorPaths(await s.request('POST', path, { token, body: { trigger: deep } }), ['/trigger']);
  assertProblem(await s.request('POST', path, { token, raw: '{"trigger":', headers: { 'content-type': 'application/json' } }), 400);
  assertProblem(await s.request('POST', path, { token, raw: 'x', headers: { 'content-type': 'text/plain' } }), 415);
  assert.equal((await s.request('POST', path, { token, body: { trigger: { a: [1, { b: null }] } } })).status, 200);
  const noBody = await s.request('POST', path, { token });
  assert.equal(noBody.status, 200, noBody.text);
  assert.deepEqual(noBody.body, { channel: 'SMS', rendered: { text: 'x' } });
  assertErrorPaths(await s.request('POST', path, { token, raw: 'null', headers: { 'content-type': 'application/json' } }), ['/']);
});

test('hostile templates fail preview cleanly and fast with 422 template_render_error', async (t) => {
  const { s, token } = await setup(t);
  const hostile: [string, Record<string, unknown>, string][] = [
    ['SMS', { text: '{% for i in (1..100000000) %}x{% endfor %}' }, '/content/text'],
    ['SMS', { text: '{% for i in (1..3000) %}{% for j in (1..3000) %}{% endfor %}{% endfor %}' }, '/content/text'],
    ['EMAIL', { subject: 'fine', html: '{% for i in (1..5000) %}{% for j in (1..5000) %}xxxxxxxxxx{% endfor %}{% endfor %}' }, '/content/html'],
    [
      'EMAIL',
      { subject: '{% assign s = "xxxxxxxxxx" %}{% for i in (1..60) %}{% assign s = s | append: s %}{% endfor %}{{ s }}', text: 'x' },
      '/content/subject',
    ],
    ['SMS', { text: `{{ trigger.big${' | append: trigger.big'.repeat(100)} }}` }, '/content/text'],
    [
      'SMS',
      { text: '{% assign s = "xxxxxxxxxx" %}{% for i in (1..40) %}{% capture s %}{{ s }}{{ s }}{% endcapture %}{% endfor %}{{ s | size }}' },
      '/content/text',
    ],
    ['SMS', { text: '{% include "secrets" %}' }, '/content/text'],
    [
      'WHATSAPP',
      { templateName: 't', language: 'en', parameters: ['ok', '{% for i in (1..10000000) %}{{ trigger.big }}{% endfor %}'] },
      '/content/parameters/1',
    ],
  ];
  const slow = '{% for i in (1..3000) %}{% for j in (1..3000) %}{% endfor %}{% endfor %}';
  hostile.push(['EMAIL', { subject: slow, html: slow, text: slow }, '/content/subject']);
  for (const [channel, content, path] of hostile) {
    const tpl = await createTemplate(s, token, { name: 'hostile', channel, content });
    const started = performance.now();
    const res = await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: { trigger: { big: 'y'.repeat(100_000) } } });
    const elapsed = performance.now() - started;
    assertErrorPaths(res, [path], 'template_render_error');
    // The 422 shows the 1 s render limit stopped it (unbounded, even the nested empty loop
    // renders fine, in about 2 s on an idle machine). The bound only catches a render that is
    // not stopped at all: slack for a loaded CI machine, where three test files and browser
    // tests run beside it (2.6 and 3.1 s were seen against an earlier 2 s bound).
    assert.ok(elapsed < 5000, `${JSON.stringify(content).slice(0, 80)} took ${Math.round(elapsed)} ms`);
  }
  // The server is still fine.
  const ok = await createTemplate(s, token, { name: 'ok', channel: 'SMS', content: { text: 'still {{ workspace.name }}' } });
  const res = await s.request('POST', `/templates/${ok.id}/preview`, { token, body: {} });
  assert.deepEqual(res.body, { channel: 'SMS', rendered: { text: 'still Acme' } });
});

// ---------------------------------------------------------------------------------------
// Audit
// ---------------------------------------------------------------------------------------

test('template writes are audited with the actor and target; reads, previews and refusals are not', async (t) => {
  const { s, token } = await setup(t);
  const tpl = await createTemplate(s, token, { name: 'Audited', channel: 'SMS', content: { text: 'x' } });
  await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { name: 'Audited 2' } });
  await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { channel: 'EMAIL', content: { subject: 's', text: 't' } } });
  await s.request('GET', `/templates/${tpl.id}`, { token });
  await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: {} });
  await s.request('PATCH', `/templates/${tpl.id}`, { token, body: { content: { text: '{{' } } });
  await s.request('POST', '/templates', { token, body: { name: 'bad', channel: 'SMS', content: { text: '{% if %}' } } });
  const key = await s.mintKey('MEMBER');
  assert.equal((await s.request('DELETE', `/templates/${tpl.id}`, { token: key })).status, 204);

  const rows = await auditRows(s);
  assert.deepEqual(
    rows.map((r) => r.action),
    ['template.created', 'template.updated', 'template.updated', 'template.deleted'],
  );
  for (const r of rows) {
    assert.equal(r.workspaceId, s.workspaceId);
    assert.equal(r.targetType, 'template');
    assert.equal(r.targetId, String(tpl.id));
  }
  assert.deepEqual(
    rows.slice(0, 3).map((r) => [r.actorType, r.actorId]),
    Array(3).fill(['USER', s.owner.id]),
  );
  assert.equal(rows[3]!.actorType, 'API_KEY');
  assert.deepEqual(rows[0]!.metadata, { name: 'Audited', channel: 'SMS' });
  assert.deepEqual(rows[1]!.metadata, { fields: ['name'] });
  assert.deepEqual((rows[2]!.metadata.fields as string[]).sort(), ['channel', 'content']);
});

// ---------------------------------------------------------------------------------------
// Fuzz
// ---------------------------------------------------------------------------------------

test('hundreds of random and hostile bodies to POST /templates never yield a 5xx', async (t) => {
  const { s, token } = await setup(t);
  const rand = rng(0x7e3a1a7e);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const fragments = [
    '{{',
    '}}',
    '{%',
    '%}',
    '{{ contact.firstName }}',
    '{% if %}',
    '{% endif %}',
    '{% for i in (1..9) %}',
    '{% endfor %}',
    '|',
    ' | append: "x"',
    '{% raw %}',
    '{% comment %}',
    '"',
    "'",
    '\\',
    '\n',
    '\u0000',
    '🙂',
    'é',
    '\ud800',
    '{{- -}}',
    '{%- liquid echo 1 -%}',
    '{% include "x" %}',
    '{% render "/etc/passwd" %}',
    '{{ trigger.a[0].b }}',
    '(1..100000000)',
  ];
  const randString = (max = 30): string => {
    let out = '';
    for (let i = Math.floor(rand() * max); i > 0; i--) out += rand() < 0.4 ? pick(fragments) : String.fromCharCode(32 + Math.floor(rand() * 95));
    return out;
  };
  const contentKeys = ['subject', 'html', 'text', 'templateName', 'language', 'parameters', 'from', '__proto__', 'constructor', ''];
  const randValue = (depth = 0): unknown => {
    const r = rand();
    if (depth > 3 || r < 0.15) return pick([null, true, false, 0, -1, 1.5, 1e308, '']);
    if (r < 0.55) return randString();
    if (r < 0.75) return Array.from({ length: Math.floor(rand() * 4) }, () => randValue(depth + 1));
    const o: Record<string, unknown> = {};
    for (let i = Math.floor(rand() * 4); i > 0; i--) o[pick(contentKeys)] = randValue(depth + 1);
    return o;
  };
  const randBody = (): unknown => {
    const o: Record<string, unknown> = {};
    if (rand() < 0.9) o.name = rand() < 0.8 ? randString(20) || 'n' : randValue(1);
    if (rand() < 0.9) o.channel = rand() < 0.85 ? pick(['EMAIL', 'SMS', 'WHATSAPP']) : randValue(1);
    if (rand() < 0.9) {
      const content: Record<string, unknown> = {};
      for (let i = Math.floor(rand() * 5); i > 0; i--) content[pick(contentKeys)] = rand() < 0.7 ? randString() : randValue(1);
      if (rand() < 0.3) content.parameters = Array.from({ length: Math.floor(rand() * 4) }, () => (rand() < 0.8 ? randString() : randValue(2)));
      o.content = rand() < 0.9 ? content : randValue(1);
    }
    if (rand() < 0.05) o[randString(6)] = randValue(1);
    return o;
  };
  const raws = [
    '{"__proto__":{"polluted":true},"name":"p","channel":"SMS","content":{"text":"x"}}',
    '{"name":"p","channel":"SMS","content":{"__proto__":{"polluted":true},"text":"x"}}',
    '{"name":"p","channel":"SMS","content":{"constructor":{"prototype":{"polluted":true}},"text":"x"}}',
    '{"name":"p","channel":"SMS","content":{"text":"\\ud800{{ a }}"}}',
    '{"name":"p","channel":"SMS","content":{"text":"x","text":"{{"}}',
    `{"name":"p","channel":"SMS","content":{"text":"${'{% if a %}'.repeat(20000)}"}}`,
    `{"name":"p","channel":"SMS","content":{"text":"${'{{ a | append: b }}'.repeat(5000)}"}}`,
    `{"name":"p","channel":"WHATSAPP","content":{"templateName":"t","language":"en","parameters":${'['.repeat(5000)}${']'.repeat(5000)}}}`,
    `{"name":"p","channel":"EMAIL","content":{"subject":"s","html":"${'x'.repeat(900 * 1024)}"}}`,
    `{"name":"p","channel":"EMAIL","content":{"subject":"s","html":"${'x'.repeat(2 * 1024 * 1024)}"}}`,
    'null',
    'true',
    '0',
    '"string"',
    '[]',
    '{}',
    '1e999',
    '{"a":}',
    '\ufeff{}',
  ];
  const bodies: { raw: string; label: string }[] = raws.map((raw, i) => ({ raw, label: `hostile #${i}: ${raw.slice(0, 60)}` }));
  for (let i = 0; i < 400; i++) {
    const v = i % 5 === 0 ? randValue() : randBody();
    bodies.push({ raw: JSON.stringify(v) ?? 'null', label: `random #${i}: ${(JSON.stringify(v) ?? 'undefined').slice(0, 100)}` });
  }

  const failures: string[] = [];
  let created = 0;
  for (const { raw, label } of bodies) {
    const res = await s.request('POST', '/templates', { token, raw, headers: { 'content-type': 'application/json' } });
    if (res.status >= 500) failures.push(`${label} → ${res.status} ${res.text.slice(0, 200)}`);
    else if (res.status === 201) {
      created++;
      try {
        assertTemplateShape(res.body);
      } catch (err) {
        failures.push(`${label} → bad 201 shape: ${(err as Error).message.slice(0, 200)}`);
      }
    } else {
      try {
        assertProblem(res, res.status);
      } catch (err) {
        failures.push(`${label} → malformed problem: ${(err as Error).message.slice(0, 200)}`);
      }
    }
  }
  assert.deepEqual(failures, [], `${failures.length} requests misbehaved:\n${failures.join('\n')}`);
  assert.ok(created > 0, 'some random bodies were valid');
  assert.equal(({} as any).polluted, undefined, 'Object.prototype not polluted');

  // Whatever was stored previews without a 5xx.
  const list = await s.request('GET', '/templates?limit=200', { token });
  assert.equal(list.status, 200);
  for (const tpl of list.body.data) {
    const res = await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: { trigger: { a: [{ b: 'x' }] } } });
    assert.ok(res.status === 200 || res.status === 422, `preview of ${JSON.stringify(tpl.content).slice(0, 100)} → ${res.status} ${res.text.slice(0, 200)}`);
    if (res.status === 422) assertProblem(res, 422, 'template_render_error');
  }
  assert.equal((await s.request('GET', '/healthz')).status, 200);
});

// ---------------------------------------------------------------------------------------
// HTML escaping (issue 8): the html part of an email escapes output, other parts do not
// ---------------------------------------------------------------------------------------

const HOSTILE_NAME = `<img src=x onerror="alert(1)"> & Co`;
const ESCAPED_NAME = '&lt;img src=x onerror=&#34;alert(1)&#34;&gt; &amp; Co';

test('preview: output in an email html part is HTML-escaped, | raw opts out; subject, text, SMS and WhatsApp are not escaped', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'eve@example.com', phone: '+16135550139', firstName: HOSTILE_NAME });
  const email = await createTemplate(s, token, {
    name: 'escaped',
    channel: 'EMAIL',
    content: {
      subject: 'Hi {{ contact.firstName }}',
      html: '<p class="x">Hi {{ contact.firstName }}</p>{{ trigger.banner | raw }}',
      text: 'Hi {{ contact.firstName }}',
    },
  });
  const res = await s.request('POST', `/templates/${email.id}/preview`, { token, body: { contactId: contact.id, trigger: { banner: '<hr>' } } });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.body.rendered, { subject: `Hi ${HOSTILE_NAME}`, html: `<p class="x">Hi ${ESCAPED_NAME}</p><hr>`, text: `Hi ${HOSTILE_NAME}` });

  for (const [channel, content, rendered] of [
    ['SMS', { text: '{{ contact.firstName }}' }, { text: HOSTILE_NAME }],
    ['WHATSAPP', { text: '{{ contact.firstName }}' }, { text: HOSTILE_NAME }],
    [
      'WHATSAPP',
      { templateName: 'hello', language: 'en', parameters: ['{{ contact.firstName }}'] },
      { templateName: 'hello', language: 'en', parameters: [HOSTILE_NAME] },
    ],
  ] as const) {
    const tpl = await createTemplate(s, token, { name: 'plain', channel, content });
    const out = await s.request('POST', `/templates/${tpl.id}/preview`, { token, body: { contactId: contact.id } });
    assert.equal(out.status, 200, out.text);
    assert.deepEqual(out.body.rendered, rendered, channel);
  }
});

test('a real send escapes the html part too: a workflow run and a test email, as recorded on their delivery attempts', async (t) => {
  const { s, token } = await buildAsOwner(t, { engine: { pollMs: 50 } });
  const tpl = await createTemplate(s, token, {
    name: 'welcome',
    channel: 'EMAIL',
    content: { subject: 'Welcome {{ contact.firstName }}', html: '<h1>Welcome {{ contact.firstName }}</h1>', text: 'Welcome {{ contact.firstName }}' },
  });
  const sms = await createTemplate(s, token, { name: 'sms', channel: 'SMS', content: { text: 'Welcome {{ contact.firstName }}' } });
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'welcome',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [
        { type: 'update_contact', set: { firstName: '{{ trigger.name }}' } },
        { type: 'send_email', templateId: tpl.id },
        { type: 'send_sms', templateId: sms.id },
      ],
      webhook: { lookup: 'email', createIfNotFound: true, defaults: { firstName: 'x' } },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  await s.request('POST', '/contacts', { token, body: { email: 'eve@example.com', phone: '+16135550139', firstName: HOSTILE_NAME } });
  const post = await s.request('POST', new URL(wf.body.webhook.url).pathname, { body: { email: 'eve@example.com', name: HOSTILE_NAME } });
  assert.equal(post.status, 202, post.text);
  const run = await waitForRun(s, token, post.body.runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  const attempts = await s.request('GET', `/messages/delivery-attempts?runId=${post.body.runId}`, { token });
  const byChannel = Object.fromEntries(attempts.body.data.map((a: any) => [a.channel, a.rendered]));
  assert.deepEqual(byChannel.EMAIL, { subject: `Welcome ${HOSTILE_NAME}`, html: `<h1>Welcome ${ESCAPED_NAME}</h1>`, text: `Welcome ${HOSTILE_NAME}` });
  assert.deepEqual(byChannel.SMS, { text: `Welcome ${HOSTILE_NAME}` });

  const mail = await s.request('POST', '/messages/test-email', {
    token,
    body: {
      to: 'qa@example.com',
      subject: '{{ data.name }}',
      html: '<b>{{ data.name }}</b>{{ data.name | raw }}',
      text: '{{ data.name }}',
      data: { name: HOSTILE_NAME },
    },
  });
  assert.equal(mail.status, 202, mail.text);
  const sent = await s.request('GET', `/messages/delivery-attempts/${mail.body.deliveryAttemptId}`, { token });
  assert.deepEqual(sent.body.rendered, { subject: HOSTILE_NAME, html: `<b>${ESCAPED_NAME}</b>${HOSTILE_NAME}`, text: HOSTILE_NAME });
});
