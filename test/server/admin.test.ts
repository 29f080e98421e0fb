/**
 * Operator endpoints through the real HTTP server: /admin/workspaces, /admin/workspaces/:id,
 * /admin/users and /admin/stats are for super-admin users alone, with correct counts and
 * no secrets. Contract: API.md sections 2 and 5.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { pgSeedActivity, seedActivity, seedWorkflow } from '../../bench/seed.js';
import { COUNT_EXACTLY_BELOW, tableRows } from '../../src/core/db/dialect.js';
import { deliveryAttempts, workflowRuns, workflows } from '../../src/core/db/schema.js';
import { setSuperAdmin } from '../../src/core/services/users.js';
import { assertProblem, build, rowsOf, sqliteStoreOf, type TestServer } from '../helpers.js';

const ENDPOINTS = ['/admin/workspaces', '/admin/workspaces/1', '/admin/users', '/admin/stats'];

function systemCtx(s: TestServer) {
  return { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
}

function assertNoSecrets(text: string): void {
  assert.doesNotMatch(text, /password|passwordHash|password_hash|keyHash|key_hash|tokenHash|\$argon|\$scrypt|svc_live_/i);
}

/** Runs and delivery attempts written straight to the database, with known statuses. */
async function seedEngineRows(s: TestServer, workspaceId: number): Promise<void> {
  await s.store.transaction(async (tx) => {
    const [wf] = await tx.insert(workflows).values({ workspaceId, name: 'seeded' }).returning();
    assert.ok(wf);
    const past = new Date(Date.now() - 60_000).toISOString();
    const future = new Date(Date.now() + 3_600_000).toISOString();
    const run = async (status: (typeof workflowRuns.$inferInsert)['status'], runAt = past) => {
      await tx.insert(workflowRuns).values({ workspaceId, workflowId: wf.id, status, definition: [], trigger: {}, runAt });
    };
    await run('QUEUED');
    await run('QUEUED');
    await run('RUNNING');
    await run('WAITING'); // due
    await run('WAITING', future); // not yet due
    await run('WAITING', future);
    await run('COMPLETED');
    await run('FAILED');
    const delivery = async (status: (typeof deliveryAttempts.$inferInsert)['status']) => {
      await tx.insert(deliveryAttempts).values({ workspaceId, channel: 'EMAIL', provider: 'outbox', to: 'x@example.test', status, rendered: {} });
    };
    await delivery('SENT');
    await delivery('SENT');
    await delivery('FAILED');
    await delivery('QUEUED');
  });
}

