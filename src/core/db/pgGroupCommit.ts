import type pg from 'pg';

/**
 * A deadlock, a serialization failure or a lock wait past the batch's lock_timeout inside a
 * job: the job runs again in a later batch, at most this often in all.
 */
const RETRYABLE = new Set(['40P01', '40001', '55P03']);
const MAX_JOB_ATTEMPTS = 30;

/** Whether an error is one a job is run again for (see RETRYABLE). */
export function isTransient(err: unknown): boolean {
  return RETRYABLE.has((err as { code?: string } | null)?.code ?? '');
}

/**
 * A job's work: its statements on the batch's connection; `batch` is the same object for the
 * jobs of one batch. `careful` is true when the job runs in a savepoint of its own (see
 * PgGroupCommit): a job that would undo part of its own work on an error needs a savepoint
 * of its own for that only then, since otherwise an error undoes the whole batch anyway.
 */
export type GroupWork<T> = (client: pg.PoolClient, batch: object, careful: boolean) => Promise<T>;

/** What the jobs of one batch share (the `batch` argument of their work). */
export interface BatchKey {
  /** How many jobs the batch has. */
  readonly size: number;
  /** What each job was queued with (`run`'s `meta`), in the order they run. */
  readonly metas: readonly unknown[];
}

interface Job<T> {
  work: GroupWork<T>;
  meta: unknown;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
  attempts: number;
}

/**
 * Group commit on PostgreSQL, for one node's concurrent requests (webhook intake): jobs
 * queued during one turn of the event loop run one after another on one pooled connection
 * inside one transaction, each in a savepoint of its own, so that a failing job is undone
 * alone and never aborts the others; every job settles only after the COMMIT, so a settled
 * job is durable. Up to `concurrency` batches are in flight at once, each on its own
 * connection; the transactions are READ COMMITTED (a job that must not race another node,
 * such as an idempotency key, takes a transaction-scoped advisory lock).
 */
export class PgGroupCommit {
  private queue: Job<unknown>[] = [];
  private scheduled = false;
  private inFlight = 0;
  private closed = false;
  private readonly idle: (() => void)[] = [];

  constructor(
    private readonly pool: pg.Pool,
    private readonly opts: {
      maxBatch?: number;
      concurrency?: number;
      /**
       * Runs after the jobs of a careless attempt (see attempt): writes the jobs held back to
       * send together (pgIntake's). A failure here is the batch's failure, as a job's would
       * be: the batch runs again carefully, where jobs write at once and nothing is held back.
       */
      afterJobs?: (client: pg.PoolClient, batch: object) => Promise<void>;
      /** Runs after the batch's jobs, before its COMMIT (writes the jobs deferred, such as counters, in a fixed order). */
      beforeCommit?: (client: pg.PoolClient, batch: object) => Promise<void>;
      /**
       * Statements run after each BEGIN (one simple query, no parameters), such as
       * `SET LOCAL lock_timeout = '200ms'`: past that wait for a row lock the job is undone
       * and runs again in a later batch, which breaks a deadlock between two batches long
       * before PostgreSQL's deadlock_timeout would.
       */
      setup?: string;
    } = {},
  ) {}

