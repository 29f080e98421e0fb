import type pg from 'pg';
import type { WriteBatcher } from './batcher.js';
import { runAsync, runSync, stmt as genericStmt, type Job, type Maybe } from './statements.js';
import type { Db } from './connection.js';
import { PgGroupCommit } from './pgGroupCommit.js';
import type { LookupKind } from './schema.js';
import type { PgStore, SqliteStore } from './store.js';

/**
 * Webhook intake's statements and group commit, the one part of the hot path that differs
 * between the stores (docs/stores.md). The receiver's rules (services/webhooks.ts) are written
 * once, as generators that yield a statement at a time: on SQLite they run synchronously on
 * prepared statements inside the batch (one await per batch, none per row); on PostgreSQL
 * each statement is awaited on the batch's connection.
 */

/** A workflow row as the intake reads it (the same names and values on both stores). */
export interface WorkflowRowRaw {
  id: number;
  webhook_token: string | null;
  workspace_id: number;
  status: string;
  trigger_source: string;
  steps: string;
  webhook_lookup: LookupKind | null;
  webhook_path: string | null;
  create_if_not_found: number;
  contact_defaults: string;
  signing_secret: string | null;
}

export interface EventRow {
  workspaceId: number;
  workflowId: number;
  statusCode: number;
  code: string | null;
  runId: number | null;
  contactId: number | null;
  sourceIp: string | null;
  contentType: string | null;
  idempotencyKey: string | null;
  body: Buffer | null;
  bodySize: number | null;
  bodySha256: string | null;
  replayOf: number | null;
}

export interface FirstAccepted {
  id: number;
  run_id: number | null;
  contact_id: number | null;
}

/** The intake's statements: plain values on SQLite, promises on PostgreSQL. */
export interface IntakeSql {
  workflowByToken(token: string): Maybe<WorkflowRowRaw | undefined>;
  workflowById(id: number): Maybe<WorkflowRowRaw | undefined>;
  contactId(workspaceId: number, kind: 'email' | 'phone' | 'contactId', value: string | number): Maybe<number | undefined>;
  /** Inserts a QUEUED run and counts it in the workspace's month; answers its id. */
  insertRun(workspaceId: number, workflowId: number, contactId: number, definition: string, trigger: string): Maybe<number>;
  insertEvent(row: EventRow): Maybe<void>;
  /**
   * The first accepted request with this key within the window. Inside a batch on
   * PostgreSQL it first takes a transaction-scoped lock on (workflow, key), so that two nodes
   * never both miss it and both start a run.
   */
  firstByIdempotencyKey(workflowId: number, key: string, since: string): Maybe<FirstAccepted | undefined>;
}

/** The statements of one request, and what it answers. */
export type IntakeJob<T> = Job<IntakeSql, T>;

/** Yields one intake statement and gives back its result (typed). */
export const stmt = <T>(statement: (sql: IntakeSql) => T) => genericStmt<IntakeSql, T>(statement);

export interface Intake {
  /** Reads outside a batch (what the request is checked against before it is queued). */
  readonly read: IntakeSql;
  /** Runs the job at the next group commit; resolves after COMMIT. `batch` names the batch it ran in. */
  run<T>(job: (batch: unknown) => IntakeJob<T>): Promise<T>;
  close(): Promise<void>;
}

const WORKFLOW_COLUMNS =
  'id, webhook_token, workspace_id, status, trigger_source, steps, webhook_lookup, webhook_path, create_if_not_found, contact_defaults, signing_secret';

function month(): string {
  return new Date().toISOString().slice(0, 7);
}

/**
 * SQLite: prepared once (building queries per request cost more than running them), on the
 * writer connection for the batch (reads inside a batch see the batch's own writes) and on
 * the reading connection for the checks before it.
 */
function sqliteStatements(db: Db): IntakeSql {
  const c = db.$client;
  const byToken = c.prepare<[string], WorkflowRowRaw>(`SELECT ${WORKFLOW_COLUMNS} FROM workflows WHERE webhook_token = ?`);
  const byId = c.prepare<[number], WorkflowRowRaw>(`SELECT ${WORKFLOW_COLUMNS} FROM workflows WHERE id = ?`);
  const contact = {
    email: c.prepare<[number, string], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND email = ?'),
    phone: c.prepare<[number, string], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND phone = ?'),
    contactId: c.prepare<[number, number], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND id = ?'),
  };
  // No RETURNING: it makes SQLite journal the statement; the id is the rowid. The month's
  // count is kept by this code, not a trigger, for the same reason (migration 0011).
  const insertRun = c.prepare<[number, number, number, string, string]>(
    'INSERT INTO workflow_runs (workspace_id, workflow_id, contact_id, definition, "trigger") VALUES (?, ?, ?, ?, ?)',
  );
  const countRun = c.prepare<[number, string]>(
    'INSERT INTO run_month_counts (workspace_id, month, runs) VALUES (?, ?, 1) ON CONFLICT (workspace_id, month) DO UPDATE SET runs = runs + 1',
  );
  const insertEvent = c.prepare<[EventRow]>(
    `INSERT INTO webhook_events (workspace_id, workflow_id, status_code, code, run_id, contact_id, source_ip, content_type, idempotency_key, body, body_size, body_sha256, replay_of)
     VALUES (@workspaceId, @workflowId, @statusCode, @code, @runId, @contactId, @sourceIp, @contentType, @idempotencyKey, @body, @bodySize, @bodySha256, @replayOf)`,
  );
  const firstByKey = c.prepare<[number, string, string], FirstAccepted>(
    `SELECT id, run_id, contact_id FROM webhook_events
      WHERE workflow_id = ? AND idempotency_key = ? AND status_code = 202 AND replay_of IS NULL AND received_at > ?
      ORDER BY id DESC LIMIT 1`,
  );
  return {
    workflowByToken: (token) => byToken.get(token),
    workflowById: (id) => byId.get(id),
    contactId: (workspaceId, kind, value) => (contact[kind] as { get(w: number, v: string | number): { id: number } | undefined }).get(workspaceId, value)?.id,
    insertRun(workspaceId, workflowId, contactId, definition, trigger) {
      const id = Number(insertRun.run(workspaceId, workflowId, contactId, definition, trigger).lastInsertRowid);
      countRun.run(workspaceId, month());
      return id;
    },
    insertEvent: (row) => void insertEvent.run(row),
    firstByIdempotencyKey: (workflowId, key, since) => firstByKey.get(workflowId, key, since),
  };
}

