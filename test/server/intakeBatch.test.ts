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
import { build, rowsOf, type TestServer } from '../helpers.js';

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
