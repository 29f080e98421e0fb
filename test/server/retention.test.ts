/**
 * Retention on the store itself (both stores, under `npm run test:pg` too): the same rules
 * delete old finished rows in batches and keep the rest; on PostgreSQL one node prunes at a
 * time (a node that finds the pruning lock taken deletes nothing). `test/e2e/retention.test.ts`
 * covers `svc serve` doing it on SQLite.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sql } from 'drizzle-orm';
import pg from 'pg';
import { execute } from '../../src/core/db/dialect.js';
import { createAttempt, settleAbandonedSends, STOPPED_BEFORE_SENDING, STOPPED_WHILE_SENDING } from '../../src/core/services/deliveries.js';
import { PRUNE_BATCH, PRUNE_LOCK_KEY, pruneAll, pruneAllPg, Pruner, type PruneCounts } from '../../src/core/services/retention.js';
import { build, rowsOf, scalarOf, sqliteStoreOf, testStore, webhookWorkflow, type TestServer } from '../helpers.js';

const DAY = 86_400_000;
const ago = (days: number) => new Date(Date.now() - days * DAY).toISOString();

/** Prunes now, as the server does at start and every 10 minutes. */
function pruneNow(s: TestServer): Promise<PruneCounts> {
  if (s.store.dialect === 'pg') return pruneAllPg(s.store, s.config);
  const store = sqliteStoreOf(s);
  const pruner = new Pruner(store, s.config);
  return pruneAll(pruner, (work) =>
    store.exclusive((w) => {
      w.$client.exec('BEGIN IMMEDIATE');
      try {
        const result = work();
        w.$client.exec('COMMIT');
        return result;
      } catch (err) {
        w.$client.exec('ROLLBACK');
        throw err;
      }
    }),
  );
}

async function fill(s: TestServer): Promise<void> {
  const ws = s.workspaceId;
  await s.store.transaction(async (tx) => {
    const run = (query: ReturnType<typeof sql>) => execute(s.store, tx, query);
    await run(sql`INSERT INTO contacts (workspace_id, email) VALUES (${ws}, 'kept@example.com')`);
    const contact = sql`(SELECT id FROM contacts WHERE email = 'kept@example.com')`;
    // More old finished runs than one batch, and the ones that must stay.
    for (let i = 0; i < PRUNE_BATCH + 20; i++) {
      await run(
        sql`INSERT INTO workflow_runs (workspace_id, contact_id, definition, "trigger", status, finished_at) VALUES (${ws}, ${contact}, '[]', '{}', 'COMPLETED', ${ago(40)})`,
      );
    }
    await run(sql`INSERT INTO workflow_runs (workspace_id, contact_id, definition, "trigger", status) VALUES (${ws}, ${contact}, '[]', '{}', 'QUEUED')`);
    await run(
      sql`INSERT INTO workflow_runs (workspace_id, contact_id, definition, "trigger", status, finished_at) VALUES (${ws}, ${contact}, '[]', '{}', 'COMPLETED', ${ago(2)})`,
    );
    await run(sql`INSERT INTO audit_logs (workspace_id, actor_type, action, at) VALUES (${ws}, 'SYSTEM', 'test.ancient', ${ago(500)})`);
    await run(sql`INSERT INTO audit_logs (workspace_id, actor_type, action, at) VALUES (${ws}, 'SYSTEM', 'test.recent', ${ago(10)})`);
  });
}

const count = (s: TestServer, query: ReturnType<typeof sql>) => scalarOf(s, query);

test('pruning deletes old finished runs in batches and old audit entries, and keeps unfinished and recent rows', async (t) => {
  const s = await build(t, { env: { SVC_RUN_RETENTION_DAYS: '30', SVC_AUDIT_RETENTION_DAYS: '365' } });
  await fill(s);
  const deleted = await pruneNow(s);
  assert.equal(deleted.runs, PRUNE_BATCH + 20);
  assert.equal(deleted.auditEntries, 1);
  assert.equal(await count(s, sql`SELECT count(*) AS n FROM workflow_runs WHERE status = 'QUEUED'`), 1, 'an unfinished run stays');
  assert.equal(await count(s, sql`SELECT count(*) AS n FROM workflow_runs`), 2, 'a recent finished run stays');
  assert.equal(await count(s, sql`SELECT count(*) AS n FROM audit_logs WHERE action = 'test.ancient'`), 0);
  assert.equal(await count(s, sql`SELECT count(*) AS n FROM audit_logs WHERE action = 'test.recent'`), 1);
  // Nothing left: a second pass deletes nothing.
  assert.equal((await pruneNow(s)).runs, 0);
});

