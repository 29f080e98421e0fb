/**
 * The inbound webhook, POST /v1/webhooks/in/:token, through the real server: every status
 * code of the contract, the order of checks, contact lookup (with real senders' bodies from
 * test/fixtures/sender-payloads.json), create-on-miss, HMAC signatures, the per-IP rate
 * limit, concurrency, Idempotency-Key, received events and replay, and hostile bodies.
 * Contract: SPEC.md sections 4-8, API.md sections 1, 3 ("Workflow") and 4.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { readFileSync } from 'node:fs';
import { test, type TestContext } from 'node:test';
import { asc, count, eq, type SQL } from 'drizzle-orm';
import { contacts, webhookEvents, workflowRuns } from '../../src/core/db/schema.js';
import { build, type HttpResult, type TestServer, assertProblem } from '../helpers.js';

// ---------------------------------------------------------------------------------------
// Helpers local to this file
// ---------------------------------------------------------------------------------------

type Env = Record<string, string>;

async function setup(t: TestContext, env: Env = {}): Promise<{ s: TestServer; token: string }> {
  const s = await build(t, { env });
  const token = await s.login(s.owner.email, s.owner.password);
  return { s, token };
}

/** Asserts a 202 {runId, contactId} and returns it. */
function assertAccepted(res: HttpResult): { runId: number; contactId: number } {
  assert.equal(res.status, 202, `expected 202, got ${res.status}: ${res.text.slice(0, 500)}`);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  assert.deepEqual(Object.keys(res.body).sort(), ['contactId', 'runId']);
  assert.ok(Number.isInteger(res.body.runId) && res.body.runId > 0);
  assert.ok(Number.isInteger(res.body.contactId) && res.body.contactId > 0);
  return res.body;
}

interface Hook {
  id: number;
  url: string;
  /** The URL's path, for posting to the test server. */
  path: string;
}

/** An ACTIVE WEBHOOK workflow with the given webhook settings. */
async function hookWorkflow(s: TestServer, token: string, webhook: Record<string, unknown>, steps: unknown[] = [{ type: 'wait', seconds: 1 }]): Promise<Hook> {
  const res = await s.request('POST', '/workflows', { token, body: { name: 'Inbound', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps, webhook } });
  assert.equal(res.status, 201, res.text);
  return { id: res.body.id, url: res.body.webhook.url, path: new URL(res.body.webhook.url).pathname };
}

interface PostOptions {
  /** JSON-encoded when given (unless raw is given). */
  body?: unknown;
  raw?: string | Buffer;
  /** Defaults to application/json; null sends no Content-Type at all. */
  contentType?: string | null;
  headers?: Record<string, string>;
}

/** POSTs to a webhook path with exact bytes (a Buffer body, so fetch adds no content type). */
async function post(s: TestServer, path: string, opts: PostOptions = {}): Promise<HttpResult> {
  const bytes = opts.raw !== undefined ? Buffer.from(opts.raw) : Buffer.from(JSON.stringify(opts.body ?? {}));
  const headers: Record<string, string> = { ...(opts.headers ?? {}) };
  const ct = opts.contentType === undefined ? 'application/json' : opts.contentType;
  if (ct !== null) headers['content-type'] = ct;
  return s.request('POST', path, { raw: bytes, headers });
}

function sign(secret: string, raw: string | Buffer): string {
  return `sha256=${createHmac('sha256', secret).update(raw).digest('hex')}`;
}

async function createContact(s: TestServer, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await s.request('POST', '/contacts', { token, body });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

async function countRows(s: TestServer, table: typeof contacts | typeof workflowRuns | typeof webhookEvents, where?: SQL): Promise<number> {
  return (await s.db.select({ n: count() }).from(table).where(where))[0]!.n;
}

const runCount = (s: TestServer, workflowId: number) => countRows(s, workflowRuns, eq(workflowRuns.workflowId, workflowId));
const contactCount = (s: TestServer) => countRows(s, contacts);

function runRows(s: TestServer, workflowId: number) {
  return s.db
    .select({ id: workflowRuns.id, contactId: workflowRuns.contactId, status: workflowRuns.status, trigger: workflowRuns.trigger })
    .from(workflowRuns)
    .where(eq(workflowRuns.workflowId, workflowId))
    .orderBy(asc(workflowRuns.id));
}

async function events(s: TestServer, token: string, workflowId: number): Promise<any[]> {
  const res = await s.request('GET', `/workflows/${workflowId}/webhook-events?limit=200`, { token });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

/** A random 30-character base62 string: the shape of a token, matching no workflow. */
function fakeToken(): string {
  const abc = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';
  let out = '';
  for (let i = 0; i < 30; i++) out += abc[Math.floor(Math.random() * abc.length)];
  return out;
}

/** Sets the value at a dot path like `form.fields[1].value` in a (cloned) JSON body. */
function setPath(body: any, path: string, value: unknown): void {
  const segs: (string | number)[] = [];
  for (const part of path.split('.')) {
    const m = /^([^[]+)((?:\[\d+\])*)$/.exec(part)!;
    segs.push(m[1]!);
    for (const idx of m[2]!.matchAll(/\[(\d+)\]/g)) segs.push(Number(idx[1]));
  }
  let cur = body;
  for (const seg of segs.slice(0, -1)) cur = cur[seg];
  cur[segs.at(-1)!] = value;
}

function getPath(body: any, path: string): unknown {
  let cur = body;
  for (const part of path.split('.')) {
    const m = /^([^[]+)((?:\[\d+\])*)$/.exec(part)!;
    cur = cur?.[m[1]!];
    for (const idx of m[2]!.matchAll(/\[(\d+)\]/g)) cur = cur?.[Number(idx[1])];
  }
  return cur;
}

type FixtureLookup = [kind: 'email' | 'phone' | 'contactId', path: string, expected: string | number];
interface Fixture {
  body: Record<string, unknown>;
  lookups: FixtureLookup[];
  must_be_422?: [kind: 'email' | 'phone' | 'contactId', path: string][];
}

function loadFixtures(): [string, Fixture][] {
  const raw = JSON.parse(readFileSync(new URL('../fixtures/sender-payloads.json', import.meta.url), 'utf8')) as Record<string, unknown>;
  return Object.entries(raw).filter(([k]) => !k.startsWith('_')) as [string, Fixture][];
}

// GitHub's published example for X-Hub-Signature-256 (docs: "Validating webhook deliveries").
const GH_SECRET = "It's a Secret to Everybody";
const GH_PAYLOAD = 'Hello, World!';
const GH_SIGNATURE = 'sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';

// ---------------------------------------------------------------------------------------
// 202: accepted
// ---------------------------------------------------------------------------------------

test('202 {runId, contactId}: exactly one QUEUED run whose trigger is the body', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const body = { email: 'ann@example.com', order: { id: 7, items: [{ sku: 'a', qty: 2 }] }, note: 'héllo ✓', flag: null };
  const res = await post(s, hook.path, { body, headers: { 'x-request-id': 'sender-req-1' } });
  const accepted = assertAccepted(res);
  assert.equal(accepted.contactId, contact.id);
  assert.equal(res.headers.get('x-request-id'), 'sender-req-1', 'X-Request-Id is echoed');

  const runs = await runRows(s, hook.id);
  assert.equal(runs.length, 1, 'exactly one run');
  assert.equal(runs[0]!.id, accepted.runId);
  assert.equal(runs[0]!.contactId, contact.id);
  assert.equal(runs[0]!.status, 'QUEUED');
  assert.deepEqual(runs[0]!.trigger, body);

  const run = await s.request('GET', `/runs/${accepted.runId}`, { token });
  assert.equal(run.status, 200, run.text);
  assert.equal(run.body.status, 'QUEUED');
  assert.equal(run.body.workflowId, hook.id);
  assert.equal(run.body.contactId, contact.id);
  assert.deepEqual(run.body.trigger, body);

  // Content-Type parameters are fine.
  assertAccepted(await post(s, hook.path, { body, contentType: 'application/json; charset=utf-8' }));
  assertAccepted(await post(s, hook.path, { body, contentType: 'Application/JSON' }));
  assert.equal(await runCount(s, hook.id), 3);
});

// ---------------------------------------------------------------------------------------
// Lookups with real senders' bodies
// ---------------------------------------------------------------------------------------

test('every fixture lookup resolves to the expected contact', async (t) => {
  const { s, token } = await setup(t);
  const fixtures = loadFixtures();
  assert.ok(fixtures.length >= 5, 'fixtures loaded');
  const byValue = new Map<string, number>();
  let checked = 0;
  for (const [name, fx] of fixtures) {
    for (const [kind, path, expected] of fx.lookups) {
      const hook = await hookWorkflow(s, token, { lookup: kind, path });
      let body: Record<string, unknown> = fx.body;
      let contactId: number;
      if (kind === 'contactId') {
        // Fixture ids (4182) are not ours: put the real id at the path, keeping its type.
        const original = getPath(fx.body, path);
        assert.equal(Number(original), expected, `${name}: fixture value at ${path}`);
        contactId = (await createContact(s, token, { email: `${name.replace(/_/g, '-')}-${checked}@fixtures.test` })).id;
        body = structuredClone(fx.body);
        setPath(body, path, typeof original === 'string' ? String(contactId) : contactId);
      } else {
        const key = `${kind}:${expected}`;
        if (!byValue.has(key)) byValue.set(key, (await createContact(s, token, { [kind]: expected })).id);
        contactId = byValue.get(key)!;
      }
      const res = await post(s, hook.path, { body });
      const accepted = assertAccepted(res);
      assert.equal(accepted.contactId, contactId, `${name}: ${kind} at ${path} resolves to the contact with ${expected}`);
      const run = await s.request('GET', `/runs/${accepted.runId}`, { token });
      assert.deepEqual(run.body.trigger, body, `${name}: the trigger is the whole body`);
      checked++;
    }
  }
  assert.equal(
    checked,
    fixtures.reduce((n, [, fx]) => n + fx.lookups.length, 0),
  );
  assert.equal(checked, 8);
});

test('every fixture lookup resolves through create-on-miss to a contact with the expected value', async (t) => {
  const { s, token } = await setup(t);
  for (const [name, fx] of loadFixtures()) {
    for (const [kind, path, expected] of fx.lookups) {
      if (kind === 'contactId') continue;
      const hook = await hookWorkflow(s, token, { lookup: kind, path, createIfNotFound: true });
      const first = assertAccepted(await post(s, hook.path, { body: fx.body }));
      const contact = await s.request('GET', `/contacts/${first.contactId}`, { token });
      assert.equal(contact.body[kind], expected, `${name}: created contact's ${kind}`);
      const again = assertAccepted(await post(s, hook.path, { body: fx.body }));
      assert.equal(again.contactId, first.contactId, `${name}: the second post finds the created contact`);
    }
  }
});

test('every must_be_422 fixture case is 422 and starts no run', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'dave@example.com' });
  let checked = 0;
  for (const [name, fx] of loadFixtures()) {
    for (const [kind, path] of fx.must_be_422 ?? []) {
      const hook = await hookWorkflow(s, token, { lookup: kind, path, createIfNotFound: true });
      const res = await post(s, hook.path, { body: fx.body });
      assertProblem(res, 422);
      assert.match(res.body.code, /^lookup_value_(missing|invalid)$/, `${name} ${path}: ${res.body.code}`);
      assert.equal(await runCount(s, hook.id), 0);
      checked++;
    }
  }
  assert.equal(checked, 3);
  // The shop order's top-level "email" is an empty string: nothing to look up.
  const [, shop] = loadFixtures().find(([n]) => n === 'shop_order_customer')!;
  const top = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true });
  assertProblem(await post(s, top.path, { body: shop.body }), 422);
  assert.equal(await contactCount(s), 1, 'no contact was created');
});

