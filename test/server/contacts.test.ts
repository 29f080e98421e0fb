import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { desc, eq, like } from 'drizzle-orm';
import { apiKeys, auditLogs, contacts, contactTags } from '../../src/core/db/schema.js';
import { FEW_TAGGED, PG_SEARCH_WALK_ROWS } from '../../src/core/services/contacts.js';
import { type HttpResult, type TestServer, assertProblem, buildAsOwner, seededRandom } from '../helpers.js';

// ---------------------------------------------------------------------------------------
// Helpers local to this file
// ---------------------------------------------------------------------------------------

const CONTACT_KEYS = ['attributes', 'createdAt', 'email', 'firstName', 'id', 'lastName', 'phone', 'tags', 'updatedAt'];
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;

const setup = (t: TestContext) => buildAsOwner(t);

/** Asserts a 422 validation problem naming `path` in errors[]. */
function assertValidation(res: HttpResult, path: string, code = 'validation_failed'): void {
  assertProblem(res, 422, code);
  assert.ok(Array.isArray(res.body.errors), `errors[] present: ${res.text}`);
  for (const e of res.body.errors) {
    assert.equal(typeof e.path, 'string');
    assert.equal(typeof e.message, 'string');
  }
  assert.ok(
    res.body.errors.some((e: { path: string }) => e.path === path),
    `errors[] names ${path}: ${JSON.stringify(res.body.errors)}`,
  );
}

function assertContactShape(c: any): void {
  assert.deepEqual(Object.keys(c).sort(), CONTACT_KEYS);
  assert.ok(Number.isInteger(c.id) && c.id > 0);
  assert.ok(c.email === null || typeof c.email === 'string');
  assert.ok(c.phone === null || typeof c.phone === 'string');
  assert.ok(c.firstName === null || typeof c.firstName === 'string');
  assert.ok(c.lastName === null || typeof c.lastName === 'string');
  assert.ok(c.attributes && typeof c.attributes === 'object' && !Array.isArray(c.attributes));
  assert.ok(Array.isArray(c.tags));
  assert.match(c.createdAt, ISO_UTC);
  assert.match(c.updatedAt, ISO_UTC);
}

/** GET /contacts?q=… answers exactly `expected` (ids, newest first). */
async function assertFound(s: TestServer, token: string, q: string, expected: number[]): Promise<void> {
  const res = await s.request('GET', `/contacts?q=${encodeURIComponent(q)}`, { token });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(
    res.body.data.map((c: { id: number }) => c.id),
    expected,
    `q=${q}`,
  );
}

async function create(s: TestServer, token: string, body: Record<string, unknown>): Promise<any> {
  const res = await s.request('POST', '/contacts', { token, body });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

interface Snapshot {
  contacts: unknown[];
  tags: unknown[];
  audit: unknown[];
}

async function snapshot(s: TestServer): Promise<Snapshot> {
  return {
    contacts: await s.db.select().from(contacts).orderBy(contacts.id),
    tags: await s.db.select().from(contactTags).orderBy(contactTags.contactId, contactTags.tagKey),
    audit: await s.db.select().from(auditLogs).where(like(auditLogs.action, 'contact.%')).orderBy(auditLogs.id),
  };
}

function auditRows(s: TestServer, action: string) {
  return s.db.select().from(auditLogs).where(eq(auditLogs.action, action)).orderBy(auditLogs.id);
}

const rng = seededRandom;

// ---------------------------------------------------------------------------------------
// Create
// ---------------------------------------------------------------------------------------

test('POST /contacts answers 201 with the full contact shape', async (t) => {
  const { s, token } = await setup(t);
  const res = await s.request('POST', '/contacts', {
    token,
    body: { email: 'ada@example.com', phone: '+16135550138', firstName: 'Ada', lastName: 'Lovelace', attributes: { plan: 'gold', n: 3 }, tags: ['vip'] },
  });
  assert.equal(res.status, 201, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  assertContactShape(res.body);
  assert.equal(res.body.email, 'ada@example.com');
  assert.equal(res.body.phone, '+16135550138');
  assert.equal(res.body.firstName, 'Ada');
  assert.equal(res.body.lastName, 'Lovelace');
  assert.deepEqual(res.body.attributes, { plan: 'gold', n: 3 });
  assert.deepEqual(res.body.tags, ['vip']);

  // The resource as created is the resource as read back.
  const got = await s.request('GET', `/contacts/${res.body.id}`, { token });
  assert.equal(got.status, 200);
  assert.deepEqual(got.body, res.body);
});

test('POST /contacts with only an email defaults the other fields', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'solo@example.com' });
  assertContactShape(c);
  assert.equal(c.phone, null);
  assert.equal(c.firstName, null);
  assert.equal(c.lastName, null);
  assert.deepEqual(c.attributes, {});
  assert.deepEqual(c.tags, []);
});

test('POST /contacts with only a phone is accepted', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { phone: '+16135550138' });
  assert.equal(c.email, null);
  assert.equal(c.phone, '+16135550138');
});

test('email is stored lower-cased and trimmed', async (t) => {
  const { s, token } = await setup(t);
  const cases: [string, string][] = [
    ['  Ada.Lovelace@Example.COM  ', 'ada.lovelace@example.com'],
    ['BOB@EXAMPLE.ORG', 'bob@example.org'],
    ['\tcarol@example.net\n', 'carol@example.net'],
  ];
  for (const [input, expected] of cases) {
    await t.test(JSON.stringify(input), async () => {
      const c = await create(s, token, { email: input });
      assert.equal(c.email, expected);
      const [row] = await s.db.select({ email: contacts.email }).from(contacts).where(eq(contacts.id, c.id));
      assert.ok(row);
      assert.equal(row.email, expected);
    });
  }
});

test('phone is normalised to E.164 (default region US)', async (t) => {
  const { s, token } = await setup(t);
  const cases: [string, string][] = [
    ['+1-613-555-0138', '+16135550138'],
    ['(415) 555-2671', '+14155552671'],
    ['415.555.2672', '+14155552672'],
    [' +44 20 7946 0958 ', '+442079460958'],
    ['+49 30 901820', '+4930901820'],
  ];
  for (const [input, expected] of cases) {
    await t.test(JSON.stringify(input), async () => {
      const c = await create(s, token, { phone: input });
      assert.equal(c.phone, expected);
    });
  }
});

test('a contact needs an email or a phone (422 email_or_phone_required)', async (t) => {
  const { s, token } = await setup(t);
  const bodies: Record<string, unknown>[] = [{}, { firstName: 'Nobody' }, { email: null, phone: null }, { email: null }, { attributes: { a: 1 }, tags: ['x'] }];
  for (const body of bodies) {
    await t.test(JSON.stringify(body), async () => {
      const res = await s.request('POST', '/contacts', { token, body });
      assertValidation(res, '/email', 'email_or_phone_required');
    });
  }
  assert.equal((await snapshot(s)).contacts.length, 0);
});

test('duplicate email or phone in the same workspace is 409 contact_exists', async (t) => {
  const { s, token } = await setup(t);
  await create(s, token, { email: 'dup@example.com', phone: '+16135550138' });
  const cases: [string, Record<string, unknown>][] = [
    ['same email', { email: 'dup@example.com' }],
    ['email in another case', { email: 'DUP@Example.Com' }],
    ['email with whitespace', { email: '  dup@example.com ' }],
    ['same phone', { phone: '+16135550138' }],
    ['phone in another format', { phone: '(613) 555-0138' }],
    ['new email but existing phone', { email: 'fresh@example.com', phone: '613-555-0138' }],
    ['existing email but new phone', { email: 'dup@example.com', phone: '+14155552671' }],
  ];
  for (const [name, body] of cases) {
    await t.test(name, async () => {
      const res = await s.request('POST', '/contacts', { token, body });
      assertProblem(res, 409, 'contact_exists');
    });
  }
  assert.equal((await snapshot(s)).contacts.length, 1, 'no duplicate rows were written');
});

test('the same email and phone in another workspace are fine', async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const a = await create(s, token, { email: 'shared@example.com', phone: '+16135550138' });
  const b = await create(s, other.token, { email: 'Shared@Example.com', phone: '613 555 0138' });
  assert.notEqual(a.id, b.id);
  assert.equal(b.email, 'shared@example.com');
  assert.equal(b.phone, '+16135550138');
});

// ---------------------------------------------------------------------------------------
// Get, patch, delete
// ---------------------------------------------------------------------------------------

test('GET /contacts/:id returns the contact; unknown id is 404 contact_not_found', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'get@example.com', tags: ['a'] });
  const res = await s.request('GET', `/contacts/${c.id}`, { token });
  assert.equal(res.status, 200);
  assertContactShape(res.body);
  assert.deepEqual(res.body, c);

  const missing = await s.request('GET', `/contacts/${c.id + 1000}`, { token });
  assertProblem(missing, 404, 'contact_not_found');
});

