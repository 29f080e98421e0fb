import type { Statement } from 'better-sqlite3';
import type { Config } from '../config.js';
import { rawSql } from '../db/dialect.js';
import type { SqliteStore, Store } from '../db/store.js';

/** Rows deleted per statement: small enough that a batch holds the write lock briefly. */
export const PRUNE_BATCH = 500;
const DAY_MS = 86_400_000;

/** What one kind of pruning deletes: rows older than the cutoff its setting gives. */
interface PruneRule {
  what: 'runs' | 'deliveryAttempts' | 'auditEntries' | 'sessions' | 'webhookEvents' | 'sandboxRequests';
  /** The cutoff (ISO time) for now, or null when the setting keeps these rows for ever. */
  cutoff(config: Config, now: number): string | null;
  sql: string;
  /** Whether to run another batch after one that deleted `n` rows (default: it was full). */
  again?(n: number): boolean;
}

const again = (rule: PruneRule, n: number) => (rule.again ? rule.again(n) : n >= PRUNE_BATCH);

const before = (days: number, now: number) => new Date(now - days * DAY_MS).toISOString();

export const RULES: PruneRule[] = [
  {
    what: 'runs',
    cutoff: (c, now) => (c.runRetentionDays > 0 ? before(c.runRetentionDays, now) : null),
    sql: `DELETE FROM workflow_runs WHERE id IN (SELECT id FROM workflow_runs WHERE finished_at < @cutoff AND status IN ('COMPLETED', 'FAILED') LIMIT ${PRUNE_BATCH})`,
  },
  {
    what: 'deliveryAttempts',
    cutoff: (c, now) => (c.deliveryRetentionDays > 0 ? before(c.deliveryRetentionDays, now) : null),
    sql: `DELETE FROM delivery_attempts WHERE id IN (SELECT id FROM delivery_attempts WHERE created_at < @cutoff AND status IN ('SENT', 'FAILED') LIMIT ${PRUNE_BATCH})`,
  },
  {
    what: 'auditEntries',
    cutoff: (c, now) => (c.auditRetentionDays > 0 ? before(c.auditRetentionDays, now) : null),
    sql: `DELETE FROM audit_logs WHERE id IN (SELECT id FROM audit_logs WHERE at < @cutoff LIMIT ${PRUNE_BATCH})`,
  },
  {
    // A session's expires_at is its family's absolute end; kept a few days past it.
    what: 'sessions',
    cutoff: (c, now) => before(c.sessionRetentionDays, now),
    sql: `DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE expires_at < @cutoff LIMIT ${PRUNE_BATCH})`,
  },
  {
    // The oldest ids first, without an index on received_at (every webhook request wrote an
    // entry into one): an event's received_at grows with its id, so the events past the
    // period are the first ids. Of the first PRUNE_BATCH ids, those past it go; once the
    // first id is recent, a pass reads PRUNE_BATCH rows and deletes nothing. Batches go on
    // while one deletes anything, not only while one is full: a few early ids stamped later
    // (a clock set back, a restored copy) would otherwise hold it to one short batch a turn.
    what: 'webhookEvents',
    cutoff: (c, now) => before(c.webhookEventRetentionDays, now),
    sql: `DELETE FROM webhook_events WHERE id IN (
            SELECT id FROM (SELECT id, received_at FROM webhook_events ORDER BY id LIMIT ${PRUNE_BATCH}) AS oldest WHERE received_at < @cutoff)`,
    again: (n) => n > 0,
  },
  {
    // What a sandbox's http_request steps would have sent: kept as long as deliveries.
    what: 'sandboxRequests',
    cutoff: (c, now) => (c.deliveryRetentionDays > 0 ? before(c.deliveryRetentionDays, now) : null),
    sql: `DELETE FROM sandbox_requests WHERE id IN (SELECT id FROM sandbox_requests WHERE created_at < @cutoff LIMIT ${PRUNE_BATCH})`,
  },
];

export type PruneCounts = Record<PruneRule['what'], number>;

/**
 * Deletes what the retention settings no longer keep, a batch of at most PRUNE_BATCH rows
 * per kind per call, so each call is one short write. Call it again while `more` is true.
 */
export class Pruner {
  private readonly statements: { rule: PruneRule; stmt: Statement<{ cutoff: string }> }[];

  constructor(
    store: SqliteStore,
    private readonly config: Config,
  ) {
    // On the writer connection: batches run synchronously in the group commit, which writes through it.
    this.statements = RULES.map((rule) => ({ rule, stmt: store.writer.$client.prepare<{ cutoff: string }>(rule.sql) }));
  }

  /** One batch of each kind (run it inside the caller's write transaction on the store's writer). */
  batch(now = Date.now()): { deleted: PruneCounts; more: boolean } {
    const deleted = { runs: 0, deliveryAttempts: 0, auditEntries: 0, sessions: 0, webhookEvents: 0, sandboxRequests: 0 };
    let more = false;
    for (const { rule, stmt } of this.statements) {
      const cutoff = rule.cutoff(this.config, now);
      if (cutoff === null) continue;
      const n = stmt.run({ cutoff }).changes;
      deleted[rule.what] = n;
      if (again(rule, n)) more = true;
    }
    return { deleted, more };
  }
}

/** Names "svc retention pruning" in pg_locks: one node of a cluster prunes at a time. */
export const PRUNE_LOCK_KEY = 7_140_002;

/**
 * PostgreSQL: the same rules, a batch of each kind per transaction, until nothing is left.
 * Each transaction first tries the pruning lock; when another node holds it, that node is
 * pruning and this one stops (it tries again at its next turn).
 */
export async function pruneAllPg(store: Store, config: Config, now = Date.now()): Promise<PruneCounts> {
  const total = { runs: 0, deliveryAttempts: 0, auditEntries: 0, sessions: 0, webhookEvents: 0, sandboxRequests: 0 };
  for (;;) {
    const { more, deleted } = await store.transaction(async (tx) => {
      // Counted afresh by each try: the store runs this body again after a conflict.
      const deleted: Partial<PruneCounts> = {};
      const raw = rawSql(store, tx);
      const [lock] = await raw.all<{ held: boolean }>('SELECT pg_try_advisory_xact_lock(?) AS held', [PRUNE_LOCK_KEY]);
      if (!lock?.held) return { more: false, deleted };
      let more = false;
      for (const rule of RULES) {
        const cutoff = rule.cutoff(config, now);
        if (cutoff === null) continue;
        const n = await raw.run(rule.sql.replace('@cutoff', '?'), [cutoff]);
        deleted[rule.what] = (deleted[rule.what] ?? 0) + n;
        if (again(rule, n)) more = true;
      }
      return { more, deleted };
    });
    for (const [what, n] of Object.entries(deleted) as [keyof PruneCounts, number][]) total[what] += n;
    if (!more) return total;
  }
}

/**
 * Prunes until nothing is left to prune, one small transaction per batch through `write`
 * (the server's group commit), yielding between batches so requests go on being served.
 */
export async function pruneAll(pruner: Pruner, write: <T>(work: () => T) => Promise<T>, now = Date.now()): Promise<PruneCounts> {
  const total = { runs: 0, deliveryAttempts: 0, auditEntries: 0, sessions: 0, webhookEvents: 0, sandboxRequests: 0 };
  for (;;) {
    const { deleted, more } = await write(() => pruner.batch(now));
    for (const k of Object.keys(total) as (keyof PruneCounts)[]) total[k] += deleted[k];
    if (!more) return total;
    await new Promise((r) => setImmediate(r));
  }
}
