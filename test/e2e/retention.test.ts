/**
 * Retention (issue 8, item 7): finished runs, finished delivery attempts, audit entries,
 * ended sessions and received webhook events older than their settings are pruned by the
 * server in the background, in small batches; what is unfinished or recent is kept.
 * Through a real `svc serve` on a data folder filled with old rows.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { startServe } from '../cli/helpers.js';
import { initFolder } from './folder.js';

const DAY = 86_400_000;
const ago = (days: number) => new Date(Date.now() - days * DAY).toISOString();

function fill(file: string): void {
  const db = new Database(file);
  try {
    const ws = (db.prepare('SELECT id FROM workspaces').get() as { id: number }).id;
    const user = (db.prepare('SELECT id FROM users').get() as { id: number }).id;
    const run = db.prepare(
      "INSERT INTO workflow_runs (workspace_id, status, definition, trigger, created_at, updated_at, finished_at) VALUES (?, ?, '[]', '{\"old\":true}', ?, ?, ?)",
    );
    const attempt = db.prepare(
      "INSERT INTO delivery_attempts (workspace_id, channel, provider, \"to\", status, rendered, created_at, updated_at) VALUES (?, 'EMAIL', 'outbox', 'a@example.com', ?, '{}', ?, ?)",
    );
    const audit = db.prepare("INSERT INTO audit_logs (workspace_id, at, actor_type, action) VALUES (?, ?, 'SYSTEM', 'test.old')");
    const session = db.prepare('INSERT INTO sessions (family_id, user_id, workspace_id, token_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?)');
    const sandboxRequest = db.prepare("INSERT INTO sandbox_requests (workspace_id, method, url, created_at) VALUES (?, 'POST', 'https://example.com/', ?)");
    db.transaction(() => {
      // 1,200 finished runs of 100 days ago (more than two batches), and what must stay.
      for (let i = 0; i < 1200; i++) run.run(ws, i % 2 ? 'COMPLETED' : 'FAILED', ago(100), ago(100), ago(100));
      run.run(ws, 'QUEUED', ago(100), ago(100), null);
      run.run(ws, 'WAITING', ago(100), ago(100), null);
      run.run(ws, 'COMPLETED', ago(5), ago(5), ago(5));
      for (let i = 0; i < 1100; i++) attempt.run(ws, i % 2 ? 'SENT' : 'FAILED', ago(100), ago(100));
      attempt.run(ws, 'SENDING', ago(100), ago(100));
      attempt.run(ws, 'SENT', ago(5), ago(5));
      for (let i = 0; i < 600; i++) audit.run(ws, ago(500));
      audit.run(ws, ago(100));
      session.run('old-family', user, ws, 'hash-old', ago(60), ago(30));
      session.run('live-family', user, ws, 'hash-live', ago(1), new Date(Date.now() + 10 * DAY).toISOString());
      for (let i = 0; i < 700; i++) sandboxRequest.run(ws, ago(100));
      sandboxRequest.run(ws, ago(5));
    })();
  } finally {
    db.close();
  }
}

function count(file: string, sql: string): number {
  const db = new Database(file, { readonly: true });
  try {
    return (db.prepare(sql).get() as { n: number }).n;
  } finally {
    db.close();
  }
}

test('svc serve prunes old finished runs, attempts, audit entries and sessions in batches, and keeps the rest', async (t) => {
  const dataDir = await initFolder(t, 'svc-retention-');
  const file = join(dataDir, 'svc.db');
  fill(file);
  const auditBefore = count(file, 'SELECT COUNT(*) AS n FROM audit_logs');

  const server = await startServe(t, dataDir, ['--port', '0'], {
    env: { SVC_ENGINE: 'false', SVC_RUN_RETENTION_DAYS: '30', SVC_DELIVERY_RETENTION_DAYS: '30', SVC_AUDIT_RETENTION_DAYS: '365', SVC_LOG_LEVEL: 'info' },
  });
  const deadline = Date.now() + 20_000;
  while (
    count(file, 'SELECT COUNT(*) AS n FROM workflow_runs') > 3 ||
    count(file, 'SELECT COUNT(*) AS n FROM delivery_attempts') > 2 ||
    count(file, "SELECT COUNT(*) AS n FROM delivery_attempts WHERE status = 'SENDING'") > 0 ||
    count(file, 'SELECT COUNT(*) AS n FROM sandbox_requests') > 1
  ) {
    assert.ok(Date.now() < deadline, 'pruning did not finish within 20 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.deepEqual(
    (new Database(file, { readonly: true }).prepare('SELECT status FROM workflow_runs ORDER BY id').all() as { status: string }[]).map((r) => r.status),
    ['QUEUED', 'WAITING', 'COMPLETED'],
    'unfinished runs and recent ones are kept',
  );
  // An attempt still SENDING is not pruned; a system email's (no run) left so for 100 days was
  // abandoned by a stopped process, and is settled FAILED instead (kept until its own time).
  assert.equal(
    count(file, "SELECT COUNT(*) AS n FROM delivery_attempts WHERE status = 'FAILED' AND error LIKE 'the process stopped while this message was being sent%'"),
    1,
    'the abandoned SENDING attempt is settled, not pruned',
  );
  assert.equal(count(file, "SELECT COUNT(*) AS n FROM audit_logs WHERE action = 'test.old'"), 1, 'audit entries within 365 days are kept');
  assert.ok(count(file, 'SELECT COUNT(*) AS n FROM audit_logs') >= auditBefore - 600);
  assert.equal(count(file, "SELECT COUNT(*) AS n FROM sessions WHERE family_id = 'old-family'"), 0, 'a session ended 30 days ago is gone');
  assert.equal(count(file, "SELECT COUNT(*) AS n FROM sessions WHERE family_id = 'live-family'"), 1);
  assert.equal(count(file, 'SELECT COUNT(*) AS n FROM sandbox_requests'), 1, "a sandbox's recorded requests go with the delivery retention");
  await server.stop();
  assert.match(server.stdout() + server.stderr(), /pruned what the retention settings no longer keep/);
});

test('a retention of 0 keeps runs, attempts and audit entries for ever', async (t) => {
  const dataDir = await initFolder(t, 'svc-retention-');
  const file = join(dataDir, 'svc.db');
  fill(file);
  const server = await startServe(t, dataDir, ['--port', '0'], {
    env: { SVC_ENGINE: 'false', SVC_RUN_RETENTION_DAYS: '0', SVC_DELIVERY_RETENTION_DAYS: '0', SVC_AUDIT_RETENTION_DAYS: '0' },
  });
  // Sessions still go (they have no "for ever"): once they are, the pruning pass is over.
  const deadline = Date.now() + 20_000;
  while (count(file, "SELECT COUNT(*) AS n FROM sessions WHERE family_id = 'old-family'") > 0) {
    assert.ok(Date.now() < deadline, 'pruning did not run within 20 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  await server.stop();
  assert.equal(count(file, 'SELECT COUNT(*) AS n FROM workflow_runs'), 1203);
  assert.equal(count(file, 'SELECT COUNT(*) AS n FROM delivery_attempts'), 1102);
  assert.equal(count(file, 'SELECT COUNT(*) AS n FROM sandbox_requests'), 701);
  assert.ok(count(file, "SELECT COUNT(*) AS n FROM audit_logs WHERE action = 'test.old'") === 601);
});