test('PATCH /contacts/:id answers 200 with the whole resource and bumps updatedAt', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'p@example.com', firstName: 'Old', lastName: 'Name', tags: ['keep'], attributes: { a: 1 } });
  await new Promise((r) => setTimeout(r, 5));
  const res = await s.request('PATCH', `/contacts/${c.id}`, { token, body: { firstName: 'New', phone: '(415) 555-2671', email: ' P2@Example.com ' } });
  assert.equal(res.status, 200, res.text);
  assertContactShape(res.body);
  assert.equal(res.body.id, c.id);
  assert.equal(res.body.firstName, 'New');
  assert.equal(res.body.lastName, 'Name', 'fields not sent are unchanged');
  assert.equal(res.body.email, 'p2@example.com');
  assert.equal(res.body.phone, '+14155552671');
  assert.deepEqual(res.body.tags, ['keep']);
  assert.deepEqual(res.body.attributes, { a: 1 });
  assert.equal(res.body.createdAt, c.createdAt);
  assert.ok(res.body.updatedAt > c.updatedAt, `updatedAt moved: ${c.updatedAt} -> ${res.body.updatedAt}`);

  const got = await s.request('GET', `/contacts/${c.id}`, { token });
  assert.deepEqual(got.body, res.body);
});

test('a new contact has no attribute whose value is null (as a PATCH removes it), so an export imports back unchanged', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'rt@example.com', attributes: { gone: null, kept: 0, nested: { inner: null } } });
  // One level, as PATCH: a null inside a nested value is that value's own.
  assert.deepEqual(c.attributes, { kept: 0, nested: { inner: null } });
  const exported = await s.request('GET', '/contacts/export?format=ndjson&email=rt@example.com', { token });
  assert.equal(exported.status, 200, exported.text);
  const back = await s.request('POST', '/contacts/import', { token, raw: exported.text, headers: { 'content-type': 'application/x-ndjson' } });
  assert.equal(back.status, 200, back.text);
  assert.equal(back.body.errorCount, 0, back.text);
  assert.deepEqual((await s.request('GET', `/contacts/${c.id}`, { token })).body.attributes, { kept: 0, nested: { inner: null } });
});

test('PATCH attributes merge one level deep and null deletes a key', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'm@example.com', attributes: { keep: 1, drop: 'x', nested: { a: 1, b: 2 } } });
  const res = await s.request('PATCH', `/contacts/${c.id}`, { token, body: { attributes: { drop: null, added: true, nested: { c: 3 } } } });
  assert.equal(res.status, 200, res.text);
  // One level: `nested` is replaced, not deep-merged.
  assert.deepEqual(res.body.attributes, { keep: 1, added: true, nested: { c: 3 } });

  const none = await s.request('PATCH', `/contacts/${c.id}`, { token, body: { attributes: { missing: null } } });
  assert.equal(none.status, 200);
  assert.deepEqual(none.body.attributes, { keep: 1, added: true, nested: { c: 3 } });

  const untouched = await s.request('PATCH', `/contacts/${c.id}`, { token, body: { firstName: 'X' } });
  assert.deepEqual(untouched.body.attributes, { keep: 1, added: true, nested: { c: 3 } });
});

test('PATCH email to null is fine while a phone remains; clearing both is 422', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'both@example.com', phone: '+16135550138' });
  const ok = await s.request('PATCH', `/contacts/${c.id}`, { token, body: { email: null } });
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.body.email, null);
  assert.equal(ok.body.phone, '+16135550138');

  const bad = await s.request('PATCH', `/contacts/${c.id}`, { token, body: { phone: null } });
  assertValidation(bad, '/email', 'email_or_phone_required');

  const both = await s.request('PATCH', `/contacts/${c.id}`, { token, body: { email: null, phone: null } });
  assertValidation(both, '/email', 'email_or_phone_required');

  const got = await s.request('GET', `/contacts/${c.id}`, { token });
  assert.equal(got.body.phone, '+16135550138', 'refused patch changed nothing');
});

test("PATCH to another contact's email or phone is 409 contact_exists; own values are fine", async (t) => {
  const { s, token } = await setup(t);
  const a = await create(s, token, { email: 'a@example.com', phone: '+16135550138' });
  const b = await create(s, token, { email: 'b@example.com' });
  for (const body of [{ email: 'a@example.com' }, { email: 'A@EXAMPLE.COM' }, { phone: '613-555-0138' }]) {
    await t.test(JSON.stringify(body), async () => {
      const res = await s.request('PATCH', `/contacts/${b.id}`, { token, body });
      assertProblem(res, 409, 'contact_exists');
    });
  }
  const self = await s.request('PATCH', `/contacts/${a.id}`, { token, body: { email: 'A@Example.com', phone: '+1 613 555 0138' } });
  assert.equal(self.status, 200, self.text);
  const got = await s.request('GET', `/contacts/${b.id}`, { token });
  assert.equal(got.body.email, 'b@example.com');
  assert.equal(got.body.phone, null);
});

test('PATCH an unknown id is 404', async (t) => {
  const { s, token } = await setup(t);
  const res = await s.request('PATCH', '/contacts/4242', { token, body: { firstName: 'x' } });
  assertProblem(res, 404, 'contact_not_found');
});

test('DELETE /contacts/:id answers 204 with no body, then 404', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'del@example.com', tags: ['gone'] });
  const res = await s.request('DELETE', `/contacts/${c.id}`, { token });
  assert.equal(res.status, 204);
  assert.equal(res.text, '');
  assertProblem(await s.request('GET', `/contacts/${c.id}`, { token }), 404, 'contact_not_found');
  assertProblem(await s.request('DELETE', `/contacts/${c.id}`, { token }), 404, 'contact_not_found');
  assertProblem(await s.request('PATCH', `/contacts/${c.id}`, { token, body: { firstName: 'x' } }), 404, 'contact_not_found');
  assert.equal((await snapshot(s)).tags.length, 0, 'its tags went with it');
  const tags = await s.request('GET', '/tags', { token });
  assert.deepEqual(tags.body, { data: [], nextCursor: null });
  // The email is free again.
  await create(s, token, { email: 'del@example.com' });
});

// ---------------------------------------------------------------------------------------
// List
// ---------------------------------------------------------------------------------------

test('GET /contacts lists newest first with {data, nextCursor}', async (t) => {
  const { s, token } = await setup(t);
  const empty = await s.request('GET', '/contacts', { token });
  assert.equal(empty.status, 200);
  assert.deepEqual(empty.body, { data: [], nextCursor: null });

  const ids: number[] = [];
  for (let i = 0; i < 4; i++) ids.push((await create(s, token, { email: `n${i}@example.com` })).id);
  const res = await s.request('GET', '/contacts', { token });
  assert.equal(res.status, 200);
  assert.deepEqual(Object.keys(res.body).sort(), ['data', 'nextCursor']);
  assert.equal(res.body.nextCursor, null);
  assert.deepEqual(
    res.body.data.map((c: any) => c.id),
    [...ids].reverse(),
  );
  res.body.data.forEach(assertContactShape);
});

