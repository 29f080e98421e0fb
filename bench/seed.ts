// Seeds large databases fast for bench/scale.ts and the query-plan tests: plain SQL inserts
// in one transaction per table, straight into a migrated database (not through the API).
// The triggers of migration 0008 still run, so the search index and the counters are
// what the server would have built.
import type Database from 'better-sqlite3';

export interface SeedContactsOptions {
  /** Every n-th contact is tagged `vip` (10: 10% of them). */
  vipEvery?: number;
  /** Distinguishes the emails of several seeded workspaces. */
  prefix?: string;
  /** Numbers the contacts from offset + 1 (to seed one workspace in several calls). */
  offset?: number;
}

const BATCH = 100;

/**
 * `n` contacts in one workspace: user{i}@{prefix}.example, Ada{i} Smith{i}, +1555 phones,
 * 10% vip. Rows go in 100 to a statement: the search index's trigger then flushes once per
 * statement instead of once per row (about 3x faster).
 */
export function seedContacts(client: Database.Database, workspaceId: number, n: number, opts: SeedContactsOptions = {}): void {
  const vipEvery = opts.vipEvery ?? 10;
  const prefix = opts.prefix ?? `w${workspaceId}`;
  const offset = opts.offset ?? 0;
  const row = '(?, ?, ?, ?, ?, ?, ?, ?)';
  const sqlFor = (k: number) =>
    `INSERT INTO contacts (workspace_id, email, phone, first_name, last_name, attributes, created_at, updated_at) VALUES ${Array(k).fill(row).join(', ')} RETURNING id`;
  const full = client.prepare(sqlFor(BATCH));
  const tag = client.prepare('INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name, created_at) VALUES (?, ?, ?, ?, ?)');
  const at = new Date().toISOString();
  client.transaction(() => {
    for (let start = offset + 1; start <= offset + n; start += BATCH) {
      const k = Math.min(BATCH, offset + n - start + 1);
      const args: unknown[] = [];
      for (let i = start; i < start + k; i++) {
        args.push(workspaceId, `user${i}@${prefix}.example`, `+1555${String(i).padStart(7, '0')}`, `Ada${i}`, `Smith${i}`, `{"plan":"p${i % 7}"}`, at, at);
      }
      const ids = (k === BATCH ? full : client.prepare(sqlFor(k))).all(...args) as { id: number }[];
      ids.forEach(({ id }, j) => {
        if ((start + j) % vipEvery === 0) tag.run(id, workspaceId, 'vip', 'vip', at);
      });
    }
  })();
}

/** A workflow for the seeded runs and events to belong to; returns its id. */
export function seedWorkflow(client: Database.Database, workspaceId: number): number {
  return Number(
    client.prepare("INSERT INTO workflows (workspace_id, name, status, trigger_source, steps) VALUES (?, 'seeded', 'ACTIVE', 'MANUAL', '[]')").run(workspaceId)
      .lastInsertRowid,
  );
}

/** `n` finished runs, webhook events, delivery attempts and audit entries of one workflow. */
export function seedActivity(client: Database.Database, workspaceId: number, workflowId: number, n: number): void {
  const at = new Date().toISOString();
  const run = client.prepare(
    'INSERT INTO workflow_runs (workspace_id, workflow_id, status, definition, step_states, trigger, created_at, updated_at, finished_at) VALUES (?, ?, ?, \'[{"type":"add_tags","tags":["x"]}]\', \'[]\', \'{}\', ?, ?, ?)',
  );
  const event = client.prepare(
    "INSERT INTO webhook_events (workspace_id, workflow_id, received_at, status_code, run_id, source_ip, content_type, body, body_size) VALUES (?, ?, ?, 202, ?, '127.0.0.1', 'application/json', ?, ?)",
  );
  const attempt = client.prepare(
    "INSERT INTO delivery_attempts (workspace_id, channel, provider, \"to\", status, run_id, step_index, rendered, created_at, updated_at) VALUES (?, 'EMAIL', 'outbox', ?, ?, ?, 0, '{}', ?, ?)",
  );
  // Audit entries a second apart up to now, one in a thousand by a user (the rest SYSTEM).
  const audit = client.prepare(
    "INSERT INTO audit_logs (workspace_id, at, actor_type, action, target_type, target_id, metadata) VALUES (?, ?, ?, ?, 'contact', ?, '{}')",
  );
  const started = Date.now();
  const body = Buffer.from('{"email":"someone@example.com"}');
  client.transaction(() => {
    for (let i = 1; i <= n; i++) {
      const runId = Number(run.run(workspaceId, workflowId, i % 50 === 0 ? 'FAILED' : 'COMPLETED', at, at, at).lastInsertRowid);
      event.run(workspaceId, workflowId, at, runId, body, body.length);
      attempt.run(workspaceId, `user${i}@example.com`, i % 50 === 0 ? 'FAILED' : 'SENT', runId, at, at);
      audit.run(
        workspaceId,
        new Date(started - (n - i) * 1000).toISOString(),
        i % 1000 === 0 ? 'USER' : 'SYSTEM',
        i % 3 === 0 ? 'contact.updated' : 'contact.created',
        String(i),
      );
    }
    // What starting the runs would have counted (src/core/db/runCounts.ts), in one step.
    client
      .prepare(
        "INSERT INTO run_month_counts (workspace_id, month, runs) VALUES (?, strftime('%Y-%m', 'now'), ?) ON CONFLICT (workspace_id, month) DO UPDATE SET runs = runs + excluded.runs",
      )
      .run(workspaceId, n);
  })();
}