// ---------------------------------------------------------------------------------------
// 404
// ---------------------------------------------------------------------------------------

test('404 webhook_not_found for an unknown token and for malformed tokens', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const real = hook.path.split('/').at(-1)!;
  const body = { email: 'ann@example.com' };
  const bad = [
    fakeToken(),
    real.slice(0, 29),
    `${real}x`,
    `${real.slice(0, 29)}-`,
    real.toLowerCase() === real ? real.toUpperCase() : real.toLowerCase(),
    'short',
    '%00',
    `${real}%20`,
    '..%2F..%2Fworkflows',
  ];
  for (const tok of bad) {
    const res = await post(s, `/v1/webhooks/in/${tok}`, { body });
    assert.equal(res.status, 404, `${tok}: ${res.status} ${res.text}`);
    assertProblem(res, 404);
  }
  const unknown = await post(s, `/v1/webhooks/in/${fakeToken()}`, { body });
  assertProblem(unknown, 404, 'webhook_not_found');
  assert.ok(unknown.headers.get('x-request-id'), 'every response carries X-Request-Id');
  assertProblem(await post(s, '/v1/webhooks/in/', { body }), 404);
  assert.equal(await runCount(s, hook.id), 0);
  assertAccepted(await post(s, hook.path, { body }));
});

test('an over-long token is a 404 problem like any other unknown token', async (t) => {
  const { s } = await setup(t);
  for (const len of [31, 100, 101, 300, 2000]) {
    const res = await post(s, `/v1/webhooks/in/${'x'.repeat(len)}`, { body: { email: 'ann@example.com' } });
    assertProblem(res, 404);
    assert.ok(res.headers.get('x-request-id'), 'every response carries X-Request-Id');
  }
});

test('404 for a paused workflow, and for a workflow whose trigger source is no longer WEBHOOK', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { status: 'PAUSED' } });
  assertProblem(await post(s, hook.path, { body: { email: 'ann@example.com' } }), 404, 'webhook_not_found');
  await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { status: 'ACTIVE', triggerSource: 'MANUAL' } });
  assertProblem(await post(s, hook.path, { body: { email: 'ann@example.com' } }), 404, 'webhook_not_found');
  assert.equal(await runCount(s, hook.id), 0);
});

test('404 contact_not_found when no contact matches and create-on-miss is off', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com', phone: '+16135550100' });
  const email = await hookWorkflow(s, token, { lookup: 'email' });
  const phone = await hookWorkflow(s, token, { lookup: 'phone' });
  const id = await hookWorkflow(s, token, { lookup: 'contactId' });
  assertProblem(await post(s, email.path, { body: { email: 'nobody@example.com' } }), 404, 'contact_not_found');
  assertProblem(await post(s, phone.path, { body: { phone: '+16135550199' } }), 404, 'contact_not_found');
  assertProblem(await post(s, id.path, { body: { contactId: 999999 } }), 404, 'contact_not_found');
  // An integer or a string of digits that no contact can have (0, negative, past 2^53) is a miss
  // like any other, not a value of the wrong shape.
  for (const contactId of [0, -3, 2 ** 60, '0', '820982911946154500', '9'.repeat(400)])
    assertProblem(await post(s, id.path, { body: { contactId } }), 404, 'contact_not_found');
  assert.equal(await contactCount(s), 1, 'nothing was created');
  assert.equal(await countRows(s, workflowRuns), 0);
});

test('a contactId miss is 404 even with create-on-miss on', async (t) => {
  const { s, token } = await setup(t);
  const hook = await hookWorkflow(s, token, { lookup: 'contactId', createIfNotFound: true, defaults: { firstName: 'Ghost' } });
  assertProblem(await post(s, hook.path, { body: { contactId: 424242 } }), 404, 'contact_not_found');
  assertProblem(await post(s, hook.path, { body: { contactId: '424243' } }), 404, 'contact_not_found');
  assert.equal(await contactCount(s), 0);
  assert.equal(await runCount(s, hook.id), 0);
});

test("a contactId of another workspace's contact is 404", async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const theirs = await createContact(s, other.token, { email: 'theirs@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'contactId' });
  assertProblem(await post(s, hook.path, { body: { contactId: theirs.id } }), 404, 'contact_not_found');
  // Nor does an email lookup see the other workspace's contact: create-on-miss makes a new one here.
  const byEmail = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true });
  const res = assertAccepted(await post(s, byEmail.path, { body: { email: 'theirs@example.com' } }));
  assert.notEqual(res.contactId, theirs.id);
});

// ---------------------------------------------------------------------------------------
// 415, 413, 400, 422
// ---------------------------------------------------------------------------------------

test('415 for text/plain, a missing Content-Type and other non-JSON types', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const raw = JSON.stringify({ email: 'ann@example.com' });
  for (const ct of [
    'text/plain',
    'text/plain; charset=utf-8',
    null,
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/jsonp',
    'application/json-seq',
    'json',
  ]) {
    const res = await post(s, hook.path, { raw, contentType: ct });
    assert.equal(res.status, 415, `${ct}: ${res.status} ${res.text}`);
    assertProblem(res, 415);
  }
  assert.equal(await runCount(s, hook.id), 0);
});

test('415 unsupported_content_encoding for a compressed body (gzip, br), recorded as refused; identity is taken', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const raw = JSON.stringify({ email: 'ann@example.com' });
  for (const [encoding, bytes] of [
    ['gzip', gzipSync(raw)],
    // Labelled gzip but sent plain: still refused, never read as JSON.
    ['gzip', Buffer.from(raw)],
    ['br', Buffer.from(raw)],
    ['deflate, gzip', Buffer.from(raw)],
  ] as const) {
    const res = await s.request('POST', hook.path, { raw: bytes, headers: { 'content-type': 'application/json', 'content-encoding': encoding } });
    assertProblem(res, 415, 'unsupported_content_encoding');
    assert.equal(res.headers.get('accept-encoding'), 'identity');
  }
  assert.equal(await runCount(s, hook.id), 0);
  const events = await s.request('GET', `/workflows/${hook.id}/webhook-events`, { token });
  assert.deepEqual(
    events.body.data.map((e: { statusCode: number; code: string }) => [e.statusCode, e.code]),
    Array(4).fill([415, 'unsupported_content_encoding']),
  );
  for (const encoding of ['identity', 'IDENTITY ', '']) {
    const res = await s.request('POST', hook.path, { raw, headers: { 'content-type': 'application/json', 'content-encoding': encoding } });
    assert.equal(res.status, 202, `${JSON.stringify(encoding)}: ${res.text}`);
  }
});

test('413 for a body over the limit (SVC_WEBHOOK_BODY_LIMIT), with or without Content-Length', async (t) => {
  const { s, token } = await setup(t, { SVC_WEBHOOK_BODY_LIMIT: '2048' });
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const padded = (size: number) => {
    const base = JSON.stringify({ email: 'ann@example.com', pad: '' });
    return JSON.stringify({ email: 'ann@example.com', pad: 'x'.repeat(size - base.length) });
  };
  assert.equal(padded(2048).length, 2048);
  assertAccepted(await post(s, hook.path, { raw: padded(2048) }));
  assertProblem(await post(s, hook.path, { raw: padded(2049) }), 413);
  assertProblem(await post(s, hook.path, { raw: padded(100_000) }), 413);

  // Streamed without Content-Length (chunked): the limit still holds.
  const big = Buffer.from(padded(5000));
  const stream = new ReadableStream({
    start(c) {
      for (let i = 0; i < big.length; i += 1000) c.enqueue(big.subarray(i, i + 1000));
      c.close();
    },
  });
  const res = await fetch(s.url + hook.path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: stream, duplex: 'half' } as RequestInit);
  assert.equal(res.status, 413, await res.text());
  assert.equal(await runCount(s, hook.id), 1);
  // The server still answers.
  assertAccepted(await post(s, hook.path, { body: { email: 'ann@example.com' } }));
});

