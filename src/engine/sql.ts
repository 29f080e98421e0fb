import type pg from 'pg';
import type { Db } from '../core/db/connection.js';
import { batchLoader } from '../core/db/batchLoader.js';
import type { Maybe } from '../core/db/statements.js';

/**
 * The run engine's statements, the one part of execution that differs between the stores
 * (docs/stores.md): SQLite's are prepared once on the thread's connection and answer plain
 * values; PostgreSQL's are named statements on a pooled connection and answer promises. The
 * executor awaits the reads (on SQLite an await of a plain value) and queues the writes as
 * operations that the run's commit applies (RunCommitter: synchronously on SQLite).
 */

export interface RunRow {
  id: number;
  workspace_id: number;
  workflow_id: number;
  contact_id: number | null;
  status: string;
  definition: string;
  step_states: string;
  trigger: string;
  lease_owner: string | null;
  /** 1 when the run's workspace is a sandbox: nothing it does may leave the machine. */
  sandbox: number;
}

export interface ContactRow {
  id: number;
  email: string | null;
  phone: string | null;
  first_name: string | null;
  last_name: string | null;
  attributes: string;
}

export interface ContactUpdate {
  email: string | null;
  phone: string | null;
  firstName: string | null;
  lastName: string | null;
  attributes: string;
  now: string;
  id: number;
  workspaceId: number;
}

export interface RunSave {
  id: number;
  owner: string;
  status: string;
  stepStates: string;
  runAt: string;
  now: string;
  finishedAt: string | null;
}

export interface AttemptInsert {
  workspaceId: number;
  channel: string;
  provider: string;
  to: string;
  status: string;
  attempt: number;
  providerMessageId: string | null;
  error: string | null;
  runId: number;
  stepIndex: number;
  templateId: number;
  rendered: string;
}

export interface AttemptMark {
  id: number;
  status: string;
  providerMessageId: string | null;
  error: string | null;
  now: string;
}

export interface EngineSql {
  run(id: number): Maybe<RunRow | undefined>;
  contact(id: number, workspaceId: number): Maybe<ContactRow | undefined>;
  tags(contactId: number): Maybe<{ name: string }[]>;
  workspace(id: number): Maybe<{ id: number; name: string; plan: string } | undefined>;
  template(id: number, workspaceId: number): Maybe<{ id: number; channel: string; content: string } | undefined>;
  /** Whether another contact of the workspace has this email (phone). */
  emailTaken(workspaceId: number, email: string, exceptId: number): Maybe<boolean>;
  phoneTaken(workspaceId: number, phone: string, exceptId: number): Maybe<boolean>;
  attemptsForStep(runId: number, stepIndex: number): Maybe<{ id: number; status: string }[]>;
  /** The workspace's provider for a channel (a sandbox has none: every channel is its outbox). */
  provider(workspaceId: number, channel: string): Maybe<string | undefined>;
  addTag(contactId: number, workspaceId: number, key: string, name: string): Maybe<unknown>;
  removeTag(contactId: number, workspaceId: number, key: string): Maybe<unknown>;
  updateContact(values: ContactUpdate): Maybe<unknown>;
  saveRun(values: RunSave): Maybe<unknown>;
  saveProgress(stepStates: string, now: string, id: number, owner: string): Maybe<unknown>;
  /** Answers the attempt's id. */
  insertAttempt(values: AttemptInsert): Maybe<number>;
  recordRequest(workspaceId: number, runId: number, stepIndex: number, method: string, url: string, headers: string, body: string | null): Maybe<unknown>;
  markAttempt(values: AttemptMark): Maybe<unknown>;
  /** Whether the run is still RUNNING under this lease token (on PostgreSQL the row is locked until the commit). */
  leaseHeld(id: number, token: string): Maybe<boolean>;
}

/** A write queued by a run, applied by its commit. */
export type EngineOp = (sql: EngineSql) => unknown;

const RUN_SQL = `SELECT id, workspace_id, workflow_id, contact_id, status, definition, step_states, "trigger", lease_owner,
   EXISTS (SELECT 1 FROM workspaces w WHERE w.id = workflow_runs.workspace_id AND w.sandbox_of IS NOT NULL) AS sandbox
 FROM workflow_runs WHERE id = ?`;
