/**
 * Inbound webhook hardening (issue 8): the signature is checked before the Idempotency-Key
 * (API.md section 4), only bodies that passed the signature check can be replayed, a body
 * refused before its signature was verified is kept as size + SHA-256 + first 1 KiB, and an
 * empty, over-long or multi-segment token is counted by the per-address limit and answered
 * 404 webhook_not_found with the rate-limit headers. Through a real server and SQLite file.
 */
import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/core/db/dialect.js';
import { assertProblem, build, rowsOf, scalarOf, type HttpResult, type TestServer } from '../helpers.js';

async function setup(t: TestContext, env: Record<string, string> = {}): Promise<{ s: TestServer; token: string }> {
  const s = await build(t, { env });
  return { s, token: await s.login(s.owner.email, s.owner.password) };
}

async function hookWorkflow(s: TestServer, token: string, webhook: Record<string, unknown>): Promise<{ id: number; path: string }> {
  const res = await s.request('POST', '/workflows', {
    token,
    body: { name: 'Inbound', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps: [{ type: 'wait', seconds: 1 }], webhook },
  });
  assert.equal(res.status, 201, res.text);
  return { id: res.body.id, path: new URL(res.body.webhook.url).pathname };
}

function post(
  s: TestServer,
  path: string,
  raw: string | Buffer,
  headers: Record<string, string> = {},
  contentType: string | null = 'application/json',
): Promise<HttpResult> {
  return s.request('POST', path, { raw: Buffer.from(raw), headers: { ...(contentType ? { 'content-type': contentType } : {}), ...headers } });
}

const sign = (secret: string, raw: string | Buffer) => `sha256=${createHmac('sha256', secret).update(raw).digest('hex')}`;
const sha256 = (raw: string | Buffer) => createHash('sha256').update(raw).digest('hex');
const SECRET = 'a-signing-secret-of-32-characters';

async function events(s: TestServer, token: string, workflowId: number): Promise<any[]> {
  const res = await s.request('GET', `/workflows/${workflowId}/webhook-events?limit=200`, { token });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

interface StoredEvent {
  id: number;
  status_code: number;
  code: string | null;
  stored: number | null;
  body_size: number | null;
  body_sha256: string | null;
}

function storedEvents(s: TestServer, workflowId: number): Promise<StoredEvent[]> {
  return rowsOf<StoredEvent & Record<string, unknown>>(
    s,
    sql`SELECT id, status_code, code, length(body) AS stored, body_size, body_sha256 FROM webhook_events WHERE workflow_id = ${workflowId} ORDER BY id`,
  );
}

const runCount = (s: TestServer) => scalarOf(s, sql`SELECT count(*) AS n FROM workflow_runs`);

async function createContact(s: TestServer, token: string, email: string): Promise<number> {
  const res = await s.request('POST', '/contacts', { token, body: { email } });
  assert.equal(res.status, 201, res.text);
  return res.body.id;
}

// ---------------------------------------------------------------------------------------
// Check order: signature (401) before Idempotency-Key (400)
// ---------------------------------------------------------------------------------------

// API.md: "up to 255 chars"; a control character (a tab: HTTP refuses the others) is no key either.
const BAD_KEYS = ['x'.repeat(256), 'tab\there'];

test('with a secret set, a wrong signature is 401 whatever the Idempotency-Key; a right one reaches the key check (400)', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, 'ann@example.com');
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: SECRET });
  const raw = JSON.stringify({ email: 'ann@example.com' });

  for (const key of BAD_KEYS) {
    assertProblem(
      await post(s, hook.path, raw, { 'x-service-signature': sign('not-the-secret-at-all', raw), 'idempotency-key': key }),
      401,
      'signature_invalid',
    );
    assertProblem(await post(s, hook.path, raw, { 'idempotency-key': key }), 401, 'signature_invalid');
    assertProblem(await post(s, hook.path, raw, { 'x-service-signature': sign(SECRET, raw), 'idempotency-key': key }), 400, 'invalid_idempotency_key');
  }
  // A valid key with a valid signature is accepted; the key check did not swallow good keys.
  const ok = await post(s, hook.path, raw, { 'x-service-signature': sign(SECRET, raw), 'idempotency-key': 'order-1' });
  assert.equal(ok.status, 202, ok.text);
  assert.equal(await runCount(s), 1, 'no refused request started a run');

  // Each refusal was recorded with its own status and code.
  const rows = await storedEvents(s, hook.id);
  assert.deepEqual(
    rows.map((r) => r.code ?? String(r.status_code)),
    [...BAD_KEYS.flatMap(() => ['signature_invalid', 'signature_invalid', 'invalid_idempotency_key']), '202'],
  );
  // An over-long key is not stored at full length.
  const longest = (await scalarOf(s, sql`SELECT max(length(idempotency_key)) AS n FROM webhook_events`))!;
  assert.ok(longest <= 255, `stored key of ${longest} characters`);
});