test('400 invalid JSON', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true });
  for (const raw of [
    '{"email": "ann@example.com"',
    '{email: "ann@example.com"}',
    "{'email': 'a@b.co'}",
    '{"email": "ann@example.com"} trailing',
    '',
    '   ',
    'undefined',
    'NaN',
    '{"a": 01}',
  ]) {
    const res = await post(s, hook.path, { raw });
    assert.equal(res.status, 400, `${JSON.stringify(raw)}: ${res.status} ${res.text}`);
    assertProblem(res, 400);
  }
  assert.equal(await runCount(s, hook.id), 0);
  assert.equal(await contactCount(s), 1);
});

test('a body after a UTF-8 byte order mark is read as JSON (RFC 8259 8.1), signed over the bytes as sent, and replays', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: 'bom-secret-0123456789abcdef' });
  const raw = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"email":"ann@example.com","n":1}')]);
  const res = await post(s, hook.path, { raw, headers: { 'x-service-signature': sign('bom-secret-0123456789abcdef', raw) } });
  assert.equal(res.status, 202, res.text);
  assert.equal(res.body.contactId, contact.id);
  const run = await s.request('GET', `/runs/${res.body.runId}`, { token });
  assert.deepEqual(run.body.trigger, { email: 'ann@example.com', n: 1 });
  const [event] = await events(s, token, hook.id);
  assert.deepEqual(event.body, { email: 'ann@example.com', n: 1 });
  const again = await s.request('POST', `/webhook-events/${event.id}/replay`, { token });
  assert.equal(again.status, 202, again.text);
  // A BOM anywhere else, or two, is no JSON.
  const twice = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf, 0xef, 0xbb, 0xbf]), Buffer.from('{"email":"ann@example.com"}')]);
  assertProblem(await post(s, hook.path, { raw: twice, headers: { 'x-service-signature': sign('bom-secret-0123456789abcdef', twice) } }), 400, 'invalid_json');
});

test('400 invalid_json when the body is not UTF-8, whatever its charset says: nothing is stored with U+FFFD in its place', async (t) => {
  const { s, token } = await setup(t);
  const hook = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true });
  const latin1 = Buffer.from('{"email":"jos\xe9@example.com","name":"Jos\xe9"}', 'latin1');
  for (const contentType of ['application/json', 'application/json; charset=iso-8859-1']) {
    const res = await post(s, hook.path, { raw: latin1, headers: { 'content-type': contentType } });
    assertProblem(res, 400, 'invalid_json');
    assert.match(res.body.detail, /not UTF-8/);
  }
  // A lone byte that starts a sequence, a cut-off sequence, an encoded surrogate.
  for (const bad of [[0xff], [0xc3], [0xed, 0xa0, 0x80]]) {
    const raw = Buffer.concat([Buffer.from('{"email":"ann@example.com","x":"'), Buffer.from(bad), Buffer.from('"}')]);
    assertProblem(await post(s, hook.path, { raw }), 400, 'invalid_json');
  }
  assert.equal(await runCount(s, hook.id), 0);
  assert.equal(await contactCount(s), 0);
  // The same text in UTF-8 is taken.
  const ok = await post(s, hook.path, { raw: Buffer.from('{"email":"jos\u00e9@example.com","name":"Jos\u00e9"}') });
  assert.equal(ok.status, 202, ok.text);
});

test('422 when the body is JSON but not an object (array, string, number, boolean, null)', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', path: '0.email' });
  for (const raw of ['[{"email": "ann@example.com"}]', '[]', '"ann@example.com"', '42', '-1.5', 'true', 'null']) {
    const res = await post(s, hook.path, { raw });
    assert.equal(res.status, 422, `${raw}: ${res.status} ${res.text}`);
    assertProblem(res, 422);
  }
  assert.equal(await runCount(s, hook.id), 0);
});

test('422 lookup_value_missing when the path resolves to nothing', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', path: 'customer.email', createIfNotFound: true });
  const missing: unknown[] = [
    {},
    { email: 'ann@example.com' },
    { customer: {} },
    { customer: null },
    { customer: 'ann@example.com' },
    { customer: { email: null } },
    { customer: [{ email: 'ann@example.com' }] },
    { Customer: { email: 'ann@example.com' } },
  ];
  for (const body of missing) assertProblem(await post(s, hook.path, { body }), 422, 'lookup_value_missing');
  const arr = await hookWorkflow(s, token, { lookup: 'email', path: 'fields[2].value', createIfNotFound: true });
  assertProblem(await post(s, arr.path, { body: { fields: [{ value: 'ann@example.com' }] } }), 422, 'lookup_value_missing');
  assertProblem(await post(s, arr.path, { body: { fields: { 2: { value: 'ann@example.com' } } } }), 422, 'lookup_value_missing');
  // An empty string resolves to nothing usable either.
  assertProblem(await post(s, hook.path, { body: { customer: { email: '' } } }), 422);
  assert.equal(await countRows(s, workflowRuns), 0);
  assert.equal(await contactCount(s), 1);
});

test('422 lookup_value_invalid when the value has the wrong type or shape', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com', phone: '+16135550100' });
  const email = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true });
  const phone = await hookWorkflow(s, token, { lookup: 'phone', createIfNotFound: true });
  const id = await hookWorkflow(s, token, { lookup: 'contactId' });
  const cases: [Hook, unknown][] = [
    [email, 'not-an-email'],
    [email, 'ann@'],
    [email, 'ann @example.com'],
    [email, 42],
    [email, true],
    [email, ['ann@example.com']],
    [email, { address: 'ann@example.com' }],
    [phone, 'call me'],
    [phone, '12'],
    [phone, 16135550100],
    [phone, ['+16135550100']],
    [id, 'abc'],
    [id, `${contact.id}a`],
    [id, '1.0'],
    [id, ` ${contact.id}`],
    [id, `${contact.id} `],
    [id, `${contact.id}\n`],
    [id, '-1'],
    [id, '+1'],
    [id, 1.5],
    [id, true],
    [id, [contact.id]],
    [id, { id: contact.id }],
  ];
  for (const [hook, value] of cases) {
    const key = hook === email ? 'email' : hook === phone ? 'phone' : 'contactId';
    const res = await post(s, hook.path, { body: { [key]: value } });
    assert.equal(res.status, 422, `${key}=${JSON.stringify(value)}: ${res.status} ${res.text}`);
    assertProblem(res, 422, 'lookup_value_invalid');
  }
  assert.equal(await contactCount(s), 1);
  assert.equal(await countRows(s, workflowRuns), 0);
});

// ---------------------------------------------------------------------------------------
// Matching and create-on-miss
// ---------------------------------------------------------------------------------------

test('create-on-miss creates the contact with the defaults and returns its id', async (t) => {
  const { s, token } = await setup(t);
  const hook = await hookWorkflow(s, token, {
    lookup: 'email',
    path: 'data.customer.email',
    createIfNotFound: true,
    defaults: { firstName: 'Friend', lastName: 'Of Hooks', attributes: { source: 'webhook' }, tags: ['lead', 'Inbound'] },
  });
  const res = assertAccepted(await post(s, hook.path, { body: { data: { customer: { email: '  New.Person@Example.COM ' } } } }));
  const contact = await s.request('GET', `/contacts/${res.contactId}`, { token });
  assert.equal(contact.status, 200, contact.text);
  assert.equal(contact.body.email, 'new.person@example.com');
  assert.equal(contact.body.firstName, 'Friend');
  assert.equal(contact.body.lastName, 'Of Hooks');
  assert.deepEqual(contact.body.attributes, { source: 'webhook' });
  assert.deepEqual([...contact.body.tags].sort(), ['Inbound', 'lead']);
  assert.equal((await runRows(s, hook.id))[0]!.contactId, res.contactId);

  // The next post for the same address (in another case) finds it: no second contact.
  const again = assertAccepted(await post(s, hook.path, { body: { data: { customer: { email: 'NEW.person@example.com' } } } }));
  assert.equal(again.contactId, res.contactId);
  assert.equal(await contactCount(s), 1);

  // An existing contact is matched, not overwritten with the defaults.
  const existing = await createContact(s, token, { email: 'kept@example.com', firstName: 'Kept' });
  const matched = assertAccepted(await post(s, hook.path, { body: { data: { customer: { email: 'kept@example.com' } } } }));
  assert.equal(matched.contactId, existing.id);
  const kept = await s.request('GET', `/contacts/${existing.id}`, { token });
  assert.equal(kept.body.firstName, 'Kept');
  assert.deepEqual(kept.body.tags, []);

  // Phone create-on-miss stores the normalised number.
  const byPhone = await hookWorkflow(s, token, { lookup: 'phone', createIfNotFound: true, defaults: { firstName: 'Caller' } });
  const p = assertAccepted(await post(s, byPhone.path, { body: { phone: '(613) 555-0199' } }));
  const pc = await s.request('GET', `/contacts/${p.contactId}`, { token });
  assert.equal(pc.body.phone, '+16135550199');
  assert.equal(pc.body.firstName, 'Caller');
});

