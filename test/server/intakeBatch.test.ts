/**
 * Webhook intake's group commit, below the HTTP route: the store's own intake (db/intake.ts)
 * on a real database, with jobs queued in one turn of the event loop so that they share a
 * batch. Runs are counted in the workspace's month once per batch (SQLite writes the count
 * before COMMIT, PostgreSQL too), so a batch rolled back by one failing job must count only
 * the runs that were committed in the end; the timestamps the intake writes itself read as
 * the schema's defaults do.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sql } from 'drizzle-orm';
import { WriteBatcher } from '../../src/core/db/batcher.js';
import { type Intake, type IntakeJob, pgIntake, sqliteIntake, stmt } from '../../src/core/db/intake.js';
import { isSqliteStore, type PgStore } from '../../src/core/db/store.js';
import type { Db } from '../../src/core/db/connection.js';
import { build, rowsOf, scalarOf, sqliteStoreOf, type TestServer } from '../helpers.js';

const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

function intakeOf(s: TestServer): Intake {
  return isSqliteStore(s.store) ? sqliteIntake(s.store, new WriteBatcher(s.store)) : pgIntake(s.store as PgStore);
}

async function fixture(s: TestServer, token: string): Promise<{ workflowId: number; contactId: number }> {
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com' } });
  assert.equal(contact.status, 201, contact.text);
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'w', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps: [{ type: 'wait', seconds: 3600 }], webhook: { lookup: 'email', path: 'email' } },
  });
  assert.equal(wf.status, 201, wf.text);
  return { workflowId: wf.body.id, contactId: contact.body.id };
}

test('a batch rolled back by one failing job counts, in the month, only the runs committed in the end', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const other = await s.otherWorkspace();
  const mine = await fixture(s, token);
  const theirs = await fixture(s, other.token);
  const intake = intakeOf(s);
  t.after(() => intake.close());

  const start = (workspaceId: number, ids: { workflowId: number; contactId: number }, fail: boolean) =>
    intake.run(function* (): IntakeJob<number> {
      const id = yield* stmt((q) => q.insertRun(workspaceId, ids.workflowId, ids.contactId, '[{"type":"wait","seconds":3600}]', '{"email":"ann@example.com"}'));
      if (fail) throw new Error('this job fails after its run was inserted');
      return id;
    });
  // Queued in one turn: one batch, which the failing job rolls back; the others run again alone.
  const outcomes = await Promise.allSettled([
    start(s.workspaceId, mine, false),
    start(other.workspaceId, theirs, false),
    start(s.workspaceId, mine, true),
    start(s.workspaceId, mine, false),
    start(other.workspaceId, theirs, false),
  ]);
  assert.deepEqual(
    outcomes.map((o) => o.status),
    ['fulfilled', 'fulfilled', 'rejected', 'fulfilled', 'fulfilled'],
  );
  const usage = async (t: string) => (await s.request('GET', '/billing/plan', { token: t })).body.usage.runsThisMonth as number;
  assert.equal(await usage(token), 2);
  assert.equal(await usage(other.token), 2);
  const runs = await rowsOf<{ workspace_id: number; n: number }>(
    s,
    sql`SELECT workspace_id, count(*) AS n FROM workflow_runs GROUP BY workspace_id ORDER BY workspace_id`,
  );
  assert.deepEqual(
    runs.map((r) => [Number(r.workspace_id), Number(r.n)]),
    [
      [s.workspaceId, 2],
      [other.workspaceId, 2],
    ],
  );

  // A second batch adds to the same month's rows.
  await Promise.all([start(s.workspaceId, mine, false), start(s.workspaceId, mine, false)]);
  assert.equal(await usage(token), 4);
  assert.equal(await usage(other.token), 2);
});

test('the runs and events intake writes carry timestamps as the defaults write them', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const { workflowId } = await fixture(s, token);
  const wf = await s.request('GET', `/workflows/${workflowId}`, { token });
  const before = Date.now();
  const posted = await s.request('POST', new URL(wf.body.webhook.url).pathname, { body: { email: 'ann@example.com' } });
  assert.equal(posted.status, 202, posted.text);
  const after = Date.now();
  const within = (iso: string) => {
    assert.match(iso, ISO_MS);
    const at = Date.parse(iso);
    assert.ok(at >= before - 5 && at <= after + 5, `${iso} is not between the request's start and its answer`);
  };
  const run = await s.request('GET', `/runs/${posted.body.runId}`, { token });
  assert.equal(run.status, 200, run.text);
  within(run.body.createdAt);
  const [row] = await rowsOf<{ run_at: string; created_at: string; updated_at: string }>(
    s,
    sql`SELECT run_at, created_at, updated_at FROM workflow_runs WHERE id = ${posted.body.runId}`,
  );
  // PostgreSQL keeps timestamps as timestamptz; the text is SQLite's.
  if (typeof row!.created_at === 'string') for (const v of [row!.run_at, row!.created_at, row!.updated_at]) within(v);
  const events = await s.request('GET', `/workflows/${workflowId}/webhook-events`, { token });
  assert.equal(events.status, 200, events.text);
  assert.equal(events.body.data.length, 1);
  within(events.body.data[0].receivedAt);
});

/** An accepted request's writes as intake makes them: a run, then its event (with the key, if any). */
function acceptJob(ids: { workspaceId: number; workflowId: number; contactId: number }, seq: number, key: string | null) {
  return function* (batch: unknown): IntakeJob<{ runId: number; replayOf: number | null; batch: unknown }> {
    if (key) {
      const first = yield* stmt((q) => q.firstByIdempotencyKey(ids.workflowId, key, '2000-01-01T00:00:00.000Z'));
      if (first) return { runId: first.run_id!, replayOf: first.id, batch };
    }
    const runId = yield* stmt((q) => q.insertRun(ids.workspaceId, ids.workflowId, ids.contactId, '[{"type":"wait","seconds":3600}]', JSON.stringify({ seq })));
    const body = Buffer.from(JSON.stringify({ seq }));
    yield* stmt((q) =>
      q.insertEvent({
        workspaceId: ids.workspaceId,
        workflowId: ids.workflowId,
        statusCode: 202,
        code: null,
        runId,
        contactId: ids.contactId,
        sourceIp: '127.0.0.1',
        contentType: 'application/json',
        idempotencyKey: key,
        body,
        bodySize: body.length,
        bodySha256: null,
        replayOf: null,
      }),
    );
    return { runId, replayOf: null, batch };
  };
}