export function sqliteIntake(store: SqliteStore, batcher: WriteBatcher): Intake {
  const write = sqliteStatements(store.writer);
  return {
    read: sqliteStatements(store.db),
    run: (job) => batcher.run(() => runSync(job(batcher.batchId), write)),
    close: async () => {},
  };
}

/** PostgreSQL: named statements (each connection prepares them once), on a batch's connection or the pool. */
function pgStatements(q: (name: string, text: string, values: unknown[]) => Promise<pg.QueryResult>, counted?: number[]): IntakeSql {
  const inBatch = counted !== undefined;
  const one = async <T>(name: string, text: string, values: unknown[]): Promise<T | undefined> => (await q(name, text, values)).rows[0] as T | undefined;
  const workflowSql = `SELECT id, webhook_token, workspace_id, status, trigger_source, steps::text AS steps, webhook_lookup, webhook_path,
                              create_if_not_found::int AS create_if_not_found, contact_defaults::text AS contact_defaults, signing_secret
                         FROM workflows`;
  return {
    workflowByToken: (token) => one('svc_wf_token', `${workflowSql} WHERE webhook_token = $1`, [token]),
    workflowById: (id) => one('svc_wf_id', `${workflowSql} WHERE id = $1`, [id]),
    async contactId(workspaceId, kind, value) {
      const column = kind === 'contactId' ? 'id' : kind;
      return (await one<{ id: number }>(`svc_contact_${kind}`, `SELECT id FROM contacts WHERE workspace_id = $1 AND ${column} = $2`, [workspaceId, value]))?.id;
    },
    async insertRun(workspaceId, workflowId, contactId, definition, trigger) {
      const row = await one<{ id: number }>(
        'svc_run_insert',
        'INSERT INTO workflow_runs (workspace_id, workflow_id, contact_id, definition, "trigger") VALUES ($1, $2, $3, $4::json, $5::json) RETURNING id',
        [workspaceId, workflowId, contactId, definition, trigger],
      );
      // Counted at the end of the batch (pgIntake), in workspace order.
      counted?.push(workspaceId);
      return row!.id;
    },
    async insertEvent(r) {
      await q(
        'svc_event_insert',
        `INSERT INTO webhook_events (workspace_id, workflow_id, status_code, code, run_id, contact_id, source_ip, content_type, idempotency_key, body, body_size, body_sha256, replay_of)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
        [
          r.workspaceId,
          r.workflowId,
          r.statusCode,
          r.code,
          r.runId,
          r.contactId,
          r.sourceIp,
          r.contentType,
          r.idempotencyKey,
          r.body,
          r.bodySize,
          r.bodySha256,
          r.replayOf,
        ],
      );
    },
    async firstByIdempotencyKey(workflowId, key, since) {
      if (inBatch) await q('svc_key_lock', 'SELECT pg_advisory_xact_lock($1::int, hashtext($2))', [workflowId, key]);
      return one<FirstAccepted>(
        'svc_key_first',
        `SELECT id, run_id, contact_id FROM webhook_events
          WHERE workflow_id = $1 AND idempotency_key = $2 AND status_code = 202 AND replay_of IS NULL AND received_at > $3
          ORDER BY id DESC LIMIT 1`,
        [workflowId, key, since],
      );
    },
  };
}

export function pgIntake(store: PgStore): Intake {
  // Runs started per workspace by each batch's jobs that succeeded, written just before its
  // COMMIT in workspace order: the month's counter rows are the hottest rows of intake, and
  // batches (of this node or others) that took them in different orders would deadlock.
  const tallies = new WeakMap<object, Map<number, number>>();
  const group = new PgGroupCommit(store.pool, {
    // One batch at a time per node: a batch holds its counter rows until its COMMIT.
    concurrency: 1,
    async beforeCommit(client, batch) {
      const tally = tallies.get(batch);
      if (!tally) return;
      const at = month();
      for (const [workspaceId, runs] of [...tally].sort((a, b) => a[0] - b[0])) {
        await client.query({
          name: 'svc_run_count',
          text: 'INSERT INTO run_month_counts (workspace_id, month, runs) VALUES ($1, $2, $3) ON CONFLICT (workspace_id, month) DO UPDATE SET runs = run_month_counts.runs + $3',
          values: [workspaceId, at, runs],
        });
      }
    },
  });
  return {
    read: pgStatements((name, text, values) => store.pool.query({ name, text, values })),
    run: (job) =>
      group.run(async (client, batch) => {
        const counted: number[] = [];
        const result = await runAsync(
          job(batch),
          pgStatements((name, text, values) => client.query({ name, text, values }), counted),
        );
        const tally = tallies.get(batch) ?? new Map<number, number>();
        tallies.set(batch, tally);
        for (const workspaceId of counted) tally.set(workspaceId, (tally.get(workspaceId) ?? 0) + 1);
        return result;
      }),
    close: () => group.close(),
  };
}