test('email matching is case-insensitive and ignores surrounding spaces', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'Jane.Doe@Example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  for (const email of ['jane.doe@example.com', 'JANE.DOE@EXAMPLE.COM', 'Jane.Doe@Example.com', '  jane.DOE@example.com  ']) {
    const res = assertAccepted(await post(s, hook.path, { body: { email } }));
    assert.equal(res.contactId, contact.id, email);
  }
});

test('phone values are normalised before matching', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { phone: '+16135550138' });
  const hook = await hookWorkflow(s, token, { lookup: 'phone', path: 'customer.phone' });
  for (const phone of ['+1-613-555-0138', '+16135550138', '+1 (613) 555-0138', '(613) 555-0138', '613.555.0138', ' +1 613 555 0138 ']) {
    const res = assertAccepted(await post(s, hook.path, { body: { customer: { phone } } }));
    assert.equal(res.contactId, contact.id, phone);
  }
});

test('contactId lookups accept an integer and a string of digits', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'first@example.com' });
  const contact = await createContact(s, token, { email: 'second@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'contactId', path: 'objectId' });
  assert.equal(assertAccepted(await post(s, hook.path, { body: { objectId: contact.id } })).contactId, contact.id);
  assert.equal(assertAccepted(await post(s, hook.path, { body: { objectId: String(contact.id) } })).contactId, contact.id);
  assert.equal(await runCount(s, hook.id), 2);
});

// ---------------------------------------------------------------------------------------
// 401: signatures
// ---------------------------------------------------------------------------------------

test("GitHub's published HMAC test vector: the receiver computes exactly that signature", async (t) => {
  // The constant itself, computed here.
  assert.equal(sign(GH_SECRET, GH_PAYLOAD), GH_SIGNATURE);

  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: GH_SECRET });

  // The vector's own bytes pass the signature check (and then fail as JSON: 400, not 401)...
  assertProblem(await post(s, hook.path, { raw: GH_PAYLOAD, headers: { 'x-service-signature': GH_SIGNATURE } }), 400);
  // ...while one changed hex digit does not.
  const flipped = GH_SIGNATURE.slice(0, -1) + (GH_SIGNATURE.endsWith('7') ? '8' : '7');
  assertProblem(await post(s, hook.path, { raw: GH_PAYLOAD, headers: { 'x-service-signature': flipped } }), 401, 'signature_invalid');

  // A JSON body signed the same way is accepted.
  const raw = JSON.stringify({ email: 'ann@example.com', hello: 'World!' });
  const sig = `sha256=${createHmac('sha256', GH_SECRET).update(Buffer.from(raw)).digest('hex')}`;
  assert.match(sig, /^sha256=[0-9a-f]{64}$/);
  const res = assertAccepted(await post(s, hook.path, { raw, headers: { 'x-service-signature': sig } }));
  assert.equal(res.contactId, contact.id);
  assert.equal(await runCount(s, hook.id), 1);
});

test('401 signature_invalid for every wrong, malformed or missing signature', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const secret = 'top-secret-signing-key';
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: secret });
  const body = { email: 'ann@example.com', n: 1 };
  const raw = JSON.stringify(body);
  const good = sign(secret, raw);
  const hex = good.slice('sha256='.length);
  const bad: [string, Record<string, string>, string?][] = [
    ['missing header', {}],
    ['no sha256= prefix', { 'x-service-signature': hex }],
    ['uppercase hex', { 'x-service-signature': `sha256=${hex.toUpperCase()}` }],
    ['uppercase prefix', { 'x-service-signature': `SHA256=${hex}` }],
    ['one hex digit short', { 'x-service-signature': good.slice(0, -1) }],
    ['one hex digit long', { 'x-service-signature': `${good}0` }],
    ['empty value', { 'x-service-signature': '' }],
    ['only the prefix', { 'x-service-signature': 'sha256=' }],
    ['sha1 of the body', { 'x-service-signature': `sha1=${createHmac('sha1', secret).update(raw).digest('hex')}` }],
    ['wrong secret', { 'x-service-signature': sign('not-the-secret', raw) }],
    ['secret with different case', { 'x-service-signature': sign(secret.toUpperCase(), raw) }],
    ['plain SHA-256 without the key', { 'x-service-signature': `sha256=${createHmac('sha256', '').update(raw).digest('hex')}` }],
    ['signature with surrounding spaces', { 'x-service-signature': ` ${good} ` }, 'maybe-trimmed'],
    ['two signatures', { 'x-service-signature': `${good}, ${good}` }],
    ['base64 digest', { 'x-service-signature': `sha256=${createHmac('sha256', secret).update(raw).digest('base64')}` }],
    ['GitHub header name instead', { 'x-hub-signature-256': good }],
  ];
  let accepted = 0;
  for (const [label, headers, note] of bad) {
    const res = await post(s, hook.path, { raw, headers });
    if (note === 'maybe-trimmed' && res.status === 202) {
      accepted++; // HTTP strips surrounding spaces from header values
      continue;
    }
    assert.equal(res.status, 401, `${label}: ${res.status} ${res.text}`);
    assertProblem(res, 401, 'signature_invalid');
    assert.ok(!res.text.includes(hex), `${label}: the expected signature is not revealed`);
    assert.ok(!res.text.includes(secret), `${label}: the secret is not revealed`);
  }

  // The signature covers the exact bytes: the same JSON with other whitespace or key order fails.
  for (const other of [
    JSON.stringify(body, null, 2),
    `${raw}\n`,
    ` ${raw}`,
    JSON.stringify({ n: 1, email: 'ann@example.com' }),
    raw.replace('"n":1', '"n":1.0'),
  ]) {
    const res = await post(s, hook.path, { raw: other, headers: { 'x-service-signature': good } });
    assertProblem(res, 401, 'signature_invalid');
    // ...and passes when signed as sent.
    assertAccepted(await post(s, hook.path, { raw: other, headers: { 'x-service-signature': sign(secret, other) } }));
  }
  assertAccepted(await post(s, hook.path, { raw, headers: { 'x-service-signature': good } }));
  assert.equal(await runCount(s, hook.id), 6 + accepted);
});

test('rotating the secret makes the old signature stale at once; clearing it accepts unsigned posts', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: 'first-secret-0123456789' });
  const raw = JSON.stringify({ email: 'ann@example.com' });
  assertAccepted(await post(s, hook.path, { raw, headers: { 'x-service-signature': sign('first-secret-0123456789', raw) } }));

  const rotated = await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { webhook: { signingSecret: 'second-secret-0123456789' } } });
  assert.equal(rotated.status, 200, rotated.text);
  assertProblem(await post(s, hook.path, { raw, headers: { 'x-service-signature': sign('first-secret-0123456789', raw) } }), 401, 'signature_invalid');
  assertAccepted(await post(s, hook.path, { raw, headers: { 'x-service-signature': sign('second-secret-0123456789', raw) } }));
  assertProblem(await post(s, hook.path, { raw }), 401, 'signature_invalid');

  const cleared = await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { webhook: { signingSecret: null } } });
  assert.equal(cleared.body.webhook.hasSigningSecret, false);
  assertAccepted(await post(s, hook.path, { raw }));
  assert.equal(await runCount(s, hook.id), 3);

  // Setting one on a previously unsigned workflow starts requiring it at once.
  await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { webhook: { signingSecret: 'third-secret-0123456789' } } });
  assertProblem(await post(s, hook.path, { raw }), 401, 'signature_invalid');
  assertAccepted(await post(s, hook.path, { raw, headers: { 'x-service-signature': sign('third-secret-0123456789', raw) } }));
});

test('signatures cover non-ASCII bytes exactly', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const secret = 'ünïcödé-secret-✓';
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: secret });
  const raw = Buffer.from(JSON.stringify({ email: 'ann@example.com', name: 'Zoë 😀', escaped: '\u00e9' }), 'utf8');
  assertAccepted(await post(s, hook.path, { raw, headers: { 'x-service-signature': sign(secret, raw) } }));
  // The same text with a \u escape instead of the raw character is different bytes.
  const escaped = Buffer.from(raw.toString('utf8').replace('Zoë', 'Zo\\u00eb'));
  assertProblem(await post(s, hook.path, { raw: escaped, headers: { 'x-service-signature': sign(secret, raw) } }), 401, 'signature_invalid');
});

// ---------------------------------------------------------------------------------------
// Order of checks (API.md section 4)
// ---------------------------------------------------------------------------------------

