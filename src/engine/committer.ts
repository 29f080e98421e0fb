import type pg from 'pg';
import type { Db } from '../core/db/connection.js';
import { type BatchKey, isTransient, PgGroupCommit } from '../core/db/pgGroupCommit.js';
import { processWriteLock } from '../core/db/writeLock.js';
import { HeldEngineSql } from './heldWrites.js';
import { type EngineOp, type EngineSql, pgEngineSql, sqliteEngineSql, type TagDelta } from './sql.js';

/** A run's claim: its id and the token its lease was taken with. */
export interface LeasedRun {
  id: number;
  token: string;
}

/** Runs' commits applied in one transaction at most. */
const MAX_ENTRIES_PER_COMMIT = 64;

/** Written instead when a run's writes fail to apply (a unique clash, say). */
export type OnFailure = (err: unknown) => EngineOp;

/** How a thread's runs commit their writes, on either store. */
export interface RunCommits {
  /** Applies the run's writes at the next group commit; resolves false when its lease was lost. */
  commit(lease: LeasedRun, ops: EngineOp[], onFailure?: OnFailure): Promise<boolean>;
  /** Writes that record what already happened outside (a provider's answer): never dropped. */
  always(op: EngineOp): Promise<boolean>;
}

interface Entry {
  /** Whose writes these are; null for writes that stand whatever happened to the lease. */
  lease: LeasedRun | null;
  ops: EngineOp[];
  /** Written instead when the ops fail to apply (a unique clash, say); rethrows when absent. */
  onFailure: OnFailure | undefined;
  resolve: (held: boolean) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit for the runs executing in one worker thread. Writes queued by any number of
 * runs during one turn of the event loop are applied together in one IMMEDIATE transaction
 * under the process write lock (one fsync for all of them), each run's part in a savepoint.
 *
 * Every run's part is applied only while its lease token still holds: the claim may have
 * been lost (renewal failed, another process took the run over after the lease ran out),
 * and then the part is dropped and its promise resolves `false`, so the run stops without
 * writing and, above all, without calling out again.
 */
export class RunCommitter implements RunCommits {
  private queue: Entry[] = [];
  private scheduled = false;
  /**
   * Runs a function in a savepoint of the open transaction. Made once: better-sqlite3 builds
   * a transaction function with Object.defineProperties, which per entry cost a worker
   * thread about 6% of its time.
   */
  private readonly inSavepoint: (fn: () => void) => void;
  constructor(
    private readonly db: Db,
    private readonly sql: EngineSql = sqliteEngineSql(db),
  ) {
    this.inSavepoint = db.$client.transaction((fn: () => void) => fn());
  }

  commit(lease: LeasedRun, ops: EngineOp[], onFailure?: OnFailure): Promise<boolean> {
    return this.enqueue(lease, ops, onFailure);
  }

  always(op: EngineOp): Promise<boolean> {
    return this.enqueue(null, [op], undefined);
  }

