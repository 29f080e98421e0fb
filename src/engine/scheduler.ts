import { existsSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import type { Config } from '../core/config.js';
import type { WriteBatcher } from '../core/db/batcher.js';
import type { Db } from '../core/db/connection.js';
import { processWriteLock, setProcessWriteLock, WriteLock } from '../core/db/writeLock.js';
import type { RunTask } from './worker.js';

export interface EngineLog {
  info(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface EngineOptions {
  /** How long a claimed run is ours; after it, any process may take it up again. */
  leaseSeconds?: number;
  /** How often the database is polled for due runs when nothing pokes the engine. */
  pollMs?: number;
  /** Runs handed to one worker task (their DB effects share one transaction). */
  batchSize?: number;
}

/** The bundled worker sits beside dist/svc.js; from source it is worker.ts next to this file. */
function workerFile(): string {
  const js = fileURLToPath(new URL('./worker.js', import.meta.url));
  if (existsSync(js)) return js;
  return fileURLToPath(new URL('./worker.ts', import.meta.url));
}

/**
 * The scheduler: claims due runs (QUEUED, WAITING whose time has come, or RUNNING whose
 * lease expired after a crash) with a lease, and hands them to the worker pool in batches.
 * Claims go through the group-commit batcher, so they share fsyncs with webhook ingest.
 */
export class Engine {
  readonly owner = `${process.pid}:${randomUUID().slice(0, 8)}`;
  private readonly pool: Piscina;
  private readonly leaseSeconds: number;
  private readonly pollMs: number;
  private readonly batchSize: number;
  private readonly claimStmt;
  private timer: NodeJS.Timeout | undefined;
  private inFlight = 0;
  private claiming = false;
  private again = false;
  private stopped = false;

  constructor(
    db: Db,
    private readonly config: Config,
    private readonly batcher: WriteBatcher,
    private readonly log: EngineLog,
    opts: EngineOptions = {},
  ) {
    this.leaseSeconds = opts.leaseSeconds ?? config.runLeaseSeconds;
    this.pollMs = opts.pollMs ?? 250;
    this.batchSize = opts.batchSize ?? 32;
    // The main thread and the workers share one in-process write lock.
    if (!processWriteLock()) setProcessWriteLock(new WriteLock());
    this.pool = new Piscina({
      filename: workerFile(),
      minThreads: config.workers,
      maxThreads: config.workers,
      idleTimeout: 60_000,
      workerData: { config, writeLock: processWriteLock()?.buffer },
    });
    this.claimStmt = db.$client.prepare<{ owner: string; now: string; until: string; limit: number }, { id: number }>(
      `UPDATE workflow_runs SET status = 'RUNNING', lease_owner = @owner, lease_until = @until, updated_at = @now
        WHERE id IN (
          SELECT id FROM workflow_runs
           WHERE (status IN ('QUEUED', 'WAITING') AND run_at <= @now) OR (status = 'RUNNING' AND lease_until < @now)
           ORDER BY run_at, id LIMIT @limit)
        RETURNING id`,
    );
  }

  start(): void {
    this.schedule(0);
  }

  /** Asks for a claim soon (after new runs were queued), instead of at the next poll. */
  poke(): void {
    if (this.stopped) return;
    if (this.claiming) this.again = true;
    else this.schedule(0);
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.tick(), ms);
    this.timer.unref?.();
  }

  private capacity(): number {
    // Two batches per thread keeps every thread busy while the next batch is claimed.
    return Math.max(0, this.config.workers * 2 - this.inFlight) * this.batchSize;
  }

  private async tick(): Promise<void> {
    if (this.stopped || this.claiming) return;
    this.claiming = true;
    try {
      const limit = this.capacity();
      if (limit > 0) {
        const now = Date.now();
        const ids = await this.batcher.run(() =>
          this.claimStmt
            .all({ owner: this.owner, now: new Date(now).toISOString(), until: new Date(now + this.leaseSeconds * 1000).toISOString(), limit })
            .map((r) => r.id),
        );
        for (let i = 0; i < ids.length; i += this.batchSize) this.dispatch(ids.slice(i, i + this.batchSize));
        if (ids.length === limit) this.again = true;
      }
    } catch (err) {
      this.log.error({ err }, 'claiming runs failed');
    } finally {
      this.claiming = false;
    }
    if (this.again && this.capacity() > 0) {
      this.again = false;
      this.schedule(0);
    } else this.schedule(this.pollMs);
  }

  private dispatch(runIds: number[]): void {
    this.inFlight++;
    const task: RunTask = { runIds, owner: this.owner };
    this.pool
      .run(task)
      .catch((err: unknown) => this.log.error({ err, runIds }, 'a batch of runs failed; their leases will expire and they will be retried'))
      .finally(() => {
        this.inFlight--;
        this.poke();
      });
  }

  /** Stops claiming, lets running batches finish, and closes the pool. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    while (this.claiming || this.inFlight > 0) await new Promise((r) => setTimeout(r, 20));
    await this.pool.destroy();
  }
}