test('the init owner (a super-admin) sees every workspace, user and the stats, with correct counts', async (t) => {
  const s = await build(t, { plan: 'PRO' });
  const token = await s.login(s.owner.email, s.owner.password);
  const other = await s.otherWorkspace('STARTER');
  const member = await s.userWithRole('MEMBER');
  await s.userWithRole('VIEWER', other.workspaceId);
  for (const email of ['a@example.test', 'b@example.test', 'c@example.test']) {
    assert.equal((await s.request('POST', '/contacts', { token, body: { email } })).status, 201);
  }
  assert.equal((await s.request('POST', '/contacts', { token: other.token, body: { email: 'z@example.test' } })).status, 201);
  await seedEngineRows(s, other.workspaceId);

  // Workspaces
  const list = await s.request('GET', '/admin/workspaces', { token });
  assert.equal(list.status, 200, list.text);
  assert.equal(list.body.nextCursor, null);
  assert.deepEqual(
    list.body.data.map((w: any) => w.id),
    [other.workspaceId, s.workspaceId],
    'newest first',
  );
  const [theirs, ours] = list.body.data;
  assert.deepEqual(
    { name: ours.name, plan: ours.plan, memberCount: ours.memberCount, contactCount: ours.contactCount },
    { name: 'Acme', plan: 'PRO', memberCount: 2, contactCount: 3 },
  );
  assert.deepEqual(
    { plan: theirs.plan, memberCount: theirs.memberCount, contactCount: theirs.contactCount },
    { plan: 'STARTER', memberCount: 2, contactCount: 1 },
  );
  assertNoSecrets(list.text);

  const page1 = await s.request('GET', '/admin/workspaces?limit=1', { token });
  assert.equal(page1.body.data.length, 1);
  assert.equal(page1.body.data[0].id, other.workspaceId);
  const page2 = await s.request('GET', `/admin/workspaces?limit=1&cursor=${page1.body.nextCursor}`, { token });
  assert.deepEqual(
    page2.body.data.map((w: any) => w.id),
    [s.workspaceId],
  );
  assert.equal(page2.body.nextCursor, null);

  const detail = await s.request('GET', `/admin/workspaces/${other.workspaceId}`, { token });
  assert.equal(detail.status, 200, detail.text);
  assert.equal(detail.body.id, other.workspaceId);
  assert.equal(detail.body.contactCount, 1);
  assert.equal(detail.body.workflowCount, 1);
  // The count follows deletions and imports, as the workspace's own usage does.
  const ann = await s.request('GET', '/contacts?email=a@example.test', { token });
  assert.equal((await s.request('DELETE', `/contacts/${ann.body.data[0].id}`, { token })).status, 204);
  const imported = await s.request('POST', '/contacts/import', {
    token,
    headers: { 'content-type': 'application/x-ndjson' },
    raw: '{"email":"d@example.test"}\n{"email":"e@example.test"}\n',
  });
  assert.equal(imported.status, 200, imported.text);
  const usage = await s.request('GET', '/billing/plan', { token });
  const counted = await s.request('GET', `/admin/workspaces/${s.workspaceId}`, { token });
  assert.deepEqual([counted.body.contactCount, usage.body.usage.contacts], [4, 4]);
  assert.equal(detail.body.members.length, 2);
  assert.deepEqual(detail.body.members.map((m: any) => m.role).sort(), ['OWNER', 'VIEWER']);
  assertNoSecrets(detail.text);

  // Users
  const users = await s.request('GET', '/admin/users', { token });
  assert.equal(users.status, 200, users.text);
  assert.equal(users.body.data.length, 4);
  assertNoSecrets(users.text);
  const owner = users.body.data.find((u: any) => u.id === s.owner.id);
  assert.deepEqual(Object.keys(owner).sort(), ['createdAt', 'email', 'id', 'isSuperAdmin', 'name', 'workspaces']);
  assert.equal(owner.email, s.owner.email);
  assert.equal(owner.isSuperAdmin, true);
  assert.deepEqual(owner.workspaces, [{ id: s.workspaceId, role: 'OWNER' }]);
  const m = users.body.data.find((u: any) => u.id === member.id);
  assert.equal(m.isSuperAdmin, false);
  assert.deepEqual(m.workspaces, [{ id: s.workspaceId, role: 'MEMBER' }]);
  const usersPage = await s.request('GET', '/admin/users?limit=3', { token });
  assert.equal(usersPage.body.data.length, 3);
  const usersRest = await s.request('GET', `/admin/users?limit=3&cursor=${usersPage.body.nextCursor}`, { token });
  assert.equal(usersRest.body.data.length, 1);
  assert.equal(usersRest.body.nextCursor, null);

  // Stats
  const stats = await s.request('GET', '/admin/stats', { token });
  assert.equal(stats.status, 200, stats.text);
  assert.deepEqual(stats.body, {
    workspaces: 2,
    users: 4,
    contacts: 5,
    workflows: 1,
    runs: { QUEUED: 2, RUNNING: 1, WAITING: 3, COMPLETED: 1, FAILED: 1 },
    queueDepth: 3,
    deliveries: { QUEUED: 1, SENDING: 0, SENT: 2, FAILED: 1 },
  });
});

test('an empty install has zeroed stats', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const stats = await s.request('GET', '/admin/stats', { token });
  assert.equal(stats.status, 200, stats.text);
  assert.deepEqual(stats.body.runs, { QUEUED: 0, RUNNING: 0, WAITING: 0, COMPLETED: 0, FAILED: 0 });
  assert.deepEqual(stats.body.deliveries, { QUEUED: 0, SENDING: 0, SENT: 0, FAILED: 0 });
  assert.equal(stats.body.queueDepth, 0);
  assert.equal(stats.body.workspaces, 1);
  assert.equal(stats.body.users, 1);
});

