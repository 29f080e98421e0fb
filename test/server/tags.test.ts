/**
 * GET /tags is a list like the others (API.md sections 7 and 8): `limit` 1..200 (default
 * 50) and an opaque `cursor`, answering {data, nextCursor}, ordered and paged by the tag's
 * name compared case-insensitively. Bad limits and cursors are 400 like every list.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertProblem, buildAsOwner, type TestServer } from '../helpers.js';

async function contact(s: TestServer, token: string, email: string, tags: string[]): Promise<number> {
  const res = await s.request('POST', '/contacts', { token, body: { email, tags } });
  assert.equal(res.status, 201, res.text);
  return res.body.id;
}

/** Every page of GET /tags with this limit, and how many requests it took. */
async function walk(s: TestServer, token: string, limit: number): Promise<{ rows: { name: string; count: number }[]; pages: number }> {
  const rows: { name: string; count: number }[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res = await s.request('GET', `/tags?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`, { token });
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(Object.keys(res.body).sort(), ['data', 'nextCursor']);
    assert.ok(res.body.data.length <= limit);
    rows.push(...res.body.data);
    cursor = res.body.nextCursor;
    if (cursor !== null) assert.equal(res.body.data.length, limit, 'only a full page has a next cursor');
    pages++;
    assert.ok(pages < 100, 'the walk ends');
  } while (cursor !== null);
  return { rows, pages };
}

test('GET /tags pages by name with limit and cursor; every tag appears once, in case-insensitive name order', async (t) => {
  const { s, token } = await buildAsOwner(t);
  await contact(s, token, 'a@example.com', ['vip', 'Beta', 'zeta', 'Épée', '😀 party']);
  await contact(s, token, 'b@example.com', ['VIP', 'alpha', 'beta']);
  await contact(s, token, 'c@example.com', ['Vip', 'gamma', 'Delta']);
  const expected = new Map([
    ['alpha', 1],
    ['beta', 2],
    ['delta', 1],
    ['gamma', 1],
    ['vip', 3],
    ['zeta', 1],
    ['épée', 1],
    ['😀 party', 1],
  ]);

  const whole = await s.request('GET', '/tags', { token });
  assert.equal(whole.status, 200);
  assert.equal(whole.body.nextCursor, null);
  const order = whole.body.data.map((r: any) => r.name.toLowerCase());
  assert.deepEqual(order, [...expected.keys()], 'ordered by the lower-cased name');

  for (const limit of [1, 2, 3, 7, 8, 9, 200]) {
    const { rows, pages } = await walk(s, token, limit);
    assert.deepEqual(
      rows.map((r) => r.name.toLowerCase()),
      [...expected.keys()],
      `limit ${limit}`,
    );
    assert.deepEqual(
      rows.map((r) => r.count),
      [...expected.values()],
      `counts with limit ${limit}`,
    );
    assert.equal(pages, Math.ceil(expected.size / limit), `pages with limit ${limit}: a full last page has no next cursor`);
  }

  // The cursor is a position, not a row: removing the tag it names does not break the walk.
  const first = await s.request('GET', '/tags?limit=2', { token });
  assert.deepEqual(
    first.body.data.map((r: any) => r.name.toLowerCase()),
    ['alpha', 'beta'],
  );
  const bId = (await s.request('GET', '/contacts?email=b@example.com', { token })).body.data[0].id;
  const aId = (await s.request('GET', '/contacts?email=a@example.com', { token })).body.data[0].id;
  assert.equal((await s.request('DELETE', `/contacts/${bId}/tags/beta`, { token })).status, 204);
  assert.equal((await s.request('DELETE', `/contacts/${aId}/tags/BETA`, { token })).status, 204);
  const next = await s.request('GET', `/tags?limit=2&cursor=${encodeURIComponent(first.body.nextCursor)}`, { token });
  assert.equal(next.status, 200, next.text);
  assert.deepEqual(
    next.body.data.map((r: any) => r.name.toLowerCase()),
    ['delta', 'gamma'],
  );
});

