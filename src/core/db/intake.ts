import type pg from 'pg';
import type { HeldWrites, WriteBatcher } from './batcher.js';
import { isoNow } from '../clock.js';
import { batchLoader } from './batchLoader.js';
import { runAsync, runSync, stmt as genericStmt, type Job, type Maybe } from './statements.js';
import type { Db } from './connection.js';
import { type BatchKey, PgGroupCommit } from './pgGroupCommit.js';
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
  /**
   * The contact the lookup names. `known`: the id a read just before the batch found for
   * this lookup; a batch that sends its writes together at its end (PostgreSQL's) takes it
   * without reading again, and the run's foreign key still refuses a contact deleted since,
   * which runs the batch again carefully, reading.
   */
  contactId(workspaceId: number, kind: 'email' | 'phone' | 'contactId', value: string | number, known?: number): Maybe<number | undefined>;
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

/** The current month (UTC) as YYYY-MM, worked out again only once the clock has left it. */
let monthNow = { text: '', from: 0, until: 0 };

function month(): string {
  const now = Date.now();
  if (now < monthNow.from || now >= monthNow.until) {
    const d = new Date(now);
    monthNow = {
      text: d.toISOString().slice(0, 7),
      from: Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1),
      until: Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1),
    };
  }
  return monthNow.text;
}

/** Runs a batch started per workspace, written once before its COMMIT (SQLite). */
class MonthTally {
  private batchId = -1;
  private readonly runs = new Map<number, number>();

  add(batchId: number, workspaceId: number): void {
    // Left over from a batch that was rolled back: its jobs count again as they run again.
    if (batchId !== this.batchId) {
      this.runs.clear();
      this.batchId = batchId;
    }
    this.runs.set(workspaceId, (this.runs.get(workspaceId) ?? 0) + 1);
  }

  /** The counts of `batchId`'s runs, forgotten once taken. */
  take(batchId: number): [number, number][] {
    const counts = batchId === this.batchId ? [...this.runs] : [];
    this.runs.clear();
    return counts;
  }
}

/** Adds runs to a workspace's month (SQLite). */
const COUNT_RUNS =
  'INSERT INTO run_month_counts (workspace_id, month, runs) VALUES (?, ?, ?) ON CONFLICT (workspace_id, month) DO UPDATE SET runs = runs + excluded.runs';

/** The first accepted request with a key (SQLite): through the partial index of events that sent one. */
export const FIRST_BY_IDEMPOTENCY_KEY = `SELECT id, run_id, contact_id FROM webhook_events
      WHERE workflow_id = ? AND idempotency_key = ? AND status_code = 202 AND replay_of IS NULL AND received_at > ?
      ORDER BY id DESC LIMIT 1`;

/**
 * SQLite: a batch's runs and events, held back and written before its COMMIT as one INSERT per
 * table (up to 64 rows a statement): one statement's start, cursors and binding
 * per batch instead of two per request. A run answers with its id before it is written: the
 * ids are taken in order after the table's last (as AUTOINCREMENT would), read once the batch
 * first inserts, and again after each write (a job that holds no writes may insert a run in
 * between: the batch writes what is held before it).
 */
class SqliteHeldWrites implements HeldWrites {
  private readonly runs: unknown[] = [];
  private readonly events: unknown[] = [];
  private nextRunId: number | undefined;
  private readonly lastRunId: Statement<[], { id: number }>;
  /** Each table's INSERT by row count, prepared on first use. */
  private readonly inserts = new Map<InsertShape, Map<number, Statement<unknown[]>>>();

  constructor(private readonly c: Db['$client']) {
    this.lastRunId = c.prepare(
      "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'workflow_runs'), 0), coalesce((SELECT max(id) FROM workflow_runs), 0)) AS id",
    );
  }

  insertRun(workspaceId: number, workflowId: number, contactId: number, definition: string, trigger: string, at: string): number {
    this.nextRunId ??= this.lastRunId.get()!.id + 1;
    const id = this.nextRunId++;
    this.runs.push(id, workspaceId, workflowId, contactId, definition, trigger, at, at, at);
    return id;
  }

  insertEvent(r: EventRow, at: string): void {
    // Values by position, in the order of EVENT_INSERT's columns.
    pushEventValues(this.events, r).push(at);
  }