test('order of checks: token → Content-Type → size → signature → JSON → object → lookup → contact', async (t) => {
  const { s, token } = await setup(t, { SVC_WEBHOOK_BODY_LIMIT: '2048' });
  const secret = 'order-secret-0123456789';
  const signed = await hookWorkflow(s, token, { lookup: 'email', signingSecret: secret });
  const unsigned = await hookWorkflow(s, token, { lookup: 'email' });
  const paused = await hookWorkflow(s, token, { lookup: 'email' });
  await s.request('PATCH', `/workflows/${paused.id}`, { token, body: { status: 'PAUSED' } });
  const unknown = `/v1/webhooks/in/${fakeToken()}`;
  const wrongSig = { 'x-service-signature': sign('wrong', 'x') };
  const tooBig = JSON.stringify({ email: 'x@example.com', pad: 'x'.repeat(5000) });

  // Token before Content-Type and size.
  assertProblem(await post(s, unknown, { raw: 'hello', contentType: 'text/plain' }), 404, 'webhook_not_found');
  assertProblem(await post(s, unknown, { raw: 'hello', contentType: null }), 404, 'webhook_not_found');
  assertProblem(await post(s, unknown, { raw: tooBig }), 404, 'webhook_not_found');
  assertProblem(await post(s, paused.path, { raw: 'hello', contentType: 'text/plain' }), 404, 'webhook_not_found');
  assertProblem(await post(s, paused.path, { raw: tooBig, headers: wrongSig }), 404, 'webhook_not_found');
  // Content-Type before size and signature.
  assertProblem(await post(s, signed.path, { raw: '{"email":"x@example.com"}', contentType: 'text/plain', headers: wrongSig }), 415);
  assertProblem(await post(s, signed.path, { raw: tooBig, contentType: 'text/plain', headers: wrongSig }), 415);
  assertProblem(await post(s, signed.path, { raw: '{}', contentType: null }), 415);
  // Size before signature.
  assertProblem(await post(s, signed.path, { raw: tooBig, headers: wrongSig }), 413);
  assertProblem(await post(s, signed.path, { raw: tooBig }), 413);
  // Signature before JSON parsing, object shape and lookup.
  assertProblem(await post(s, signed.path, { raw: '{"email": ', headers: wrongSig }), 401, 'signature_invalid');
  assertProblem(await post(s, signed.path, { raw: '[1,2]', headers: wrongSig }), 401, 'signature_invalid');
  assertProblem(await post(s, signed.path, { raw: '{}' }), 401, 'signature_invalid');
  // With a valid signature the later checks apply, in order.
  const signedPost = (raw: string) => post(s, signed.path, { raw, headers: { 'x-service-signature': sign(secret, raw) } });
  assertProblem(await signedPost('{"email": '), 400);
  assertProblem(await signedPost('[{"email": "x@example.com"}]'), 422);
  assertProblem(await signedPost('{"name": "no email"}'), 422, 'lookup_value_missing');
  assertProblem(await signedPost('{"email": "nope"}'), 422, 'lookup_value_invalid');
  assertProblem(await signedPost('{"email": "nobody@example.com"}'), 404, 'contact_not_found');
  // Unsigned: JSON before object before lookup before contact.
  assertProblem(await post(s, unsigned.path, { raw: '[' }), 400);
  assertProblem(await post(s, unsigned.path, { raw: '"x@example.com"' }), 422);
  assertProblem(await post(s, unsigned.path, { raw: '{}' }), 422, 'lookup_value_missing');
  assertProblem(await post(s, unsigned.path, { raw: '{"email":"nobody@example.com"}' }), 404, 'contact_not_found');
  assert.equal(await countRows(s, workflowRuns), 0);
});

// ---------------------------------------------------------------------------------------
// 429: per-IP rate limit
// ---------------------------------------------------------------------------------------

function assertRateHeaders(res: HttpResult, limit: number): void {
  assert.equal(res.headers.get('x-ratelimit-limit'), String(limit), `X-RateLimit-Limit on ${res.status}`);
  const remaining = res.headers.get('x-ratelimit-remaining');
  const reset = res.headers.get('x-ratelimit-reset');
  assert.match(remaining ?? '', /^\d+$/, `X-RateLimit-Remaining on ${res.status}`);
  assert.match(reset ?? '', /^\d+$/, `X-RateLimit-Reset on ${res.status}`);
  assert.ok(Number(reset) <= 60, 'reset is within the one-minute window');
}

test('429 after the per-IP limit, with Retry-After and rate-limit headers on every response', async (t) => {
  const { s, token } = await setup(t, { SVC_WEBHOOK_RATE_LIMIT: '5' });
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const other = await hookWorkflow(s, token, { lookup: 'email' });
  const results = [
    await post(s, hook.path, { body: { email: 'ann@example.com' } }),
    await post(s, hook.path, { body: { email: 'nobody@example.com' } }),
    await post(s, `/v1/webhooks/in/${fakeToken()}`, { body: {} }),
    await post(s, hook.path, { raw: 'x', contentType: 'text/plain' }),
    await post(s, other.path, { body: { email: 'ann@example.com' } }),
  ];
  assert.deepEqual(
    results.map((r) => r.status),
    [202, 404, 404, 415, 202],
  );
  results.forEach((r, i) => {
    assertRateHeaders(r, 5);
    assert.equal(r.headers.get('x-ratelimit-remaining'), String(4 - i), `remaining after request ${i + 1}`);
  });

  // The 6th request from this address is refused, whatever the token (the limit is checked first).
  for (const path of [hook.path, other.path, `/v1/webhooks/in/${fakeToken()}`]) {
    const res = await post(s, path, { body: { email: 'ann@example.com' } });
    assertProblem(res, 429);
    assertRateHeaders(res, 5);
    assert.equal(res.headers.get('x-ratelimit-remaining'), '0');
    const retry = res.headers.get('retry-after');
    assert.match(retry ?? '', /^\d+$/, 'Retry-After in seconds');
    assert.ok(Number(retry) >= 1 && Number(retry) <= 60, `Retry-After ${retry}`);
  }
  assert.equal((await runCount(s, hook.id)) + (await runCount(s, other.id)), 2, 'refused requests start no run');

  // Authenticated endpoints are not affected by the webhook limit.
  assert.equal((await s.request('GET', '/workflows', { token })).status, 200);
});

test('X-Forwarded-For is ignored by default: changing it does not reset the limit', async (t) => {
  const { s, token } = await setup(t, { SVC_WEBHOOK_RATE_LIMIT: '5' });
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  for (let i = 0; i < 5; i++) {
    assertAccepted(await post(s, hook.path, { body: { email: 'ann@example.com' }, headers: { 'x-forwarded-for': `198.51.100.${i + 1}` } }));
  }
  for (const xff of ['198.51.100.99', '203.0.113.7, 198.51.100.1', '::1']) {
    assertProblem(await post(s, hook.path, { body: { email: 'ann@example.com' }, headers: { 'x-forwarded-for': xff } }), 429);
  }
  const evs = await events(s, token, hook.id);
  assert.ok(evs.length >= 5);
  for (const e of evs) assert.match(e.sourceIp, /^(::ffff:)?127\.0\.0\.1$/, 'the socket address is recorded, not the header');
});

test('X-Forwarded-For is honoured behind one trusted hop (SVC_TRUST_PROXY=1): another forwarded address still passes', async (t) => {
  const { s, token } = await setup(t, { SVC_WEBHOOK_RATE_LIMIT: '5', SVC_TRUST_PROXY: '1' });
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const from = (ip: string) => post(s, hook.path, { body: { email: 'ann@example.com' }, headers: { 'x-forwarded-for': ip } });
  for (let i = 0; i < 5; i++) assertAccepted(await from('203.0.113.10'));
  const limited = await from('203.0.113.10');
  assertProblem(limited, 429);
  assert.ok(limited.headers.get('retry-after'));
  const second = await from('203.0.113.11');
  assertAccepted(second);
  assertRateHeaders(second, 5);
  assert.equal(second.headers.get('x-ratelimit-remaining'), '4');
  const evs = await events(s, token, hook.id);
  assert.equal(evs[0].sourceIp, '203.0.113.11', 'the forwarded address is recorded');
});

// ---------------------------------------------------------------------------------------
// Concurrency
// ---------------------------------------------------------------------------------------

test('20 concurrent create-on-miss requests for one new email create exactly one contact and 20 runs', async (t) => {
  const { s, token } = await setup(t);
  const hook = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true, defaults: { firstName: 'Racer' } });
  const results = await Promise.all(
    Array.from({ length: 20 }, (_, i) => post(s, hook.path, { body: { email: i % 2 ? 'Racer@Example.com' : 'racer@example.com', i } })),
  );
  const accepted = results.map(assertAccepted);
  const contactIds = new Set(accepted.map((a) => a.contactId));
  assert.equal(contactIds.size, 1, 'every request got the same contact');
  assert.equal(await countRows(s, contacts, eq(contacts.email, 'racer@example.com')), 1);
  assert.equal(await contactCount(s), 1);
  assert.equal(new Set(accepted.map((a) => a.runId)).size, 20);
  assert.equal(await runCount(s, hook.id), 20);
  const list = await s.request('GET', '/contacts?email=racer@example.com', { token });
  assert.equal(list.body.data.length, 1);
});

test('N concurrent accepted requests start exactly N runs, each with its own body', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const N = 60;
  const results = await Promise.all(Array.from({ length: N }, (_, i) => post(s, hook.path, { body: { email: 'ann@example.com', seq: i } })));
  const accepted = results.map(assertAccepted);
  assert.ok(accepted.every((a) => a.contactId === contact.id));
  assert.equal(new Set(accepted.map((a) => a.runId)).size, N);
  const rows = await runRows(s, hook.id);
  assert.equal(rows.length, N);
  // Each 202's runId holds the body that was sent with it.
  const byRun = new Map(rows.map((r) => [r.id, r.trigger.seq]));
  accepted.forEach((a, i) => assert.equal(byRun.get(a.runId), i));
  assert.equal((await events(s, token, hook.id)).filter((e) => e.statusCode === 202).length, N);
});

// ---------------------------------------------------------------------------------------
// Idempotency-Key
// ---------------------------------------------------------------------------------------

