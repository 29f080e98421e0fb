import type pg from 'pg';

/** A deadlock or serialization failure inside a job: run it again, at most this often. */
const RETRYABLE = new Set(['40P01', '40001']);
const MAX_JOB_ATTEMPTS = 5;

/** A job's work: its statements on the batch's connection; `batch` is the same object for the jobs of one batch. */
export type GroupWork<T> = (client: pg.PoolClient, batch: object) => Promise<T>;

interface Job<T> {
  work: GroupWork<T>;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
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
      /** Runs after the batch's jobs, before its COMMIT (writes the jobs deferred, such as counters, in a fixed order). */
      beforeCommit?: (client: pg.PoolClient, batch: object) => Promise<void>;
    } = {},
  ) {}

  run<T>(work: GroupWork<T>): Promise<T> {
    if (this.closed) return Promise.reject(new Error('the group commit is closed'));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, resolve, reject } as Job<unknown>);
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
    const settled: (() => void)[] = [];
    const batchKey = {};
    let broken: unknown;
    try {
      await client.query('BEGIN');
      for (const [i, job] of batch.entries()) {
        await client.query(`SAVEPOINT j${i}`);
        for (let attempt = 1; ; attempt++) {
          try {
            const value = await job.work(client, batchKey);
            await client.query(`RELEASE SAVEPOINT j${i}`);
            settled.push(() => job.resolve(value));
            break;
          } catch (err) {
            // Rolling back to the savepoint releases the locks the job took, which ends a
            // deadlock with another batch (another node's, or this node's other connection,
            // touching the same counters in another order); the job then runs again.
            await client.query(`ROLLBACK TO SAVEPOINT j${i}`);
            if (attempt < MAX_JOB_ATTEMPTS && RETRYABLE.has((err as { code?: string }).code ?? '')) continue;
            settled.push(() => job.reject(err));
            break;
          }
        }
      }
      await this.opts.beforeCommit?.(client, batchKey);
      await client.query('COMMIT');
    } catch (err) {
      // The connection or the COMMIT failed: nothing of the batch is durable.
      broken = err;
      await client.query('ROLLBACK').catch(() => {});
      for (const job of batch) job.reject(err);
      return;
    } finally {
      client.release(broken instanceof Error ? broken : undefined);
    }
    for (const settle of settled) settle();
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