test('an Idempotency-Key is any text of 1 to 255 characters: spaces, punctuation and non-ASCII keys each start one run', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, 'ann@example.com');
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const raw = JSON.stringify({ email: 'ann@example.com' });
  const keys = ['order 42', 'caf\u00e9', 'a/b:c?d=e&f#g', 'k'.repeat(255)];
  for (const key of keys) {
    const first = await post(s, hook.path, raw, { 'idempotency-key': key });
    assert.equal(first.status, 202, `${key}: ${first.text}`);
    const again = await post(s, hook.path, raw, { 'idempotency-key': key });
    assert.equal(again.status, 202, again.text);
    assert.equal(again.headers.get('idempotent-replayed'), 'true', key);
    assert.equal(again.body.runId, first.body.runId, key);
  }
  assert.equal(await runCount(s), keys.length);

  // A key sent as UTF-8 (as curl sends `é`: two bytes) is that text: its length in characters,
  // and shown as written among the received events, not as Node's Latin-1 reading of it.
  const utf8 = (text: string) => Buffer.from(text, 'utf8').toString('latin1');
  const accented = '\u00e9'.repeat(128);
  const first = await post(s, hook.path, raw, { 'idempotency-key': utf8(accented) });
  assert.equal(first.status, 202, first.text);
  const again = await post(s, hook.path, raw, { 'idempotency-key': utf8(accented) });
  assert.equal(again.headers.get('idempotent-replayed'), 'true');
  assertProblem(await post(s, hook.path, raw, { 'idempotency-key': utf8('\u00e9'.repeat(256)) }), 400, 'invalid_idempotency_key');
  // 255 characters that are 510 UTF-16 units: kept whole, so that its repeat finds it.
  const emoji = '\u{1F600}'.repeat(255);
  const firstEmoji = await post(s, hook.path, raw, { 'idempotency-key': utf8(emoji) });
  assert.equal(firstEmoji.status, 202, firstEmoji.text);
  const againEmoji = await post(s, hook.path, raw, { 'idempotency-key': utf8(emoji) });
  assert.deepEqual([againEmoji.headers.get('idempotent-replayed'), againEmoji.body.runId], ['true', firstEmoji.body.runId]);
  const events = await s.request('GET', `/workflows/${hook.id}/webhook-events?limit=200`, { token });
  assert.ok(
    events.body.data.some((e: { idempotencyKey: string | null }) => e.idempotencyKey === accented),
    'the key as written',
  );
});

test('without a secret, an invalid Idempotency-Key is 400 before the body is parsed', async (t) => {
  const { s, token } = await setup(t);
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  for (const key of BAD_KEYS) {
    assertProblem(await post(s, hook.path, '{"email":', { 'idempotency-key': key }), 400, 'invalid_idempotency_key');
    assertProblem(await post(s, hook.path, '[1]', { 'idempotency-key': key }), 400, 'invalid_idempotency_key');
  }
  assertProblem(await post(s, hook.path, '{"email":', { 'idempotency-key': 'fine' }), 400, 'invalid_json');
  assert.equal(await runCount(s), 0);
});

// ---------------------------------------------------------------------------------------
// Replay: only what passed the signature check
// ---------------------------------------------------------------------------------------