test('stats over more runs and deliveries than are counted exactly: the other statuses exact, the commonest the table less them (on PostgreSQL, its estimate)', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  // One run in 50 FAILED (and its delivery), the others COMPLETED (and SENT).
  const n = COUNT_EXACTLY_BELOW + 20_000;
  if (s.store.dialect === 'pg') {
    const [wf] = await rowsOf<{ id: unknown }>(
      s,
      sql`INSERT INTO workflows (workspace_id, name, status, trigger_source, steps) VALUES (${s.workspaceId}, 'seeded', 'ACTIVE', 'MANUAL', '[]') RETURNING id`,
    );
    const client = new pg.Client({ connectionString: s.config.databaseUrl! });
    await client.connect();
    try {
      await client.query('SET session_replication_role = replica');
      await pgSeedActivity(client, s.workspaceId, Number(wf!.id), n);
      await client.query('SET session_replication_role = DEFAULT');
      await client.query('ANALYZE workflow_runs, delivery_attempts');
    } finally {
      await client.end();
    }
  } else {
    // Straight through the writer connection.
    await sqliteStoreOf(s).exclusive((w) => seedActivity(w.$client, s.workspaceId, seedWorkflow(w.$client, s.workspaceId), n));
  }
  const stats = await s.request('GET', '/admin/stats', { token });
  assert.equal(stats.status, 200, stats.text);
  const failed = n / 50;
  assert.deepEqual({ ...stats.body.runs, COMPLETED: 0 }, { QUEUED: 0, RUNNING: 0, WAITING: 0, COMPLETED: 0, FAILED: failed });
  assert.deepEqual({ ...stats.body.deliveries, SENT: 0 }, { QUEUED: 0, SENDING: 0, SENT: 0, FAILED: failed });
  // PostgreSQL's count of a table this large is its estimate; SQLite's is exact.
  for (const table of ['workflow_runs', 'delivery_attempts'])
    assert.equal((await tableRows(s.store, s.store.db, table)).estimated, s.store.dialect === 'pg', table);
  for (const finished of [stats.body.runs.COMPLETED, stats.body.deliveries.SENT]) {
    if (s.store.dialect === 'pg') assert.ok(Math.abs(finished - (n - failed)) <= (n - failed) * 0.02, `${finished} within 2% of ${n - failed}`);
    else assert.equal(finished, n - failed);
  }
});

test('unknown or malformed workspace id 404; bad cursor or limit 400', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  assertProblem(await s.request('GET', '/admin/workspaces/999999', { token }), 404, 'workspace_not_found');
  assertProblem(await s.request('GET', '/admin/workspaces/abc', { token }), 404);
  assertProblem(await s.request('GET', '/admin/workspaces?cursor=nope!', { token }), 400);
  assertProblem(await s.request('GET', '/admin/users?limit=500', { token }), 400, 'invalid_query');
});

test('everyone but a super-admin user gets 403: a plain OWNER, other workspaces, every API key; no credential 401', async (t) => {
  const s = await build(t, { plan: 'PRO' });
  const owner2 = await s.userWithRole('OWNER');
  const other = await s.otherWorkspace('PRO');
  const callers = [
    owner2.token,
    other.token,
    (await s.userWithRole('ADMIN')).token,
    await s.mintKey('ADMIN'),
    await s.mintKey('MEMBER'),
    await s.mintKey('VIEWER'),
    await s.mintKey('ADMIN', other.workspaceId),
  ];
  for (const path of ENDPOINTS) {
    assertProblem(await s.request('GET', path), 401);
    for (const token of callers) assertProblem(await s.request('GET', path, { token }), 403, 'forbidden');
  }
  // The 403 comes before the lookup, so an unknown id does not leak as 404.
  assertProblem(await s.request('GET', '/admin/workspaces/999999', { token: owner2.token }), 403, 'forbidden');

  // Granting the flag opens the endpoints for that user; revoking closes them again.
  await setSuperAdmin(systemCtx(s), owner2.email, true);
  const token = await s.login(owner2.email, owner2.password);
  assert.equal((await s.request('GET', '/admin/stats', { token })).status, 200);
  await setSuperAdmin(systemCtx(s), owner2.email, false);
  assertProblem(await s.request('GET', '/admin/stats', { token }), 403, 'forbidden');
});