  private enqueue(lease: LeasedRun | null, ops: EngineOp[], onFailure: OnFailure | undefined): Promise<boolean> {
    return new Promise<boolean>((resolve, reject) => {
      this.queue.push({ lease, ops, onFailure, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    // A bounded transaction holds the process write lock briefly, so webhook intake on the
    // main thread (and the other threads) get their turn between two of them.
    const entries = this.queue.splice(0, MAX_ENTRIES_PER_COMMIT);
    if (this.queue.length) {
      this.scheduled = true;
      setImmediate(() => this.flush());
    }
    if (!entries.length) return;
    const lock = processWriteLock();
    lock?.acquire();
    let outcome: { held: boolean[]; failures: unknown[] };
    try {
      // Tried first without a savepoint per run (two statements each): a run's writes almost
      // never fail. When one does, the whole transaction is rolled back and the batch applied
      // again carefully, each run's part in its own savepoint, so only that part is undone.
      outcome = this.apply(entries, false) ?? this.apply(entries, true)!;
    } catch (err) {
      for (const entry of entries) entry.reject(err);
      return;
    } finally {
      lock?.release();
    }
    const { held, failures } = outcome;
    entries.forEach((entry, i) => (failures[i] !== undefined ? entry.reject(failures[i]) : entry.resolve(held[i]!)));
  }

  /**
   * One transaction of the entries' writes, each only while its lease holds. Careless: a
   * failing write rolls the whole transaction back and answers undefined. Careful: a run's
   * failing part is undone alone (its savepoint), and its onFailure written instead.
   */
  private apply(entries: Entry[], careful: boolean): { held: boolean[]; failures: unknown[] } | undefined {
    const client = this.db.$client;
    const held: boolean[] = [];
    const failures: unknown[] = [];
    client.exec('BEGIN IMMEDIATE');
    try {
      for (const entry of entries) {
        const ok = entry.lease === null || (this.sql.leaseHeld(entry.lease.id, entry.lease.token) as boolean);
        held.push(ok);
        failures.push(undefined);
        if (!ok) continue;
        if (!careful) {
          try {
            for (const op of entry.ops) op(this.sql);
          } catch {
            client.exec('ROLLBACK');
            return undefined;
          }
          continue;
        }
        try {
          this.inSavepoint(() => entry.ops.forEach((op) => op(this.sql)));
        } catch (err) {
          if (entry.onFailure) this.inSavepoint(() => entry.onFailure!(err)(this.sql));
          else failures[failures.length - 1] = err;
        }
      }
      client.exec('COMMIT');
    } catch (err) {
      if (client.inTransaction) client.exec('ROLLBACK');
      throw err;
    }
    return { held, failures };
  }
}

/**
 * PostgreSQL: the same contract on a pooled connection. Runs committing in the same turn share
 * one transaction (PgGroupCommit). A run's part is written only while its lease token holds,
 * checked with its row locked (FOR UPDATE: no other node can take the run over between the
 * check and the writes), and dropped when it does not.
 *
 * A batch is first tried carelessly: one statement locks and checks the leases of all its
 * runs, and their writes are held and sent together at its end (HeldEngineSql). When that
 * fails, it runs again carefully: each run's part checks its own lease and writes at once in
 * a savepoint of its own, so a run whose writes fail is undone alone.
 */
/**
 * After each engine batch's BEGIN: how long a statement waits for a row lock before its run's
 * part is tried again (runs of one contact lock the same rows in batches of other threads and
 * nodes: a wait past it undoes the run's part and runs it again in a later batch, instead of
 * a deadlock stalling both batches for PostgreSQL's deadlock_timeout, 1 s); and tag counts
 * deferred to the end of the batch (migration 0003).
 */
const BATCH_SETUP = "SET LOCAL lock_timeout = '200ms'; SET LOCAL svc.defer_tag_counts = 'on'";

export class PgRunCommitter implements RunCommits {
  private readonly group: PgGroupCommit;
  /** Each batch's changes to tag_counts, from the runs whose part committed in it. */
  private readonly tallies = new WeakMap<object, TagDelta[]>();
  /** A careless batch's held writes and the runs whose leases hold, found once for all of them. */
  private readonly careless = new WeakMap<object, { sql: HeldEngineSql; held: Promise<Set<number>> }>();

  constructor(pool: pg.Pool) {
    this.group = new PgGroupCommit(pool, {
      maxBatch: MAX_ENTRIES_PER_COMMIT,
      concurrency: 2,
      setup: BATCH_SETUP,
      // A tag every run adds (a campaign's) is one row of tag_counts for the whole cluster:
      // counted here, one statement per tag in a fixed order, just before the COMMIT, it is
      // held for the COMMIT only, and batches never wait for each other in a cycle.
      beforeCommit: (client, batch) => applyTagDeltas(client, this.tallies.get(batch) ?? []),
      afterJobs: async (_client, batch) => this.careless.get(batch)?.sql.flush(),
    });
  }

  /** The careless batch's held writes, and the ids of its runs whose leases hold (their rows locked, in id order). */
  private carelessOf(client: pg.PoolClient, batch: object) {
    let found = this.careless.get(batch);
    if (!found) {
      const leases = (batch as BatchKey).metas.filter((m): m is LeasedRun => m !== null && m !== undefined);
      const held = leases.length
        ? client
            .query<{ id: number }>({
              name: 'svc_engine_leases_held',
              text: `SELECT r.id FROM workflow_runs r JOIN unnest($1::bigint[], $2::text[]) AS l(id, token) ON r.id = l.id AND r.lease_owner = l.token
                      WHERE r.status = 'RUNNING' ORDER BY r.id FOR UPDATE OF r`,
              values: [leases.map((l) => l.id), leases.map((l) => l.token)],
            })
            .then(({ rows }) => new Set(rows.map((r) => r.id)))
        : Promise.resolve(new Set<number>());
      // Awaited by the batch's runs; a failure fails the first of them (and so the batch).
      held.catch(() => {});
      found = { sql: new HeldEngineSql(client, (batch as BatchKey).size, this.tallyOf(batch)), held };
      this.careless.set(batch, found);
    }
    return found;
  }

  commit(lease: LeasedRun, ops: EngineOp[], onFailure?: OnFailure): Promise<boolean> {
    return this.group.run(async (client, batch, careful) => {
      if (!careful) {
        const { sql, held } = this.carelessOf(client, batch);
        if (!(await held).has(lease.id)) return false;
        // An error fails the batch, which runs again carefully (PgGroupCommit).
        for (const op of ops) await op(sql);
        return true;
      }
      const deltas: TagDelta[] = [];
      const sql = pgEngineSql(client, deltas);
      if (!(await sql.leaseHeld(lease.id, lease.token))) return false;
      await client.query('SAVEPOINT run_ops');
      try {
        for (const op of ops) await op(sql);
        await client.query('RELEASE SAVEPOINT run_ops');
      } catch (err) {
        await client.query('ROLLBACK TO SAVEPOINT run_ops');
        // A deadlock or lock wait is no fault of the run's: its part runs again (PgGroupCommit).
        if (!onFailure || isTransient(err)) throw err;
        deltas.length = 0;
        await onFailure(err)(sql);
      }
      this.tallyOf(batch).push(...deltas);
      return true;
    }, lease);
  }

  private tallyOf(batch: object): TagDelta[] {
    const tally = this.tallies.get(batch) ?? [];
    this.tallies.set(batch, tally);
    return tally;
  }

  always(op: EngineOp): Promise<boolean> {
    return this.group.run(async (client, batch, careful) => {
      if (!careful) {
        await op(this.carelessOf(client, batch).sql);
        return true;
      }
      const deltas: TagDelta[] = [];
      await op(pgEngineSql(client, deltas));
      this.tallyOf(batch).push(...deltas);
      return true;
    }, null);
  }

  close(): Promise<void> {
    return this.group.close();
  }
}

/**
 * Writes a batch's changes to tag_counts as the triggers of migration 0001 would have, row by
 * row: one statement per (workspace, tag) with a net change, in that order.
 */
async function applyTagDeltas(client: pg.PoolClient, deltas: TagDelta[]): Promise<void> {
  if (!deltas.length) return;
  const net = new Map<string, TagDelta>();
  for (const d of deltas) {
    const id = `${d.workspaceId}\u0000${d.key}`;
    const sum = net.get(id);
    if (sum) sum.delta += d.delta;
    else net.set(id, { ...d });
  }
  const ordered = [...net.values()].filter((d) => d.delta !== 0).sort((a, b) => a.workspaceId - b.workspaceId || (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  for (const d of ordered) {
    if (d.delta > 0) {
      await client.query({
        name: 'svc_engine_tag_count_add',
        text: `INSERT INTO tag_counts (workspace_id, tag_key, name, contacts) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (workspace_id, tag_key) DO UPDATE SET contacts = tag_counts.contacts + $4`,
        values: [d.workspaceId, d.key, d.name, d.delta],
      });
    } else {
      await client.query({
        name: 'svc_engine_tag_count_remove',
        text: 'UPDATE tag_counts SET contacts = contacts + $3 WHERE workspace_id = $1 AND tag_key = $2',
        values: [d.workspaceId, d.key, d.delta],
      });
      await client.query({
        name: 'svc_engine_tag_count_drop',
        text: 'DELETE FROM tag_counts WHERE workspace_id = $1 AND tag_key = $2 AND contacts <= 0',
        values: [d.workspaceId, d.key],
      });
    }
  }
}