test('limit and cursor walk every contact exactly once', async (t) => {
  const { s, token } = await setup(t);
  const ids: number[] = [];
  for (let i = 0; i < 7; i++) ids.push((await create(s, token, { email: `page${i}@example.com`, tags: i % 2 ? ['odd'] : [] })).id);
  const seen: number[] = [];
  const pageSizes: number[] = [];
  let cursor: string | null = null;
  let guard = 0;
  do {
    const q: string = `?limit=3${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const res = await s.request('GET', `/contacts${q}`, { token });
    assert.equal(res.status, 200, res.text);
    pageSizes.push(res.body.data.length);
    seen.push(...res.body.data.map((c: any) => c.id));
    cursor = res.body.nextCursor;
    if (cursor !== null) assert.equal(typeof cursor, 'string');
    assert.ok(++guard < 10, 'pagination terminates');
  } while (cursor);
  assert.deepEqual(pageSizes, [3, 3, 1]);
  assert.deepEqual(seen, [...ids].reverse());
  assert.equal(new Set(seen).size, 7);

  // Exactly `limit` items left: the last full page says there is no more.
  const exact = await s.request('GET', '/contacts?limit=7', { token });
  assert.equal(exact.body.data.length, 7);
  assert.equal(exact.body.nextCursor, null);

  // Filters combine with pagination.
  const odd1 = await s.request('GET', '/contacts?tag=odd&limit=2', { token });
  assert.equal(odd1.body.data.length, 2);
  const odd2 = await s.request('GET', `/contacts?tag=odd&limit=2&cursor=${encodeURIComponent(odd1.body.nextCursor)}`, { token });
  assert.equal(odd2.body.data.length, 1);
  assert.equal(odd2.body.nextCursor, null);
  assert.deepEqual(
    [...odd1.body.data, ...odd2.body.data].map((c: any) => c.id),
    [ids[5], ids[3], ids[1]],
  );
});

test('limit boundaries 1 and 200 are accepted; default is 50', async (t) => {
  const { s, token } = await setup(t);
  for (let i = 0; i < 3; i++) await create(s, token, { email: `b${i}@example.com` });
  const one = await s.request('GET', '/contacts?limit=1', { token });
  assert.equal(one.status, 200);
  assert.equal(one.body.data.length, 1);
  assert.equal(typeof one.body.nextCursor, 'string');
  const max = await s.request('GET', '/contacts?limit=200', { token });
  assert.equal(max.status, 200);
  assert.equal(max.body.data.length, 3);
});

test('default page size is 50', async (t) => {
  const { s, token } = await setup(t);
  await s.store.transaction(async (tx) => {
    await tx.insert(contacts).values(Array.from({ length: 55 }, (_, i) => ({ workspaceId: s.workspaceId, email: `bulk${i}@example.com` })));
  });
  const res = await s.request('GET', '/contacts', { token });
  assert.equal(res.status, 200);
  assert.equal(res.body.data.length, 50);
  assert.equal(typeof res.body.nextCursor, 'string');
});

test('list filters: tag (any case), email (any case), phone (any format), q', async (t) => {
  const { s, token } = await setup(t);
  const ada = await create(s, token, { email: 'ada@example.com', phone: '+16135550138', firstName: 'Ada', lastName: 'Lovelace', tags: ['VIP'] });
  const bob = await create(s, token, { email: 'bob@builder.org', firstName: 'Bob', lastName: 'Builder', tags: ['vip', 'Trade'] });
  const cat = await create(s, token, { phone: '(415) 555-2671', firstName: 'Catherine', lastName: 'Ada-Smith' });
  const dan = await create(s, token, { email: 'dan_100%@example.com', firstName: 'Dan' });

  const cases: [string, number[]][] = [
    ['?tag=vip', [bob.id, ada.id]],
    ['?tag=VIP', [bob.id, ada.id]],
    ['?tag=Vip', [bob.id, ada.id]],
    ['?tag=trade', [bob.id]],
    ['?tag=nope', []],
    ['?email=ada@example.com', [ada.id]],
    ['?email=ADA@Example.COM', [ada.id]],
    [`?email=${encodeURIComponent('  Bob@Builder.org ')}`, [bob.id]],
    ['?email=nobody@example.com', []],
    [`?phone=${encodeURIComponent('+16135550138')}`, [ada.id]],
    [`?phone=${encodeURIComponent('+1-613-555-0138')}`, [ada.id]],
    [`?phone=${encodeURIComponent('(613) 555-0138')}`, [ada.id]],
    ['?phone=6135550138', [ada.id]],
    [`?phone=${encodeURIComponent('415.555.2671')}`, [cat.id]],
    ['?phone=2025550000', []],
    ['?q=ada', [cat.id, ada.id]],
    ['?q=ADA', [cat.id, ada.id]],
    ['?q=lovel', [ada.id]],
    ['?q=builder', [bob.id]],
    ['?q=therin', [cat.id]],
    ['?q=example.com', [dan.id, ada.id]],
    [`?q=${encodeURIComponent('100%')}`, [dan.id]],
    [`?q=${encodeURIComponent('_')}`, [dan.id]],
    [`?q=${encodeURIComponent('%')}`, [dan.id]],
    ['?q=zzzz', []],
    // Search syntax of the index is text like any other.
    ['?q=%22', []],
    [`?q=${encodeURIComponent('ada" OR "bob')}`, []],
    [`?q=${encodeURIComponent('NEAR(ada bob)')}`, []],
    ['?q=ad*', []],
    ['?tag=vip&q=bob', [bob.id]],
    ['?tag=vip&email=ada@example.com', [ada.id]],
  ];
  for (const [query, expected] of cases) {
    await t.test(query, async () => {
      const res = await s.request('GET', `/contacts${query}`, { token });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(
        res.body.data.map((c: any) => c.id),
        expected,
      );
    });
  }
  // No filter value holds a NUL (SQLite's FTS5 and LIKE end a pattern at one, PostgreSQL text
  // cannot hold one): refused at the field, on both stores, never a 500 or a match of all.
  for (const query of ['?q=%00ada', '?q=ada%00', '?q=%00a', '?tag=vip&q=b%00ob', '?tag=v%00ip', '?email=a%00@example.com', '?phone=%2B1%00']) {
    await t.test(query, async () => {
      const res = await s.request('GET', `/contacts${query}`, { token });
      assertProblem(res, 400, 'invalid_query');
      assert.match(res.body.errors[0].path, /^\/(q|tag|email|phone)$/);
    });
  }
});

test('q ignores the case of every letter, not only ASCII, whatever its length (one or two characters are not indexed)', async (t) => {
  const { s, token } = await setup(t);
  const elodie = await create(s, token, { email: 'elodie@example.fr', firstName: 'Élodie', lastName: 'ÖZTÜRK' });
  const other = await create(s, token, { email: 'eve@example.org', firstName: 'Eve', lastName: 'Oz' });
  const cases: [string, number[]][] = [
    ['él', [elodie.id]],
    ['ÉL', [elodie.id]],
    ['É', [elodie.id]],
    ['élo', [elodie.id]],
    ['ÉLODIE', [elodie.id]],
    ['öz', [elodie.id]],
    ['ÖzT', [elodie.id]],
    ['oz', [other.id]],
    ['OZ', [other.id]],
    ['ü', [elodie.id]],
  ];
  for (const [q, expected] of cases) {
    await assertFound(s, token, q, expected);
  }
});

test('q alone pages through its matches newest first, whether they fit in a page (read oldest first, turned round) or not', async (t) => {
  const { s, token } = await setup(t);
  const made: number[] = [];
  for (let i = 0; i < 12; i++) made.push((await create(s, token, { email: `m${i}@example.com`, firstName: i % 4 === 0 ? `Quill${i}` : `Other${i}` })).id);
  const quills = made.filter((_, i) => i % 4 === 0).reverse();
  const all = [...made].reverse();
  for (const [q, expected] of [
    ['quill', quills],
    ['example.com', all],
    ['other1', [made[11]!, made[10]!, made[1]!]],
    ['nobody', []],
  ] as const) {
    // Limits below, at and above the number of matches: the page's one more (limit + 1) too.
    for (const limit of [1, 2, expected.length - 1, expected.length, expected.length + 1, 50].filter((l) => l >= 1)) {
      const ids: number[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const res = await s.request('GET', `/contacts?q=${q}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`, { token });
        assert.equal(res.status, 200, res.text);
        assert.ok(res.body.data.length <= limit);
        ids.push(...res.body.data.map((c: { id: number }) => c.id));
        cursor = res.body.nextCursor;
        assert.ok(++pages < 100);
      } while (cursor);
      assert.deepEqual(ids, expected, `q=${q}&limit=${limit}`);
      // A page that holds every match says there is no next one.
      if (limit >= expected.length) assert.equal(pages, 1, `q=${q}&limit=${limit}`);
    }
  }
});

test('q alone, in a workspace larger than the walk before the search index: matches below the walk, inside it, or both, newest first across pages', async (t) => {
  const { s, token } = await setup(t);
  // Oldest first: Deep0..Deep299, then PG_SEARCH_WALK_ROWS + 300 others, three of them deep
  // too among the newest. On PostgreSQL a page walks PG_SEARCH_WALK_ROWS contacts below its
  // cursor and takes the rest from the trigram index; on SQLite FTS5 walks the matches.
  const n = 300 + PG_SEARCH_WALK_ROWS + 300;
  const deepNew = new Set([300 + PG_SEARCH_WALK_ROWS - 1, n - 150, n - 1]);
  const rows = Array.from({ length: n }, (_, i) =>
    JSON.stringify({ email: `w${i}@example.com`, firstName: i < 300 || deepNew.has(i) ? `Deep${i}` : `Plain${i}` }),
  );
  const imported = await s.request('POST', '/contacts/import', { token, raw: `${rows.join('\n')}\n`, headers: { 'content-type': 'application/x-ndjson' } });
  assert.ok(imported.status === 200 || imported.status === 202, imported.text);
  for (let job = imported.body; job.status === 'RUNNING'; ) {
    await new Promise((r) => setTimeout(r, 50));
    job = (await s.request('GET', `/contacts/imports/${job.id}`, { token })).body;
  }
  const everyone: { id: number; firstName: string }[] = [];
  for (let cursor: string | null = null, first = true; first || cursor; first = false) {
    const res = await s.request('GET', `/contacts?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token });
    everyone.push(...res.body.data);
    cursor = res.body.nextCursor;
  }
  assert.equal(everyone.length, n);
  const deep = everyone.filter((c) => c.firstName.startsWith('Deep')).map((c) => c.id);
  const walk = (q: string, limit: number, from?: number) => async () => {
    const ids: number[] = [];
    let cursor: string | null = from ? Buffer.from(`v1:${from}`).toString('base64url') : null;
    let pages = 0;
    do {
      const res = await s.request('GET', `/contacts?q=${q}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`, { token });
      assert.equal(res.status, 200, res.text);
      assert.equal(res.body.data.length, Math.min(limit, deep.filter((id) => !from || id < from).length - ids.length), 'every page full but the last');
      ids.push(...res.body.data.map((c: { id: number }) => c.id));
      cursor = res.body.nextCursor;
      assert.ok(++pages < 1000);
    } while (cursor);
    return ids;
  };
  for (const limit of [1, 3, 4, 50, 200]) assert.deepEqual(await walk('deep', limit)(), deep, `limit=${limit}`);
  // From a cursor among the newest: the walk below it meets one deep contact, the index the rest.
  const from = everyone[100]!.id;
  assert.deepEqual(
    await walk('DEEP', 50, from)(),
    deep.filter((id) => id < from),
  );
  // Nothing matches: every contact walked, then the index answers none.
  const none = await s.request('GET', '/contacts?q=nobody-here', { token });
  assert.deepEqual([none.status, none.body.data, none.body.nextCursor], [200, [], null]);
  // Every contact holds "@example.com": on PostgreSQL the index looks up only the part of such a
  // q that few of the newest contacts hold ("w12@"), and the whole q is checked on each it finds.
  // LIKE's wildcards and its escape in such a q are plain characters, in the part looked up and in q.
  const noMatch = ['w12@example.org', 'w12@exam_le.com', 'w12@exa%ple.com', 'w12@example.com\\', 'w12%example.com'];
  for (const q of ['w12@example.com', 'W12@EXAMPLE.COM', 'w1@example.com', '12@example.co', ...noMatch]) {
    const expected = (everyone as unknown as { id: number; email: string }[]).filter((c) => c.email.includes(q.toLowerCase())).map((c) => c.id);
    assert.ok(noMatch.includes(q) ? expected.length === 0 : expected.length > 0 && expected.length <= 50, q);
    await assertFound(s, token, q, expected);
  }
});