const PROVIDER_SQL = `SELECT provider FROM channel_settings WHERE workspace_id = ? AND channel = ?
   AND NOT EXISTS (SELECT 1 FROM workspaces w WHERE w.id = channel_settings.workspace_id AND w.sandbox_of IS NOT NULL)`;

/**
 * The values of the engine's wider writes in their statements' order, shared by both stores.
 * SQLite binds them by position too: by name, better-sqlite3 looks each one up on the object.
 */
const contactUpdateValues = (v: ContactUpdate) => [v.email, v.phone, v.firstName, v.lastName, v.attributes, v.now, v.id, v.workspaceId];
const runSaveValues = (v: RunSave) => [v.status, v.stepStates, v.runAt, v.now, v.finishedAt, v.id, v.owner];
export const attemptInsertValues = (v: AttemptInsert) => [
  v.workspaceId,
  v.channel,
  v.provider,
  v.to,
  v.status,
  v.attempt,
  v.providerMessageId,
  v.error,
  v.runId,
  v.stepIndex,
  v.templateId,
  v.rendered,
];
const attemptMarkValues = (v: AttemptMark) => [v.status, v.providerMessageId, v.error, v.now, v.id];

export function sqliteEngineSql(db: Db): EngineSql {
  const c = db.$client;
  const s = {
    run: c.prepare<[number], RunRow>(RUN_SQL),
    contact: c.prepare<[number, number], ContactRow>(
      'SELECT id, email, phone, first_name, last_name, attributes FROM contacts WHERE id = ? AND workspace_id = ?',
    ),
    tags: c.prepare<[number], { name: string }>('SELECT name FROM contact_tags WHERE contact_id = ? ORDER BY tag_key'),
    workspace: c.prepare<[number], { id: number; name: string; plan: string }>('SELECT id, name, plan FROM workspaces WHERE id = ?'),
    template: c.prepare<[number, number], { id: number; channel: string; content: string }>(
      'SELECT id, channel, content FROM templates WHERE id = ? AND workspace_id = ?',
    ),
    addTag: c.prepare('INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING'),
    removeTag: c.prepare('DELETE FROM contact_tags WHERE contact_id = ? AND workspace_id = ? AND tag_key = ?'),
    updateContact: c.prepare<unknown[]>(
      'UPDATE contacts SET email = ?, phone = ?, first_name = ?, last_name = ?, attributes = ?, updated_at = ? WHERE id = ? AND workspace_id = ?',
    ),
    emailTaken: c.prepare<[number, string, number], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND email = ? AND id != ?'),
    phoneTaken: c.prepare<[number, string, number], { id: number }>('SELECT id FROM contacts WHERE workspace_id = ? AND phone = ? AND id != ?'),
    saveRun: c.prepare<unknown[]>(
      `UPDATE workflow_runs SET status = ?, step_states = ?, run_at = ?, lease_owner = NULL, lease_until = NULL,
         updated_at = ?, finished_at = ? WHERE id = ? AND lease_owner = ?`,
    ),
    saveProgress: c.prepare('UPDATE workflow_runs SET step_states = ?, updated_at = ? WHERE id = ? AND lease_owner = ?'),
    attemptsForStep: c.prepare<[number, number], { id: number; status: string }>(
      'SELECT id, status FROM delivery_attempts WHERE run_id = ? AND step_index = ? ORDER BY attempt, id',
    ),
    insertAttempt: c.prepare<unknown[]>(
      `INSERT INTO delivery_attempts (workspace_id, channel, provider, "to", status, attempt, provider_message_id, error, run_id, step_index, template_id, rendered)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ),
    provider: c.prepare<[number, string], { provider: string }>(PROVIDER_SQL),
    recordRequest: c.prepare('INSERT INTO sandbox_requests (workspace_id, run_id, step_index, method, url, headers, body) VALUES (?, ?, ?, ?, ?, ?, ?)'),
    markAttempt: c.prepare<unknown[]>('UPDATE delivery_attempts SET status = ?, provider_message_id = ?, error = ?, updated_at = ? WHERE id = ?'),
    leaseHeld: c.prepare<[number, string], { id: number }>("SELECT id FROM workflow_runs WHERE id = ? AND lease_owner = ? AND status = 'RUNNING'"),
  };
  return {
    run: (id) => s.run.get(id),
    contact: (id, ws) => s.contact.get(id, ws),
    tags: (contactId) => s.tags.all(contactId),
    workspace: (id) => s.workspace.get(id),
    template: (id, ws) => s.template.get(id, ws),
    emailTaken: (ws, email, id) => s.emailTaken.get(ws, email, id) !== undefined,
    phoneTaken: (ws, phone, id) => s.phoneTaken.get(ws, phone, id) !== undefined,
    attemptsForStep: (runId, stepIndex) => s.attemptsForStep.all(runId, stepIndex),
    provider: (ws, channel) => s.provider.get(ws, channel)?.provider,
    addTag: (contactId, ws, key, name) => s.addTag.run(contactId, ws, key, name),
    removeTag: (contactId, ws, key) => s.removeTag.run(contactId, ws, key),
    updateContact: (values) => s.updateContact.run(...contactUpdateValues(values)),
    saveRun: (values) => s.saveRun.run(...runSaveValues(values)),
    saveProgress: (states, now, id, owner) => s.saveProgress.run(states, now, id, owner),
    insertAttempt: (values) => Number(s.insertAttempt.run(...attemptInsertValues(values)).lastInsertRowid),
    recordRequest: (ws, runId, stepIndex, method, url, headers, body) => s.recordRequest.run(ws, runId, stepIndex, method, url, headers, body),
    markAttempt: (values) => s.markAttempt.run(...attemptMarkValues(values)),
    leaseHeld: (id, token) => s.leaseHeld.get(id, token) !== undefined,
  };
}

/** `?` placeholders numbered for PostgreSQL ($1, $2, ...). */
function numbered(text: string): string {
  let n = 0;
  return text.replace(/\?/g, () => `$${++n}`);
}

/** PostgreSQL: named statements (each connection prepares them once) through `query`, on a batch's connection or the pool. */
/** A change to a tag's count of contacts, for a batch that counts them itself (engine/committer.ts). */
export interface TagDelta {
  workspaceId: number;
  key: string;
  name: string;
  delta: number;
}

/**
 * `deltas`: the batch's transaction defers tag counts (svc.defer_tag_counts, migration 0003),
 * so each tag added or removed is told there, to be counted before its COMMIT.
 */
export function pgEngineSql(client: Pick<pg.Pool, 'query'> | Pick<pg.PoolClient, 'query'>, deltas?: TagDelta[]): EngineSql {
  const q = async <T>(name: string, text: string, values: unknown[]): Promise<T[]> =>
    (await (client as pg.Pool).query({ name: `svc_engine_${name}`, text, values })).rows as T[];
  const one = async <T>(name: string, text: string, values: unknown[]): Promise<T | undefined> => (await q<T>(name, text, values))[0];
  return {
    // JSON columns come back as their text (store.ts sets the driver so), as on SQLite.
    run: (id) => one('run', numbered(RUN_SQL.replace(') AS sandbox', ')::int AS sandbox')), [id]),
    contact: (id, ws) =>
      one('contact', 'SELECT id, email, phone, first_name, last_name, attributes FROM contacts WHERE id = $1 AND workspace_id = $2', [id, ws]),
    tags: (contactId) => q('tags', 'SELECT name FROM contact_tags WHERE contact_id = $1 ORDER BY tag_key', [contactId]),
    workspace: (id) => one('workspace', 'SELECT id, name, plan FROM workspaces WHERE id = $1', [id]),
    template: (id, ws) => one('template', 'SELECT id, channel, content FROM templates WHERE id = $1 AND workspace_id = $2', [id, ws]),
    emailTaken: async (ws, email, id) =>
      (await one('email_taken', 'SELECT id FROM contacts WHERE workspace_id = $1 AND email = $2 AND id != $3', [ws, email, id])) !== undefined,
    phoneTaken: async (ws, phone, id) =>
      (await one('phone_taken', 'SELECT id FROM contacts WHERE workspace_id = $1 AND phone = $2 AND id != $3', [ws, phone, id])) !== undefined,
    attemptsForStep: (runId, stepIndex) =>
      q('attempts', 'SELECT id, status FROM delivery_attempts WHERE run_id = $1 AND step_index = $2 ORDER BY attempt, id', [runId, stepIndex]),
    provider: async (ws, channel) => (await one<{ provider: string }>('provider', numbered(PROVIDER_SQL), [ws, channel]))?.provider,
    addTag: async (contactId, ws, key, name) => {
      const added = await q(
        'add_tag',
        'INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING contact_id',
        [contactId, ws, key, name],
      );
      if (added.length) deltas?.push({ workspaceId: ws, key, name, delta: 1 });
    },
    removeTag: async (contactId, ws, key) => {
      const removed = await q<{ name: string }>(
        'remove_tag',
        'DELETE FROM contact_tags WHERE contact_id = $1 AND workspace_id = $2 AND tag_key = $3 RETURNING name',
        [contactId, ws, key],
      );
      if (removed.length) deltas?.push({ workspaceId: ws, key, name: removed[0]!.name, delta: -1 });
    },
    updateContact: (v) =>
      q(
        'update_contact',
        'UPDATE contacts SET email = $1, phone = $2, first_name = $3, last_name = $4, attributes = $5::json, updated_at = $6 WHERE id = $7 AND workspace_id = $8',
        contactUpdateValues(v),
      ),
    saveRun: (v) =>
      q(
        'save_run',
        `UPDATE workflow_runs SET status = $1, step_states = $2::json, run_at = $3, lease_owner = NULL, lease_until = NULL, updated_at = $4, finished_at = $5
          WHERE id = $6 AND lease_owner = $7`,
        runSaveValues(v),
      ),
    saveProgress: (states, now, id, owner) =>
      q('save_progress', 'UPDATE workflow_runs SET step_states = $1::json, updated_at = $2 WHERE id = $3 AND lease_owner = $4', [states, now, id, owner]),
    insertAttempt: async (v) =>
      (await one<{ id: number }>(
        'insert_attempt',
        `INSERT INTO delivery_attempts (workspace_id, channel, provider, "to", status, attempt, provider_message_id, error, run_id, step_index, template_id, rendered)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::json) RETURNING id`,
        attemptInsertValues(v),
      ))!.id,
    recordRequest: (ws, runId, stepIndex, method, url, headers, body) =>
      q(
        'record_request',
        'INSERT INTO sandbox_requests (workspace_id, run_id, step_index, method, url, headers, body) VALUES ($1, $2, $3, $4, $5, $6::json, $7)',
        [ws, runId, stepIndex, method, url, headers, body],
      ),
    markAttempt: (v) =>
      q('mark_attempt', 'UPDATE delivery_attempts SET status = $1, provider_message_id = $2, error = $3, updated_at = $4 WHERE id = $5', attemptMarkValues(v)),
    leaseHeld: async (id, token) =>
      (await one('lease_held', "SELECT id FROM workflow_runs WHERE id = $1 AND lease_owner = $2 AND status = 'RUNNING' FOR UPDATE", [id, token])) !== undefined,
  };
}

/** The scheduler's statements (claims, leases), on the main thread, in its transactions. */
export interface SchedulerSql {
  /** WAITING runs whose time has come back to QUEUED. */
  promoteWaiting(now: string, limit: number): Maybe<unknown>;
  /** Claims whose lease ran out (the process died or stalled) back to QUEUED; the token goes with them. */
  promoteExpired(now: string, limit: number): Maybe<unknown>;
  /** The workspaces with QUEUED runs. */
  queuedWorkspaces(): Maybe<number[]>;
  /**
   * Takes up to `limit` QUEUED runs of a workspace, oldest first, under the lease token `token`:
   * new for each claiming transaction, shared by the runs it takes (every lease check names
   * the run's id with it), so no token is made and read back per run.
   */
  claim(workspaceId: number, limit: number, now: string, until: string, token: string): Maybe<{ id: number }[]>;
  /**
   * Extends a lease: 'held' when extended; 'busy' when the row is being written right now
   * (PostgreSQL: locked by a commit, skipped rather than waited for, tried at the next
   * renewal); 'done' when the run was saved and left RUNNING meanwhile (this process finished
   * it); 'lost' when it is RUNNING or QUEUED without this token (taken over).
   */
  renew(id: number, token: string, until: string): Maybe<Renewal>;
  release(id: number, token: string, now: string): Maybe<unknown>;
}

export type Renewal = 'held' | 'busy' | 'done' | 'lost';

const renewalOf = (row: { status: string } | undefined): Renewal => (row && (row.status === 'RUNNING' || row.status === 'QUEUED') ? 'lost' : 'done');

/**
 * The scheduler's statements on SQLite. Each names its status as a literal, so that it reads
 * the partial index of the runs in that status (schema.ts; test/server/queryPlans.test.ts).
 */
export const SQLITE_SCHEDULER_STATEMENTS = {
  promoteWaiting: `UPDATE workflow_runs SET status = 'QUEUED', updated_at = @now
        WHERE id IN (SELECT id FROM workflow_runs WHERE status = 'WAITING' AND run_at <= @now ORDER BY run_at LIMIT @limit)`,
  promoteExpired: `UPDATE workflow_runs SET status = 'QUEUED', lease_owner = NULL, lease_until = NULL, updated_at = @now
        WHERE id IN (SELECT id FROM workflow_runs WHERE status = 'RUNNING' AND (lease_until IS NULL OR lease_until < @now) LIMIT @limit)`,
  // One index seek per workspace (a skip scan of the ready index).
  queuedWorkspaces: `WITH RECURSIVE ws(id) AS (
         SELECT (SELECT workspace_id FROM workflow_runs WHERE status = 'QUEUED' ORDER BY workspace_id LIMIT 1)
         UNION ALL
         SELECT (SELECT workspace_id FROM workflow_runs WHERE status = 'QUEUED' AND workspace_id > ws.id ORDER BY workspace_id LIMIT 1) FROM ws WHERE ws.id IS NOT NULL
       ) SELECT id FROM ws WHERE id IS NOT NULL`,
  // A claim reads the runs it takes (the oldest QUEUED of the workspace, through the ready
  // index), then takes each by its id. One UPDATE of many rows with RETURNING made SQLite keep
  // a statement journal of every page it changed, in case the statement had to be undone
  // alone (npm run bench:batch; docs/benchmark-history.md, Webhook ingest); an UPDATE of one row needs none.
  claimable: `SELECT id FROM workflow_runs WHERE status = 'QUEUED' AND workspace_id = @workspaceId ORDER BY run_at, id LIMIT @limit`,
  claimOne: `UPDATE workflow_runs SET status = 'RUNNING', lease_owner = @token, lease_until = @until, updated_at = @now WHERE id = @id AND status = 'QUEUED'`,
  renew: `UPDATE workflow_runs SET lease_until = @until WHERE id = @id AND lease_owner = @token AND status = 'RUNNING'`,
  status: 'SELECT status FROM workflow_runs WHERE id = ?',
  release: `UPDATE workflow_runs SET status = 'QUEUED', lease_owner = NULL, lease_until = NULL, updated_at = @now WHERE id = @id AND lease_owner = @token AND status = 'RUNNING'`,
} as const;

export function sqliteSchedulerSql(db: Db): SchedulerSql {
  const c = db.$client;
  const q = SQLITE_SCHEDULER_STATEMENTS;
  const s = {
    promoteWaiting: c.prepare<{ now: string; limit: number }>(q.promoteWaiting),
    promoteExpired: c.prepare<{ now: string; limit: number }>(q.promoteExpired),
    queuedWorkspaces: c.prepare<[], { id: number }>(q.queuedWorkspaces),
    claimable: c.prepare<{ workspaceId: number; limit: number }, { id: number }>(q.claimable),
    claimOne: c.prepare<{ id: number; now: string; until: string; token: string }>(q.claimOne),
    renew: c.prepare<{ id: number; token: string; until: string }>(q.renew),
    status: c.prepare<[number], { status: string }>(q.status),
    release: c.prepare<{ id: number; token: string; now: string }>(q.release),
  };
  return {
    promoteWaiting: (now, limit) => s.promoteWaiting.run({ now, limit }),
    promoteExpired: (now, limit) => s.promoteExpired.run({ now, limit }),
    queuedWorkspaces: () => s.queuedWorkspaces.all().map((r) => r.id),
    // Inside the claiming transaction, which holds the write lock: the runs read are still QUEUED.
    claim: (workspaceId, limit, now, until, token) =>
      s.claimable.all({ workspaceId, limit }).filter(({ id }) => s.claimOne.run({ id, now, until, token }).changes === 1),
    renew: (id, token, until) => (s.renew.run({ id, token, until }).changes > 0 ? 'held' : renewalOf(s.status.get(id))),
    release: (id, token, now) => s.release.run({ id, token, now }),
  };
}

/**
 * PostgreSQL: the same statements for many nodes at once. Rows being claimed, promoted or
 * renewed elsewhere are skipped (FOR UPDATE SKIP LOCKED), so nodes claiming together never
 * wait for each other and never take the same run.
 */
export function pgSchedulerSql(client: Pick<pg.PoolClient, 'query'>): SchedulerSql {
  const q = async <T>(name: string, text: string, values: unknown[]): Promise<pg.QueryResult & { rows: T[] }> =>
    client.query({ name: `svc_sched_${name}`, text, values }) as Promise<pg.QueryResult & { rows: T[] }>;
  return {
    promoteWaiting: (now, limit) =>
      q(
        'promote_waiting',
        `UPDATE workflow_runs SET status = 'QUEUED', updated_at = $1
          WHERE id IN (SELECT id FROM workflow_runs WHERE status = 'WAITING' AND run_at <= $1 ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
        [now, limit],
      ),
    promoteExpired: (now, limit) =>
      q(
        'promote_expired',
        `UPDATE workflow_runs SET status = 'QUEUED', lease_owner = NULL, lease_until = NULL, updated_at = $1
          WHERE id IN (SELECT id FROM workflow_runs WHERE status = 'RUNNING' AND (lease_until IS NULL OR lease_until < $1) LIMIT $2 FOR UPDATE SKIP LOCKED)`,
        [now, limit],
      ),
    queuedWorkspaces: async () =>
      (
        await q<{ id: number }>(
          'queued_workspaces',
          `WITH RECURSIVE ws(id) AS (
             SELECT (SELECT workspace_id FROM workflow_runs WHERE status = 'QUEUED' ORDER BY workspace_id LIMIT 1)
             UNION ALL
             SELECT (SELECT workspace_id FROM workflow_runs WHERE status = 'QUEUED' AND workspace_id > ws.id ORDER BY workspace_id LIMIT 1) FROM ws WHERE ws.id IS NOT NULL
           ) SELECT id FROM ws WHERE id IS NOT NULL`,
          [],
        )
      ).rows.map((r) => r.id),
    claim: async (workspaceId, limit, now, until, token) =>
      (
        await q<{ id: number }>(
          'claim',
          `UPDATE workflow_runs SET status = 'RUNNING', lease_owner = $5, lease_until = $3, updated_at = $4
            WHERE id IN (SELECT id FROM workflow_runs WHERE status = 'QUEUED' AND workspace_id = $1 ORDER BY run_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
            RETURNING id`,
          [workspaceId, limit, until, now, token],
        )
      ).rows,
    // A row locked by a commit is skipped, not waited for: waiting here, with other leases of
    // this transaction held, is how renewals and commits deadlocked.
    renew: async (id, token, until) => {
      const [row] = (
        await q<{ status: string; renewed: boolean }>(
          'renew',
          `WITH l AS (SELECT id, status, lease_owner FROM workflow_runs WHERE id = $1 FOR UPDATE SKIP LOCKED),
                u AS (UPDATE workflow_runs w SET lease_until = $3 FROM l WHERE w.id = l.id AND l.lease_owner = $2 AND l.status = 'RUNNING' RETURNING w.id)
           SELECT l.status, EXISTS (SELECT 1 FROM u) AS renewed FROM l`,
          [id, token, until],
        )
      ).rows;
      if (!row) return (await q<{ id: number }>('renew_exists', 'SELECT id FROM workflow_runs WHERE id = $1', [id])).rows.length ? 'busy' : 'done';
      return row.renewed ? 'held' : renewalOf(row);
    },
    release: (id, token, now) =>
      q(
        'release',
        `UPDATE workflow_runs SET status = 'QUEUED', lease_owner = NULL, lease_until = NULL, updated_at = $3 WHERE id = $1 AND lease_owner = $2 AND status = 'RUNNING'`,
        [id, token, now],
      ),
  };
}