test('Idempotency-Key: a repeat answers the first 202 again with Idempotent-Replayed and starts no run', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true });
  const other = await hookWorkflow(s, token, { lookup: 'email' });
  const body = { email: 'ann@example.com', order: 1 };

  const first = await post(s, hook.path, { body, headers: { 'idempotency-key': 'order-1' } });
  const a = assertAccepted(first);
  assert.equal(first.headers.get('idempotent-replayed'), null, 'the first answer is not a replay');

  for (let i = 0; i < 3; i++) {
    const repeat = await post(s, hook.path, { body, headers: { 'idempotency-key': 'order-1' } });
    assert.deepEqual(assertAccepted(repeat), a);
    assert.equal(repeat.headers.get('idempotent-replayed'), 'true');
  }
  assert.equal(await runCount(s, hook.id), 1);

  // A different key starts a new run.
  const b = assertAccepted(await post(s, hook.path, { body, headers: { 'idempotency-key': 'order-2' } }));
  assert.notEqual(b.runId, a.runId);
  assert.equal(await runCount(s, hook.id), 2);
  // No key at all: every post is a new run.
  assertAccepted(await post(s, hook.path, { body }));
  assertAccepted(await post(s, hook.path, { body }));
  assert.equal(await runCount(s, hook.id), 4);
  // The same key on another workflow is a new run there.
  const c = await post(s, other.path, { body, headers: { 'idempotency-key': 'order-1' } });
  assertAccepted(c);
  assert.equal(c.headers.get('idempotent-replayed'), null);
  assert.notEqual(c.body.runId, a.runId);
  assert.equal(await runCount(s, other.id), 1);
  // A create-on-miss repeat creates no second contact either.
  const n1 = assertAccepted(await post(s, hook.path, { body: { email: 'brand.new@example.com' }, headers: { 'idempotency-key': 'new-1' } }));
  const n2 = assertAccepted(await post(s, hook.path, { body: { email: 'brand.new@example.com' }, headers: { 'idempotency-key': 'new-1' } }));
  assert.deepEqual(n2, n1);
  assert.equal(await contactCount(s), 2);
});

test('Idempotency-Key with create-on-miss: concurrent repeats naming new contacts create only the first one; a replay leaves nothing', async (t) => {
  const { s, token } = await setup(t);
  const hook = await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true, defaults: { tags: ['from-hook'] } });
  // One sender's retries of one event, each (wrongly, or after an edit) with another email.
  const results = await Promise.all(
    Array.from({ length: 10 }, (_, i) => post(s, hook.path, { body: { email: `idem${i}@example.com` }, headers: { 'idempotency-key': 'K-same-1' } })),
  );
  const bodies = results.map(assertAccepted);
  assert.ok(
    bodies.every((b) => b.runId === bodies[0]!.runId && b.contactId === bodies[0]!.contactId),
    'every answer is the first one',
  );
  assert.equal(results.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 9);
  assert.equal(await runCount(s, hook.id), 1);
  assert.equal(await contactCount(s), 1, 'only the accepted request created its contact');
  const tags = await s.request('GET', '/tags', { token });
  assert.deepEqual(
    tags.body.data.map((t: { name: string; count: number }) => [t.name, t.count]),
    [['from-hook', 1]],
  );
  // Other keys (and no key) are not held up by it: each creates its own.
  const others = await Promise.all([
    post(s, hook.path, { body: { email: 'other1@example.com' }, headers: { 'idempotency-key': 'K-other' } }),
    post(s, hook.path, { body: { email: 'other2@example.com' } }),
  ]);
  others.map(assertAccepted);
  assert.equal(await contactCount(s), 3);
});

test('Idempotency-Key: concurrent repeats start one run; a refused first attempt is not replayed', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const results = await Promise.all(
    Array.from({ length: 10 }, () => post(s, hook.path, { body: { email: 'ann@example.com' }, headers: { 'idempotency-key': 'burst' } })),
  );
  const bodies = results.map(assertAccepted);
  assert.ok(
    bodies.every((b) => b.runId === bodies[0]!.runId),
    'every answer names the same run',
  );
  assert.equal(results.filter((r) => r.headers.get('idempotent-replayed') === 'true').length, 9);
  assert.equal(await runCount(s, hook.id), 1);

  // The first attempt failed (no such contact); after fixing that, the retry with the same key runs.
  assertProblem(await post(s, hook.path, { body: { email: 'late@example.com' }, headers: { 'idempotency-key': 'retry-me' } }), 404, 'contact_not_found');
  await createContact(s, token, { email: 'late@example.com' });
  const retry = await post(s, hook.path, { body: { email: 'late@example.com' }, headers: { 'idempotency-key': 'retry-me' } });
  assertAccepted(retry);
  assert.equal(retry.headers.get('idempotent-replayed'), null);
  assert.equal(await runCount(s, hook.id), 2);
});

// ---------------------------------------------------------------------------------------
// Received events and replay
// ---------------------------------------------------------------------------------------

test('GET /workflows/:id/webhook-events lists accepted and refused posts with status, code, run, IP and body', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const secret = 'events-secret-0123456789';
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: secret });
  const signedPost = (body: unknown, raw = JSON.stringify(body)) => post(s, hook.path, { raw, headers: { 'x-service-signature': sign(secret, raw) } });

  const ok = assertAccepted(await signedPost({ email: 'ann@example.com', n: 1 }));
  await signedPost({ email: 'nobody@example.com' }); // 404 contact_not_found
  await signedPost({ name: 'no email' }); // 422 lookup_value_missing
  await signedPost(null, '{"email":'); // 400
  await post(s, hook.path, { body: { email: 'ann@example.com', forged: true }, headers: { 'x-service-signature': sign('wrong', 'x') } }); // 401
  await post(s, hook.path, { raw: 'plain text', contentType: 'text/plain' }); // 415

  const evs = await events(s, token, hook.id);
  assert.equal(evs.length, 6, JSON.stringify(evs));
  for (const e of evs) {
    for (const k of ['id', 'statusCode', 'code', 'runId', 'sourceIp', 'body', 'receivedAt']) assert.ok(k in e, `event has ${k}`);
    assert.equal(e.workflowId, hook.id);
    assert.match(e.receivedAt, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/);
    assert.match(e.sourceIp, /^(::ffff:)?127\.0\.0\.1$/);
  }
  const ids = evs.map((e) => e.id);
  assert.deepEqual(
    ids,
    [...ids].sort((x, y) => y - x),
    'newest first',
  );
  const [e415, e401, e400, e422, e404, e202] = evs;
  assert.equal(e202.statusCode, 202);
  assert.equal(e202.runId, ok.runId);
  assert.equal(e202.contactId, contact.id);
  assert.deepEqual(e202.body, { email: 'ann@example.com', n: 1 });
  assert.deepEqual([e404.statusCode, e404.code, e404.runId], [404, 'contact_not_found', null]);
  assert.deepEqual(e404.body, { email: 'nobody@example.com' });
  assert.deepEqual([e422.statusCode, e422.code, e422.runId], [422, 'lookup_value_missing', null]);
  assert.deepEqual(e422.body, { name: 'no email' });
  assert.deepEqual([e400.statusCode, e400.runId], [400, null]);
  assert.equal(e400.bodyText, '{"email":', 'a body that is not JSON is kept as text');
  assert.deepEqual([e401.statusCode, e401.code, e401.runId], [401, 'signature_invalid', null]);
  assert.equal(e415.statusCode, 415);
  assert.equal(e415.runId, null);

  const page = await s.request('GET', `/workflows/${hook.id}/webhook-events?limit=2`, { token });
  assert.equal(page.body.data.length, 2);
  assert.equal(typeof page.body.nextCursor, 'string');
  const next = await s.request('GET', `/workflows/${hook.id}/webhook-events?limit=2&cursor=${encodeURIComponent(page.body.nextCursor)}`, { token });
  assert.deepEqual(
    next.body.data.map((e: any) => e.id),
    ids.slice(2, 4),
  );
  // The other workspace cannot read them.
  const other = await s.otherWorkspace();
  assertProblem(await s.request('GET', `/workflows/${hook.id}/webhook-events`, { token: other.token }), 404);
  // The list never shows the signing secret.
  assert.ok(!JSON.stringify(evs).includes(secret));
});

test('POST /webhook-events/:id/replay starts a new run (202) from the stored bytes', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', path: 'customer.email' });
  const body = { customer: { email: 'ann@example.com' }, total: 12.5 };
  const first = assertAccepted(await post(s, hook.path, { body }));
  const [event] = await events(s, token, hook.id);

  const replay = await s.request('POST', `/webhook-events/${event.id}/replay`, { token });
  assert.equal(replay.status, 202, replay.text);
  assert.deepEqual(Object.keys(replay.body).sort(), ['contactId', 'runId']);
  assert.equal(replay.body.contactId, contact.id);
  assert.notEqual(replay.body.runId, first.runId);
  assert.equal(await runCount(s, hook.id), 2);
  const run = await s.request('GET', `/runs/${replay.body.runId}`, { token });
  assert.deepEqual(run.body.trigger, body);
  assert.equal(run.body.status, 'QUEUED');

  // A post refused for its lookup path can be replayed after the path is fixed.
  assertProblem(await post(s, hook.path, { body: { data: { email: 'ann@example.com' } } }), 422, 'lookup_value_missing');
  const [refused] = await events(s, token, hook.id);
  assert.equal(refused.statusCode, 422);
  assertProblem(await s.request('POST', `/webhook-events/${refused.id}/replay`, { token }), 422);
  await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { webhook: { path: 'data.email' } } });
  const fixed = await s.request('POST', `/webhook-events/${refused.id}/replay`, { token });
  assert.equal(fixed.status, 202, fixed.text);
  assert.equal(fixed.body.contactId, contact.id);
  assert.equal(await runCount(s, hook.id), 3);

  // Replay uses the workflow's current path: the first event no longer resolves.
  assertProblem(await s.request('POST', `/webhook-events/${event.id}/replay`, { token }), 422, 'lookup_value_missing');

  // A MEMBER may replay.
  const member = await s.userWithRole('MEMBER');
  assert.equal((await s.request('POST', `/webhook-events/${refused.id}/replay`, { token: member.token })).status, 202);
  assert.equal(await runCount(s, hook.id), 4);
});