test('a tag beside a q, with few or many tagged contacts: the same contacts across pages either way, and an unknown tag ends at once', async (t) => {
  const { s, token } = await setup(t);
  // 'few': fewer than FEW_TAGGED contacts (read by id, q checked on each); 'many': more (q drives, the tag checked on each).
  const made: { id: number; name: string; tags: string[] }[] = [];
  for (let i = 0; i < FEW_TAGGED + 8; i++) {
    const name = i % 3 === 0 ? `Zed${i}` : `Yan${i}`;
    const tags = ['many', ...(i % 5 === 0 ? ['Few'] : [])];
    const c = await create(s, token, { email: `p${i}@example.com`, firstName: name, tags });
    made.push({ id: c.id, name, tags });
  }
  const expect = (tag: string, q: string) =>
    made
      .filter((c) => c.tags.includes(tag) && `p${made.indexOf(c)}@example.com ${c.name}`.toLowerCase().includes(q.toLowerCase()))
      .map((c) => c.id)
      .reverse();
  for (const [tag, q] of [
    ['FEW', 'zed'],
    ['few', 'example'],
    ['Many', 'ZED'],
    ['many', 'yan1'],
    ['many', 'nobody'],
  ] as const) {
    for (const limit of [1, 2, 50]) {
      const ids: number[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const res = await s.request('GET', `/contacts?tag=${tag}&q=${q}&limit=${limit}${cursor ? `&cursor=${cursor}` : ''}`, { token });
        assert.equal(res.status, 200, res.text);
        ids.push(...res.body.data.map((c: any) => c.id));
        cursor = res.body.nextCursor;
        assert.ok(++pages < 100);
      } while (cursor);
      assert.deepEqual(ids, expect(tag.toLowerCase() === 'few' ? 'Few' : 'many', q), `tag=${tag}&q=${q}&limit=${limit}`);
    }
  }
  const none = await s.request('GET', '/contacts?tag=nosuch&q=example', { token });
  assert.deepEqual(none.body, { data: [], nextCursor: null });
});

test('q follows every change of a searched field, and an update that writes the same values keeps the contact found', async (t) => {
  const { s, token } = await setup(t);
  const ada = await create(s, token, { email: 'ada@example.com', phone: '+16135550138', firstName: 'Ada', lastName: 'Lovelace' });
  const found = async (q: string) => {
    const res = await s.request('GET', `/contacts?q=${encodeURIComponent(q)}`, { token });
    assert.equal(res.status, 200, res.text);
    return res.body.data.map((c: { id: number }) => c.id) as number[];
  };
  // The same values written again (as PATCH with every field, and update_contact, do).
  const same = await s.request('PATCH', `/contacts/${ada.id}`, {
    token,
    body: { email: 'ada@example.com', phone: '+16135550138', firstName: 'Ada', lastName: 'Lovelace' },
  });
  assert.equal(same.status, 200, same.text);
  for (const q of ['ada@ex', 'Lovel', '6135550', 'Ada']) assert.deepEqual(await found(q), [ada.id], q);
  // Each searched field changed alone: the new value is found, the old one no more.
  const changes: [Record<string, string | null>, string, string][] = [
    [{ email: 'countess@example.org' }, 'countess', 'ada@ex'],
    [{ phone: '+14155552671' }, '4155552', '6135550'],
    [{ lastName: 'King' }, 'King', 'Lovel'],
    [{ firstName: 'Augusta' }, 'Augusta', 'Ada'],
  ];
  for (const [body, now, before] of changes) {
    const res = await s.request('PATCH', `/contacts/${ada.id}`, { token, body });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(await found(now), [ada.id], `${JSON.stringify(body)}: ${now}`);
    assert.deepEqual(await found(before), [], `${JSON.stringify(body)}: ${before}`);
  }
  // A field set to nothing is no longer found either.
  const cleared = await s.request('PATCH', `/contacts/${ada.id}`, { token, body: { lastName: null } });
  assert.equal(cleared.status, 200, cleared.text);
  assert.deepEqual(await found('King'), []);
  assert.deepEqual(await found('Augusta'), [ada.id]);
});

test('bad list query inputs are 400 problems', async (t) => {
  const { s, token } = await setup(t);
  await create(s, token, { email: 'q@example.com' });
  const cases: [string, string?][] = [
    ['?limit=0', 'invalid_query'],
    ['?limit=201', 'invalid_query'],
    ['?limit=-1', 'invalid_query'],
    ['?limit=abc', 'invalid_query'],
    ['?limit=1.5', 'invalid_query'],
    ['?limit=', undefined],
    ['?cursor=zzz', 'invalid_cursor'],
    ['?cursor=!!!', undefined],
    [`?cursor=${'A'.repeat(201)}`, undefined],
    [`?cursor=${Buffer.from('v1:0').toString('base64url')}`, 'invalid_cursor'],
    [`?cursor=${Buffer.from('v2:5').toString('base64url')}`, 'invalid_cursor'],
    [`?cursor=${Buffer.from('v1:-5').toString('base64url')}`, 'invalid_cursor'],
    // Past the safe integers: 9999999999999999 would read as 10^16.
    [`?cursor=${Buffer.from('v1:9999999999999999').toString('base64url')}`, 'invalid_cursor'],
    [`?cursor=${Buffer.from('v1:1 OR 1=1').toString('base64url')}`, 'invalid_cursor'],
    // Whatever the filters find (a tag no contact has, a search that matches nothing).
    ['?tag=nosuchtag&cursor=zzz', 'invalid_cursor'],
    ['?q=nothing-matches-this&cursor=zzz', 'invalid_cursor'],
    ['?email=nobody%40example.com&cursor=zzz', 'invalid_cursor'],
    ['?zzz=1', 'invalid_query'],
    ['?limit=10&foo=bar', 'invalid_query'],
  ];
  for (const [query, code] of cases) {
    await t.test(query.slice(0, 60), async () => {
      const res = await s.request('GET', `/contacts${query}`, { token });
      assertProblem(res, 400, code);
    });
  }
});

// ---------------------------------------------------------------------------------------
// Tags
// ---------------------------------------------------------------------------------------

test('POST /contacts/:id/tags adds tags and answers 200 with the contact', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 't@example.com', tags: ['first'] });
  const res = await s.request('POST', `/contacts/${c.id}/tags`, { token, body: { tags: ['VIP', 'beta'] } });
  assert.equal(res.status, 200, res.text);
  assertContactShape(res.body);
  assert.equal(res.body.id, c.id);
  assert.deepEqual([...res.body.tags].sort(), ['VIP', 'beta', 'first'].sort());
  const got = await s.request('GET', `/contacts/${c.id}`, { token });
  assert.deepEqual(got.body, res.body);
});

