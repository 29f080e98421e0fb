/**
 * Reads at scale (issue 9, item 3): on 100,000 contacts the list, tag and search queries run
 * through their indexes, never a full scan of contacts or a sort of the workspace. The plans
 * are those of the very statements the services run (their query builders, `.toSQL()`),
 * asked of SQLite with EXPLAIN QUERY PLAN. The answers stay right: the same rows a plain scan
 * finds, every contact once across the cursor pages, another workspace's rows never seen.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { eq, type SQL, sql } from 'drizzle-orm';
import { seedActivity, seedContacts, seedWorkflow } from '../../bench/seed.js';
import { pageQuery, windowEndQuery, type WorkspaceContext, type WorkspaceScope } from '../../src/core/context.js';
import { deliveryAttempts, RUN_STATUSES, webhookEvents, workflowRuns } from '../../src/core/db/schema.js';
import { adminStats, statusCountQuery } from '../../src/core/services/admin.js';
import { auditPageQuery } from '../../src/core/services/auditLog.js';
import {
  contactListQuery,
  contactTagsQuery,
  FEW_TAGGED,
  listContacts,
  SHORT_Q_SCAN_ROWS,
  tagListQuery,
  type ContactFilter,
} from '../../src/core/services/contacts.js';
import { encodeCursor, LIST_SCAN_ROWS } from '../../src/core/pagination.js';
import { listRuns, listWorkspaceRuns, runQuery } from '../../src/core/services/runs.js';
import { RULES } from '../../src/core/services/retention.js';
import { FIRST_BY_IDEMPOTENCY_KEY } from '../../src/core/db/intake.js';
import { ftsRowid, queryRows } from '../../src/core/db/dialect.js';
import { SQLITE_SCHEDULER_STATEMENTS } from '../../src/engine/sql.js';
import { createWorkspace } from '../../src/core/services/workspaces.js';
import { build, type TestServer, sqliteStoreOf } from '../helpers.js';

const N = 100_000;

function plan(s: TestServer, query: { toSQL(): { sql: string; params: unknown[] } }): string[] {
  const { sql, params } = query.toSQL();
  return (s.db.$client.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params) as { detail: string }[]).map((r) => r.detail);
}

/** No full scan of contacts (in any form), no sort of the rows the list reads. */
function assertSeeks(lines: string[], label: string): void {
  const text = lines.join(' | ');
  for (const line of lines) assert.doesNotMatch(line, /^SCAN (contacts|contact_tags)\b(?!_fts)/, `${label}: full scan in ${text}`);
  assert.doesNotMatch(text, /TEMP B-TREE/, `${label}: sorts in ${text}`);
}