test('replay: events that passed the signature check (or had no secret) replay; unverified ones never do', async (t) => {
  const { s, token } = await setup(t);
  const annId = await createContact(s, token, 'ann@example.com');
  const signed = await hookWorkflow(s, token, { lookup: 'email', signingSecret: SECRET });
  const open = await hookWorkflow(s, token, { lookup: 'email' });
  const raw = JSON.stringify({ email: 'ann@example.com', order: 7 });
  const replay = (id: number) => s.request('POST', `/webhook-events/${id}/replay`, { token });

  // Signed workflow: a forged body with a bad key, a forged body, and a verified body with a bad key.
  await post(s, signed.path, raw, { 'x-service-signature': sign('forged-secret-forged-secret', raw), 'idempotency-key': 'x'.repeat(256) });
  await post(s, signed.path, raw, { 'x-service-signature': sign('forged-secret-forged-secret', raw) });
  await post(s, signed.path, raw, { 'x-service-signature': sign(SECRET, raw), 'idempotency-key': 'x'.repeat(256) });
  const [verifiedBadKey, forged, forgedBadKey] = await events(s, token, signed.id);
  assert.deepEqual([forgedBadKey.code, forged.code, verifiedBadKey.code], ['signature_invalid', 'signature_invalid', 'invalid_idempotency_key']);
  assert.equal(await runCount(s), 0);

  assertProblem(await replay(forgedBadKey.id), 422, 'event_not_replayable');
  assertProblem(await replay(forged.id), 422, 'event_not_replayable');
  assert.equal(await runCount(s), 0, 'an unverified body starts no run');

  const again = await replay(verifiedBadKey.id);
  assert.equal(again.status, 202, again.text);
  assert.equal(again.body.contactId, annId);
  const run = await s.request('GET', `/runs/${again.body.runId}`, { token });
  assert.equal(run.status, 200, run.text);
  assert.deepEqual(run.body.trigger, { email: 'ann@example.com', order: 7 }, 'the run starts from the verified bytes');
  assert.equal(run.body.workflowId, signed.id);

  // No secret: a refusal for the key stored the whole body, which replays.
  await post(s, open.path, raw, { 'idempotency-key': 'x'.repeat(300) });
  const [openEvent] = await events(s, token, open.id);
  assert.equal(openEvent.code, 'invalid_idempotency_key');
  assert.equal(openEvent.bodySha256, null);
  const openReplay = await replay(openEvent.id);
  assert.equal(openReplay.status, 202, openReplay.text);
  assert.equal(openReplay.body.contactId, annId);

  // A row stored before this change (no body_size) that was refused for its key may never
  // have been checked against the secret: it is not replayable either.
  const [inserted] = await s.store.transaction((tx) =>
    queryRows<{ id: number }>(
      s.store,
      tx,
      sql`INSERT INTO webhook_events (workspace_id, workflow_id, status_code, code, source_ip, content_type, body)
          VALUES (${s.workspaceId}, ${signed.id}, 400, 'invalid_idempotency_key', '127.0.0.1', 'application/json', ${Buffer.from(raw)}) RETURNING id`,
    ),
  );
  const legacy = inserted!.id;
  assertProblem(await replay(legacy), 422, 'event_not_replayable');
  assert.equal(await runCount(s), 2);
});

// ---------------------------------------------------------------------------------------
// Storage of refusals before the signature was verified
// ---------------------------------------------------------------------------------------

