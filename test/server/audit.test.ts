/**
 * The audit feed through the real HTTP server: GET /audit-logs shows what earlier actions
 * recorded, with the right actor, filters, pagination, workspace scoping, and the role and
 * plan gates. Contract: API.md sections 1, 2 and 5.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sql } from 'drizzle-orm';
import { queryRows } from '../../src/core/db/dialect.js';
import { setWorkspacePlan } from '../../src/core/services/workspaces.js';
import { assertProblem, build, rowsOf, seededRandom, type TestServer } from '../helpers.js';

function systemCtx(s: TestServer) {
  return { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
}

async function feed(s: TestServer, token: string, query = ''): Promise<any[]> {
  const res = await s.request('GET', `/audit-logs${query}`, { token });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test('the feed shows earlier actions, newest first, with the right actors', async (t) => {
  const s = await build(t, { plan: 'GROWTH' });
  const token = await s.login(s.owner.email, s.owner.password);

  const contact = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.test' } });
  assert.equal(contact.status, 201, contact.text);
  const minted = await s.request('POST', '/api-keys', { token, body: { name: 'ci', role: 'MEMBER' } });
  assert.equal(minted.status, 201, minted.text);
  const revoked = await s.request('DELETE', `/api-keys/${minted.body.id}`, { token });
  assert.equal(revoked.status, 204);
  const memberKey = await s.mintKey('MEMBER');
  const byKey = await s.request('POST', '/contacts', { token: memberKey, body: { email: 'bob@example.test' } });
  assert.equal(byKey.status, 201, byKey.text);

  const res = await s.request('GET', '/audit-logs', { token });
  assert.equal(res.status, 200, res.text);
  const data: any[] = res.body.data;
  assert.equal(res.body.nextCursor, null);
  const ids = data.map((e) => e.id);
  assert.deepEqual(
    ids,
    [...ids].sort((a, b) => b - a),
    'newest first',
  );

  const login = data.find((e) => e.action === 'auth.login');
  assert.ok(login, 'auth.login is logged');
  assert.deepEqual(login.actor, { type: 'USER', id: s.owner.id, label: s.owner.email });
  assert.deepEqual(login.target, { type: 'user', id: s.owner.id });
  assert.match(login.at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/);

  const created = data.filter((e) => e.action === 'contact.created');
  assert.equal(created.length, 2);
  const [newest, oldest] = created;
  assert.deepEqual(oldest.target, { type: 'contact', id: contact.body.id });
  assert.equal(oldest.actor.type, 'USER');
  assert.equal(oldest.actor.id, s.owner.id);
  assert.deepEqual(newest.target, { type: 'contact', id: byKey.body.id });
  assert.equal(newest.actor.type, 'API_KEY');
  assert.equal(newest.actor.label, 'member key');
  assert.equal(typeof newest.actor.id, 'number');

  const keyCreated = data.find((e) => e.action === 'api_key.created' && e.actor.type === 'USER');
  assert.ok(keyCreated, 'api_key.created by the owner');
  assert.deepEqual(keyCreated.target, { type: 'api_key', id: minted.body.id });
  assert.equal(keyCreated.metadata.role, 'MEMBER');
  assert.equal(keyCreated.metadata.name, 'ci');
  const keyRevoked = data.find((e) => e.action === 'api_key.revoked');
  assert.ok(keyRevoked);
  assert.deepEqual(keyRevoked.target, { type: 'api_key', id: minted.body.id });
  assert.equal(keyRevoked.actor.type, 'USER');
  assert.ok(typeof keyRevoked.ip === 'string' && keyRevoked.ip.length > 0, 'the caller ip is recorded');

  // No key material in the feed.
  assert.doesNotMatch(res.text, /svc_live_[0-9A-Za-z]{20,}/);
  assert.ok(!res.text.includes(minted.body.key));
  assert.ok(!res.text.includes(memberKey));
});

test('filters: action (exact and prefix), actorType, since/until', async (t) => {
  const s = await build(t, { plan: 'PRO' });
  const token = await s.login(s.owner.email, s.owner.password);
  const c = await s.request('POST', '/contacts', { token, body: { email: 'a@example.test' } });
  assert.equal(c.status, 201);
  assert.equal((await s.request('PATCH', `/contacts/${c.body.id}`, { token, body: { firstName: 'Ann' } })).status, 200);
  const key = await s.mintKey('MEMBER');
  assert.equal((await s.request('POST', '/contacts', { token: key, body: { email: 'b@example.test' } })).status, 201);

  const exact = await feed(s, token, '?action=contact.created');
  assert.equal(exact.length, 2);
  assert.ok(exact.every((e) => e.action === 'contact.created'));

  const prefix = await feed(s, token, '?action=contact.*');
  assert.deepEqual(prefix.map((e) => e.action).sort(), ['contact.created', 'contact.created', 'contact.updated']);

  const none = await feed(s, token, '?action=contact');
  assert.equal(none.length, 0, 'no implicit prefix match');

  const byKey = await feed(s, token, '?actorType=API_KEY');
  assert.ok(byKey.length >= 1);
  assert.ok(byKey.every((e) => e.actor.type === 'API_KEY'));
  const byUser = await feed(s, token, '?actorType=USER&action=contact.created');
  assert.equal(byUser.length, 1);
  assert.equal(byUser[0].actor.id, s.owner.id);
  const bySystem = await feed(s, token, '?actorType=SYSTEM');
  assert.ok(
    bySystem.some((e) => e.action === 'workspace.created'),
    'set-up entries are SYSTEM',
  );

  const all = await feed(s, token);
  const pivot = all.find((e) => e.action === 'contact.updated');
  const since = await feed(s, token, `?since=${encodeURIComponent(pivot.at)}`);
  assert.ok(since.every((e) => e.at >= pivot.at));
  assert.ok(
    since.some((e) => e.id === pivot.id),
    'since is inclusive',
  );
  const until = await feed(s, token, `?until=${encodeURIComponent(pivot.at)}`);
  assert.ok(
    until.every((e) => e.at < pivot.at),
    'until is exclusive',
  );
  assert.equal(since.length + until.length, all.length);

  assert.equal((await feed(s, token, '?since=2000-01-01T00:00:00Z&until=2000-01-02')).length, 0);
  assert.equal((await feed(s, token, '?since=2000-01-01T00:00:00%2B02:00')).length, all.length);
  assert.equal((await feed(s, token, '?since=2024-02-29')).length, all.length, 'a leap day is a day');
  assert.equal((await feed(s, token, '?until=2999-01-01T00:00:00.000Z')).length, all.length);

  for (const q of [
    '?since=yesterday',
    '?until=2026-13-45T00:00:00Z',
    '?since=2026-01-01T10:00:00',
    '?since=1700000000',
    // A day the month does not have (Date.parse read 2026-02-30 as March 2).
    '?since=2026-02-30T00:00:00Z',
    '?until=2026-04-31',
    '?since=2025-02-29',
  ]) {
    assertProblem(await s.request('GET', `/audit-logs${q}`, { token }), 400);
  }
  assertProblem(await s.request('GET', '/audit-logs?actorType=ROBOT', { token }), 400, 'invalid_query');
  assertProblem(await s.request('GET', '/audit-logs?nope=1', { token }), 400, 'invalid_query');
  assertProblem(await s.request('GET', '/audit-logs?limit=0', { token }), 400, 'invalid_query');
  assertProblem(await s.request('GET', '/audit-logs?cursor=garbage!', { token }), 400);
});

test('pagination walks the whole feed without repeats', async (t) => {
  const s = await build(t, { plan: 'PRO' });
  const token = await s.login(s.owner.email, s.owner.password);
  for (let i = 0; i < 7; i++) {
    assert.equal((await s.request('POST', '/contacts', { token, body: { email: `p${i}@example.test` } })).status, 201);
  }
  const all = await feed(s, token, '?limit=200');
  const seen: number[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res = await s.request('GET', `/audit-logs?limit=3${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(res.status, 200, res.text);
    assert.ok(res.body.data.length <= 3);
    seen.push(...res.body.data.map((e: any) => e.id));
    cursor = res.body.nextCursor;
    pages++;
  } while (cursor && pages < 50);
  assert.deepEqual(
    seen,
    all.map((e) => e.id),
  );
  assert.ok(pages >= 3);

  // A cursor combines with a filter.
  const first = await s.request('GET', '/audit-logs?action=contact.created&limit=4', { token });
  assert.equal(first.body.data.length, 4);
  const second = await s.request('GET', `/audit-logs?action=contact.created&limit=4&cursor=${first.body.nextCursor}`, { token });
  assert.equal(second.body.data.length, 3);
  assert.equal(second.body.nextCursor, null);
});

test("another workspace's entries are never visible", async (t) => {
  const s = await build(t, { plan: 'PRO' });
  const token = await s.login(s.owner.email, s.owner.password);
  const other = await s.otherWorkspace('PRO');
  const theirs = await s.request('POST', '/contacts', { token: other.token, body: { email: 'secret@other.test' } });
  assert.equal(theirs.status, 201);
  const mine = await s.request('POST', '/contacts', { token, body: { email: 'mine@acme.test' } });

  const data = await feed(s, token, '?limit=200');
  const created = data.filter((e) => e.action === 'contact.created');
  assert.deepEqual(
    created.map((e) => e.target.id),
    [mine.body.id],
  );
  assert.ok(!data.some((e) => e.action === 'workspace.created' && e.target.id === other.workspaceId));

  const theirFeed = await feed(s, other.token, '?action=contact.created');
  assert.deepEqual(
    theirFeed.map((e) => e.target.id),
    [theirs.body.id],
  );
});

test('access: ADMIN and OWNER (users or keys) read; VIEWER and MEMBER get 403; no credential 401', async (t) => {
  const s = await build(t, { plan: 'GROWTH' });
  assertProblem(await s.request('GET', '/audit-logs'), 401);
  assertProblem(await s.request('GET', '/audit-logs', { token: 'not-a-token' }), 401);
  for (const role of ['VIEWER', 'MEMBER'] as const) {
    const u = await s.userWithRole(role);
    assertProblem(await s.request('GET', '/audit-logs', { token: u.token }), 403, 'forbidden');
    assertProblem(await s.request('GET', '/audit-logs', { token: await s.mintKey(role) }), 403, 'forbidden');
  }
  const admin = await s.userWithRole('ADMIN');
  assert.equal((await s.request('GET', '/audit-logs', { token: admin.token })).status, 200);
  assert.equal((await s.request('GET', '/audit-logs', { token: await s.mintKey('ADMIN') })).status, 200);
});

test('STARTER answers 403 plan_upgrade_required; after an upgrade to GROWTH the feed opens at once', async (t) => {
  const s = await build(t, { plan: 'STARTER' });
  const token = await s.login(s.owner.email, s.owner.password);
  assertProblem(await s.request('GET', '/audit-logs', { token }), 403, 'plan_upgrade_required');
  const admin = await s.userWithRole('ADMIN');
  assertProblem(await s.request('GET', '/audit-logs', { token: admin.token }), 403, 'plan_upgrade_required');
  // The role check comes first: a VIEWER hears about its role, not the plan.
  const viewer = await s.userWithRole('VIEWER');
  assertProblem(await s.request('GET', '/audit-logs', { token: viewer.token }), 403, 'forbidden');

  await setWorkspacePlan(systemCtx(s), s.workspaceId, 'GROWTH');
  const res = await s.request('GET', '/audit-logs?action=workspace.plan_changed', { token });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.data.length, 1);
  assert.deepEqual(res.body.data[0].metadata, { from: 'STARTER', to: 'GROWTH' });
  assert.equal(res.body.data[0].actor.type, 'SYSTEM');

  await setWorkspacePlan(systemCtx(s), s.workspaceId, 'STARTER');
  assertProblem(await s.request('GET', '/audit-logs', { token }), 403, 'plan_upgrade_required');
});

test('every filter pages exactly as a reference does: newest first by time, then id, ties and clock steps included', async (t) => {
  const s = await build(t, { plan: 'PRO' });
  const token = await s.login(s.owner.email, s.owner.password);
  const other = await s.otherWorkspace('PRO');
  // Entries written straight to the store: times out of id order (a clock stepped back, or
  // PostgreSQL's transaction-start now()), many in one millisecond, every actor type, and
  // actions that only look like a prefix's ('contacts.imported', 'contact').
  const random = seededRandom(9);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const times = Array.from({ length: 40 }, (_, i) => new Date(Date.UTC(2025, 0, 1) + i * 9 * 86_400_000 + (i % 3)).toISOString());
  const actions = ['contact.created', 'contact.updated', 'contact.deleted', 'contacts.imported', 'contact', 'workflow.activated', 'tag.added'] as const;
  const actorTypes = ['USER', 'API_KEY', 'SYSTEM', 'CLI'] as const;
  await s.store.transaction(async (db) => {
    for (let i = 0; i < 260; i++) {
      const workspaceId = i % 5 === 4 ? other.workspaceId : s.workspaceId;
      await queryRows(
        s.store,
        db,
        sql`INSERT INTO audit_logs (workspace_id, at, actor_type, action, metadata) VALUES (${workspaceId}, ${pick(times)}, ${pick(actorTypes)}, ${pick(actions)}, '{}') RETURNING id`,
      );
    }
  });
  const all = await rowsOf<{ id: number; at: string; actor_type: string; action: string }>(
    s,
    sql`SELECT id, at, actor_type, action FROM audit_logs WHERE workspace_id = ${s.workspaceId}`,
  );
  const reference = all.map((r) => ({ ...r, id: Number(r.id) })).sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : b.id - a.id));

  const walk = async (query: string, limit: number): Promise<number[]> => {
    const ids: number[] = [];
    let cursor: string | null = null;
    for (let pages = 0; pages < 200; pages++) {
      const res = await s.request('GET', `/audit-logs?limit=${limit}${query}${cursor ? `&cursor=${cursor}` : ''}`, { token });
      assert.equal(res.status, 200, `${query}: ${res.text}`);
      assert.ok(res.body.data.length <= limit);
      if (res.body.nextCursor !== null) assert.equal(res.body.data.length, limit, `${query}: only the last page is short`);
      ids.push(...res.body.data.map((e: { id: number }) => e.id));
      cursor = res.body.nextCursor;
      if (!cursor) return ids;
    }
    throw new Error(`${query}: more than 200 pages`);
  };
  const spans: [string, ((at: string) => boolean) | undefined][] = [
    ['', undefined],
    [`&since=${times[13]}`, (at) => at >= times[13]!],
    [`&until=${times[21]}`, (at) => at < times[21]!],
    [`&since=${times[8]}&until=${times[30]}`, (at) => at >= times[8]! && at < times[30]!],
    ['&since=2999-01-01T00:00:00Z', () => false],
    ['&until=2000-01-01T00:00:00Z', () => false],
  ];
  let checked = 0;
  for (const action of [undefined, 'contact.created', 'contact.*', 'contacts.*', 'workflow.*', 'nosuch', 'nosuch.*']) {
    for (const actorType of [undefined, 'USER', 'CLI']) {
      for (const [span, inSpan] of spans) {
        const query = `${action ? `&action=${action}` : ''}${actorType ? `&actorType=${actorType}` : ''}${span}`;
        const expected = reference
          .filter((r) => action === undefined || (action.endsWith('.*') ? r.action.startsWith(action.slice(0, -1)) : r.action === action))
          .filter((r) => actorType === undefined || r.actor_type === actorType)
          .filter((r) => inSpan === undefined || inSpan(r.at))
          .map((r) => r.id);
        assert.deepEqual(await walk(query, 13), expected, query);
        checked += expected.length;
      }
    }
  }
  assert.ok(checked > 1000, `the combinations matched ${checked} entries in all`);
  assert.deepEqual(
    await walk('', 200),
    reference.map((r) => r.id),
    'one page of 200 and the rest',
  );

  // A cursor of the former id-ordered pages (v1:<id>) reads on below the entry it names.
  const middle = reference[100]!;
  const legacy = Buffer.from(`v1:${middle.id}`).toString('base64url');
  const res = await s.request('GET', `/audit-logs?limit=5&cursor=${legacy}`, { token });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(
    res.body.data.map((e: { id: number }) => e.id),
    reference.slice(101, 106).map((r) => r.id),
  );
  // ...but not past an entry of another workspace, nor one that is gone.
  const [theirs] = await rowsOf<{ id: number }>(s, sql`SELECT max(id) AS id FROM audit_logs WHERE workspace_id = ${other.workspaceId}`);
  for (const id of [Number(theirs!.id), 999_999_999]) {
    assertProblem(await s.request('GET', `/audit-logs?cursor=${Buffer.from(`v1:${id}`).toString('base64url')}`, { token }), 400, 'invalid_cursor');
  }
  for (const cursor of [Buffer.from('a1:x|1').toString('base64url'), Buffer.from(`a1:${middle.at}|0`).toString('base64url'), 'a'.repeat(97)]) {
    assertProblem(await s.request('GET', `/audit-logs?cursor=${cursor}`, { token }), 400, 'invalid_cursor');
  }
});

test('a page stops at the byte budget with a cursor past it; a prefix of more actions than svc writes is still exact', async (t) => {
  const s = await build(t, { plan: 'PRO' });
  const token = await s.login(s.owner.email, s.owner.password);
  // Ten entries of 400 KB of metadata: the 2 MiB a page may hold is reached after five.
  const big = JSON.stringify({ note: 'x'.repeat(400_000) });
  await s.store.transaction(async (db) => {
    for (let i = 0; i < 10; i++)
      await queryRows(
        s.store,
        db,
        sql`INSERT INTO audit_logs (workspace_id, actor_type, action, metadata) VALUES (${s.workspaceId}, 'SYSTEM', 'big.entry', ${big}) RETURNING id`,
      );
    // 230 distinct actions under one prefix: more than a page merges, so each entry is checked.
    for (let i = 0; i < 230; i++)
      await queryRows(
        s.store,
        db,
        sql`INSERT INTO audit_logs (workspace_id, actor_type, action, metadata) VALUES (${s.workspaceId}, 'CLI', ${`many.a${i}`}, '{}') RETURNING id`,
      );
  });
  const pages: number[][] = [];
  let cursor: string | null = null;
  do {
    const res = await s.request('GET', `/audit-logs?action=big.entry&limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(res.status, 200, res.text.slice(0, 300));
    pages.push(res.body.data.map((e: { id: number }) => e.id));
    cursor = res.body.nextCursor;
  } while (cursor && pages.length < 10);
  assert.deepEqual(
    pages.map((p) => p.length),
    [5, 5],
    'two pages of five',
  );
  const expected = await rowsOf<{ id: number }>(s, sql`SELECT id FROM audit_logs WHERE action = 'big.entry' ORDER BY at DESC, id DESC`);
  assert.deepEqual(
    pages.flat(),
    expected.map((r) => Number(r.id)),
  );

  const many = await rowsOf<{ id: number }>(s, sql`SELECT id FROM audit_logs WHERE action LIKE 'many.%' ORDER BY at DESC, id DESC`);
  const seen: number[] = [];
  cursor = null;
  do {
    const res = await s.request('GET', `/audit-logs?action=many.*&actorType=CLI&limit=37${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(res.status, 200, res.text);
    seen.push(...res.body.data.map((e: { id: number }) => e.id));
    cursor = res.body.nextCursor;
  } while (cursor);
  assert.deepEqual(
    seen,
    many.map((r) => Number(r.id)),
  );
});