/** How long an engine thread on PostgreSQL reuses a template or provider it read. */
export const ENGINE_READ_CACHE_MS = 1_000;

/** A run read with its workspace, contact and the contact's tags (a JSON array of names, in tag order). */
interface RunWithContext extends RunRow {
  /** Null only for a run whose workspace is gone (SQLite's read joins it LEFT). */
  ws_name: string | null;
  ws_plan: string | null;
  c_id: number | null;
  c_email: string | null;
  c_phone: string | null;
  c_first_name: string | null;
  c_last_name: string | null;
  c_attributes: string | null;
  c_tags: string | null;
}

/**
 * The statements an engine thread reads through on PostgreSQL, where each is a round trip:
 * reading a run also reads its workspace, contact and tags (one query instead of four; the
 * executor asks for them next and gets them from that read: RunContext), and a template or
 * channel provider read is reused for ENGINE_READ_CACHE_MS: a change to one reaches the
 * runs of every node within a second, as the cluster's other caches do. Writes and the
 * reads inside a commit go through pgEngineSql as ever.
 */
export function pgReadingEngineSql(pool: Pick<pg.Pool, 'query'>): EngineSql {
  const base = pgEngineSql(pool);
  const read = async <T>(name: string, text: string, values: unknown[]): Promise<T[]> =>
    (await pool.query({ name: `svc_engine_${name}`, text, values })).rows as T[];
  const cache = new Map<string, { at: number; value: Promise<unknown> }>();
  const cached = <T>(key: string, load: () => Promise<T>): Promise<T> => {
    const now = Date.now();
    const hit = cache.get(key);
    if (hit && now - hit.at < ENGINE_READ_CACHE_MS) return hit.value as Promise<T>;
    if (cache.size > 10_000) cache.clear();
    const value = load();
    cache.set(key, { at: now, value });
    // A failed read is not kept.
    value.catch(() => cache.delete(key));
    return value;
  };
  // The runs of a task start together, and reach their sends together: the reads of one turn
  // of the event loop are one query.
  const context = new RunContext(
    base,
    batchLoader(async (ids: number[]) => {
      const rows = await read<RunWithContext>(
        'runs_with_context',
        `SELECT r.id, r.workspace_id, r.workflow_id, r.contact_id, r.status, r.definition, r.step_states, r."trigger", r.lease_owner,
                  (w.sandbox_of IS NOT NULL)::int AS sandbox, w.name AS ws_name, w.plan AS ws_plan,
                  c.id AS c_id, c.email AS c_email, c.phone AS c_phone, c.first_name AS c_first_name, c.last_name AS c_last_name,
                  c.attributes AS c_attributes,
                  (SELECT json_agg(t.name ORDER BY t.tag_key) FROM contact_tags t WHERE t.contact_id = c.id) AS c_tags
             FROM workflow_runs r JOIN workspaces w ON w.id = r.workspace_id
             LEFT JOIN contacts c ON c.id = r.contact_id AND c.workspace_id = r.workspace_id
            WHERE r.id = ANY($1::bigint[])`,
        [ids],
      );
      const byId = new Map(rows.map((r) => [r.id, r]));
      return ids.map((id) => byId.get(id));
    }),
  );
  const attempts = batchLoader(async (keys: { runId: number; stepIndex: number }[]) => {
    const rows = await read<{ id: number; run_id: number; step_index: number; status: string }>(
      'attempts_of_runs',
      'SELECT id, run_id, step_index, status FROM delivery_attempts WHERE run_id = ANY($1::bigint[]) ORDER BY attempt, id',
      [[...new Set(keys.map((k) => k.runId))]],
    );
    return keys.map((k) => rows.filter((r) => r.run_id === k.runId && r.step_index === k.stepIndex).map((r) => ({ id: Number(r.id), status: r.status })));
  });
  return {
    ...base,
    attemptsForStep: (runId, stepIndex) => attempts({ runId, stepIndex }),
    run: (id) => context.run(id),
    contact: (id, ws) => context.contact(id, ws),
    tags: (contactId) => context.tags(contactId),
    workspace: (id) => context.workspace(id),
    template: (id, ws) => cached(`t:${ws}:${id}`, () => base.template(id, ws) as Promise<{ id: number; channel: string; content: string } | undefined>),
    provider: (ws, channel) => cached(`p:${ws}:${channel}`, () => base.provider(ws, channel) as Promise<string | undefined>),
  };
}