test('GET /tags: default limit 50, at most 200; long and non-ASCII names make cursors that still work', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const names = Array.from({ length: 60 }, (_, i) => `tag-${String(i).padStart(3, '0')}-${'€'.repeat(56)}`);
  assert.ok(names.every((n) => n.length === 64));
  await contact(s, token, 'many@example.com', names.slice(0, 30));
  await contact(s, token, 'more@example.com', names.slice(30));
  const emoji = '😀'.repeat(32);
  await contact(s, token, 'emoji@example.com', [emoji]);

  const first = await s.request('GET', '/tags', { token });
  assert.equal(first.status, 200);
  assert.equal(first.body.data.length, 50, 'the default limit is 50');
  assert.equal(typeof first.body.nextCursor, 'string');
  const rest = await s.request('GET', `/tags?cursor=${encodeURIComponent(first.body.nextCursor)}`, { token });
  assert.equal(rest.status, 200, rest.text);
  assert.deepEqual(
    rest.body.data.map((r: any) => r.name),
    [...names.slice(50), emoji],
  );
  assert.equal(rest.body.nextCursor, null);

  const max = await s.request('GET', '/tags?limit=200', { token });
  assert.equal(max.body.data.length, 61);

  // A cursor naming the longest possible key (emoji are 4 bytes each) is accepted.
  const byOne = await walk(s, token, 1);
  assert.equal(byOne.rows.length, 61);
  assert.equal(byOne.rows.at(-1)!.name, emoji);
});

test('GET /tags: bad limit or cursor is 400 like every list; unknown parameters too; VIEWER may read; workspaces are apart', async (t) => {
  const { s, token } = await buildAsOwner(t);
  await contact(s, token, 'a@example.com', ['one', 'two', 'three']);
  for (const q of ['limit=0', 'limit=201', 'limit=-1', 'limit=abc', 'limit=1.5', 'limit=0x2', 'limit=', 'limit=1e1', 'foo=bar', `cursor=${'A'.repeat(401)}`]) {
    assertProblem(await s.request('GET', `/tags?${q}`, { token }), 400, 'invalid_query');
  }
  const contactsCursor = Buffer.from('v1:5').toString('base64url');
  const notOurs = [
    'zzz',
    '!!!',
    'dDE6', // "t1:" with an empty key
    contactsCursor,
    Buffer.from('t2:one').toString('base64url'),
    `${Buffer.from('t1:one').toString('base64url')}=`,
    Buffer.concat([Buffer.from('t1:'), Buffer.from([0xff, 0xfe])]).toString('base64url'),
    Buffer.from(`t1:${'x'.repeat(129)}`).toString('base64url'),
    '%00',
    // A key no tag can have: U+0000 (PostgreSQL text cannot hold it; it answered 500), another
    // control character, a space at either end.
    Buffer.from('t1:\u0000').toString('base64url'),
    Buffer.from('t1:a\u0000b').toString('base64url'),
    Buffer.from('t1:a\nb').toString('base64url'),
    Buffer.from('t1: a').toString('base64url'),
  ];
  for (const cursor of notOurs) {
    assertProblem(await s.request('GET', `/tags?cursor=${encodeURIComponent(cursor)}`, { token }), 400);
  }
  assertProblem(await s.request('GET', `/tags?cursor=${contactsCursor}`, { token }), 400, 'invalid_cursor');

  const viewer = await s.mintKey('VIEWER');
  const page = await s.request('GET', '/tags?limit=2', { token: viewer });
  assert.equal(page.status, 200, page.text);
  assert.deepEqual(
    page.body.data.map((r: any) => r.name),
    ['one', 'three'],
  );
  assertProblem(await s.request('GET', '/tags'), 401);

  const other = await s.otherWorkspace();
  const theirs = await s.request('GET', '/tags', { token: other.token });
  assert.deepEqual(theirs.body, { data: [], nextCursor: null });
  // Our cursor in their workspace is only a position: it shows nothing of ours.
  const there = await s.request('GET', `/tags?cursor=${encodeURIComponent(page.body.nextCursor)}`, { token: other.token });
  assert.deepEqual(there.body, { data: [], nextCursor: null });
});