  /** `meta`: what the batch's jobs can know of this one before it runs (BatchKey.metas). */
  run<T>(work: GroupWork<T>, meta?: unknown): Promise<T> {
    if (this.closed) return Promise.reject(new Error('the group commit is closed'));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, meta, resolve, reject, attempts: 0 } as Job<unknown>);
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled || !this.queue.length || this.inFlight >= (this.opts.concurrency ?? 4)) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      const batch = this.queue.splice(0, this.opts.maxBatch ?? 256);
      if (!batch.length) return;
      this.inFlight++;
      void this.commit(batch).finally(() => {
        this.inFlight--;
        if (this.queue.length) this.schedule();
        else if (this.inFlight === 0) for (const wake of this.idle.splice(0)) wake();
      });
      // Another batch may start while this one commits.
      this.schedule();
    });
  }

  private async commit(batch: Job<unknown>[]): Promise<void> {
    let client: pg.PoolClient;
    try {
      client = await this.pool.connect();
    } catch (err) {
      for (const job of batch) job.reject(err);
      return;
    }
    let broken: unknown;
    try {
      // First without savepoints (two round trips fewer per job). A job that fails undoes the
      // whole batch then, and the batch runs again at once, each job in a savepoint of its own.
      const outcome = await this.attempt(client, batch, false);
      if (outcome.broken) broken = outcome.broken;
      else if (!outcome.done) broken = (await this.attempt(client, batch, true)).broken;
    } finally {
      client.release(broken instanceof Error ? broken : undefined);
    }
  }

  /**
   * One transaction of the batch's jobs. Careless: the first failing job ends it, rolled
   * back, with `done` false (nothing settled). Careful: each job in a savepoint, a failing
   * job undone alone. `broken` when the connection or the COMMIT failed (every job settled).
   */
  private async attempt(client: pg.PoolClient, batch: Job<unknown>[], careful: boolean): Promise<{ done: boolean; broken?: unknown }> {
    const settled: (() => void)[] = [];
    const again: Job<unknown>[] = [];
    // The jobs of one batch share it: `size` is how many jobs it has.
    const batchKey: BatchKey = { size: batch.length, metas: batch.map((job) => job.meta) };
    try {
      await client.query('BEGIN');
      if (this.opts.setup) await client.query(this.opts.setup);
      for (const [i, job] of batch.entries()) {
        if (!careful) {
          let value: unknown;
          try {
            value = await job.work(client, batchKey, false);
          } catch {
            await client.query('ROLLBACK');
            return { done: false };
          }
          settled.push(() => job.resolve(value));
          continue;
        }
        await client.query(`SAVEPOINT j${i}`);
        try {
          const value = await job.work(client, batchKey, true);
          await client.query(`RELEASE SAVEPOINT j${i}`);
          settled.push(() => job.resolve(value));
        } catch (err) {
          // Rolling back to the savepoint releases the locks the job took, which ends a
          // deadlock with another batch (another node's, or this node's other connection,
          // touching the same rows in another order). The job runs again first in a later
          // batch, not in this one: here the jobs before it still hold their locks, and the
          // other batch may be waiting for them.
          await client.query(`ROLLBACK TO SAVEPOINT j${i}`);
          if (++job.attempts < MAX_JOB_ATTEMPTS && isTransient(err)) again.push(job);
          else settled.push(() => job.reject(err));
        }
      }
      if (!careful && this.opts.afterJobs) {
        try {
          await this.opts.afterJobs(client, batchKey);
        } catch {
          await client.query('ROLLBACK');
          return { done: false };
        }
      }
      await this.opts.beforeCommit?.(client, batchKey);
      await client.query('COMMIT');
    } catch (err) {
      // The connection, the deferred writes or the COMMIT failed: nothing of the batch is
      // durable. A deadlock or the like there: every job runs again, in a later batch.
      await client.query('ROLLBACK').catch(() => {});
      const rerun = isTransient(err) ? batch.filter((job) => ++job.attempts < MAX_JOB_ATTEMPTS) : [];
      for (const job of batch) if (!rerun.includes(job)) job.reject(err);
      if (rerun.length) this.queue.unshift(...rerun);
      return { done: true, broken: isTransient(err) ? undefined : err };
    }
    for (const settle of settled) settle();
    if (again.length) this.queue.unshift(...again);
    return { done: true };
  }

  /** Refuses new work and waits for what is queued and in flight. */
  async close(): Promise<void> {
    this.closed = true;
    while (this.queue.length || this.inFlight) {
      await new Promise<void>((resolve) => {
        this.idle.push(resolve);
        this.schedule();
      });
    }
  }
}