  flush(): void {
    this.nextRunId = undefined;
    // Events first: each statement's journal (it may fail halfway) stays in memory up to 64 KiB,
    // and once one spills to a file the rest of the transaction's journals go there too. The
    // runs' statement touches more pages (five indexes) and is the one that spills.
    this.write(EVENT_INSERT, this.events);
    this.write(RUN_INSERT, this.runs);
  }

  discard(): void {
    this.nextRunId = undefined;
    this.runs.length = 0;
    this.events.length = 0;
  }

  /**
   * Writes the held rows of one table, 64 to a statement and the rest in one (a statement per
   * row count, prepared on first use: at most 64 a table); forgets them, written or not.
   */
  private write(insert: InsertShape, values: unknown[]): void {
    try {
      let byRows = this.inserts.get(insert);
      if (!byRows) {
        byRows = new Map();
        this.inserts.set(insert, byRows);
      }
      let at = 0;
      while (at < values.length) {
        const rows = Math.min((values.length - at) / insert.columns, 64);
        let statement = byRows.get(rows);
        if (!statement) {
          statement = this.c.prepare(`${insert.head} VALUES ${Array(rows).fill(insert.row).join(', ')}`);
          byRows.set(rows, statement);
        }
        const end = at + rows * insert.columns;
        statement.run(at === 0 && end === values.length ? values : values.slice(at, end));
        at = end;
      }
    } finally {
      values.length = 0;
    }
  }
}

type Statement<P extends unknown[], R = unknown> = import('better-sqlite3').Statement<P, R>;

/** A multi-row INSERT: its head, one row's placeholders, and the values a row binds. */
interface InsertShape {
  head: string;
  row: string;
  columns: number;
}

const RUN_INSERT: InsertShape = {
  head: 'INSERT INTO workflow_runs (id, workspace_id, workflow_id, contact_id, definition, "trigger", run_at, created_at, updated_at)',
  row: '(?, ?, ?, ?, ?, ?, ?, ?, ?)',
  columns: 9,
};
const EVENT_INSERT: InsertShape = {
  head: 'INSERT INTO webhook_events (workspace_id, workflow_id, status_code, code, run_id, contact_id, source_ip, content_type, idempotency_key, body, body_size, body_sha256, replay_of, received_at)',
  row: '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)',
  columns: 14,
};

/**
 * SQLite: prepared once (building queries per request cost more than running them), on the
 * writer connection for the batch (reads inside a batch see the batch's own writes, once
 * `held` has written them) and on the reading connection for the checks before it.
 */
function sqliteStatements(db: Db, held?: SqliteHeldWrites, onRun?: (workspaceId: number) => void): IntakeSql {
  const c = db.$client;
  const byToken = c.prepare<[string], WorkflowRowRaw>(`SELECT ${WORKFLOW_COLUMNS} FROM workflows WHERE webhook_token = ?`);
  const byId = c.prepare<[number], WorkflowRowRaw>(`SELECT ${WORKFLOW_COLUMNS} FROM workflows WHERE id = ?`);
  const contact = {
    email: c.prepare<[number, string], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND email = ?'),
    phone: c.prepare<[number, string], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND phone = ?'),
    contactId: c.prepare<[number, number], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND id = ?'),
  };
  const firstByKey = c.prepare<[number, string, string], FirstAccepted>(FIRST_BY_IDEMPOTENCY_KEY);
  return {
    workflowByToken: (token) => byToken.get(token),
    workflowById: (id) => byId.get(id),
    contactId: (workspaceId, kind, value) => (contact[kind] as { get(w: number, v: string | number): { id: number } | undefined }).get(workspaceId, value)?.id,
    insertRun(workspaceId, workflowId, contactId, definition, trigger) {
      // The reading connection is query_only: it never gets here.
      if (!held) throw new Error('runs are inserted only inside a batch');
      // One string for the timestamps: SQLite formatting each column's default cost more. The
      // month's count is kept by this code, not a trigger: a trigger makes SQLite journal the
      // statement (migration 0011).
      const id = held.insertRun(workspaceId, workflowId, contactId, definition, trigger, isoNow());
      onRun?.(workspaceId);
      return id;
    },
    insertEvent(row) {
      if (!held) throw new Error('events are inserted only inside a batch');
      held.insertEvent(row, isoNow());
    },
    firstByIdempotencyKey(workflowId, key, since) {
      // The batch's own earlier requests with this key must be seen.
      held?.flush();
      return firstByKey.get(workflowId, key, since);
    },
  };
}