async function seeded(t: Parameters<typeof build>[0]) {
  const s = await build(t, { store: 'sqlite' });
  const sys = { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
  const other = await createWorkspace(sys, { name: 'Other', plan: 'PRO' });
  // The seeders write straight through the writer connection, each in its own transaction.
  await sqliteStoreOf(s).exclusive((w) => {
    seedContacts(w.$client, s.workspaceId, N, { prefix: 'big' });
    seedContacts(w.$client, other.id, 1000, { prefix: 'small' });
  });
  const ctx: WorkspaceContext = { ...sys, workspaceId: s.workspaceId };
  const otherCtx: WorkspaceContext = { ...sys, workspaceId: other.id };
  return { s, ctx, otherCtx, token: await s.login(s.owner.email, s.owner.password) };
}

/** Whether a page of this filter checks filters per row (a short q, or a tag beside a q), and so may end early. */
function listPlanIsWindowed(filter: Omit<ContactFilter, 'cursor'>): boolean {
  const q = filter.q?.trim() ?? '';
  return filter.email === undefined && filter.phone === undefined && ((q !== '' && [...q].length < 3) || (q !== '' && filter.tag !== undefined));
}

/** Ids newest first that a plain scan finds, for comparison. */
function bruteForce(s: TestServer, workspaceId: number, where: string, ...params: unknown[]): number[] {
  return (
    s.db.$client.prepare(`SELECT id FROM contacts WHERE workspace_id = ? AND (${where}) ORDER BY id DESC`).all(workspaceId, ...params) as { id: number }[]
  ).map((r) => r.id);
}

async function walk(ctx: WorkspaceContext, filter: Omit<ContactFilter, 'cursor'>): Promise<number[]> {
  const ids: number[] = [];
  let cursor: string | undefined;
  for (let pages = 0; ; pages++) {
    assert.ok(pages < 2000, 'the walk ends');
    const page = await listContacts(ctx, { ...filter, ...(cursor ? { cursor } : {}) });
    ids.push(...page.data.map((c) => c.id));
    if (!page.nextCursor) return ids;
    // A page checking filters per row may end early, short or empty (LIST_SCAN_ROWS).
    if (page.data.length < filter.limit) assert.ok(listPlanIsWindowed(filter), `a short page with a next cursor: ${JSON.stringify(filter)}`);
    cursor = page.nextCursor;
  }
}

test('contacts on 100,000: list, cursor, tag, email, phone and search queries seek through their indexes', async (t) => {
  const { s, ctx } = await seeded(t);
  const cursor = (await listContacts(ctx, { limit: 200, tag: 'vip' })).nextCursor!;
  const mid = Buffer.from(`v1:${Math.floor(N / 2)}`).toString('base64url');
  const cases: [string, ContactFilter, RegExp][] = [
    ['first page', { limit: 50 }, /SEARCH contacts USING INDEX contacts_workspace_idx \(workspace_id=\?\)/],
    ['a page in the middle', { limit: 200, cursor: mid }, /SEARCH contacts USING INDEX contacts_workspace_idx \(workspace_id=\? AND id<\?\)/],
    ['tag', { limit: 50, tag: 'vip' }, /SEARCH contact_tags USING COVERING INDEX contact_tags_workspace_tag_contact_idx \(workspace_id=\? AND tag_key=\?\)/],
    ['tag, next page', { limit: 200, tag: 'VIP', cursor }, /contact_tags_workspace_tag_contact_idx \(workspace_id=\? AND tag_key=\? AND contact_id<\?\)/],
    ['q', { limit: 50, q: 'Smith77' }, /SCAN contacts_fts VIRTUAL TABLE INDEX \d+:M/],
    ['q, next page', { limit: 50, q: 'Smith77', cursor: mid }, /SCAN contacts_fts VIRTUAL TABLE INDEX \d+:/],
    ['email', { limit: 50, email: 'USER5@big.example' }, /contacts_workspace_email_unique \(workspace_id=\? AND email=\?\)/],
    ['phone', { limit: 50, phone: '+15550000005' }, /contacts_workspace_phone_unique \(workspace_id=\? AND phone=\?\)/],
    ['tag and q', { limit: 50, tag: 'vip', q: 'Smith77' }, /SEARCH contact_tags EXISTS USING COVERING INDEX/],
    ['email, tag and q', { limit: 50, email: 'user10@big.example', tag: 'vip', q: 'Smith' }, /contacts_workspace_email_unique.*SCAN contacts_fts EXISTS/],
  ];
  for (const [label, filter, uses] of cases) {
    const lines = plan(s, contactListQuery(ctx, filter));
    assertSeeks(lines, label);
    assert.match(lines.join(' | '), uses, `${label}: ${lines.join(' | ')}`);
  }
  // The cursor's bound reaches the search index: FTS5 takes a rowid constraint only when its
  // value is an INTEGER, and better-sqlite3 binds a JavaScript number as a REAL. Asked for
  // rowid = a value, FTS5 answers the one row when it took the bound and every match when it
  // ignored it (a bound on `<` it ignored, SQLite checked on every match above the cursor).
  const match = `ws : "w${ctx.workspaceId}w" AND {email phone first_name last_name} : "big.example"`;
  const id = (await listContacts(ctx, { limit: 1 })).data[0]!.id;
  const equal = async (bound: SQL) =>
    Number(
      Object.values((await queryRows(s.store, s.db, sql`SELECT count(*) FROM contacts_fts WHERE contacts_fts MATCH ${match} AND rowid = ${bound}`))[0]!)[0],
    );
  assert.equal(await equal(sql`${id}`), N, 'a number bound as it is: ignored by FTS5');
  assert.equal(await equal(ftsRowid(id)), 1, 'ftsRowid: taken by FTS5');
  // A few tagged contacts beside a q: read by id, newest first without a sort.
  const few = plan(s, contactListQuery(ctx, { limit: 50, tag: 'rare', q: 'Smith' }, null, [90, 40, 7]));
  assertSeeks(few, 'few tagged and q');
  assert.match(few.join(' | '), /^SEARCH contacts USING INTEGER PRIMARY KEY \(rowid=\?\)/, few.join(' | '));
  // The tags of a page: by the contacts' primary key, never the workspace's tag index.
  const pageTags = plan(
    s,
    contactTagsQuery(
      ctx,
      (await listContacts(ctx, { limit: 50 })).data.map((c) => c.id),
    ),
  );
  assert.match(pageTags.join(' | '), /^SEARCH contact_tags USING INDEX sqlite_autoindex_contact_tags_1 \(contact_id=\?\)/, pageTags.join(' | '));
  const tags = plan(s, tagListQuery(ctx, { limit: 50 }));
  assert.match(tags.join(' | '), /^SEARCH tag_counts USING INDEX sqlite_autoindex_tag_counts_1 \(workspace_id=\?\)$/, tags.join(' | '));
});

test('contacts on 100,000: the indexed reads give the rows a scan gives, every one once across the pages, none of another workspace', async (t) => {
  const { s, ctx, otherCtx, token } = await seeded(t);

  // Every contact exactly once, newest first, across 500 pages.
  const all = await walk(ctx, { limit: 200 });
  assert.equal(all.length, N);
  assert.equal(new Set(all).size, N);
  assert.deepEqual(all, bruteForce(s, ctx.workspaceId, '1'));

  const vip = await walk(ctx, { limit: 200, tag: 'Vip' });
  assert.equal(vip.length, N / 10);
  assert.deepEqual(vip, bruteForce(s, ctx.workspaceId, "id IN (SELECT contact_id FROM contact_tags WHERE tag_key = 'vip')"));

  const like = 'lower(email) LIKE ? OR lower(phone) LIKE ? OR lower(first_name) LIKE ? OR lower(last_name) LIKE ?';
  for (const q of ['Smith77', 'smith777', 'BIG.EXA', '5550001', 'ada9999', 'zzz', '"q"']) {
    const p = `%${q.toLowerCase()}%`;
    assert.deepEqual(await walk(ctx, { limit: 200, q }), bruteForce(s, ctx.workspaceId, like, p, p, p, p), `q=${q}`);
  }
  // Shorter than a trigram: matched by LIKE over the workspace, SHORT_Q_SCAN_ROWS rows a page
  // at most, the same rows across the pages (whatever the case of q's letters); a rare one
  // in short or empty pages.
  for (const q of ['7', '77', 'zq', 'SM', 'mI']) {
    const p = `%${q}%`;
    assert.deepEqual(await walk(ctx, { limit: 200, q }), bruteForce(s, ctx.workspaceId, like, p, p, p, p), `q=${q}`);
  }
  const none = await listContacts(ctx, { limit: 50, q: 'zq' });
  assert.deepEqual(none.data, []);
  assert.ok(none.nextCursor, 'no match among the first SHORT_Q_SCAN_ROWS rows: an empty page that goes on');
  let pages = 1;
  for (let page = none; page.nextCursor; pages++) page = await listContacts(ctx, { limit: 50, q: 'zq', cursor: page.nextCursor });
  assert.equal(pages, Math.ceil(N / SHORT_Q_SCAN_ROWS), 'each page examines SHORT_Q_SCAN_ROWS contacts');
  // A tag beside a q is checked per row too, each way round.
  const vipKeys = "id IN (SELECT contact_id FROM contact_tags WHERE tag_key = 'vip')";
  for (const q of ['zq', '77', 'Smith', 'zzzz']) {
    const p = `%${q.toLowerCase()}%`;
    assert.deepEqual(await walk(ctx, { limit: 200, q, tag: 'vip' }), bruteForce(s, ctx.workspaceId, `(${like}) AND ${vipKeys}`, p, p, p, p), `q=${q}&tag=vip`);
  }
  assert.deepEqual(await walk(ctx, { limit: 200, q: 'Smith', tag: 'nosuch' }), []);
  // A tag of FEW_TAGGED contacts or fewer below the cursor beside a q: its contacts are read
  // by id and q checked on each; the page is whole (no cursor to follow through empty pages).
  assert.deepEqual(await listContacts(ctx, { limit: 50, q: 'Smith', tag: 'nosuch' }), { data: [], nextCursor: null });
  const rareIds = bruteForce(s, ctx.workspaceId, 'id % 3001 = 0');
  assert.ok(rareIds.length > FEW_TAGGED, 'more tagged than FEW_TAGGED, so that the first pages go the other way');
  await sqliteStoreOf(s).exclusive((w) => {
    const tag = w.$client.prepare("INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name, created_at) VALUES (?, ?, 'rare', 'Rare', '2026-01-01')");
    for (const id of rareIds) tag.run(id, ctx.workspaceId);
  });
  const rareKeys = "id IN (SELECT contact_id FROM contact_tags WHERE tag_key = 'rare')";
  for (const [q, limit] of [
    ['Smith', 5],
    ['Smith', 200],
    ['smith3', 2],
    ['Ada1', 50],
    ['zzzz', 50],
  ] as const) {
    const p = `%${q.toLowerCase()}%`;
    assert.deepEqual(
      await walk(ctx, { limit, q, tag: 'RARE' }),
      bruteForce(s, ctx.workspaceId, `(${like}) AND ${rareKeys}`, p, p, p, p),
      `q=${q}&tag=rare&limit=${limit}`,
    );
  }
  // Below the cursor of the FEW_TAGGED-th newest, only the few remain: one page holds them.
  const fewBelow = rareIds[rareIds.length - FEW_TAGGED - 1]!;
  const fewPage = await listContacts(ctx, { limit: 200, q: 'Smith', tag: 'rare', cursor: encodeCursor(fewBelow) });
  assert.deepEqual(
    fewPage.data.map((c) => c.id),
    rareIds.slice(-FEW_TAGGED),
  );
  assert.equal(fewPage.nextCursor, null);
  // Combined filters.
  const p = '%smith77%';
  assert.deepEqual(
    await walk(ctx, { limit: 50, q: 'smith77', tag: 'vip' }),
    bruteForce(s, ctx.workspaceId, `(${like}) AND id IN (SELECT contact_id FROM contact_tags WHERE tag_key = 'vip')`, p, p, p, p),
  );

  // The other workspace: its own 11 Smith77s, never the big one's; and the big one never sees them.
  const theirs = await walk(otherCtx, { limit: 5, q: 'Smith77' });
  assert.equal(theirs.length, 11);
  assert.deepEqual(theirs, bruteForce(s, otherCtx.workspaceId, like, p, p, p, p));
  assert.deepEqual(await walk(ctx, { limit: 50, q: 'small.example' }), []);
  assert.deepEqual(await walk(otherCtx, { limit: 50, q: 'big.example' }), []);
  assert.deepEqual(await walk(ctx, { limit: 50, email: 'user5@small.example' }), []);

  // Over HTTP: the counts come from the counters and match the rows.
  const plan = await s.request('GET', '/billing/plan', { token });
  assert.equal(plan.status, 200, plan.text);
  assert.equal(plan.body.usage.contacts, N);
  const tags = await s.request('GET', '/tags', { token });
  assert.deepEqual(tags.body, {
    data: [
      { name: 'Rare', count: rareIds.length },
      { name: 'vip', count: N / 10 },
    ],
    nextCursor: null,
  });
  const page = await s.request('GET', '/contacts?q=Smith77&limit=3', { token });
  assert.deepEqual(
    page.body.data.map((c: any) => c.lastName),
    ['Smith77999', 'Smith77998', 'Smith77997'],
  );
});

test('the search index and the counters follow creates, edits, tag changes and deletes', async (t) => {
  const s = await build(t, { store: 'sqlite' });
  const token = await s.login(s.owner.email, s.owner.password);
  const made = await s.request('POST', '/contacts', {
    token,
    body: { email: 'grace@navy.example', firstName: 'Grace', lastName: 'Hopper', tags: ['Pioneer', 'vip'] },
  });
  assert.equal(made.status, 201, made.text);
  const search = async (q: string) => (await s.request('GET', `/contacts?q=${encodeURIComponent(q)}`, { token })).body.data.map((c: any) => c.id);
  assert.deepEqual(await search('hopp'), [made.body.id]);
  assert.deepEqual(await search('NAVY'), [made.body.id]);

  const edited = await s.request('PATCH', `/contacts/${made.body.id}`, { token, body: { lastName: 'Murray', email: 'grace@yale.example' } });
  assert.equal(edited.status, 200, edited.text);
  assert.deepEqual(await search('hopp'), []);
  assert.deepEqual(await search('navy'), []);
  assert.deepEqual(await search('murr'), [made.body.id]);
  assert.deepEqual(await search('yale'), [made.body.id]);

  const usage = async () => (await s.request('GET', '/billing/plan', { token })).body.usage.contacts;
  const tags = async () => (await s.request('GET', '/tags', { token })).body.data;
  assert.equal(await usage(), 1);
  assert.deepEqual(await tags(), [
    { name: 'Pioneer', count: 1 },
    { name: 'vip', count: 1 },
  ]);
  const second = await s.request('POST', '/contacts', { token, body: { phone: '+16135550199', tags: ['PIONEER'] } });
  assert.equal(await usage(), 2);
  assert.deepEqual(await tags(), [
    { name: 'Pioneer', count: 2 },
    { name: 'vip', count: 1 },
  ]);
  assert.equal((await s.request('DELETE', `/contacts/${made.body.id}/tags/VIP`, { token })).status, 204);
  assert.deepEqual(await tags(), [{ name: 'Pioneer', count: 2 }]);
  assert.equal((await s.request('DELETE', `/contacts/${made.body.id}`, { token })).status, 204);
  assert.equal(await usage(), 1);
  assert.deepEqual(await tags(), [{ name: 'Pioneer', count: 1 }]);
  assert.deepEqual(await search('murr'), []);
  assert.deepEqual(await search('5550199'), [second.body.id]);
});

test('runs, webhook events, delivery attempts and audit entries: every list and filter seeks in id order', async (t) => {
  const s = await build(t, { store: 'sqlite' });
  const ctx: WorkspaceContext = {
    db: s.db,
    store: s.store,
    config: s.config,
    actor: { type: 'SYSTEM', id: null, label: 'test' },
    ip: null,
    workspaceId: s.workspaceId,
  };
  const wf = await sqliteStoreOf(s).exclusive((w) => {
    const id = seedWorkflow(w.$client, s.workspaceId);
    seedActivity(w.$client, s.workspaceId, id, 20_000);
    return id;
  });
  const runs = (filter: Parameters<typeof runQuery>[0]) => runQuery(filter, false);
  const statusFirst = (filter: Parameters<typeof runQuery>[0]) => runQuery(filter, true);
  const cases: [string, Parameters<typeof pageQuery>[1], { scope?: WorkspaceScope; conditions: (ReturnType<typeof eq> | undefined)[] }, RegExp][] = [
    ['runs', workflowRuns, runs({}), /workflow_runs_workspace_idx \(workspace_id=\? AND id<\?\)/],
    ['runs by status', workflowRuns, runs({ status: 'FAILED' }), /workflow_runs_workspace_status_idx \(workspace_id=\? AND status=\? AND id<\?\)/],
    ['runs of a workflow', workflowRuns, runs({ workflowId: wf }), /workflow_runs_workflow_idx \(workflow_id=\? AND id<\?\)/],
    ['failed runs of a workflow', workflowRuns, runs({ workflowId: wf, status: 'FAILED' }), /workflow_runs_workflow_idx \(workflow_id=\? AND id<\?\)/],
    [
      'waiting runs of a workflow, few waiting',
      workflowRuns,
      statusFirst({ workflowId: wf, status: 'WAITING' }),
      /workflow_runs_workspace_status_idx \(workspace_id=\? AND status=\? AND id<\?\)/,
    ],
    [
      'queued runs of a contact, few queued',
      workflowRuns,
      statusFirst({ contactId: 1, status: 'QUEUED' }),
      /workflow_runs_workspace_status_idx \(workspace_id=\? AND status=\? AND id<\?\)/,
    ],
    [
      'failed runs of an automation, few failed',
      workflowRuns,
      statusFirst({ automationId: 1, status: 'FAILED' }),
      /workflow_runs_workspace_status_idx \(workspace_id=\? AND status=\? AND id<\?\)/,
    ],
    ['runs of an automation', workflowRuns, runs({ automationId: 1 }), /workflow_runs_automation_idx \(automation_id=\? AND id<\?\)/],
    ['runs of a contact', workflowRuns, runs({ contactId: 1, status: 'COMPLETED' }), /workflow_runs_contact_idx \(contact_id=\? AND id<\?\)/],
    [
      'webhook events',
      webhookEvents,
      { scope: { parent: webhookEvents.workflowId, id: wf }, conditions: [] },
      /webhook_events_workflow_idx \(workflow_id=\? AND id<\?\)/,
    ],
    ['delivery attempts', deliveryAttempts, { conditions: [] }, /delivery_attempts_workspace_idx \(workspace_id=\? AND id<\?\)/],
    [
      'delivery attempts by status',
      deliveryAttempts,
      { conditions: [eq(deliveryAttempts.status, 'FAILED')] },
      /delivery_attempts_status_idx \(workspace_id=\? AND status=\? AND rowid<\?\)/,
    ],
  ];
  // Whether a status has fewer than LIST_SCAN_ROWS runs below the cursor (runs.ts, fewInStatus):
  // one walk along the status's index, reading no run.
  for (const cursor of [undefined, 10_000]) {
    const text = plan(s, windowEndQuery(ctx, workflowRuns, cursor, 'index', eq(workflowRuns.status, 'WAITING'))).join(' | ');
    assert.match(text, /SEARCH workflow_runs USING COVERING INDEX workflow_runs_workspace_status_idx \(workspace_id=\? AND status=\?/, text);
  }
  for (const [label, table, { scope, conditions }, uses] of cases) {
    const lines = plan(s, pageQuery(ctx, table as typeof workflowRuns, 10_000, 51, scope, ...conditions));
    const text = lines.join(' | ');
    assert.match(text, uses, `${label}: ${text}`);
    assert.doesNotMatch(text, /TEMP B-TREE|^SCAN/, `${label}: ${text}`);
  }
  // The audit trail, newest first by (at, id): each filter and time span seeks on the index
  // whose equality columns it names and reads in order from the cursor (services/auditLog.ts).
  const key = { at: '2026-06-01T00:00:00.000Z', id: 10_000 };
  const since = '2026-01-01T00:00:00.000Z';
  const until = '2026-03-01T00:00:00.000Z';
  const auditCases: [string, Parameters<typeof auditPageQuery>[1], RegExp][] = [
    ['audit', {}, /audit_logs_workspace_at_idx \(workspace_id=\? AND at<\?\)/],
    ['audit since and until', { since, until }, /audit_logs_workspace_at_idx \(workspace_id=\? AND at>\? AND at<\?\)/],
    ['audit by action', { action: 'contact.updated' }, /audit_logs_action_at_idx \(workspace_id=\? AND action=\? AND at<\?\)/],
    ['audit by action since', { action: 'contact.updated', since }, /audit_logs_action_at_idx \(workspace_id=\? AND action=\? AND at>\? AND at<\?\)/],
    ['audit by actor type', { actorType: 'USER' }, /audit_logs_actor_at_idx \(workspace_id=\? AND actor_type=\? AND at<\?\)/],
    ['audit by actor type until', { actorType: 'USER', until }, /audit_logs_actor_at_idx \(workspace_id=\? AND actor_type=\? AND at<\?\)/],
    [
      'audit by actor type and action',
      { actorType: 'USER', action: 'contact.updated' },
      /audit_logs_actor_action_at_idx \(workspace_id=\? AND actor_type=\? AND action=\? AND at<\?\)/,
    ],
  ];
  for (const [label, filter, uses] of auditCases) {
    for (const cursor of [undefined, key]) {
      const text = plan(s, auditPageQuery(ctx, filter, cursor, 51)).join(' | ');
      // Without a cursor the index is the same; only the bound on `at` goes.
      assert.match(text, cursor ? uses : new RegExp(uses.source.split(' ')[0]!), `${label}: ${text}`);
      assert.doesNotMatch(text, /TEMP B-TREE|^SCAN/, `${label}: ${text}`);
    }
  }
  // A workflow's runs in one status. WAITING: the two oldest of the workflow's 20,000 runs,
  // beside 10,001 runs of a second workflow, all WAITING and newer. With LIST_SCAN_ROWS or more
  // WAITING runs below the cursor, the workflow's index walks, the status checked per run,
  // LIST_SCAN_ROWS a page at most: the first page is empty and goes on; below it only the two
  // are WAITING, so the status's index walks and the next page holds both, and ends.
  // FAILED (400, one in fifty of the workflow's): the status's index from the first page.
  const second = await sqliteStoreOf(s).exclusive((w) => {
    const id = seedWorkflow(w.$client, s.workspaceId);
    seedActivity(w.$client, s.workspaceId, id, LIST_SCAN_ROWS + 1);
    w.$client.prepare("UPDATE workflow_runs SET status = 'WAITING' WHERE workflow_id = ?").run(id);
    w.$client.prepare("UPDATE workflow_runs SET status = 'WAITING' WHERE id IN (SELECT id FROM workflow_runs ORDER BY id LIMIT 2)").run();
    return id;
  });
  const ofStatus = (status: string, workflowId: number) =>
    (
      s.db.$client.prepare('SELECT id FROM workflow_runs WHERE status = ? AND workflow_id = ? ORDER BY id DESC').all(status, workflowId) as { id: number }[]
    ).map((r) => r.id);
  const waiting = ofStatus('WAITING', wf);
  const failed = ofStatus('FAILED', wf);
  assert.deepEqual([waiting.length, failed.length], [2, 400]);
  for (const [status, expected, pagesExpected] of [
    ['WAITING', waiting, 2],
    ['FAILED', failed, 400 / 50],
  ] as const) {
    for (const list of [
      (cursor?: string) => listRuns(ctx, wf, { limit: 50, status, cursor }),
      (cursor?: string) => listWorkspaceRuns(ctx, { limit: 50, status, workflowId: wf, cursor }),
    ]) {
      const ids: number[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const page = await list(cursor);
        if (pages === 0 && status === 'WAITING')
          assert.deepEqual([page.data.length, typeof page.nextCursor], [0, 'string'], 'an empty first page that goes on');
        ids.push(...page.data.map((r) => r.runId));
        cursor = page.nextCursor ?? undefined;
        pages++;
      } while (cursor);
      assert.deepEqual(ids, expected, status);
      assert.equal(pages, pagesExpected, status);
    }
  }
  // The second workflow's WAITING runs: all of its runs, newest first, in full pages.
  const theirs: number[] = [];
  let next: string | undefined;
  do {
    const page = await listRuns(ctx, second, { limit: 200, status: 'WAITING', cursor: next });
    theirs.push(...page.data.map((r) => r.runId));
    next = page.nextCursor ?? undefined;
  } while (next);
  assert.deepEqual(theirs, ofStatus('WAITING', second));
  // Every status listed across the workspace (no workflow named): the pages give exactly the
  // runs a scan finds, newest first; the admin's counts agree.
  await sqliteStoreOf(s).exclusive((w) => {
    w.$client.prepare("UPDATE workflow_runs SET status = 'QUEUED' WHERE id % 7 = 0 AND status = 'COMPLETED'").run();
    w.$client
      .prepare(
        "UPDATE workflow_runs SET status = 'RUNNING', lease_owner = 'x', lease_until = '2099-01-01T00:00:00.000Z' WHERE id % 11 = 0 AND status = 'COMPLETED'",
      )
      .run();
  });
  const counts: Record<string, number> = {};
  for (const status of RUN_STATUSES) {
    const expected = (s.db.$client.prepare('SELECT id FROM workflow_runs WHERE status = ? ORDER BY id DESC').all(status) as { id: number }[]).map((r) => r.id);
    const ids: number[] = [];
    let cursor: string | undefined;
    do {
      const page = await listWorkspaceRuns(ctx, { limit: 200, status, cursor });
      ids.push(...page.data.map((r) => r.runId));
      cursor = page.nextCursor ?? undefined;
    } while (cursor);
    assert.deepEqual(ids, expected, status);
    counts[status] = expected.length;
  }
  assert.ok(counts.QUEUED! > 2000 && counts.RUNNING! > 1000, JSON.stringify(counts));
  assert.deepEqual((await adminStats({ db: s.db, store: s.store })).runs, counts);
  // The admin's counts by status: a seek per workspace along its status index, reading no row
  // (the commonest status is the table's count less the others).
  for (const [table, index] of [
    [workflowRuns, 'workflow_runs_workspace_status_idx'],
    [deliveryAttempts, 'delivery_attempts_status_idx'],
  ] as const) {
    const text = plan(s, statusCountQuery({ db: s.db }, table, 'FAILED')).join(' | ');
    assert.match(text, new RegExp(`SEARCH \\w+ USING COVERING INDEX ${index} \\(workspace_id=\\? AND status=\\?\\)`), text);
    assert.doesNotMatch(text, /TEMP B-TREE|^SCAN/, text);
  }

  // The month's runs are read from their counter, not counted from the 30,001 rows.
  const token = await s.login(s.owner.email, s.owner.password);
  const usage = await s.request('GET', '/billing/plan', { token });
  assert.equal(usage.body.usage.runsThisMonth, 20_000 + LIST_SCAN_ROWS + 1);
});

test('the engine, intake, retention and metrics statements on runs read the partial index of their status, never the table', async (t) => {
  const s = await build(t, { store: 'sqlite' });
  await sqliteStoreOf(s).exclusive((w) => seedActivity(w.$client, s.workspaceId, seedWorkflow(w.$client, s.workspaceId), 20_000));
  const explain = (sql: string, ...params: unknown[]) =>
    (s.db.$client.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(...params) as { detail: string }[]).map((r) => r.detail).join(' | ');
  const at = { now: new Date().toISOString(), until: new Date().toISOString(), limit: 50, workspaceId: s.workspaceId, id: 1, token: 'x' };
  const q = SQLITE_SCHEDULER_STATEMENTS;
  const cases: [string, string, RegExp][] = [
    ['due WAITING runs', explain(q.promoteWaiting, { now: at.now, limit: 50 }), /workflow_runs_due_idx \(run_at<\?\)/],
    ['expired claims', explain(q.promoteExpired, { now: at.now, limit: 50 }), /workflow_runs_running_idx/],
    ['workspaces with QUEUED runs', explain(q.queuedWorkspaces), /workflow_runs_ready_idx/],
    ['claim: the runs it takes', explain(q.claimable, { workspaceId: at.workspaceId, limit: 50 }), /workflow_runs_ready_idx \(workspace_id=\?\)/],
    [
      'claim: each one',
      explain(q.claimOne, { id: 1, now: at.now, until: at.until, token: at.token }),
      /SEARCH workflow_runs USING INTEGER PRIMARY KEY \(rowid=\?\)/,
    ],
    ['idempotency key', explain(FIRST_BY_IDEMPOTENCY_KEY, 1, 'key', at.now), /webhook_events_idempotency_idx \(workflow_id=\? AND idempotency_key=\?\)/],
    ['retention of runs', explain(RULES.find((r) => r.what === 'runs')!.sql, { cutoff: at.now }), /workflow_runs_finished_idx \(finished_at<\?\)/],
  ];
  for (const status of ['QUEUED', 'RUNNING', 'WAITING'])
    cases.push([
      `svc_runs{status="${status}"}`,
      explain(`SELECT count(*) FROM workflow_runs WHERE status = '${status}'`),
      /USING (COVERING )?INDEX workflow_runs_(ready|running|due)_idx/,
    ]);
  // The queue's depth and age (metrics): run_at is in the ready index, whose entries answer alone.
  cases.push(
    [
      'svc_runs_queue_depth',
      explain(`SELECT count(*) AS n FROM (SELECT 1 FROM workflow_runs WHERE status = 'QUEUED' AND run_at <= ? LIMIT 10000) capped`, at.now),
      /USING COVERING INDEX workflow_runs_ready_idx/,
    ],
    [
      'svc_runs_claim_lag_seconds',
      explain(`SELECT min(run_at) AS at FROM workflow_runs WHERE status = 'QUEUED' AND run_at <= ?`, at.now),
      /USING COVERING INDEX workflow_runs_ready_idx/,
    ],
  );
  // Webhook events are pruned oldest id first (no index on received_at, migration 0014): the
  // first ids in rowid order, a batch's worth (the LIMIT), never sorted.
  const events = explain(RULES.find((r) => r.what === 'webhookEvents')!.sql, { cutoff: at.now });
  assert.match(events, /SCAN webhook_events/, events);
  assert.doesNotMatch(events, /TEMP B-TREE|webhook_events_received_idx/, events);
  for (const [label, text, uses] of cases) {
    assert.match(text, uses, `${label}: ${text}`);
    // A scan of a partial index reads only the rows in that status (the claims in flight, the first QUEUED run, a count of one status).
    assert.doesNotMatch(
      text,
      /SCAN (workflow_runs|webhook_events)(?! USING (COVERING )?INDEX workflow_runs_(running|ready|due)_idx)/,
      `${label} scans the table: ${text}`,
    );
  }
});
