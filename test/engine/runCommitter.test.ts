/**
 * An engine thread's group commit on SQLite (engine/committer.ts): the runs committing in one
 * turn share a transaction, tried first without a savepoint per run. When one run's writes
 * fail, the batch is applied again carefully: that run's part alone is undone (its onFailure
 * written instead, or its promise rejected), the others commit, and a run whose lease is not
 * held writes nothing. On a real SQLite file, through a connection of its own as a thread has.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { closeDatabase, openDatabase } from '../../src/core/db/connection.js';
import { RunCommitter } from '../../src/engine/committer.js';
import type { EngineOp } from '../../src/engine/sql.js';
import { build, webhookWorkflow } from '../helpers.js';

async function setUp(t: import('node:test').TestContext) {
  const s = await build(t, { store: 'sqlite' });
  const token = await s.login(s.owner.email, s.owner.password);
  const path = await webhookWorkflow(s, token, 'commits', [{ type: 'add_tags', tags: ['x'] }]);
  const workflowId = Number((await s.request('GET', '/workflows', { token })).body.data[0].id);
  assert.ok(path && workflowId);
  const contacts: number[] = [];
  for (const email of ['a@example.com', 'b@example.com', 'c@example.com', 'd@example.com', 'taken@example.com']) {
    const res = await s.request('POST', '/contacts', { token, body: { email } });
    assert.equal(res.status, 201, res.text);
    contacts.push(Number(res.body.id));
  }
  const db = openDatabase(s.config.dbFile);
  t.after(() => closeDatabase(db));
  const c = db.$client;
  const workspaceId = (c.prepare('SELECT workspace_id AS w FROM workflows WHERE id = ?').get(workflowId) as { w: number }).w;
  // Runs as a claim leaves them: RUNNING under a lease token.
  const insert = c.prepare(
    `INSERT INTO workflow_runs (workspace_id, workflow_id, contact_id, status, definition, step_states, "trigger", run_at, lease_owner, lease_until, created_at, updated_at)
     VALUES (?, ?, ?, 'RUNNING', '[]', '[]', '{}', ?, 'tok', ?, ?, ?)`,
  );
  const now = new Date().toISOString();
  const until = new Date(Date.now() + 60_000).toISOString();
  const runs = contacts.slice(0, 4).map((contactId) => Number(insert.run(workspaceId, workflowId, contactId, now, until, now, now).lastInsertRowid));
  const status = (id: number) => (c.prepare('SELECT status FROM workflow_runs WHERE id = ?').get(id) as { status: string }).status;
  const tags = (contactId: number) => (c.prepare('SELECT name FROM contact_tags WHERE contact_id = ?').all(contactId) as { name: string }[]).map((r) => r.name);
  const email = (contactId: number) => (c.prepare('SELECT email FROM contacts WHERE id = ?').get(contactId) as { email: string }).email;
  return { db, workspaceId, contacts, runs, status, tags, email };
}

const save =
  (id: number, status: string): EngineOp =>
  (s) =>
    s.saveRun({
      id,
      owner: 'tok',
      status,
      stepStates: '[]',
      runAt: new Date().toISOString(),
      now: new Date().toISOString(),
      finishedAt: new Date().toISOString(),
    });

/** A write that fails on the unique email: the contact takes the email another one has. */
const takeEmail =
  (id: number, workspaceId: number): EngineOp =>
  (s) =>
    s.updateContact({
      id,
      workspaceId,
      email: 'taken@example.com',
      phone: null,
      firstName: null,
      lastName: null,
      attributes: '{}',
      now: new Date().toISOString(),
    });

test('one run whose write fails in a shared commit: its part alone is undone and its onFailure written, the others commit', async (t) => {
  const { db, workspaceId, contacts, runs, status, tags, email } = await setUp(t);
  const committer = new RunCommitter(db);
  const [a, b, c, d] = runs as [number, number, number, number];
  const [ca, cb, cc, cd] = contacts as [number, number, number, number];
  const clash = takeEmail(cb, workspaceId);
  // Queued in one turn of the event loop: one transaction.
  const results = await Promise.allSettled([
    committer.commit({ id: a, token: 'tok' }, [(s) => s.addTag(ca, workspaceId, 'first', 'first'), save(a, 'COMPLETED')]),
    committer.commit({ id: b, token: 'tok' }, [(s) => s.addTag(cb, workspaceId, 'undone', 'undone'), clash, save(b, 'COMPLETED')], () => save(b, 'FAILED')),
    committer.commit({ id: c, token: 'not-the-lease' }, [(s) => s.addTag(cc, workspaceId, 'stale', 'stale'), save(c, 'COMPLETED')]),
    committer.commit({ id: d, token: 'tok' }, [(s) => s.addTag(cd, workspaceId, 'last', 'last'), save(d, 'COMPLETED')]),
  ]);
  assert.deepEqual(
    results.map((r) => (r.status === 'fulfilled' ? r.value : 'rejected')),
    [true, true, false, true],
  );
  assert.deepEqual([status(a), status(b), status(c), status(d)], ['COMPLETED', 'FAILED', 'RUNNING', 'COMPLETED']);
  assert.deepEqual(tags(ca), ['first']);
  assert.deepEqual(tags(cb), [], "the failing run's earlier write in the same part is undone");
  assert.deepEqual(tags(cc), [], 'a run whose lease is not held writes nothing');
  assert.deepEqual(tags(cd), ['last']);
  assert.equal(email(cb), 'b@example.com');
});

test('a failing write without onFailure rejects that run alone; the batch beside it commits', async (t) => {
  const { db, workspaceId, contacts, runs, status, tags } = await setUp(t);
  const committer = new RunCommitter(db);
  const [a, b] = runs as [number, number];
  const [ca, cb] = contacts as [number, number];
  const broken = takeEmail(cb, workspaceId);
  const [first, second] = await Promise.allSettled([
    committer.commit({ id: a, token: 'tok' }, [(s) => s.addTag(ca, workspaceId, 'kept', 'kept'), save(a, 'COMPLETED')]),
    committer.commit({ id: b, token: 'tok' }, [(s) => s.addTag(cb, workspaceId, 'dropped', 'dropped'), broken, save(b, 'COMPLETED')]),
  ]);
  assert.equal(first.status, 'fulfilled');
  assert.equal(second.status, 'rejected');
  assert.match(String((second as PromiseRejectedResult).reason), /UNIQUE/);
  assert.deepEqual([status(a), status(b)], ['COMPLETED', 'RUNNING']);
  assert.deepEqual(tags(ca), ['kept']);
  assert.deepEqual(tags(cb), []);
});
