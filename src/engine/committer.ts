import type { Db } from '../core/db/connection.js';
import { processWriteLock } from '../core/db/writeLock.js';

/** A run's claim: its id and the token its lease was taken with. */
export interface LeasedRun {
  id: number;
  token: string;
}

/** Runs' commits applied in one transaction at most. */
const MAX_ENTRIES_PER_COMMIT = 64;

interface Entry {
  /** Whose writes these are; null for writes that stand whatever happened to the lease. */
  lease: LeasedRun | null;
  ops: (() => void)[];
  /** Written instead when the ops fail to apply (a unique clash, say); rethrows when absent. */
  onFailure: ((err: unknown) => void) | undefined;
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
export class RunCommitter {
  private queue: Entry[] = [];
  private scheduled = false;
  private readonly leaseHeld;

  constructor(private readonly db: Db) {
    this.leaseHeld = db.$client.prepare<[number, string], { id: number }>(
      "SELECT id FROM workflow_runs WHERE id = ? AND lease_owner = ? AND status = 'RUNNING'",
    );
  }

  /** Applies the run's writes at the next group commit; resolves false when its lease was lost. */
  commit(lease: LeasedRun, ops: (() => void)[], onFailure?: (err: unknown) => void): Promise<boolean> {
    return this.enqueue(lease, ops, onFailure);
  }

  /** Writes that record what already happened outside (a provider's answer): never dropped. */
  always(op: () => void): Promise<boolean> {
    return this.enqueue(null, [op], undefined);
  }

  private enqueue(lease: LeasedRun | null, ops: (() => void)[], onFailure: ((err: unknown) => void) | undefined): Promise<boolean> {
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
          const ok = entry.lease === null || this.leaseHeld.get(entry.lease.id, entry.lease.token) !== undefined;
          held.push(ok);
          failures.push(undefined);
          if (!ok) continue;
          try {
            client.transaction(() => entry.ops.forEach((op) => op()))();
          } catch (err) {
            if (entry.onFailure) client.transaction(() => entry.onFailure!(err))();
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