test('adding tags is idempotent and case-insensitive ("VIP" then "vip" keeps one)', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 't@example.com' });
  const first = await s.request('POST', `/contacts/${c.id}/tags`, { token, body: { tags: ['VIP'] } });
  assert.equal(first.status, 200);
  assert.deepEqual(first.body.tags, ['VIP']);
  for (const tags of [['VIP'], ['vip'], ['Vip', 'vIP'], [' vip ']]) {
    const again = await s.request('POST', `/contacts/${c.id}/tags`, { token, body: { tags } });
    assert.equal(again.status, 200, again.text);
    assert.equal(again.body.tags.length, 1, `after ${JSON.stringify(tags)}: ${JSON.stringify(again.body.tags)}`);
    assert.equal(again.body.tags[0].toLowerCase(), 'vip');
  }
  const rows = await s.db.select().from(contactTags).where(eq(contactTags.contactId, c.id));
  assert.equal(rows.length, 1);

  // Duplicates inside one create request collapse too.
  const d = await create(s, token, { email: 'd@example.com', tags: ['Promo', 'PROMO', 'promo'] });
  assert.equal(d.tags.length, 1);
});

test('DELETE /contacts/:id/tags/:tag answers 204 and removes it case-insensitively', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 't@example.com', tags: ['VIP', 'Beta Tester', 'other'] });
  const cases: [string, string[]][] = [
    ['vip', ['Beta Tester', 'other']],
    [encodeURIComponent('BETA TESTER'), ['other']],
    ['OTHER', []],
  ];
  for (const [tag, remaining] of cases) {
    const res = await s.request('DELETE', `/contacts/${c.id}/tags/${tag}`, { token });
    assert.equal(res.status, 204, res.text);
    assert.equal(res.text, '');
    const got = await s.request('GET', `/contacts/${c.id}`, { token });
    assert.deepEqual([...got.body.tags].sort(), remaining);
  }
  // Removing a tag the contact does not have is still 204 (idempotent).
  const again = await s.request('DELETE', `/contacts/${c.id}/tags/vip`, { token });
  assert.equal(again.status, 204);
  // Unknown contact is 404.
  assertProblem(await s.request('DELETE', `/contacts/${c.id + 99}/tags/vip`, { token }), 404, 'contact_not_found');
});

test('GET /tags lists tag names with correct contact counts', async (t) => {
  const { s, token } = await setup(t);
  const empty = await s.request('GET', '/tags', { token });
  assert.equal(empty.status, 200);
  assert.deepEqual(empty.body, { data: [], nextCursor: null });

  const a = await create(s, token, { email: 'a@example.com', tags: ['vip', 'beta'] });
  await create(s, token, { email: 'b@example.com', tags: ['VIP'] });
  const c = await create(s, token, { email: 'c@example.com', tags: ['Vip', 'gamma'] });
  await create(s, token, { email: 'd@example.com' });

  const res = await s.request('GET', '/tags', { token });
  assert.equal(res.status, 200);
  assert.deepEqual(Object.keys(res.body).sort(), ['data', 'nextCursor']);
  assert.equal(res.body.nextCursor, null);
  const byKey = new Map<string, { name: string; count: number }>(res.body.data.map((x: any) => [x.name.toLowerCase(), x]));
  assert.equal(res.body.data.length, 3, JSON.stringify(res.body));
  for (const row of res.body.data) assert.deepEqual(Object.keys(row).sort(), ['count', 'name']);
  assert.equal(byKey.get('vip')?.count, 3);
  assert.ok(['vip', 'VIP', 'Vip'].includes(byKey.get('vip')!.name));
  assert.equal(byKey.get('beta')?.count, 1);
  assert.deepEqual(byKey.get('gamma'), { name: 'gamma', count: 1 });

  // Counts follow removals and deletions.
  await s.request('DELETE', `/contacts/${a.id}/tags/VIP`, { token });
  await s.request('DELETE', `/contacts/${c.id}`, { token });
  const after = await s.request('GET', '/tags', { token });
  const m2 = new Map(after.body.data.map((x: any) => [x.name.toLowerCase(), x.count]));
  assert.deepEqual(Object.fromEntries(m2), { vip: 1, beta: 1 });
});

test('tag name validation: 65 chars, empty and blank names, empty array → 422', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 't@example.com' });
  const ok64 = await s.request('POST', `/contacts/${c.id}/tags`, { token, body: { tags: ['x'.repeat(64)] } });
  assert.equal(ok64.status, 200, 'exactly 64 characters is allowed');
  // Characters are code points: 64 emoji (128 UTF-16 units) are 64 characters, on create, on tagging and in an import.
  const emoji64 = '\u{1F600}'.repeat(64);
  const okEmoji = await s.request('POST', `/contacts/${c.id}/tags`, { token, body: { tags: [emoji64] } });
  assert.equal(okEmoji.status, 200, okEmoji.text);
  assert.equal((await s.request('POST', '/contacts', { token, body: { email: 'emoji@example.com', tags: [emoji64] } })).status, 201);
  const imported = await s.request('POST', '/contacts/import', {
    token,
    headers: { 'content-type': 'application/x-ndjson' },
    raw: `${JSON.stringify({ email: 'emoji2@example.com', tags: [emoji64] })}\n${JSON.stringify({ email: 'emoji3@example.com', tags: [`${emoji64}\u{1F600}`] })}\n`,
  });
  assert.equal(imported.body.created, 1, imported.text);
  assert.deepEqual(
    imported.body.errors.map((e: { line: number; field: string }) => [e.line, e.field]),
    [[2, 'tags']],
  );
  assert.equal((await s.request('DELETE', `/contacts/${c.id}/tags/${encodeURIComponent(emoji64)}`, { token })).status, 204);

  const cases: [string, unknown, string][] = [
    ['65 chars', { tags: ['y'.repeat(65)] }, '/tags/0'],
    ['65 chars second item', { tags: ['ok', 'y'.repeat(65)] }, '/tags/1'],
    ['65 emoji', { tags: ['\u{1F600}'.repeat(65)] }, '/tags/0'],
    ['empty string', { tags: [''] }, '/tags/0'],
    ['blank string', { tags: ['   '] }, '/tags/0'],
    ['empty array', { tags: [] }, '/tags'],
    ['missing tags', {}, '/tags'],
    ['tags not array', { tags: 'vip' }, '/tags'],
    ['tag not string', { tags: [5] }, '/tags/0'],
    ['unknown field', { tags: ['a'], zzz: 1 }, '/zzz'],
  ];
  for (const [name, body, path] of cases) {
    await t.test(name, async () => {
      const res = await s.request('POST', `/contacts/${c.id}/tags`, { token, body });
      assertValidation(res, path);
    });
  }
  await t.test('create with a 65-char tag', async () => {
    const res = await s.request('POST', '/contacts', { token, body: { email: 'long@example.com', tags: ['z'.repeat(65)] } });
    assertValidation(res, '/tags/0');
  });
  const got = await s.request('GET', `/contacts/${c.id}`, { token });
  assert.deepEqual(got.body.tags, ['x'.repeat(64)]);
  const del65 = await s.request('DELETE', `/contacts/${c.id}/tags/${'y'.repeat(65)}`, { token });
  assert.ok(del65.status >= 400 && del65.status < 500, `65-char tag in URL is a 4xx, got ${del65.status}`);
});

// ---------------------------------------------------------------------------------------
// Bad inputs
// ---------------------------------------------------------------------------------------

test('wrong types and unknown fields are 422 naming the field', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'base@example.com' });
  const cases: [string, Record<string, unknown>, string][] = [
    ['email: 5', { email: 5 }, '/email'],
    ['email: true', { email: true }, '/email'],
    ['email: []', { email: ['a@example.com'] }, '/email'],
    ['phone: 6135550138 (number)', { phone: 6135550138 }, '/phone'],
    ['firstName: {}', { email: 'x@example.com', firstName: {} }, '/firstName'],
    ['lastName: 1', { email: 'x@example.com', lastName: 1 }, '/lastName'],
    ['attributes: "x"', { email: 'x@example.com', attributes: 'x' }, '/attributes'],
    ['attributes: []', { email: 'x@example.com', attributes: [] }, '/attributes'],
    ['attributes: null', { email: 'x@example.com', attributes: null }, '/attributes'],
    ['tags: "a"', { email: 'x@example.com', tags: 'a' }, '/tags'],
    ['unknown zzz', { email: 'x@example.com', zzz: 1 }, '/zzz'],
    ['snake_case first_name', { email: 'x@example.com', first_name: 'A' }, '/first_name'],
    ['id', { email: 'x@example.com', id: 5 }, '/id'],
    ['firstName too long', { email: 'x@example.com', firstName: 'a'.repeat(201) }, '/firstName'],
  ];
  for (const [name, body, path] of cases) {
    await t.test(`POST ${name}`, async () => {
      assertValidation(await s.request('POST', '/contacts', { token, body }), path);
    });
    if (path !== '/tags') {
      await t.test(`PATCH ${name}`, async () => {
        assertValidation(await s.request('PATCH', `/contacts/${c.id}`, { token, body }), path);
      });
    }
  }
  const snap = await snapshot(s);
  assert.equal(snap.contacts.length, 1);
  const got = await s.request('GET', `/contacts/${c.id}`, { token });
  assert.deepEqual(got.body, c, 'refused patches changed nothing');
});

