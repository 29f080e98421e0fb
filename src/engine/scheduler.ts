import { existsSync } from 'node:fs';
import { randomBytes, randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { BroadcastChannel } from 'node:worker_threads';
import { Piscina } from 'piscina';
import type { Config } from '../core/config.js';
import type { WriteBatcher } from '../core/db/batcher.js';
import { PgGroupCommit } from '../core/db/pgGroupCommit.js';
import { runAsync, runSync, stmt, type Job } from '../core/db/statements.js';
import { isSqliteStore, type PgStore, type Store } from '../core/db/store.js';
import { pgSchedulerSql, type SchedulerSql, sqliteSchedulerSql } from './sql.js';
import { processWriteLock, setProcessWriteLock, WriteLock } from '../core/db/writeLock.js';
import { extractedFile, isExecutable } from '../core/runtime.js';
import type { LeasedRun } from './committer.js';
import { addDeliveryCounts } from './counters.js';
import type { RunOutcome } from './executor.js';
import type { EngineMessage, EngineWorkerData, RunTask } from './worker.js';

export interface EngineLog {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

export interface EngineOptions {
  /** How long a claim holds without renewal; renewed every third of it while the run executes. */
  leaseSeconds?: number;
  /** How often the database is polled for due runs when nothing pokes the engine. */
  pollMs?: number;
  /** Most runs handed to a worker thread in one task (they execute at once there). */
  batchSize?: number;
  /** Runs in flight in this process at most. */
  runConcurrency?: number;
  /** Runs of one workspace in flight in this process at most. */
  workspaceConcurrency?: number;
  /** On stop, how long in-flight runs may finish before they are released. */
  shutdownGraceMs?: number;
}

/**
 * The bundled worker sits beside dist/svc.js; from source it is worker.ts next to this file;
 * in the single executable it is extracted to the cache folder.
 */
export function workerFile(): string {
  if (isExecutable()) return extractedFile('worker.js');
  const js = fileURLToPath(new URL('./worker.js', import.meta.url));
  if (existsSync(js)) return js;
  return fileURLToPath(new URL('./worker.ts', import.meta.url));
}

export interface EngineStats {
  /** Started, not stopping, and its worker threads exist. */
  up: boolean;
  threads: number;
  /** Tasks waiting for a free thread. */
  queuedTasks: number;
  runsInFlight: number;
  runConcurrency: number;
  /** Runs executed to a resting point in this process since start, by outcome. */
  outcomes: Partial<Record<RunOutcome, number>>;
}

interface Claim {
  token: string;
  workspaceId: number;
  /** The renewal found the lease taken over: the run's writes will be dropped; stop renewing. */
  lost: boolean;
  /** When the lease runs out as last written by this process (epoch ms). */
  until: number;
}

/** The young generation (V8 new space) of each engine thread, in MB. */
const WORKER_YOUNG_GENERATION_MB = 24;
/** After the grace period, how long released runs get to reach a stopping point. */
const RELEASE_SETTLE_MS = 2_000;
/** WAITING runs whose time has come, and expired claims, moved back to QUEUED per tick. */
const PROMOTE_LIMIT = 1_000;
/**
 * How often a claim also looks for due WAITING runs and expired claims. Not every claim: under
 * load a node claims dozens of times a second, and on PostgreSQL finding expired claims walks
 * every RUNNING row (the heaviest statement of a busy node before this). A quarter second
 * late is nothing next to a lease of many seconds, or to a wait step's due time.
 */
const PROMOTE_EVERY_MS = 250;

/**
 * Extends the leases of `claims` to `untilIso`, each only while its token still holds it.
 * 'busy' is left out (tried again next time), and so is 'done' (its thread reports it soon).
 */
function* renewLeases(claims: Iterable<[number, Claim]>, untilIso: string): Job<SchedulerSql, Map<number, 'held' | 'lost'>> {
  const renewed = new Map<number, 'held' | 'lost'>();
  for (const [id, c] of claims) {
    const result = yield* stmt((s: SchedulerSql) => s.renew(id, c.token, untilIso));
    if (result === 'held' || result === 'lost') renewed.set(id, result);
  }
  return renewed;
}

/**
 * The scheduler. Each claim takes QUEUED runs under a lease token of its own (a random
 * value in lease_owner, shared by the runs of that claim), renewed every third of the lease
 * while a run is in flight; every write of a run checks its id with the token (RunCommitter), so a run that outlived its lease
 * and was taken over by another process writes nothing and calls out no more.
 *
 * Claims are sized to the free capacity (`runConcurrency` runs in flight at most, and
 * `workspaceConcurrency` per workspace) and shared round-robin across the workspaces that
 * have QUEUED runs, so one workspace's backlog of slow runs does not hold up the others.
 * Worker threads execute the runs of their tasks at once and report each finished run on
 * a BroadcastChannel, so capacity frees up run by run, not batch by batch. Claims and
 * renewals go through the group-commit batcher: they share fsyncs with webhook intake.
 */
export class Engine {
  private readonly pool: Piscina;
  private readonly leaseMs: number;
  private readonly pollMs: number;
  private readonly batchSize: number;
  private readonly runConcurrency: number;
  private readonly workspaceConcurrency: number;
  private readonly graceMs: number;
  private readonly channel: BroadcastChannel;
  private readonly inFlight = new Map<number, Claim>();
  private readonly perWorkspace = new Map<number, number>();
  /** The workspace served last: the next claim starts after it. */
  private cursor = 0;
  /** When the last claim promoted due WAITING runs and expired claims (PROMOTE_EVERY_MS). */
  private promotedAt = 0;
  private timer: NodeJS.Timeout | undefined;
  private renewTimer: NodeJS.Timeout | undefined;
  /** How often the leases of the runs in flight are renewed: a third of the lease. */
  private readonly renewEveryMs: number;
  private tasks = 0;
  private claiming = false;
  private again = false;
  private stopped = false;
  private started = false;
  /** How the runs this process executed came to rest, counted since start (for the metrics). */
  private readonly outcomes = new Map<RunOutcome, number>();

  /** Runs a job of the scheduler's statements in one transaction (SQLite: through the group-commit batcher). */
  private readonly tx: <T>(job: () => Job<SchedulerSql, T>) => Promise<T>;
  private readonly group: PgGroupCommit | undefined;

  constructor(
    store: Store,
    private readonly config: Config,
    private readonly batcher: WriteBatcher | undefined,
    private readonly log: EngineLog,
    opts: EngineOptions = {},
  ) {
    this.leaseMs = (opts.leaseSeconds ?? config.runLeaseSeconds) * 1000;
    this.renewEveryMs = Math.max(100, Math.floor(this.leaseMs / 3));
    this.pollMs = opts.pollMs ?? 250;
    this.batchSize = opts.batchSize ?? 32;
    this.runConcurrency = opts.runConcurrency ?? config.runConcurrency;
    this.workspaceConcurrency = opts.workspaceConcurrency ?? config.workspaceConcurrency;
    this.graceMs = opts.shutdownGraceMs ?? config.shutdownGraceSeconds * 1000;
    // The main thread and the workers share one in-process write lock.
    if (!processWriteLock()) setProcessWriteLock(new WriteLock());
    const channelName = `svc-engine-${process.pid}-${randomUUID()}`;
    this.channel = new BroadcastChannel(channelName);
    this.channel.onmessage = (event) => {
      const msg = (event as { data: EngineMessage }).data;
      if (msg.type === 'counts') addDeliveryCounts(msg.deliveries);
      if (msg.type !== 'done') return;
      for (const id of msg.runIds) this.finish(id);
      this.poke();
    };
    this.channel.unref();
    const workerData: EngineWorkerData = { config, writeLock: processWriteLock()!.buffer, channel: channelName };
    this.pool = new Piscina({
      filename: workerFile(),
      minThreads: config.workers,
      maxThreads: config.workers,
      concurrentTasksPerWorker: Math.max(1, Math.ceil(this.runConcurrency / config.workers)),
      idleTimeout: 60_000,
      workerData,
      // V8 sizes a thread's young generation from the machine's memory (about 64 MB a
      // thread on 24 GiB) and keeps it once grown, mostly empty; 24 MB collects as fast
      // here and keeps a node with 1,000 runs in flight about 100 MB smaller.
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
    });
    if (isSqliteStore(store)) {
      // Run inside the batcher's transactions, so prepared on the connection they run on.
      const batcher = this.batcher;
      if (!batcher) throw new Error('the engine on SQLite needs the write batcher');
      const sql = sqliteSchedulerSql(store.writer);
      this.tx = (job) => batcher.run(() => runSync(job(), sql));
      this.group = undefined;
    } else {
      const group = new PgGroupCommit((store as PgStore).pool, { concurrency: 1 });
      this.tx = (job) => group.run((client) => runAsync(job(), pgSchedulerSql(client)));
      this.group = group;
    }
  }

  start(): void {
    this.started = true;
    this.schedule(0);
    this.renewTimer = setInterval(() => void this.renew(), this.renewEveryMs);
    this.renewTimer.unref();
  }

  /** Runs in flight in this process (claimed and not yet finished). */
  get running(): number {
    return this.inFlight.size;
  }

  /** What the metrics and /readyz read: all of it known in process, no query. */
  stats(): EngineStats {
    return {
      up: this.started && !this.stopped && this.pool.threads.length > 0,
      threads: this.pool.threads.length,
      queuedTasks: this.pool.queueSize,
      runsInFlight: this.inFlight.size,
      runConcurrency: this.runConcurrency,
      outcomes: Object.fromEntries(this.outcomes) as Partial<Record<RunOutcome, number>>,
    };
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

  private allowance(workspaceId: number, claimedNow: Map<number, number>): number {
    return this.workspaceConcurrency - (this.perWorkspace.get(workspaceId) ?? 0) - (claimedNow.get(workspaceId) ?? 0);
  }

  /**
   * One claiming transaction: wakes due WAITING runs and expired claims, then takes up to
   * `free` QUEUED runs, in rounds of an equal share per workspace, starting after the
   * workspace served last. Pure with respect to the engine's state: the batcher may run it
   * twice (after a rollback), so the claims are recorded by the caller once it committed.
   */
  private *claimJob(
    free: number,
  ): Job<SchedulerSql, { claims: (LeasedRun & { workspaceId: number })[]; cursor: number; until: number; renewed: Map<number, 'held' | 'lost'> }> {
    const now = Date.now();
    const nowIso = new Date(now).toISOString();
    let renewed = new Map<number, 'held' | 'lost'>();
    if (now - this.promotedAt >= PROMOTE_EVERY_MS) {
      // Expired claims are taken back below. After a stall of this process (a starved machine,
      // a laptop waking from sleep) the leases of its own runs in flight may have run out too,
      // with the renewal's timer not yet fired: those due within a renewal period are renewed
      // first, in this same transaction, so this process never takes its own runs back and
      // executes them a second time. (On PostgreSQL a row a commit has locked is skipped by
      // both statements alike, and renewed first by the next promotion.)
      const due = [...this.inFlight].filter(([, c]) => !c.lost && c.until - now <= this.renewEveryMs);
      if (due.length) renewed = yield* renewLeases(due, new Date(now + this.leaseMs).toISOString());
      yield* stmt((s: SchedulerSql) => s.promoteWaiting(nowIso, PROMOTE_LIMIT));
      yield* stmt((s: SchedulerSql) => s.promoteExpired(nowIso, PROMOTE_LIMIT));
      // Set at once, not after the commit: if the batch is rolled back and run again, the
      // promotions run again in it only if a quarter second passed, and otherwise next time.
      this.promotedAt = now;
    }
    const until = new Date(now + this.leaseMs).toISOString();
    const token = randomBytes(16).toString('hex');
    const ids = yield* stmt((s: SchedulerSql) => s.queuedWorkspaces());
    const ordered = [...ids.filter((id) => id > this.cursor), ...ids.filter((id) => id <= this.cursor)];
    const claimedNow = new Map<number, number>();
    const claims: (LeasedRun & { workspaceId: number })[] = [];
    let cursor = this.cursor;
    let remaining = free;
    let active = ordered.filter((id) => this.allowance(id, claimedNow) > 0);
    while (remaining > 0 && active.length) {
      const share = Math.max(1, Math.floor(remaining / active.length));
      const next: number[] = [];
      for (const workspaceId of active) {
        if (remaining <= 0) break;
        const want = Math.min(share, remaining, this.allowance(workspaceId, claimedNow));
        const rows = yield* stmt((s: SchedulerSql) => s.claim(workspaceId, want, nowIso, until, token));
        for (const row of rows) claims.push({ id: row.id, token, workspaceId });
        claimedNow.set(workspaceId, (claimedNow.get(workspaceId) ?? 0) + rows.length);
        remaining -= rows.length;
        if (rows.length) cursor = workspaceId;
        if (rows.length === want && this.allowance(workspaceId, claimedNow) > 0) next.push(workspaceId);
      }
      active = next;
    }
    return { claims, cursor, until: now + this.leaseMs, renewed };
  }

  private async tick(): Promise<void> {
    if (this.stopped || this.claiming) return;
    this.claiming = true;
    let full = false;
    try {
      // At most a few tasks' worth per claim: a backlog is taken up in steps, so the first
      // runs start at once and intake is never held up by one huge claim.
      const free = Math.min(this.runConcurrency - this.inFlight.size, this.batchSize * this.config.workers * 4);
      if (free > 0) {
        const { claims, cursor, until, renewed } = await this.tx(() => this.claimJob(free));
        this.cursor = cursor;
        this.applyRenewals(renewed, until);
        for (const c of claims) {
          this.inFlight.set(c.id, { token: c.token, workspaceId: c.workspaceId, lost: false, until });
          this.perWorkspace.set(c.workspaceId, (this.perWorkspace.get(c.workspaceId) ?? 0) + 1);
        }
        this.dispatch(claims);
        // Everything free was taken: more may be waiting as soon as capacity frees up.
        full = claims.length === free;
      }
    } catch (err) {
      // A full disk is logged by the batcher's StorageHealth once a minute, not every poll.
      if (!this.batcher?.storage?.full) this.log.error({ err }, 'claiming runs failed');
    } finally {
      this.claiming = false;
    }
    if (this.again && !full && this.inFlight.size < this.runConcurrency) {
      this.again = false;
      this.schedule(0);
    } else this.schedule(this.pollMs);
  }

  /** Hands the claims to the worker threads, spread over them, at most batchSize a task. */
  private dispatch(claims: LeasedRun[]): void {
    if (!claims.length) return;
    const size = Math.max(1, Math.min(this.batchSize, Math.ceil(claims.length / this.config.workers)));
    for (let i = 0; i < claims.length; i += size) {
      const runs = claims.slice(i, i + size).map(({ id, token }) => ({ id, token }));
      const task: RunTask = { runs };
      this.tasks++;
      this.pool
        .run(task)
        .then(
          (outcomes: RunOutcome[]) => {
            for (const outcome of outcomes) this.outcomes.set(outcome, (this.outcomes.get(outcome) ?? 0) + 1);
            // Runs stopped by a shutdown stay in flight here until stop() releases them.
            runs.forEach((run, i) => outcomes[i] !== 'RELEASED' && this.finish(run.id));
          },
          (err: unknown) => {
            // Cut off by a shutdown: stop() releases them. Otherwise their leases expire.
            if (this.stopped) return;
            this.log.error({ err, runIds: runs.map((r) => r.id) }, 'a batch of runs failed; their leases will expire and they will be retried');
            for (const run of runs) this.finish(run.id);
          },
        )
        .finally(() => {
          this.tasks--;
          this.poke();
        });
    }
  }

  /** A run is over in this process (done, parked, failed, or given up): its slot frees. */
  private finish(id: number): void {
    const claim = this.inFlight.get(id);
    if (!claim) return;
    this.inFlight.delete(id);
    const n = (this.perWorkspace.get(claim.workspaceId) ?? 1) - 1;
    if (n > 0) this.perWorkspace.set(claim.workspaceId, n);
    else this.perWorkspace.delete(claim.workspaceId);
  }

  /** Extends the lease of every run in flight; a lease found taken over is given up. */
  private async renew(): Promise<void> {
    const held = [...this.inFlight].filter(([, c]) => !c.lost);
    if (!held.length) return;
    const leaseMs = this.leaseMs;
    try {
      const { renewed, until } = await this.tx(function* () {
        // From when the transaction runs, not from when it was queued: on a busy node it may
        // wait its turn behind other batches for a good part of a short lease.
        const now = Date.now();
        const renewed = yield* renewLeases(held, new Date(now + leaseMs).toISOString());
        return { renewed, until: now + leaseMs };
      });
      this.applyRenewals(renewed, until);
    } catch (err) {
      if (!this.batcher?.storage?.full) this.log.error({ err }, 'renewing run leases failed');
    }
  }

  /** Records what a committed renewal found: leases extended to `until`, or taken over. */
  private applyRenewals(renewed: Map<number, 'held' | 'lost'>, until: number): void {
    const lost: number[] = [];
    for (const [id, result] of renewed) {
      const claim = this.inFlight.get(id);
      if (!claim) continue;
      if (result === 'held') claim.until = Math.max(claim.until, until);
      else if (!claim.lost) {
        claim.lost = true;
        lost.push(id);
      }
    }
    if (lost.length)
      this.log.warn({ runIds: lost.slice(0, 20), count: lost.length }, 'runs were taken over after their lease ran out; their further writes are dropped');
  }

  /**
   * Stops claiming, lets in-flight runs finish for the grace period (leases still renewed),
   * then tells the threads to stop each remaining run before its next outside call, closes
   * the pool and releases what is left (QUEUED, lease cleared) so another process takes it
   * up at once. A run is resumed from its last commit: its step under way is run again,
   * except a message whose SENDING row exists, which is not sent twice.
   */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    while (this.claiming) await sleep(10);
    const graceEnds = Date.now() + this.graceMs;
    while (this.inFlight.size > 0 && Date.now() < graceEnds) await sleep(20);
    if (this.inFlight.size > 0) {
      this.log.info({ runs: this.inFlight.size }, 'grace period over: releasing the runs still in flight');
      this.channel.postMessage({ type: 'stop' } satisfies EngineMessage);
      const settleEnds = Date.now() + RELEASE_SETTLE_MS;
      while (this.tasks > 0 && Date.now() < settleEnds) await sleep(20);
    }
    if (this.renewTimer) clearInterval(this.renewTimer);
    const cutOff = this.tasks > 0;
    await this.pool.destroy();
    // A thread ended mid-transaction leaves the in-process lock taken; nobody holds it now.
    if (cutOff) processWriteLock()?.release();
    const left = [...this.inFlight];
    if (left.length) {
      const now = new Date().toISOString();
      try {
        await this.tx(function* () {
          for (const [id, c] of left) yield* stmt((s: SchedulerSql) => s.release(id, c.token, now));
        });
      } catch (err) {
        this.log.error({ err }, 'releasing runs failed; their leases will expire instead');
      }
      for (const [id] of left) this.finish(id);
    }
    this.channel.close();
    await this.group?.close();
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