/** Entries the context maps keep at most: left behind only by runs that stopped before reading them. */
const CONTEXT_ENTRIES_MAX = 1_000;

/**
 * What reading a run with its context brought along, for the executor's next reads: it asks
 * for the run's workspace, contact and tags right after the run, in the same turn of the
 * event loop, so they are as fresh as the run. Every run read refreshes them; runs of one
 * contact read together share one snapshot, as they did when each read its own a moment
 * apart (none of them commits before all have read).
 */
class RunContext {
  /** By contact id, with the workspace the run that read it belongs to. */
  private readonly contacts = new Map<number, { row: ContactRow; workspaceId: number }>();
  private readonly tagsOf = new Map<number, { name: string }[]>();
  private readonly workspaces = new Map<number, { id: number; name: string; plan: string }>();

  constructor(
    private readonly base: EngineSql,
    private readonly load: (id: number) => Promise<RunWithContext | undefined>,
  ) {}

  async run(id: number): Promise<RunRow | undefined> {
    const row = await this.load(id);
    if (!row) return undefined;
    const { ws_name, ws_plan, c_id, c_email, c_phone, c_first_name, c_last_name, c_attributes, c_tags, ...run } = row;
    if (ws_name !== null && ws_plan !== null) {
      const ws = { id: run.workspace_id, name: ws_name, plan: ws_plan };
      if (this.workspaces.size > CONTEXT_ENTRIES_MAX) this.workspaces.clear();
      this.workspaces.set(ws.id, ws);
    }
    if (c_id !== null) {
      if (this.contacts.size > CONTEXT_ENTRIES_MAX) this.contacts.clear();
      if (this.tagsOf.size > CONTEXT_ENTRIES_MAX) this.tagsOf.clear();
      this.contacts.set(c_id, {
        row: { id: c_id, email: c_email, phone: c_phone, first_name: c_first_name, last_name: c_last_name, attributes: c_attributes ?? '{}' },
        workspaceId: run.workspace_id,
      });
      this.tagsOf.set(
        c_id,
        ((c_tags ? JSON.parse(c_tags) : []) as string[]).map((name) => ({ name })),
      );
    } else if (run.contact_id !== null) {
      // Gone (or moved) since an earlier read: nothing of it may be answered from here.
      this.contacts.delete(run.contact_id);
      this.tagsOf.delete(run.contact_id);
    }
    return run;
  }