test('webhook events are pruned oldest id first, in batches, while the oldest is past the period; recent ones stay', async (t) => {
  // No index on received_at (migration 0014): retention reads the first ids, whose events are
  // the oldest, and stops at the first recent one.
  const s = await build(t, { env: { SVC_WEBHOOK_EVENT_RETENTION_DAYS: '7' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const path = await webhookWorkflow(s, token, 'events', [{ type: 'add_tags', tags: ['x'] }]);
  const workflowId = Number(await scalarOf(s, sql`SELECT id AS n FROM workflows WHERE webhook_token = ${path.split('/').pop()!}`));
  const ws = s.workspaceId;
  await s.store.transaction(async (tx) => {
    const run = (query: ReturnType<typeof sql>) => execute(s.store, tx, query);
    // First an event stamped a day ahead (a clock set right after it): it stays, and does not
    // hold up the rest. Then, received over the weeks in id order, more past the period than
    // one batch, then recent ones.
    await run(sql`INSERT INTO webhook_events (workspace_id, workflow_id, status_code, received_at) VALUES (${ws}, ${workflowId}, 202, ${ago(-1)})`);
    for (let i = 0; i < PRUNE_BATCH + 20; i++) {
      await run(
        sql`INSERT INTO webhook_events (workspace_id, workflow_id, status_code, received_at) VALUES (${ws}, ${workflowId}, 202, ${ago(30 - (i * 20) / (PRUNE_BATCH + 20))})`,
      );
    }
    for (const days of [6, 2, 0])
      await run(sql`INSERT INTO webhook_events (workspace_id, workflow_id, status_code, received_at) VALUES (${ws}, ${workflowId}, 202, ${ago(days)})`);
  });
  // And one received through the URL now.
  assert.equal((await s.request('POST', path, { body: { email: 'new@example.com' } })).status, 202);
  const deleted = await pruneNow(s);
  assert.equal(deleted.webhookEvents, PRUNE_BATCH + 20);
  assert.equal(await count(s, sql`SELECT count(*) AS n FROM webhook_events`), 5, 'the recent events stay');
  assert.equal(await count(s, sql`SELECT count(*) AS n FROM webhook_events WHERE received_at < ${ago(7)}`), 0);
  assert.equal((await pruneNow(s)).webhookEvents, 0, 'nothing left past the period');
});

// PostgreSQL only: SQLite has one writer per file, so there is no other node to take turns with.
if (testStore() === 'pg')
  test('on PostgreSQL, a node that finds the pruning lock held by another deletes nothing', async (t) => {
    const s = await build(t, { env: { SVC_RUN_RETENTION_DAYS: '30' } });
    assert.equal(s.store.dialect, 'pg');
    await fill(s);
    const other = new pg.Client({ connectionString: s.config.databaseUrl! });
    // Ended by the test itself: its database is dropped (its connections terminated) after it.
    other.on('error', () => {});
    await other.connect();
    await other.query('BEGIN');
    await other.query('SELECT pg_advisory_xact_lock($1)', [PRUNE_LOCK_KEY]);
    assert.equal((await pruneAllPg(s.store, s.config)).runs, 0, 'another node is pruning');
    await other.query('COMMIT');
    await other.end();
    assert.equal((await pruneAllPg(s.store, s.config)).runs, PRUNE_BATCH + 20);
  });

test("a system email left SENDING by a stopped process is settled FAILED once it is past any try; a run's, or a recent one, is left", async (t) => {
  const s = await build(t);
  const ctx = { db: s.store.db, store: s.store };
  const base = { workspaceId: s.workspaceId, channel: 'EMAIL' as const, provider: 'smtp' as const, to: 'a@example.com', attempt: 1, rendered: {} };
  const old = await createAttempt(ctx, { ...base, status: 'SENDING' });
  const waiting = await createAttempt(ctx, { ...base, status: 'QUEUED' });
  const recent = await createAttempt(ctx, { ...base, status: 'SENDING' });
  const sent = await createAttempt(ctx, { ...base, status: 'SENT' });
  await s.store.transaction((tx) =>
    execute(s.store, tx, sql`INSERT INTO workflow_runs (workspace_id, definition, "trigger", status) VALUES (${s.workspaceId}, '[]', '{}', 'RUNNING')`),
  );
  const run = (await scalarOf(s, sql`SELECT MAX(id) FROM workflow_runs`))!;
  const ofRun = await createAttempt(ctx, { ...base, status: 'SENDING', runId: run, stepIndex: 0 });
  await s.store.transaction((tx) =>
    execute(s.store, tx, sql`UPDATE delivery_attempts SET updated_at = ${ago(1)} WHERE id IN (${old.id}, ${waiting.id}, ${sent.id}, ${ofRun.id})`),
  );

  assert.equal(await settleAbandonedSends(ctx, new Date(Date.now() - 600_000).toISOString()), 2);
  const row = async (id: number) =>
    (await rowsOf<{ status: string; error: string | null }>(s, sql`SELECT status, error FROM delivery_attempts WHERE id = ${id}`))[0]!;
  const status = async (id: number) => (await row(id)).status;
  assert.deepEqual(await row(old.id), { status: 'FAILED', error: STOPPED_WHILE_SENDING });
  assert.deepEqual(await row(waiting.id), { status: 'FAILED', error: STOPPED_BEFORE_SENDING });
  assert.deepEqual([await status(recent.id), await status(sent.id), await status(ofRun.id)], ['SENDING', 'SENT', 'SENDING']);
  assert.equal(await settleAbandonedSends(ctx, new Date(Date.now() - 600_000).toISOString()), 0, 'settled once');
});