test('in one batch each run is answered with its own row id, and a key accepted earlier in the batch is seen', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const { workflowId, contactId } = await fixture(s, token);
  const ids = { workspaceId: s.workspaceId, workflowId, contactId };
  const intake = intakeOf(s);
  t.after(() => intake.close());
  // Queued in one turn: one batch, whose writes are held back and made together (more rows
  // than one statement of SQLite's takes).
  const seqs = Array.from({ length: 70 }, (_, i) => i);
  const keyed = (seq: number) => seq % 23 === 0;
  const out = await Promise.all(seqs.map((seq) => intake.run(acceptJob(ids, seq, keyed(seq) ? 'same-key' : null))));
  // 0 started a run with the key; 23, 46 and 69, later in the same batch, found it.
  assert.equal(out[0]!.replayOf, null);
  for (const seq of [23, 46, 69]) {
    assert.equal(out[seq]!.runId, out[0]!.runId);
    assert.notEqual(out[seq]!.replayOf, null);
  }
  const started = seqs.filter((seq) => seq === 0 || !keyed(seq));
  const runs = await rowsOf<{ id: number; trigger: unknown }>(s, sql`SELECT id, "trigger" FROM workflow_runs WHERE workflow_id = ${workflowId} ORDER BY id`);
  const seqOf = (r: { trigger: unknown }) => (typeof r.trigger === 'string' ? JSON.parse(r.trigger) : r.trigger).seq as number;
  assert.deepEqual(
    runs.map((r) => [Number(r.id), seqOf(r)]),
    started.map((seq) => [out[seq]!.runId, seq]),
  );
  const events = await rowsOf<{ run_id: number; body: Buffer | string }>(
    s,
    sql`SELECT run_id, body FROM webhook_events WHERE workflow_id = ${workflowId} ORDER BY id`,
  );
  assert.deepEqual(
    events.map((e) => [Number(e.run_id), JSON.parse(Buffer.from(e.body).toString()).seq]),
    started.map((seq) => [out[seq]!.runId, seq]),
  );
});