export function sqliteIntake(store: SqliteStore, batcher: WriteBatcher): Intake {
  // A batch's runs are counted in one statement per workspace before its COMMIT, not one per run.
  const tally = new MonthTally();
  const countRuns = store.writer.$client.prepare<[number, string, number]>(COUNT_RUNS);
  batcher.beforeCommit.push((batchId) => {
    const counts = tally.take(batchId);
    if (!counts.length) return;
    const at = month();
    for (const [workspaceId, runs] of counts) countRuns.run(workspaceId, at, runs);
  });
  const held = new SqliteHeldWrites(store.writer.$client);
  batcher.held.push(held);
  const write = sqliteStatements(store.writer, held, (workspaceId) => tally.add(batcher.batchId, workspaceId));
  return {
    read: sqliteStatements(store.db),
    run: (job) => batcher.run(() => runSync(job(batcher.batchId), write), true),
    close: async () => {},
  };
}

/** Appends an event's values in the order of the columns every event INSERT names (received_at, SQLite's last, aside). */
function pushEventValues(to: unknown[], r: EventRow): unknown[] {
  to.push(
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
  );
  return to;
}

const eventValues = (r: EventRow): unknown[] => pushEventValues([], r);

type PgQuery = (name: string, text: string, values: unknown[]) => Promise<pg.QueryResult>;

/**
 * A careless batch's runs and events (see PgGroupCommit), held back and sent at its end as
 * one INSERT per table: a round trip per batch instead of two per request, on the busiest
 * path of a node. A run's id is taken from its sequence beforehand (one query for the whole
 * batch), since its request answers with it before the run is written.
 */
class PgHeldWrites {
  private readonly runs: unknown[][] = [[], [], [], [], [], []];
  private readonly events: unknown[][] = Array.from({ length: 13 }, () => []);
  private ids: number[] = [];

  constructor(
    private readonly q: PgQuery,
    private readonly size: number,
  ) {}

  async insertRun(workspaceId: number, workflowId: number, contactId: number, definition: string, trigger: string): Promise<number> {
    if (!this.ids.length) {
      const { rows } = await this.q('svc_run_ids', "SELECT nextval('workflow_runs_id_seq') AS id FROM generate_series(1, $1)", [Math.max(this.size, 1)]);
      this.ids = rows.map((r: { id: number }) => r.id);
    }
    const id = this.ids.shift()!;
    [id, workspaceId, workflowId, contactId, definition, trigger].forEach((v, i) => this.runs[i]!.push(v));
    return id;
  }

  insertEvent(r: EventRow): void {
    eventValues(r).forEach((v, i) => this.events[i]!.push(v));
  }

  /** Writes what is held (before a read that must see it, and at the end of the batch). */
  async flush(): Promise<void> {
    if (this.runs[0]!.length) {
      await this.q(
        'svc_runs_insert',
        `INSERT INTO workflow_runs (id, workspace_id, workflow_id, contact_id, definition, "trigger")
         SELECT id, ws, wf, c, d::json, t::json FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::text[], $6::text[]) AS r(id, ws, wf, c, d, t)`,
        this.runs,
      );
      for (const column of this.runs) column.length = 0;
    }
    if (this.events[0]!.length) {
      await this.q(
        'svc_events_insert',
        `INSERT INTO webhook_events (workspace_id, workflow_id, status_code, code, run_id, contact_id, source_ip, content_type, idempotency_key, body, body_size, body_sha256, replay_of)
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::int[], $4::text[], $5::bigint[], $6::bigint[], $7::text[], $8::text[], $9::text[], $10::bytea[], $11::int[], $12::text[], $13::bigint[])`,
        this.events,
      );
      for (const column of this.events) column.length = 0;
    }
  }
}

/**
 * PostgreSQL: named statements (each connection prepares them once), on a batch's connection
 * or the pool. `held`: a careless batch's writes, sent together at its end.
 */