test('replay runs nothing for a paused workflow, or one no longer triggered by its webhook (422); activated again, it replays', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  assertAccepted(await post(s, hook.path, { body: { email: 'ann@example.com' } }));
  const [event] = await events(s, token, hook.id);
  const replay = () => s.request('POST', `/webhook-events/${event.id}/replay`, { token });

  assert.equal((await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { status: 'PAUSED' } })).status, 200);
  const paused = await replay();
  assertProblem(paused, 422, 'workflow_not_active');
  assert.match(paused.body.detail, /PAUSED/);
  assert.equal((await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { triggerSource: 'MANUAL', status: 'ACTIVE' } })).status, 200);
  assertProblem(await replay(), 422, 'workflow_not_webhook');
  assert.equal(await runCount(s, hook.id), 1, 'neither started a run');

  assert.equal((await s.request('PATCH', `/workflows/${hook.id}`, { token, body: { triggerSource: 'WEBHOOK' } })).status, 200);
  const again = await replay();
  assert.equal(again.status, 202, again.text);
  assert.equal(again.body.contactId, contact.id);
  assert.equal(await runCount(s, hook.id), 2);
});

test('replay refuses signature-refused events (422), other workspaces (404), VIEWER (403)', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: 'replay-secret-0123456789' });
  const raw = JSON.stringify({ email: 'ann@example.com' });
  assertAccepted(await post(s, hook.path, { raw, headers: { 'x-service-signature': sign('replay-secret-0123456789', raw) } }));
  assertProblem(await post(s, hook.path, { raw, headers: { 'x-service-signature': sign('forged', raw) } }), 401);
  await post(s, hook.path, { raw, contentType: 'text/plain' });
  const [e415, e401, e202] = await events(s, token, hook.id);
  assert.equal(e401.code, 'signature_invalid');

  const before = await runCount(s, hook.id);
  assertProblem(await s.request('POST', `/webhook-events/${e401.id}/replay`, { token }), 422);
  // An event refused before its body was read has nothing to replay.
  assert.equal(e415.statusCode, 415);
  const r415 = await s.request('POST', `/webhook-events/${e415.id}/replay`, { token });
  assert.ok(r415.status === 422 || r415.status === 404, `${r415.status} ${r415.text}`);

  const other = await s.otherWorkspace();
  assertProblem(await s.request('POST', `/webhook-events/${e202.id}/replay`, { token: other.token }), 404);
  const viewer = await s.userWithRole('VIEWER');
  assertProblem(await s.request('POST', `/webhook-events/${e202.id}/replay`, { token: viewer.token }), 403, 'forbidden');
  assertProblem(await s.request('POST', `/webhook-events/${e202.id}/replay`, { token: await s.mintKey('VIEWER') }), 403, 'forbidden');
  assertProblem(await s.request('POST', `/webhook-events/${e202.id}/replay`), 401);
  assertProblem(await s.request('POST', '/webhook-events/999999/replay', { token }), 404);
  assert.equal(await runCount(s, hook.id), before, 'none of these started a run');
  // VIEWER may still read the events.
  assert.equal((await s.request('GET', `/workflows/${hook.id}/webhook-events`, { token: viewer.token })).status, 200);
});

// ---------------------------------------------------------------------------------------
// Hostile input
// ---------------------------------------------------------------------------------------

/** A small seeded PRNG, so a failure can be reproduced. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const NASTY_KEYS = [
  '__proto__',
  'constructor',
  'prototype',
  'toString',
  'hasOwnProperty',
  'valueOf',
  'email',
  'phone',
  'contactId',
  'data',
  '',
  ' ',
  '\u0000',
  '😀',
  'a.b',
  'x[0]',
];
const NASTY_STRINGS = [
  '',
  ' ',
  'a@b.co',
  'A@B.CO',
  '+16135550100',
  '4182',
  '0',
  '-1',
  'null',
  'undefined',
  '{{ contact.email }}',
  '{% raw %}',
  '<script>',
  "'; DROP TABLE contacts; --",
  '\u0000',
  '\ud800',
  '😀@example.com',
  'x'.repeat(3000),
  `${'a'.repeat(64)}@${'b'.repeat(190)}.com`,
];

function randomValue(rnd: () => number, depth: number): unknown {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const r = rnd();
  if (depth > 4 || r < 0.3) {
    return pick<unknown>([
      null,
      true,
      false,
      0,
      -0,
      1,
      -1,
      1.5,
      1e21,
      -1e-7,
      Number.MAX_SAFE_INTEGER,
      2 ** 53 + 2,
      pick(NASTY_STRINGS),
      pick(NASTY_STRINGS),
      Math.floor(rnd() * 1e6),
    ]);
  }
  if (r < 0.55) return Array.from({ length: Math.floor(rnd() * 5) }, () => randomValue(rnd, depth + 1));
  const obj: Record<string, unknown> = {};
  for (let i = Math.floor(rnd() * 6); i > 0; i--)
    Object.defineProperty(obj, pick(NASTY_KEYS), { value: randomValue(rnd, depth + 1), enumerable: true, configurable: true, writable: true });
  return obj;
}

/** Hand-written hostile bodies (exact bytes). */
function hostileBodies(): Buffer[] {
  const b = (s: string) => Buffer.from(s, 'utf8');
  const bodies = [
    b('{"__proto__": {"email": "evil@example.com", "contactId": 1}}'),
    b('{"constructor": {"prototype": {"email": "evil@example.com"}}}'),
    b('{"email": {"__proto__": "a@b.co"}}'),
    b('{"__proto__": null, "email": "ann@example.com"}'),
    b('{"data": {"__proto__": {"phone": "+16135550100"}}}'),
    b('{"email": "a@b.co", "email": "c@d.co"}'),
    b('{"contactId": 1e400}'),
    b('{"contactId": -0}'),
    b('{"contactId": 9007199254740993}'),
    b('{"contactId": "99999999999999999999999"}'),
    b('{"contactId": "0001"}'),
    b('{"contactId": "1e3"}'),
    b('{"contactId": "0x10"}'),
    b('{"email": "\\u0000@example.com"}'),
    b('{"email": "\\ud800@example.com"}'),
    b(`{"phone": "+1${'9'.repeat(80)}"}`),
    b('{"phone": "\\u0661\\u0662\\u0663"}'),
    b('\ufeff{"email": "ann@example.com"}'),
    b('{"email": "ann@example.com"}\u0000'),
    b('{}'.repeat(1000)),
    b('['.repeat(50_000) + ']'.repeat(50_000)),
    b(`${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}`),
    b(JSON.stringify(JSON.parse(`${'{"x":'.repeat(70)}{"email":"deep@example.com"}${'}'.repeat(70)}`))),
    b('['.repeat(200_000)),
    b(JSON.stringify({ email: `${'a'.repeat(900_000)}@example.com` })),
    b(JSON.stringify({ email: 'ann@example.com', blob: 'z'.repeat(1000_000) })),
    b(JSON.stringify({ email: 'ann@example.com', arr: Array.from({ length: 50_000 }, (_, i) => i) })),
    b(`{${Array.from({ length: 20_000 }, (_, i) => `"k${i}":${i}`).join(',')}}`),
    b(`"${'x'.repeat(100_000)}"`),
    b('null'),
    b('0'),
    b('{"email": null, "phone": null, "contactId": null}'),
    b('{"email": "ann@example.com", "n": NaN}'),
    b('{"email": "ann@example.com", "n": Infinity}'),
    b("{'email': 'ann@example.com'}"),
    b('{"email": "ann@example.com",}'),
    b('/* comment */ {"email": "ann@example.com"}'),
    Buffer.concat([b('{"email": "'), Buffer.from([0xff, 0xfe, 0xfd]), b('@example.com"}')]),
    Buffer.concat([b('{"name": "'), Buffer.from([0xc3, 0x28, 0xa0, 0xa1, 0xe2, 0x28, 0xa1]), b('", "email": "ann@example.com"}')]),
    Buffer.concat([b('{"email": "ann@example.com", "x": "'), Buffer.from([0xed, 0xa0, 0x80]), b('"}')]),
    Buffer.from([0xff, 0xfe, 0x7b, 0x00, 0x7d, 0x00]),
    Buffer.from([0xef, 0xbb, 0xbf, 0x7b, 0x7d]),
    Buffer.alloc(2000, 0),
    Buffer.alloc(0),
  ];
  const rnd = mulberry32(0xbadc0de);
  for (let i = 0; i < 20; i++) bodies.push(Buffer.from(Array.from({ length: Math.floor(rnd() * 400) }, () => Math.floor(rnd() * 256))));
  return bodies;
}