test("SQLite: a job that holds no writes sees the batch's held runs, and held writes that fail run the batch's jobs again one by one", async (t) => {
  const s = await build(t, { store: 'sqlite' });
  const token = await s.login(s.owner.email, s.owner.password);
  const { workflowId, contactId } = await fixture(s, token);
  const ids = { workspaceId: s.workspaceId, workflowId, contactId };
  const store = sqliteStoreOf(s);
  const batcher = new WriteBatcher(store);
  const intake = sqliteIntake(store, batcher);
  t.after(() => batcher.close());
  const count = (w: Db) => (w.$client.prepare('SELECT count(*) AS n FROM workflow_runs WHERE workflow_id = ?').get(workflowId) as { n: number }).n;

  // One batch: two held runs, a job of another kind that counts them and inserts a run of its
  // own (the table's next id), then a held run again, which must take the id after that one.
  const [a, b, seen, c] = await Promise.all([
    intake.run(acceptJob(ids, 0, null)),
    intake.run(acceptJob(ids, 1, null)),
    batcher.run((w) => {
      const before = count(w);
      const id = w.$client
        .prepare('INSERT INTO workflow_runs (workspace_id, workflow_id, contact_id, definition, "trigger") VALUES (?, ?, ?, ?, ?)')
        .run(ids.workspaceId, workflowId, contactId, '[]', '{"seq":"direct"}').lastInsertRowid;
      return { before, id: Number(id), batch: batcher.batchId };
    }),
    intake.run(acceptJob(ids, 2, null)),
  ]);
  assert.deepEqual([a.batch, b.batch, c.batch], [seen.batch, seen.batch, seen.batch], 'one transaction');
  assert.equal(seen.before, 2, 'the job saw the two runs held before it');
  assert.deepEqual([a.runId + 1, b.runId + 1, seen.id + 1], [b.runId, seen.id, c.runId]);
  assert.equal(await scalarOf(s, sql`SELECT count(*) FROM workflow_runs WHERE workflow_id = ${workflowId}`), 4);

  // A run for a contact that does not exist fails only when the held rows are written (its
  // foreign key): the batch rolls back, and its jobs run again each in a transaction of its own.
  const outcomes = await Promise.allSettled([
    intake.run(acceptJob(ids, 3, null)),
    intake.run(acceptJob({ ...ids, contactId: contactId + 1000 }, 4, null)),
    intake.run(acceptJob(ids, 5, null)),
  ]);
  assert.deepEqual(
    outcomes.map((o) => o.status),
    ['fulfilled', 'rejected', 'fulfilled'],
  );
  assert.match(String((outcomes[1] as PromiseRejectedResult).reason), /FOREIGN KEY/);
  const triggers = await rowsOf<{ id: number; trigger: string }>(s, sql`SELECT id, "trigger" FROM workflow_runs WHERE workflow_id = ${workflowId} ORDER BY id`);
  assert.deepEqual(
    triggers.map((r) => JSON.parse(r.trigger).seq),
    [0, 1, 'direct', 2, 3, 5],
  );
  const [three, five] = outcomes.filter((o) => o.status === 'fulfilled').map((o) => (o as PromiseFulfilledResult<{ runId: number }>).value.runId);
  assert.deepEqual([three, five], [triggers[4]!.id, triggers[5]!.id]);
  // Each accepted run has its event; the refused one left neither.
  assert.equal(await scalarOf(s, sql`SELECT count(*) FROM webhook_events WHERE workflow_id = ${workflowId}`), 5);
  const usage = (await s.request('GET', '/billing/plan', { token })).body.usage.runsThisMonth as number;
  assert.equal(usage, 5, 'the month counts the runs intake committed (not the one inserted directly)');
});