function pgStatements(q: PgQuery, counted?: number[], held?: PgHeldWrites): IntakeSql {
  const inBatch = counted !== undefined;
  const one = async <T>(name: string, text: string, values: unknown[]): Promise<T | undefined> => (await q(name, text, values)).rows[0] as T | undefined;
  const workflowSql = `SELECT id, webhook_token, workspace_id, status, trigger_source, steps::text AS steps, webhook_lookup, webhook_path,
                              create_if_not_found::int AS create_if_not_found, contact_defaults::text AS contact_defaults, signing_secret
                         FROM workflows`;
  return {
    workflowByToken: (token) => one('svc_wf_token', `${workflowSql} WHERE webhook_token = $1`, [token]),
    workflowById: (id) => one('svc_wf_id', `${workflowSql} WHERE id = $1`, [id]),
    async contactId(workspaceId, kind, value, known) {
      if (held && known !== undefined) return known;
      const column = kind === 'contactId' ? 'id' : kind;
      return (await one<{ id: number }>(`svc_contact_${kind}`, `SELECT id FROM contacts WHERE workspace_id = $1 AND ${column} = $2`, [workspaceId, value]))?.id;
    },
    async insertRun(workspaceId, workflowId, contactId, definition, trigger) {
      // Counted at the end of the batch (pgIntake), in workspace order.
      counted?.push(workspaceId);
      if (held) return held.insertRun(workspaceId, workflowId, contactId, definition, trigger);
      const row = await one<{ id: number }>(
        'svc_run_insert',
        'INSERT INTO workflow_runs (workspace_id, workflow_id, contact_id, definition, "trigger") VALUES ($1, $2, $3, $4::json, $5::json) RETURNING id',
        [workspaceId, workflowId, contactId, definition, trigger],
      );
      return row!.id;
    },
    async insertEvent(r) {
      if (held) return held.insertEvent(r);
      await q(
        'svc_event_insert',
        `INSERT INTO webhook_events (workspace_id, workflow_id, status_code, code, run_id, contact_id, source_ip, content_type, idempotency_key, body, body_size, body_sha256, replay_of)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
        eventValues(r),
      );
    },
    async firstByIdempotencyKey(workflowId, key, since) {
      if (inBatch) await q('svc_key_lock', 'SELECT pg_advisory_xact_lock($1::int, hashtext($2))', [workflowId, key]);
      // The batch's own earlier requests with this key must be seen.
      await held?.flush();
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
  const held = new WeakMap<object, PgHeldWrites>();
  const group = new PgGroupCommit(store.pool, {
    // One batch at a time per node: a batch holds its counter rows until its COMMIT.
    concurrency: 1,
    afterJobs: async (_client, batch) => held.get(batch)?.flush(),
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
  const read = pgStatements((name, text, values) => store.pool.query({ name, text, values }));
  // Every request looks its contact up before it is queued: the lookups of one turn of the
  // event loop are one query per workspace and kind (an index scan for the list of values).
  const lookup = (kind: 'email' | 'phone' | 'contactId') => {
    const column = kind === 'contactId' ? 'id' : kind;
    return batchLoader(async (keys: { workspaceId: number; value: string | number }[]) => {
      const found = new Map<string, number>();
      for (const workspaceId of new Set(keys.map((k) => k.workspaceId))) {
        const values = keys.filter((k) => k.workspaceId === workspaceId).map((k) => k.value);
        const { rows } = await store.pool.query<{ id: number; v: string | number }>({
          name: `svc_contacts_${kind}`,
          text: `SELECT id, ${column} AS v FROM contacts WHERE workspace_id = $1 AND ${column} = ANY($2::${kind === 'contactId' ? 'bigint' : 'text'}[])`,
          values: [workspaceId, values],
        });
        for (const row of rows) found.set(`${workspaceId}:${row.v}`, row.id);
      }
      return keys.map((k) => found.get(`${k.workspaceId}:${k.value}`));
    });
  };
  const lookups = { email: lookup('email'), phone: lookup('phone'), contactId: lookup('contactId') };
  read.contactId = (workspaceId, kind, value) => lookups[kind]({ workspaceId, value });
  return {
    read,
    run: (job) =>
      group.run(async (client, batch, careful) => {
        const counted: number[] = [];
        const q: PgQuery = (name, text, values) => client.query({ name, text, values });
        let writes = held.get(batch);
        if (!careful && !writes) {
          writes = new PgHeldWrites(q, (batch as BatchKey).size);
          held.set(batch, writes);
        }
        const result = await runAsync(job(batch), pgStatements(q, counted, careful ? undefined : writes));
        const tally = tallies.get(batch) ?? new Map<number, number>();
        tallies.set(batch, tally);
        for (const workspaceId of counted) tally.set(workspaceId, (tally.get(workspaceId) ?? 0) + 1);
        return result;
      }),
    close: () => group.close(),
  };
}
