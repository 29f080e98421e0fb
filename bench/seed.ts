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

/**
 * PostgreSQL: what seedContacts and seedActivity write, one SQL statement per table and
 * chunk (generate_series), on a client whose session has triggers off
 * (`session_replication_role = replica`, a superuser's: the deferred counter trigger would
 * update one row a million times in one transaction); pgSeedCounters then writes the counters
 * the triggers would have kept.
 */
export async function pgSeedContacts(client: PgClient, workspaceId: number, n: number, opts: SeedContactsOptions = {}): Promise<void> {
  const vipEvery = opts.vipEvery ?? 10;
  const prefix = opts.prefix ?? `w${workspaceId}`;
  const offset = opts.offset ?? 0;
  const at = new Date().toISOString();
  await client.query(
    `WITH c AS (
       INSERT INTO contacts (workspace_id, email, phone, first_name, last_name, attributes, created_at, updated_at)
       SELECT $1, 'user' || i || '@' || $2 || '.example', '+1555' || lpad(i::text, 7, '0'), 'Ada' || i, 'Smith' || i,
              json_build_object('plan', 'p' || (i % 7)), $3, $3
         FROM generate_series($4::bigint, $5::bigint) AS i ORDER BY i
       RETURNING id, substr(first_name, 4)::bigint AS i)
     INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name, created_at)
     SELECT id, $1, 'vip', 'vip', $3 FROM c WHERE i % $6 = 0`,
    [workspaceId, prefix, at, offset + 1, offset + n, vipEvery],
  );
}

/** PostgreSQL's seedActivity (see pgSeedContacts). */
export async function pgSeedActivity(client: PgClient, workspaceId: number, workflowId: number, n: number): Promise<void> {
  const at = new Date().toISOString();
  await client.query(
    `WITH r AS (
       INSERT INTO workflow_runs (workspace_id, workflow_id, status, definition, step_states, trigger, created_at, updated_at, finished_at)
       SELECT $1, $2, CASE WHEN i % 50 = 0 THEN 'FAILED' ELSE 'COMPLETED' END, '[{"type":"add_tags","tags":["x"]}]', '[]', '{}', $3, $3, $3
         FROM generate_series(1, $4::bigint) AS i ORDER BY i
       RETURNING id, status),
     e AS (
       INSERT INTO webhook_events (workspace_id, workflow_id, received_at, status_code, run_id, source_ip, content_type, body, body_size)
       SELECT $1, $2, $3, 202, id, '127.0.0.1', 'application/json', convert_to('{"email":"someone@example.com"}', 'UTF8'), 31 FROM r ORDER BY id)
     INSERT INTO delivery_attempts (workspace_id, channel, provider, "to", status, run_id, step_index, rendered, created_at, updated_at)
     SELECT $1, 'EMAIL', 'outbox', 'user' || id || '@example.com', CASE WHEN status = 'FAILED' THEN 'FAILED' ELSE 'SENT' END, id, 0, '{}', $3, $3
       FROM r ORDER BY id`,
    [workspaceId, workflowId, at, n],
  );
  await client.query(
    `INSERT INTO audit_logs (workspace_id, at, actor_type, action, target_type, target_id, metadata)
     SELECT $1, to_char((now() - (($2 - i) || ' seconds')::interval) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            CASE WHEN i % 1000 = 0 THEN 'USER' ELSE 'SYSTEM' END,
            CASE WHEN i % 3 = 0 THEN 'contact.updated' ELSE 'contact.created' END, 'contact', i::text, '{}'
       FROM generate_series(1, $2::bigint) AS i ORDER BY i`,
    [workspaceId, n],
  );
  await client.query(
    `INSERT INTO run_month_counts (workspace_id, month, runs) VALUES ($1, to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM'), $2)
     ON CONFLICT (workspace_id, month) DO UPDATE SET runs = run_month_counts.runs + excluded.runs`,
    [workspaceId, n],
  );
}

/** The counters the triggers keep (workspace_counters, tag_counts), from the rows, for seeded workspaces. */
export async function pgSeedCounters(client: PgClient, workspaceIds: number[]): Promise<void> {
  await client.query(
    `INSERT INTO workspace_counters (workspace_id, contacts)
     SELECT workspace_id, count(*) FROM contacts WHERE workspace_id = ANY($1) GROUP BY workspace_id
     ON CONFLICT (workspace_id) DO UPDATE SET contacts = excluded.contacts`,
    [workspaceIds],
  );
  await client.query(
    `INSERT INTO tag_counts (workspace_id, tag_key, name, contacts)
     SELECT workspace_id, tag_key, min(name), count(*) FROM contact_tags WHERE workspace_id = ANY($1) GROUP BY workspace_id, tag_key
     ON CONFLICT (workspace_id, tag_key) DO UPDATE SET contacts = excluded.contacts`,
    [workspaceIds],
  );
}

/** The part of a node-postgres client the seeders use. */
export interface PgClient {
  query(text: string, params?: unknown[]): Promise<{ rows: Record<string, unknown>[] }>;
}
