import type { Db } from './connection.js';

interface Job<T> {
  work: () => T;
  resolve: (value: T) => void;
  reject: (err: unknown) => void;
}

/**
 * Group commit. Write jobs queued during one turn of the event loop run together in one
 * IMMEDIATE transaction, each inside its own savepoint (a failing job rolls back alone),
 * and their promises settle only after COMMIT returns: with synchronous=FULL a settled job
 * is on disk. One fsync then covers many requests instead of one each.
 */
export class WriteBatcher {
  private queue: Job<unknown>[] = [];
  private scheduled = false;
  private closed = false;

  constructor(
    private readonly db: Db,
    private readonly maxBatch = 512,
  ) {}

  run<T>(work: () => T): Promise<T> {
    if (this.closed) return Promise.reject(new Error('the write batcher is closed'));
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ work, resolve, reject } as Job<unknown>);
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    while (this.queue.length) {
      const batch = this.queue.splice(0, this.maxBatch);
      this.commit(batch);
    }
  }

  private commit(batch: Job<unknown>[]): void {
    const client = this.db.$client;
    const outcomes: { ok: boolean; value: unknown }[] = [];
    try {
      client.exec('BEGIN IMMEDIATE');
    } catch (err) {
      for (const job of batch) job.reject(err);
      return;
    }
    for (const job of batch) {
      try {
        // Inside an open transaction better-sqlite3 turns this into a savepoint.
        outcomes.push({ ok: true, value: client.transaction(job.work)() });
      } catch (err) {
        outcomes.push({ ok: false, value: err });
      }
    }
    try {
      client.exec('COMMIT');
    } catch (err) {
      if (client.inTransaction) client.exec('ROLLBACK');
      for (const job of batch) job.reject(err);
      return;
    }
    batch.forEach((job, i) => {
      const outcome = outcomes[i]!;
      if (outcome.ok) job.resolve(outcome.value);
      else job.reject(outcome.value);
    });
  }

  /** Runs what is queued and refuses new work (for shutdown). */
  close(): void {
    this.flush();
    this.closed = true;
  }
}