test('a body refused before its signature was verified is stored as size, SHA-256 and its first 1 KiB', async (t) => {
  const { s, token } = await setup(t);
  await createContact(s, token, 'ann@example.com');
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: SECRET });
  const big = JSON.stringify({ email: 'ann@example.com', pad: 'p'.repeat(600 * 1024) });
  const forged = await post(s, hook.path, big, { 'x-service-signature': sign('forged-secret-forged-secret', big) });
  assertProblem(forged, 401, 'signature_invalid');

  const [row] = await storedEvents(s, hook.id);
  assert.deepEqual({ stored: row!.stored, size: row!.body_size, sha: row!.body_sha256 }, { stored: 1024, size: Buffer.byteLength(big), sha: sha256(big) });
  const [event] = await events(s, token, hook.id);
  assert.equal(event.statusCode, 401);
  assert.equal(event.bodySize, Buffer.byteLength(big));
  assert.equal(event.bodyTruncated, true);
  assert.equal(event.bodySha256, sha256(big));
  assert.equal(event.body, null, 'a prefix is not shown as parsed JSON');
  assert.equal(event.bodyText, big.slice(0, 1024));

  // Many large forged posts add about 1 KiB each, not their size.
  for (let i = 0; i < 20; i++) {
    const body = JSON.stringify({ email: 'ann@example.com', i, pad: 'q'.repeat(200 * 1024) });
    assertProblem(await post(s, hook.path, body, { 'x-service-signature': sign(SECRET, 'something else') }), 401);
  }
  const total = (await scalarOf(s, sql`SELECT sum(length(body)) AS n FROM webhook_events WHERE workflow_id = ${hook.id}`))!;
  assert.ok(total <= 21 * 1024, `stored ${total} bytes for 21 forged posts`);

  // A multi-byte character cut at the 1 KiB boundary still lists (no 5xx).
  const euros = JSON.stringify({ email: 'ann@example.com', text: '€'.repeat(1000) });
  assertProblem(await post(s, hook.path, euros, { 'x-service-signature': sign('forged-secret-forged-secret', euros) }), 401);
  const [cut] = await events(s, token, hook.id);
  assert.equal(cut.bodyTruncated, true);
  assert.equal(cut.bodySha256, sha256(euros));
  assert.equal(Buffer.byteLength(cut.bodyText) >= 1020 && Buffer.byteLength(cut.bodyText) <= 1026, true, `${Buffer.byteLength(cut.bodyText)} bytes`);

  // A small forged body is kept whole (it is its own first KiB) but still marked unverified.
  const small = JSON.stringify({ email: 'ann@example.com' });
  assertProblem(await post(s, hook.path, small), 401);
  const [smallEvent] = await events(s, token, hook.id);
  assert.equal(smallEvent.bodyTruncated, false);
  assert.equal(smallEvent.bodySize, Buffer.byteLength(small));
  assert.equal(smallEvent.bodySha256, sha256(small));
  assertProblem(await s.request('POST', `/webhook-events/${smallEvent.id}/replay`, { token }), 422, 'event_not_replayable');
  assert.equal(await runCount(s), 0);
});

test('verified bodies are kept whole; refusals before the body is read keep none; unknown tokens store nothing', async (t) => {
  const { s, token } = await setup(t, { SVC_WEBHOOK_BODY_LIMIT: '4096' });
  await createContact(s, token, 'ann@example.com');
  const hook = await hookWorkflow(s, token, { lookup: 'email', signingSecret: SECRET });
  const signedPost = (raw: string) => post(s, hook.path, raw, { 'x-service-signature': sign(SECRET, raw) });

  const accepted = JSON.stringify({ email: 'ann@example.com', pad: 'a'.repeat(2000) });
  assert.equal((await signedPost(accepted)).status, 202);
  const missing = JSON.stringify({ name: 'no email', pad: 'b'.repeat(2000) });
  assertProblem(await signedPost(missing), 422, 'lookup_value_missing');
  assertProblem(await post(s, hook.path, 'x'.repeat(2000), {}, 'text/plain'), 415);
  assertProblem(await post(s, hook.path, JSON.stringify({ pad: 'c'.repeat(5000) })), 413);
  // Chunked (no Content-Length): refused while the body is read.
  const chunked = await fetch(s.url + hook.path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: new ReadableStream({
      start(c) {
        c.enqueue(new TextEncoder().encode(JSON.stringify({ pad: 'd'.repeat(5000) })));
        c.close();
      },
    }),
    duplex: 'half',
  } as RequestInit);
  assert.equal(chunked.status, 413);

  const rows = await storedEvents(s, hook.id);
  assert.deepEqual(
    rows.map((r) => [r.status_code, r.stored, r.body_size, r.body_sha256]),
    [
      [202, Buffer.byteLength(accepted), Buffer.byteLength(accepted), null],
      [422, Buffer.byteLength(missing), Buffer.byteLength(missing), null],
      [415, null, null, null],
      [413, null, null, null],
      [413, null, null, null],
    ],
  );
  const listed = await events(s, token, hook.id);
  assert.deepEqual(
    listed.map((e) => [e.statusCode, e.bodySize, e.bodyTruncated, e.bodySha256]),
    [
      [413, null, false, null],
      [413, null, false, null],
      [415, null, false, null],
      [422, Buffer.byteLength(missing), false, null],
      [202, Buffer.byteLength(accepted), false, null],
    ],
  );
  assert.deepEqual(listed[4].body, JSON.parse(accepted));

  const countEvents = () => scalarOf(s, sql`SELECT count(*) AS n FROM webhook_events`);
  const before = await countEvents();
  assertProblem(await post(s, `/v1/webhooks/in/${'Z'.repeat(30)}`, accepted), 404, 'webhook_not_found');
  assertProblem(await post(s, `/v1/webhooks/in/${'Z'.repeat(500)}`, accepted), 404, 'webhook_not_found');
  assert.equal(await countEvents(), before, 'a refusal of an unknown token is not stored');
});