test('a few hundred hostile bodies never cause a 5xx, and the server still answers afterwards', async (t) => {
  const { s, token } = await setup(t, { SVC_WEBHOOK_RATE_LIMIT: '100000' });
  const contact = await createContact(s, token, { email: 'ann@example.com', phone: '+16135550100' });
  const secret = 'hostile-secret-0123456789';
  const hooks = [
    await hookWorkflow(s, token, { lookup: 'email', createIfNotFound: true, defaults: { firstName: 'Hostile', tags: ['h'] } }),
    await hookWorkflow(s, token, { lookup: 'phone', path: 'data.phone', createIfNotFound: true }),
    await hookWorkflow(s, token, { lookup: 'contactId' }),
    await hookWorkflow(s, token, { lookup: 'email', path: '__proto__.email', createIfNotFound: true }),
    await hookWorkflow(s, token, { lookup: 'contactId', path: 'constructor' }),
    await hookWorkflow(s, token, { lookup: 'email', signingSecret: secret }),
  ];
  const rnd = mulberry32(20261121);
  const bodies: Buffer[] = hostileBodies();
  for (let i = 0; i < 200; i++) bodies.push(Buffer.from(JSON.stringify(randomValue(rnd, 0)) ?? 'null'));

  const requests: (() => Promise<HttpResult>)[] = [];
  bodies.forEach((raw, i) => {
    const hook = hooks[i % hooks.length]!;
    const headers: Record<string, string> = {};
    if (hook === hooks[5]) headers['x-service-signature'] = i % 2 ? sign(secret, raw) : `sha256=${'0'.repeat(64)}`;
    if (i % 7 === 0) headers['idempotency-key'] = `k-${i % 3}`;
    const contentType = i % 13 === 0 ? 'application/json; charset=latin1' : 'application/json';
    requests.push(() => post(s, hook.path, { raw, contentType, headers }));
  });
  // Odd headers too.
  for (const ct of ['application/json; boundary=--', 'application/json;;;', 'application/json\t', 'APPLICATION/JSON; CHARSET=UTF-16']) {
    requests.push(() => post(s, hooks[0]!.path, { raw: '{"email":"ann@example.com"}', contentType: ct }));
  }
  for (const key of ['x'.repeat(255), 'x'.repeat(256), 'ключ', ' ', 'a b']) {
    requests.push(() =>
      post(s, hooks[0]!.path, {
        raw: '{"email":"ann@example.com"}',
        headers: { 'idempotency-key': encodeURIComponent(key) === key ? key : encodeURIComponent(key) },
      }),
    );
  }
  assert.ok(requests.length >= 250, `${requests.length} requests`);

  const statuses = new Map<number, number>();
  for (let i = 0; i < requests.length; i += 16) {
    const batch = await Promise.all(requests.slice(i, i + 16).map((r) => r()));
    batch.forEach((res, j) => {
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
      assert.ok(res.status < 500, `request ${i + j} answered ${res.status}: ${res.text.slice(0, 300)}`);
      assert.ok([202, 400, 401, 404, 413, 415, 422].includes(res.status), `request ${i + j}: unexpected ${res.status}: ${res.text.slice(0, 300)}`);
      if (res.status !== 202) assertProblem(res, res.status);
    });
  }
  assert.ok((statuses.get(202) ?? 0) > 0 && (statuses.get(422) ?? 0) > 0, `a mix of outcomes: ${JSON.stringify([...statuses])}`);

  // Nothing leaked onto Object.prototype in this (the server's) process.
  assert.equal(({} as any).email, undefined);
  assert.equal(({} as any).phone, undefined);
  assert.equal(({} as any).contactId, undefined);

  // The server still answers: health, a normal post, and every listing of what was received.
  assert.equal((await s.request('GET', '/healthz')).status, 200);
  assert.equal(assertAccepted(await post(s, hooks[0]!.path, { body: { email: 'ann@example.com' } })).contactId, contact.id);
  for (const hook of hooks) {
    assert.ok((await countRows(s, webhookEvents, eq(webhookEvents.workflowId, hook.id))) > 0, 'every post was recorded');
    const runs = await s.request('GET', `/workflows/${hook.id}/runs?limit=200`, { token });
    assert.equal(runs.status, 200, runs.text.slice(0, 300));
  }
  assert.equal((await s.request('GET', '/contacts?limit=200', { token })).status, 200);
});

/** Bodies that are awkward to store, show and replay. */
function awkwardBodies(): [string, Buffer][] {
  return [
    ['5000-deep array beside a valid email', Buffer.from(`{"email":"ann@example.com","x":${'['.repeat(5000)}${']'.repeat(5000)}}`)],
    ['50000-deep array', Buffer.from('['.repeat(50_000) + ']'.repeat(50_000))],
    ['20000-deep object', Buffer.from(`${'{"a":'.repeat(20_000)}1${'}'.repeat(20_000)}`)],
    ['invalid UTF-8', Buffer.concat([Buffer.from('{"email": "ann@example.com", "x": "'), Buffer.from([0xff, 0xfe, 0xc3, 0x28]), Buffer.from('"}')])],
    ['own __proto__ key', Buffer.from('{"__proto__": {"email": "evil@example.com"}, "email": "ann@example.com"}')],
    ['NUL and lone surrogate', Buffer.from('{"email": "ann@example.com", "x": "\\u0000\\ud800"}')],
  ];
}

async function postAwkward(s: TestServer, token: string): Promise<{ hook: Hook; contact: any; bodies: [string, Buffer][] }> {
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const bodies = awkwardBodies();
  for (const [label, raw] of bodies) {
    const res = await post(s, hook.path, { raw });
    assert.ok(res.status < 500, `${label}: post answered ${res.status}`);
  }
  return { hook, contact, bodies };
}

test('received events with deeply nested or malformed bodies can still be listed (no 5xx)', async (t) => {
  const { s, token } = await setup(t);
  const { hook, bodies } = await postAwkward(s, token);
  const list = await s.request('GET', `/workflows/${hook.id}/webhook-events?limit=200`, { token });
  assert.equal(list.status, 200, `listing events: ${list.status} ${list.text.slice(0, 200)}`);
  assert.equal(list.body.data.length, bodies.length);
  // One page at a time works too.
  for (let cursor: string | null = null, pages = 0; pages === 0 || cursor; pages++) {
    const res: HttpResult = await s.request('GET', `/workflows/${hook.id}/webhook-events?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, {
      token,
    });
    assert.equal(res.status, 200, `page ${pages}: ${res.status}`);
    cursor = res.body.nextCursor;
  }
});

test('replaying events with deeply nested or malformed bodies never gives a 5xx', async (t) => {
  const { s, token } = await setup(t);
  const { hook, contact, bodies } = await postAwkward(s, token);
  const ids = (await s.db.select({ id: webhookEvents.id }).from(webhookEvents).where(eq(webhookEvents.workflowId, hook.id)).orderBy(asc(webhookEvents.id))).map(
    (e) => e.id,
  );
  assert.equal(ids.length, bodies.length);
  for (const [i, id] of ids.entries()) {
    const res = await s.request('POST', `/webhook-events/${id}/replay`, { token });
    assert.ok(res.status < 500, `replay of "${bodies[i]![0]}": ${res.status} ${res.text.slice(0, 200)}`);
    if (res.status === 202) assert.equal(res.body.contactId, contact.id);
    else assertProblem(res, res.status);
  }
  const runs = await s.request('GET', `/workflows/${hook.id}/runs?limit=200`, { token });
  assert.equal(runs.status, 200, runs.text.slice(0, 200));
  assert.equal((await s.request('GET', '/healthz')).status, 200);
});

test('paths like "__proto__.email" or "constructor" never resolve to inherited values', async (t) => {
  const { s, token } = await setup(t);
  const contact = await createContact(s, token, { email: 'ann@example.com' });
  const cases: [Record<string, unknown>, string, string][] = [
    [{ lookup: 'email', path: '__proto__.email', createIfNotFound: true }, '{"email": "ann@example.com"}', 'an own __proto__ key is absent'],
    [{ lookup: 'email', path: 'constructor', createIfNotFound: true }, '{"email": "ann@example.com"}', 'Object.prototype.constructor'],
    [{ lookup: 'email', path: 'constructor.name', createIfNotFound: true }, '{}', 'Object.prototype.constructor.name'],
    [{ lookup: 'contactId', path: 'constructor.length' }, '{}', 'Object.length'],
    [{ lookup: 'email', path: 'toString', createIfNotFound: true }, '{}', 'Object.prototype.toString'],
    [{ lookup: 'email', path: 'hasOwnProperty', createIfNotFound: true }, '{}', 'Object.prototype.hasOwnProperty'],
    [{ lookup: 'contactId', path: 'items.length' }, '{"items": [1, 2, 3]}', 'Array length'],
    [{ lookup: 'contactId', path: 'name.length' }, '{"name": "abcdef"}', 'String length'],
    [
      { lookup: 'email', path: 'email', createIfNotFound: true },
      '{"__proto__": {"email": "evil@example.com"}}',
      'a __proto__ key in the body does not become a prototype',
    ],
    [{ lookup: 'email', path: 'a.email', createIfNotFound: true }, '{"a": {"__proto__": {"email": "evil@example.com"}}}', 'nested __proto__ key'],
    [{ lookup: 'contactId', path: 'contactId' }, '{"constructor": {"prototype": {"contactId": 1}}}', 'constructor.prototype pollution attempt'],
  ];
  for (const [webhook, raw, label] of cases) {
    const hook = await hookWorkflow(s, token, webhook);
    const res = await post(s, hook.path, { raw });
    assertProblem(res, 422, 'lookup_value_missing');
    assert.ok(res.status === 422, label);
  }
  assert.equal(await contactCount(s), 1, 'no contact was created from an inherited value');
  assert.equal(await countRows(s, workflowRuns), 0);
  assert.equal(({} as any).email, undefined);
  assert.equal(({} as any).contactId, undefined);

  // An own "__proto__" key is ordinary data: it resolves like any other key.
  const own = await hookWorkflow(s, token, { lookup: 'email', path: '__proto__.email' });
  const res = assertAccepted(await post(s, own.path, { raw: '{"__proto__": {"email": "ann@example.com"}}' }));
  assert.equal(res.contactId, contact.id);
  const run = await s.request('GET', `/runs/${res.runId}`, { token });
  assert.equal(run.status, 200, run.text);
});