  async contact(id: number, workspaceId: number): Promise<ContactRow | undefined> {
    const read = this.contacts.get(id);
    return read?.workspaceId === workspaceId ? read.row : this.base.contact(id, workspaceId);
  }

  async tags(contactId: number): Promise<{ name: string }[]> {
    return this.tagsOf.get(contactId) ?? this.base.tags(contactId);
  }

  /** The workspace as the last run read found it. */
  workspace(id: number): Maybe<{ id: number; name: string; plan: string } | undefined> {
    return this.workspaces.get(id) ?? this.base.workspace(id);
  }
}

/**
 * The statements an engine thread reads through on SQLite. Every statement outside a
 * transaction takes and drops the database's read lock (two fcntl calls and an fstat, about
 * 2.5 µs, more than the read itself): reading a run also reads its workspace, contact and
 * tags, and the runs a task starts together (in one turn, before any of them awaits) are
 * read by one statement. Nothing is cached beyond that read: templates and providers are
 * read as they are now, as ever.
 */
export function sqliteReadingEngineSql(db: Db): EngineSql {
  const base = sqliteEngineSql(db);
  const runs = db.$client.prepare<[string], RunWithContext>(
    `SELECT r.id, r.workspace_id, r.workflow_id, r.contact_id, r.status, r.definition, r.step_states, r."trigger", r.lease_owner,
            (w.sandbox_of IS NOT NULL) AS sandbox, w.name AS ws_name, w.plan AS ws_plan,
            c.id AS c_id, c.email AS c_email, c.phone AS c_phone, c.first_name AS c_first_name, c.last_name AS c_last_name,
            c.attributes AS c_attributes,
            (SELECT json_group_array(t.name ORDER BY t.tag_key) FROM contact_tags t WHERE t.contact_id = c.id) AS c_tags
       FROM json_each(?) j JOIN workflow_runs r ON r.id = j.value
       LEFT JOIN workspaces w ON w.id = r.workspace_id
       LEFT JOIN contacts c ON c.id = r.contact_id AND c.workspace_id = r.workspace_id`,
  );
  const context = new RunContext(
    base,
    batchLoader(
      async (ids: number[]) => {
        const byId = new Map(runs.all(JSON.stringify(ids)).map((r) => [r.id, r]));
        return ids.map((id) => byId.get(id));
      },
      { schedule: queueMicrotask },
    ),
  );
  return {
    ...base,
    run: (id) => context.run(id),
    contact: (id, ws) => context.contact(id, ws),
    tags: (contactId) => context.tags(contactId),
    workspace: (id) => context.workspace(id),
  };
}