// ---------------------------------------------------------------------------------------
// Empty, over-long and odd tokens are counted and answered like unknown ones
// ---------------------------------------------------------------------------------------

function assertRateHeaders(res: HttpResult, limit: number, remaining: number): void {
  assert.equal(res.headers.get('x-ratelimit-limit'), String(limit), `X-RateLimit-Limit on ${res.status}`);
  assert.equal(res.headers.get('x-ratelimit-remaining'), String(remaining), `X-RateLimit-Remaining on ${res.status}`);
  assert.match(res.headers.get('x-ratelimit-reset') ?? '', /^\d+$/, `X-RateLimit-Reset on ${res.status}`);
}

test('an empty, over-long or multi-segment token is counted by the per-address limit and answered 404 webhook_not_found', async (t) => {
  const odd = [
    `/v1/webhooks/in/${'x'.repeat(500)}`,
    '/v1/webhooks/in/',
    '/v1/webhooks/in',
    `/v1/webhooks/in/${'A'.repeat(256)}`,
    `/v1/webhooks/in/${'A'.repeat(257)}`,
    `/v1/webhooks/in/${'y'.repeat(5000)}?x=1`,
    '/v1/webhooks/in/?a=b',
    '/v1/webhooks/in/abc/def',
    '/v1/webhooks/in//',
  ];
  const { s, token } = await setup(t, { SVC_WEBHOOK_RATE_LIMIT: String(odd.length + 1) });
  await createContact(s, token, 'ann@example.com');
  const hook = await hookWorkflow(s, token, { lookup: 'email' });
  const limit = odd.length + 1;

  for (const [i, path] of odd.entries()) {
    const res = await post(s, path, '{"email":"ann@example.com"}');
    assertProblem(res, 404, 'webhook_not_found');
    assertRateHeaders(res, limit, limit - 1 - i);
    assert.ok(res.headers.get('x-request-id'), 'every response carries X-Request-Id');
  }
  // They share the address's counter with real tokens: one left, then 429 for every path.
  assert.equal((await post(s, hook.path, '{"email":"ann@example.com"}')).status, 202);
  for (const path of [hook.path, odd[0]!, odd[1]!]) {
    const res = await post(s, path, '{"email":"ann@example.com"}');
    assertProblem(res, 429, 'rate_limited');
    assertRateHeaders(res, limit, 0);
    assert.match(res.headers.get('retry-after') ?? '', /^\d+$/);
  }
  // Other routes are not rewritten: a GET there is an ordinary unknown route.
  assertProblem(await s.request('GET', '/v1/webhooks/in/'), 404, 'route_not_found');
  assertProblem(await s.request('GET', '/v1/webhooksx/in/abc'), 404, 'route_not_found');
});
