import type { Db } from './connection.js';
import type { StorageHealth } from './storage.js';
import type { SqliteStore } from './store.js';

interface Job<T> {
  work: (writer: Db) => T;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
  /** The job's writes may be held back (HeldWrites): nothing it reads can see them missing. */
  holds: boolean;
}

/**
 * Writes that jobs hold back to make together, one statement for many rows (intake's runs
 * and events): the batch writes them before any job that does not hold writes of its own
 * kind (it might read them) and before COMMIT, and drops them when it rolls back (the jobs
 * hold them again as they run again).
 */
export interface HeldWrites {
  /** Writes what is held; throws like a failed job. */
  flush(): void;
  /** Forgets what is held: the transaction that would have written it was rolled back. */
  discard(): void;
}

/**
 * Group commit. Write jobs queued during one turn of the event loop run together in one
 * IMMEDIATE transaction on the store's writer connection, and their promises settle only
 * after COMMIT returns: with synchronous=FULL a settled job is on disk. One fsync then covers
 * many requests instead of one each. The batch waits its turn behind the store's other
 * transactions once (store.exclusive), then runs its jobs synchronously: one await per
 * batch, none per job.
 *
 * Jobs run without savepoints (they cost as much as the jobs); when one throws, the batch
 * is rolled back and every job is run again in a transaction of its own, so one bad job
 * fails alone and the others still commit. Jobs must therefore be safe to run twice when
 * their first run was rolled back (they only touch the database).
 */
export class WriteBatcher {
  private queue: Job<unknown>[] = [];
  private scheduled = false;
  private closed = false;
  private generation = 0;
  /**
   * Told of every commit and every failed write: a batch that fails for lack of space is
   * refused whole (running its jobs one by one would fail them all again).
   */
  storage: StorageHealth | undefined;

  private flushing: Promise<void> | undefined;

  /**
   * Run inside each transaction after its jobs and before COMMIT, with the transaction's
   * batchId: for writes a batch makes once for all its jobs. Only jobs that ran in that
   * transaction count: a rolled-back batch's jobs run again, each in a transaction (and
   * generation) of its own. A hook that throws fails the batch like a failed COMMIT.
   */
  readonly beforeCommit: ((batchId: number) => void)[] = [];

  /** What jobs that hold writes keep until the batch makes them (HeldWrites). */
  readonly held: HeldWrites[] = [];

  constructor(
    private readonly store: SqliteStore,
    private readonly maxBatch = 512,
  ) {}

  /** Changes with every transaction the batcher runs: memoise reads per batch with it. */
  get batchId(): number {
    return this.generation;
  }

  /**
   * Queues work for the next group commit; it gets the writer connection to prepare statements
   * on. `holds`: the work may hold writes back in `held` (only what knows of them may say so).
   */
  run<T>(work: (writer: Db) => T, holds = false): Promise<T> {
    if (this.closed) return Promise.reject(new Error('the write batcher is closed'));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, resolve, reject, holds } as Job<unknown>);
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || this.flushing) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.flushing = this.store
        .exclusive((writer) => this.flushNow(writer))
        .catch((err: unknown) => {
          // The store is closed (shutdown): nothing can be written any more.
          for (const job of this.queue.splice(0)) job.reject(err);
        })
        .finally(() => {
          this.flushing = undefined;
          // Jobs queued while this batch waited for its turn go in the next one.
          if (this.queue.length) this.schedule();
        });
    });
  }

  private flushNow(writer: Db): void {
    while (this.queue.length) {
      const batch = this.queue.splice(0, this.maxBatch);
      if (!this.commitAll(writer, batch)) for (const job of batch) this.commitAll(writer, [job]);
    }
  }

  /** Runs the jobs in one transaction; false when a job threw and the batch was rolled back. */
  private commitAll(writer: Db, batch: Job<unknown>[]): boolean {
    this.generation++;
    const values: unknown[] = [];
    const client = writer.$client;
    try {
      client.exec('BEGIN IMMEDIATE');
    } catch (err) {
      this.storage?.noteFailure(err);
      for (const job of batch) job.reject(err);
      return true;
    }
    // A job that fails, or held writes that fail as they are made (before a job that may read
    // them, or at the end), roll the batch back; its jobs then run again one by one.
    const failed = (err: unknown, job: Job<unknown>): boolean => {
      rollback(client);
      this.discardHeld();
      if (this.storage?.noteFailure(err)) {
        for (const j of batch) j.reject(err);
        return true;
      }
      if (batch.length === 1) {
        job.reject(err);
        return true;
      }
      return false;
    };
    for (const job of batch) {
      try {
        if (!job.holds) this.flushHeld();
        values.push(job.work(writer));
      } catch (err) {
        return failed(err, job);
      }
    }
    try {
      this.flushHeld();
    } catch (err) {
      return failed(err, batch[batch.length - 1]!);
    }
    try {
      for (const hook of this.beforeCommit) hook(this.generation);
      client.exec('COMMIT');
    } catch (err) {
      rollback(client);
      this.discardHeld();
      this.storage?.noteFailure(err);
      for (const job of batch) job.reject(err);
      return true;
    }
    this.storage?.noteSuccess();
    batch.forEach((job, i) => job.resolve(values[i]));
    return true;
  }

  private flushHeld(): void {
    for (const h of this.held) h.flush();
  }

  private discardHeld(): void {
    for (const h of this.held) h.discard();
  }

  /** Runs what is queued and refuses new work (for shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    while (this.flushing || this.queue.length) {
      if (this.flushing) await this.flushing;
      else await this.store.exclusive((writer) => this.flushNow(writer));
    }
  }
}

/** Ends a failed transaction; SQLite may have rolled it back itself (a full disk does). */
function rollback(client: Db['$client']): void {
  try {
    if (client.inTransaction) client.exec('ROLLBACK');
  } catch {
    // Nothing is left to undo.
  }
}