test('invalid email and phone strings are 422', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'base@example.com', phone: '+16135550138' });
  const cases: [Record<string, unknown>, string][] = [
    [{ email: 'not-an-email' }, '/email'],
    [{ email: '' }, '/email'],
    [{ email: '   ' }, '/email'],
    [{ email: 'a@b' }, '/email'],
    [{ email: 'two@@example.com' }, '/email'],
    [{ email: 'spa ce@example.com' }, '/email'],
    [{ email: `${'a'.repeat(250)}@example.com` }, '/email'],
    [{ phone: 'abc' }, '/phone'],
    [{ phone: '' }, '/phone'],
    [{ phone: '123' }, '/phone'],
    [{ phone: '+1 555' }, '/phone'],
    [{ phone: '+999 1234 5678' }, '/phone'],
    [{ phone: '1'.repeat(65) }, '/phone'],
    [{ email: 'ok@example.com', phone: 'nope' }, '/phone'],
  ];
  for (const [body, path] of cases) {
    await t.test(`POST ${JSON.stringify(body).slice(0, 60)}`, async () => {
      assertValidation(await s.request('POST', '/contacts', { token, body }), path);
    });
    await t.test(`PATCH ${JSON.stringify(body).slice(0, 60)}`, async () => {
      assertValidation(await s.request('PATCH', `/contacts/${c.id}`, { token, body }), path);
    });
  }
  assert.equal((await snapshot(s)).contacts.length, 1);
});

test('malformed bodies: invalid JSON 400, empty JSON body 400, text/plain 415, > 1 MiB 413', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'base@example.com' });
  const json = { 'content-type': 'application/json' };
  const targets: [string, string][] = [
    ['POST', '/contacts'],
    ['PATCH', `/contacts/${c.id}`],
    ['POST', `/contacts/${c.id}/tags`],
  ];
  const big = JSON.stringify({ email: 'big@example.com', attributes: { blob: 'x'.repeat(1024 * 1024 + 10) } });
  const cases: [string, { raw: string; headers: Record<string, string> }, number, string][] = [
    ['invalid JSON', { raw: '{"email": "a@example.com",', headers: json }, 400, 'invalid_json'],
    ['single quotes', { raw: "{'email': 'a@example.com'}", headers: json }, 400, 'invalid_json'],
    ['trailing garbage', { raw: '{"email":"a@example.com"} x', headers: json }, 400, 'invalid_json'],
    ['empty body with JSON content-type', { raw: '', headers: json }, 400, 'invalid_json'],
    ['text/plain', { raw: '{"email":"a@example.com"}', headers: { 'content-type': 'text/plain' } }, 415, 'unsupported_media_type'],
    ['form-urlencoded', { raw: 'email=a%40example.com', headers: { 'content-type': 'application/x-www-form-urlencoded' } }, 415, 'unsupported_media_type'],
    [
      'gzip',
      { raw: '{"email":"a@example.com"}', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } },
      415,
      'unsupported_content_encoding',
    ],
    ['body larger than 1 MiB', { raw: big, headers: json }, 413, 'payload_too_large'],
  ];
  for (const [method, path] of targets) {
    for (const [name, opts, status, code] of cases) {
      await t.test(`${method} ${path} ${name}`, async () => {
        const res = await s.request(method, path, { token, ...opts });
        assertProblem(res, status, code);
        if (code === 'unsupported_content_encoding') assert.equal(res.headers.get('accept-encoding'), 'identity');
      });
    }
  }
  const snap = await snapshot(s);
  assert.equal(snap.contacts.length, 1);
  const got = await s.request('GET', `/contacts/${c.id}`, { token });
  assert.deepEqual(got.body, c);
});

test('non-numeric, zero, negative and huge ids are 404, never 500', async (t) => {
  const { s, token } = await setup(t);
  await create(s, token, { email: 'base@example.com' });
  const ids = ['abc', '0', '-1', '99999999999999999999', '1.5', '1e400', '9007199254740992', 'null', '%20', '1;DROP TABLE contacts'];
  for (const raw of ids) {
    const id = raw.includes(' ') || raw.includes(';') ? encodeURIComponent(raw) : raw;
    await t.test(raw, async () => {
      const calls: [string, string, unknown?][] = [
        ['GET', `/contacts/${id}`],
        ['PATCH', `/contacts/${id}`, { firstName: 'x' }],
        ['DELETE', `/contacts/${id}`],
        ['POST', `/contacts/${id}/tags`, { tags: ['x'] }],
        ['DELETE', `/contacts/${id}/tags/x`],
      ];
      for (const [method, path, body] of calls) {
        const res = await s.request(method, path, { token, ...(body !== undefined ? { body } : {}) });
        assertProblem(res, 404);
      }
    });
  }
  assert.equal((await snapshot(s)).contacts.length, 1);
});

test('deeply nested attributes (well under 1 MiB) are answered with 201 or a 4xx problem, never 500', async (t) => {
  const { s, token } = await setup(t);
  const base = await create(s, token, { email: 'deep-base@example.com' });
  const cases: [string, string, string, number][] = [
    ['objects x1000', '{"a":', '}', 1000],
    ['objects x5000', '{"a":', '}', 5000],
    ['arrays x10000', '[', ']', 10000],
    ['arrays x100000', '[', ']', 100000],
  ];
  let n = 0;
  for (const [name, open, close, depth] of cases) {
    const deep = `${open.repeat(depth)}1${close.repeat(depth)}`;
    for (const [method, path] of [
      ['POST', '/contacts'],
      ['PATCH', `/contacts/${base.id}`],
    ] as const) {
      await t.test(`${method} ${name}`, async () => {
        const raw = `{"email":"deep${++n}@example.com","attributes":{"deep":${deep}}}`;
        assert.ok(raw.length < 1024 * 1024);
        const res = await s.request(method, path, { token, raw, headers: { 'content-type': 'application/json' } });
        if (res.status >= 400) assertProblem(res, res.status);
        else assert.ok([200, 201].includes(res.status), `status ${res.status}`);
        assert.ok(res.status < 500, `${method} ${name} answered ${res.status}: ${res.text}`);
      });
    }
  }
});

