import type pg from 'pg';
import type { Db } from '../core/db/connection.js';
import { isTransient, PgGroupCommit } from '../core/db/pgGroupCommit.js';
import { processWriteLock } from '../core/db/writeLock.js';
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
  constructor(
    private readonly db: Db,
    private readonly sql: EngineSql = sqliteEngineSql(db),
  ) {}

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
    const client = this.db.$client;
    const held: boolean[] = [];
    const failures: unknown[] = [];
    const lock = processWriteLock();
    lock?.acquire();
    try {
      client.exec('BEGIN IMMEDIATE');
      try {
        for (const entry of entries) {
          const ok = entry.lease === null || (this.sql.leaseHeld(entry.lease.id, entry.lease.token) as boolean);
          held.push(ok);
          failures.push(undefined);
          if (!ok) continue;
          try {
            client.transaction(() => entry.ops.forEach((op) => op(this.sql)))();
          } catch (err) {
            if (entry.onFailure) client.transaction(() => entry.onFailure!(err)(this.sql))();
            else failures[failures.length - 1] = err;
          }
        }
        client.exec('COMMIT');
      } catch (err) {
        if (client.inTransaction) client.exec('ROLLBACK');
        throw err;
      }
    } catch (err) {
      for (const entry of entries) entry.reject(err);
      return;
    } finally {
      lock?.release();
    }
    entries.forEach((entry, i) => (failures[i] !== undefined ? entry.reject(failures[i]) : entry.resolve(held[i]!)));
  }
}

/**
 * PostgreSQL: the same contract on a pooled connection. Runs committing in the same turn share
 * one transaction (PgGroupCommit), each in a savepoint of its own; a run's part first locks its
 * row while the lease token still holds (FOR UPDATE: no other node can take the run over
 * between the check and the writes), and is dropped when it does not.
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

  constructor(pool: pg.Pool) {
    this.group = new PgGroupCommit(pool, {
      maxBatch: MAX_ENTRIES_PER_COMMIT,
      concurrency: 2,
      setup: BATCH_SETUP,
      // A tag every run adds (a campaign's) is one row of tag_counts for the whole cluster:
      // counted here, one statement per tag in a fixed order, just before the COMMIT, it is
      // held for the COMMIT only, and batches never wait for each other in a cycle.
      beforeCommit: (client, batch) => applyTagDeltas(client, this.tallies.get(batch) ?? []),
    });
  }

  commit(lease: LeasedRun, ops: EngineOp[], onFailure?: OnFailure): Promise<boolean> {
    return this.group.run(async (client, batch, careful) => {
      const deltas: TagDelta[] = [];
      const sql = pgEngineSql(client, deltas);
      if (!(await sql.leaseHeld(lease.id, lease.token))) return false;
      // Not careful: an error undoes the batch, which runs again carefully (PgGroupCommit).
      if (!careful) {
        for (const op of ops) await op(sql);
      } else {
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
      }
      this.tallyOf(batch).push(...deltas);
      return true;
    });
  }

  private tallyOf(batch: object): TagDelta[] {
    const tally = this.tallies.get(batch) ?? [];
    this.tallies.set(batch, tally);
    return tally;
  }

  always(op: EngineOp): Promise<boolean> {
    return this.group.run(async (client, batch) => {
      const deltas: TagDelta[] = [];
      await op(pgEngineSql(client, deltas));
      this.tallyOf(batch).push(...deltas);
      return true;
    });
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