test('hundreds of random and hostile bodies to POST and PATCH never yield a 5xx', async (t) => {
  const { s, token } = await setup(t);
  const base = await create(s, token, { email: 'fuzz-base@example.com', phone: '+16135550138' });
  const rand = rng(0xc0ffee);
  const pick = <T>(xs: T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const unicode = ['é', 'ß', '漢字', '🙂', '👩‍👩‍👧', '\u202e', '\u0000', '\ufeff', 'İ', 'ﬃ', '\u200b', 'Ω', '\\', '"', "'", '<script>', '%', '_'];
  const randString = (max = 40): string => {
    const len = Math.floor(rand() * max);
    let out = '';
    for (let i = 0; i < len; i++) out += rand() < 0.3 ? pick(unicode) : String.fromCharCode(32 + Math.floor(rand() * 95));
    return out;
  };
  const randValue = (depth = 0): unknown => {
    const r = rand();
    if (depth > 4 || r < 0.15) return pick([null, true, false, 0, -1, 1.5, 1e308, -0, Number.MAX_SAFE_INTEGER + 2]);
    if (r < 0.45) return randString();
    if (r < 0.6) return pick(['a@example.com', 'A@EXAMPLE.COM', '+16135550138', '(415) 555-2671', 'x@y', '+', '']);
    if (r < 0.8) return Array.from({ length: Math.floor(rand() * 4) }, () => randValue(depth + 1));
    const o: Record<string, unknown> = {};
    for (let i = Math.floor(rand() * 4); i > 0; i--)
      o[pick(['email', 'phone', 'firstName', 'lastName', 'attributes', 'tags', randString(8)])] = randValue(depth + 1);
    return o;
  };
  const randContactBody = (): unknown => {
    const o: Record<string, unknown> = {};
    const fields = ['email', 'phone', 'firstName', 'lastName', 'attributes', 'tags'];
    for (const f of fields) if (rand() < 0.5) o[f] = randValue(1);
    if (rand() < 0.5) o.email = `fz${Math.floor(rand() * 1e9)}@example.com`;
    if (rand() < 0.3) o.attributes = { [randString(10)]: randValue(1) };
    if (rand() < 0.2) o.tags = Array.from({ length: Math.floor(rand() * 5) }, () => randString(70));
    return o;
  };
  const nested = (depth: number, open: string, close: string, leaf = '1') => open.repeat(depth) + leaf + close.repeat(depth);
  const raws: string[] = [
    '{"__proto__":{"polluted":true},"email":"p1@example.com"}',
    '{"email":"p2@example.com","attributes":{"__proto__":{"polluted":true}}}',
    '{"email":"p3@example.com","attributes":{"constructor":{"prototype":{"polluted":true}}}}',
    '{"email":"p4@example.com","attributes":{"toString":"x","hasOwnProperty":1,"valueOf":null}}',
    '{"email":"p5@example.com","constructor":{"prototype":{"polluted":true}}}',
    '{"email":"p6@example.com","email":"p7@example.com"}',
    '{"email":"p8@example.com","firstName":"\\ud800"}',
    '{"email":"p9@example.com","firstName":"a\\u0000b","attributes":{"\\u0000":"\\udfff"}}',
    '{"email":"p10@example.com","attributes":{"n":1e309}}',
    '{"email":"p11@example.com","attributes":{"n":123456789012345678901234567890}}',
    '{"email":"p12@example.com","attributes":{"":""}}',
    '{"tags":["\\ud83d"],"email":"p13@example.com"}',
    `{"email":"p14@example.com","attributes":{"deep":${nested(100, '{"a":', '}')}}}`,
    `{"email":"p15@example.com","attributes":{"deep":${nested(1000, '[', ']')}}}`,
    `{"email":"p16@example.com","attributes":{"deep":${nested(5000, '{"a":', '}')}}}`,
    `{"email":"p17@example.com","attributes":{"deep":${nested(100000, '[', ']')}}}`,
    `{"email":"p18@example.com","attributes":{"deep":${nested(60000, '{"a":', '}')}}}`,
    nested(10000, '[', ']'),
    nested(100000, '{"a":', '}'),
    `{"email":"p19@example.com","attributes":{"long":"${'x'.repeat(70 * 1024)}"}}`,
    `{"email":"p20@example.com","attributes":{"long":"${'é'.repeat(40 * 1024)}"}}`,
    `{"email":"p21@example.com","firstName":"${'🙂'.repeat(150)}"}`,
    `{"email":"p22@example.com","firstName":"${'🙂'.repeat(50)}"}`,
    `{"email":"${'a'.repeat(300)}@example.com"}`,
    `{"email":"p23@example.com","tags":[${Array.from({ length: 101 }, (_, i) => `"t${i}"`).join(',')}]}`,
    `{"email":"p24@example.com","tags":[${Array.from({ length: 100 }, (_, i) => `"t${i}"`).join(',')}]}`,
    `{"email":"p25@example.com","attributes":{${Array.from({ length: 5000 }, (_, i) => `"k${i}":${i}`).join(',')}}}`,
    `{"phone":"${'+'.repeat(64)}"}`,
    '{"phone":"+١٦١٣٥٥٥٠١٣٨"}',
    '{"email":"ａ@example.com"}',
    '{"email":"user@xn--bcher-kva.example"}',
    '{"email":"user@bücher.example"}',
    'null',
    'true',
    '0',
    '"string"',
    '[]',
    '[{"email":"a@example.com"}]',
    '{}',
    '1e999',
    '-',
    '{"a":}',
    '\ufeff{}',
  ];
  const bodies: { raw: string; label: string }[] = raws.map((raw, i) => ({ raw, label: `hostile #${i}: ${raw.slice(0, 60)}` }));
  for (let i = 0; i < 300; i++) {
    const v = i % 3 === 0 ? randValue() : randContactBody();
    bodies.push({ raw: JSON.stringify(v) ?? 'null', label: `random #${i}: ${(JSON.stringify(v) ?? 'undefined').slice(0, 80)}` });
  }

  const failures: string[] = [];
  for (const { raw, label } of bodies) {
    for (const [method, path] of [
      ['POST', '/contacts'],
      ['PATCH', `/contacts/${base.id}`],
    ] as const) {
      const res = await s.request(method, path, { token, raw, headers: { 'content-type': 'application/json' } });
      if (res.status >= 500) failures.push(`${method} ${label} → ${res.status} ${res.text.slice(0, 200)}`);
      else if (res.status >= 400) {
        try {
          assertProblem(res, res.status);
        } catch (err) {
          failures.push(`${method} ${label} → malformed problem: ${(err as Error).message.slice(0, 200)}`);
        }
      } else if (![200, 201].includes(res.status)) failures.push(`${method} ${label} → unexpected ${res.status}`);
    }
  }
  assert.deepEqual(failures, [], `${failures.length} requests misbehaved:\n${failures.join('\n')}`);
  assert.equal(({} as any).polluted, undefined, 'Object.prototype not polluted');
  const health = await s.request('GET', '/healthz');
  assert.equal(health.status, 200);
  const list = await s.request('GET', '/contacts?limit=200', { token });
  assert.equal(list.status, 200, 'contacts still list after the fuzzing');
  const tags = await s.request('GET', '/tags', { token });
  assert.equal(tags.status, 200);
});

// ---------------------------------------------------------------------------------------
// Roles
// ---------------------------------------------------------------------------------------

test('no credential (or a bad one) is 401 with WWW-Authenticate: Bearer', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'a@example.com', tags: ['x'] });
  const before = await snapshot(s);
  const calls: [string, string, unknown?][] = [
    ['GET', '/contacts'],
    ['GET', `/contacts/${c.id}`],
    ['GET', '/tags'],
    ['POST', '/contacts', { email: 'new@example.com' }],
    ['PATCH', `/contacts/${c.id}`, { firstName: 'x' }],
    ['DELETE', `/contacts/${c.id}`],
    ['POST', `/contacts/${c.id}/tags`, { tags: ['y'] }],
    ['DELETE', `/contacts/${c.id}/tags/x`],
  ];
  for (const auth of [undefined, 'Bearer nope', 'Bearer svc_live_notarealkey', 'Basic Zm9vOmJhcg==']) {
    for (const [method, path, body] of calls) {
      await t.test(`${auth ?? 'none'} ${method} ${path}`, async () => {
        const res = await s.request(method, path, { ...(body !== undefined ? { body } : {}), ...(auth ? { headers: { authorization: auth } } : {}) });
        assertProblem(res, 401);
        assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer/);
      });
    }
  }
  assert.deepEqual(await snapshot(s), before);
});

test('VIEWER (user and API key) can read contacts and tags', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'a@example.com', tags: ['x'] });
  const viewer = await s.userWithRole('VIEWER');
  const key = await s.mintKey('VIEWER');
  for (const [who, cred] of [
    ['user', viewer.token],
    ['api key', key],
  ] as const) {
    await t.test(who, async () => {
      const list = await s.request('GET', '/contacts?tag=x', { token: cred });
      assert.equal(list.status, 200);
      assert.deepEqual(
        list.body.data.map((x: any) => x.id),
        [c.id],
      );
      const one = await s.request('GET', `/contacts/${c.id}`, { token: cred });
      assert.equal(one.status, 200);
      assert.deepEqual(one.body, c);
      const tags = await s.request('GET', '/tags', { token: cred });
      assert.equal(tags.status, 200);
      assert.deepEqual(tags.body, { data: [{ name: 'x', count: 1 }], nextCursor: null });
    });
  }
});

test('VIEWER (user and API key) gets 403 forbidden on every write and nothing changes', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'a@example.com', tags: ['x'] });
  const viewer = await s.userWithRole('VIEWER');
  const key = await s.mintKey('VIEWER');
  const before = await snapshot(s);
  const calls: [string, string, unknown?][] = [
    ['POST', '/contacts', { email: 'new@example.com' }],
    ['POST', '/contacts', { email: 'a@example.com' }],
    ['POST', '/contacts', { zzz: 'invalid body still 403' }],
    ['PATCH', `/contacts/${c.id}`, { firstName: 'Hacked' }],
    ['PATCH', `/contacts/${c.id}`, { email: null, phone: null }],
    ['DELETE', `/contacts/${c.id}`],
    ['POST', `/contacts/${c.id}/tags`, { tags: ['y'] }],
    ['DELETE', `/contacts/${c.id}/tags/x`],
  ];
  for (const [who, cred] of [
    ['user', viewer.token],
    ['api key', key],
  ] as const) {
    for (const [method, path, body] of calls) {
      await t.test(`${who} ${method} ${path} ${JSON.stringify(body ?? null)}`, async () => {
        const res = await s.request(method, path, { token: cred, ...(body !== undefined ? { body } : {}) });
        assertProblem(res, 403, 'forbidden');
      });
    }
  }
  assert.deepEqual(await snapshot(s), before, 'refused writes changed nothing');
});

test('MEMBER, ADMIN and OWNER (users) and MEMBER/ADMIN API keys can write contacts', async (t) => {
  const { s, token } = await setup(t);
  const creds: [string, string][] = [
    ['OWNER user', token],
    ['MEMBER user', (await s.userWithRole('MEMBER')).token],
    ['ADMIN user', (await s.userWithRole('ADMIN')).token],
    ['OWNER user (second)', (await s.userWithRole('OWNER')).token],
    ['MEMBER key', await s.mintKey('MEMBER')],
    ['ADMIN key', await s.mintKey('ADMIN')],
  ];
  let i = 0;
  for (const [who, cred] of creds) {
    await t.test(who, async () => {
      i++;
      const created = await s.request('POST', '/contacts', { token: cred, body: { email: `w${i}@example.com` } });
      assert.equal(created.status, 201, created.text);
      const id = created.body.id;
      const patched = await s.request('PATCH', `/contacts/${id}`, { token: cred, body: { firstName: who } });
      assert.equal(patched.status, 200, patched.text);
      assert.equal(patched.body.firstName, who);
      const tagged = await s.request('POST', `/contacts/${id}/tags`, { token: cred, body: { tags: ['t'] } });
      assert.equal(tagged.status, 200, tagged.text);
      assert.deepEqual(tagged.body.tags, ['t']);
      const untag = await s.request('DELETE', `/contacts/${id}/tags/t`, { token: cred });
      assert.equal(untag.status, 204);
      const del = await s.request('DELETE', `/contacts/${id}`, { token: cred });
      assert.equal(del.status, 204);
      assertProblem(await s.request('GET', `/contacts/${id}`, { token: cred }), 404);
    });
  }
});

// ---------------------------------------------------------------------------------------
// Workspace isolation
// ---------------------------------------------------------------------------------------

test('a contact of another workspace answers 404 everywhere and is left untouched', async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const theirs = await create(s, other.token, { email: 'theirs@example.com', tags: ['secret'] });
  await create(s, token, { email: 'mine@example.com' });
  const before = await snapshot(s);
  const calls: [string, string, unknown?][] = [
    ['GET', `/contacts/${theirs.id}`],
    ['PATCH', `/contacts/${theirs.id}`, { firstName: 'Hacked' }],
    ['PATCH', `/contacts/${theirs.id}`, { email: null, phone: null }],
    ['DELETE', `/contacts/${theirs.id}`],
    ['POST', `/contacts/${theirs.id}/tags`, { tags: ['pwned'] }],
    ['DELETE', `/contacts/${theirs.id}/tags/secret`],
  ];
  const memberKey = await s.mintKey('ADMIN');
  for (const [who, cred] of [
    ['owner', token],
    ['admin key', memberKey],
  ] as const) {
    for (const [method, path, body] of calls) {
      await t.test(`${who} ${method} ${path}`, async () => {
        const res = await s.request(method, path, { token: cred, ...(body !== undefined ? { body } : {}) });
        assertProblem(res, 404, 'contact_not_found');
      });
    }
  }
  assert.deepEqual(await snapshot(s), before);
  const still = await s.request('GET', `/contacts/${theirs.id}`, { token: other.token });
  assert.deepEqual(still.body, theirs);
});

test("lists, filters and GET /tags never show another workspace's contacts", async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const mine = await create(s, token, { email: 'mine@example.com', phone: '+16135550138', firstName: 'Shared', tags: ['vip'] });
  const theirs = await create(s, other.token, { email: 'theirs@example.com', phone: '+14155552671', firstName: 'Shared', tags: ['vip', 'secret'] });
  await create(s, other.token, { email: 'mine@example.com', tags: ['VIP'] });

  const queries: [string, number[]][] = [
    ['', [mine.id]],
    ['?limit=200', [mine.id]],
    ['?tag=vip', [mine.id]],
    ['?tag=secret', []],
    ['?email=theirs@example.com', []],
    ['?email=mine@example.com', [mine.id]],
    [`?phone=${encodeURIComponent('+14155552671')}`, []],
    ['?q=shared', [mine.id]],
    ['?q=theirs', []],
  ];
  for (const [q, expected] of queries) {
    await t.test(q || '(no query)', async () => {
      const res = await s.request('GET', `/contacts${q}`, { token });
      assert.equal(res.status, 200);
      assert.deepEqual(
        res.body.data.map((c: any) => c.id),
        expected,
      );
    });
  }
  // A cursor built to point past the other workspace's ids still shows only ours.
  const cursor = Buffer.from(`v1:${theirs.id + 100}`).toString('base64url');
  const paged = await s.request('GET', `/contacts?cursor=${cursor}`, { token });
  assert.equal(paged.status, 200);
  assert.deepEqual(
    paged.body.data.map((c: any) => c.id),
    [mine.id],
  );

  const tags = await s.request('GET', '/tags', { token });
  assert.deepEqual(tags.body, { data: [{ name: 'vip', count: 1 }], nextCursor: null });
  const theirTags = await s.request('GET', '/tags', { token: other.token });
  const m = Object.fromEntries(theirTags.body.data.map((x: any) => [x.name.toLowerCase(), x.count]));
  assert.deepEqual(m, { vip: 2, secret: 1 });
});

// ---------------------------------------------------------------------------------------
// Audit
// ---------------------------------------------------------------------------------------

test('contact writes by a user are audited with actor USER and the target id', async (t) => {
  const { s } = await setup(t);
  const member = await s.userWithRole('MEMBER');
  const c = await create(s, member.token, { email: 'aud@example.com' });
  assert.equal((await s.request('PATCH', `/contacts/${c.id}`, { token: member.token, body: { firstName: 'A' } })).status, 200);
  assert.equal((await s.request('POST', `/contacts/${c.id}/tags`, { token: member.token, body: { tags: ['vip', 'beta'] } })).status, 200);
  assert.equal((await s.request('DELETE', `/contacts/${c.id}/tags/VIP`, { token: member.token })).status, 204);
  assert.equal((await s.request('DELETE', `/contacts/${c.id}`, { token: member.token })).status, 204);

  for (const action of ['contact.created', 'contact.updated', 'contact.tags_added', 'contact.tag_removed', 'contact.deleted']) {
    await t.test(action, async () => {
      const rows = await auditRows(s, action);
      assert.equal(rows.length, 1, `${action}: ${JSON.stringify(rows)}`);
      const row = rows[0]!;
      assert.equal(row.actorType, 'USER');
      assert.equal(row.actorId, member.id);
      assert.equal(row.workspaceId, s.workspaceId);
      assert.equal(row.targetType, 'contact');
      assert.equal(String(row.targetId), String(c.id));
    });
  }
  const added = (await auditRows(s, 'contact.tags_added'))[0]!.metadata as { tags: string[] };
  assert.deepEqual([...added.tags].sort(), ['beta', 'vip']);
  // Order: created first, deleted last.
  const order = (await s.db.select({ action: auditLogs.action }).from(auditLogs).where(like(auditLogs.action, 'contact.%')).orderBy(auditLogs.id)).map(
    (r) => r.action,
  );
  assert.deepEqual(order, ['contact.created', 'contact.updated', 'contact.tags_added', 'contact.tag_removed', 'contact.deleted']);
});

test('contact writes by an API key are audited with actor API_KEY', async (t) => {
  const { s } = await setup(t);
  const key = await s.mintKey('MEMBER');
  const [keyRow] = await s.db.select({ id: apiKeys.id }).from(apiKeys).orderBy(desc(apiKeys.id)).limit(1);
  assert.ok(keyRow);
  const c = await create(s, key, { phone: '+16135550138' });
  await s.request('PATCH', `/contacts/${c.id}`, { token: key, body: { lastName: 'B' } });
  await s.request('POST', `/contacts/${c.id}/tags`, { token: key, body: { tags: ['k'] } });
  await s.request('DELETE', `/contacts/${c.id}/tags/k`, { token: key });
  await s.request('DELETE', `/contacts/${c.id}`, { token: key });
  for (const action of ['contact.created', 'contact.updated', 'contact.tags_added', 'contact.tag_removed', 'contact.deleted']) {
    const rows = await auditRows(s, action);
    assert.equal(rows.length, 1, action);
    assert.equal(rows[0]!.actorType, 'API_KEY', action);
    assert.equal(rows[0]!.actorId, keyRow.id, action);
    assert.equal(String(rows[0]!.targetId), String(c.id), action);
    assert.equal(rows[0]!.workspaceId, s.workspaceId, action);
  }
});

test('refused or no-op contact requests write no audit rows', async (t) => {
  const { s, token } = await setup(t);
  const c = await create(s, token, { email: 'a@example.com', tags: ['vip'] });
  const before = (await snapshot(s)).audit.length;
  await s.request('POST', '/contacts', { token, body: { email: 'a@example.com' } }); // 409
  await s.request('POST', '/contacts', { token, body: { email: 'bad' } }); // 422
  await s.request('PATCH', `/contacts/${c.id}`, { token, body: { email: null } }); // 422
  await s.request('PATCH', `/contacts/${c.id + 50}`, { token, body: { firstName: 'x' } }); // 404
  await s.request('DELETE', `/contacts/${c.id + 50}`, { token }); // 404
  assert.equal((await snapshot(s)).audit.length, before);
});
