// The worker-thread entry of the run engine's Piscina pool: each thread keeps its own
// database connection (opened with the same pragmas as the main thread) and executor, and
// executes the runs of every task it is given at once.
import { BroadcastChannel, workerData } from 'node:worker_threads';
import type { Config } from '../core/config.js';
import { openDatabase } from '../core/db/connection.js';
import { setProcessWriteLock, WriteLock } from '../core/db/writeLock.js';
import type { LeasedRun } from './committer.js';
import { flushDeliveryCounts, setDeliveryFlusher, type DeliveryCount } from './counters.js';
import { RunExecutor, type ExecutorDeps, type RunOutcome } from './executor.js';
import { PgRunCommitter, RunCommitter } from './committer.js';
import { pgReadingEngineSql, sqliteEngineSql, sqliteReadingEngineSql } from './sql.js';
import { openPgStore } from '../core/db/store.js';
import { RenderError, renderContent, type RenderContext } from './render.js';

export interface RunTask {
  runs: LeasedRun[];
}

export interface EngineWorkerData {
  config: Config;
  writeLock: SharedArrayBuffer;
  /** The engine's channel: threads report finished runs on it, the engine says "stop" on it. */
  channel: string;
}

/** Messages on the engine's channel. */
export type EngineMessage = { type: 'done'; runIds: number[] } | { type: 'stop' } | { type: 'counts'; deliveries: DeliveryCount[] };

let executor: RunExecutor | undefined;
let channel: BroadcastChannel | undefined;
let finished: number[] = [];

function executorFor(data: EngineWorkerData): RunExecutor {
  if (!executor) {
    const ex = new RunExecutor(executorDeps(data), data.config);
    channel = new BroadcastChannel(data.channel);
    channel.onmessage = (event) => {
      if ((event as { data: EngineMessage }).data.type === 'stop') ex.stop();
    };
    channel.unref();
    setDeliveryFlusher((deliveries) => channel?.postMessage({ type: 'counts', deliveries } satisfies EngineMessage));
    executor = ex;
  }
  return executor;
}

/**
 * The thread's own connection and statements: a SQLite connection with the main thread's
 * pragmas (writes under the shared in-process lock), or a small PostgreSQL pool.
 */
function executorDeps(data: EngineWorkerData): ExecutorDeps {
  const { config } = data;
  if (config.databaseUrl) {
    const store = openPgStore(config.databaseUrl, { poolSize: PG_CONNECTIONS_PER_THREAD, applicationName: 'svc engine' });
    return { db: store.db, sql: pgReadingEngineSql(store.pool), committer: new PgRunCommitter(store.pool) };
  }
  setProcessWriteLock(new WriteLock(data.writeLock));
  const db = openDatabase(config.dbFile, { synchronous: config.dbSynchronous });
  return { db, sql: sqliteReadingEngineSql(db), committer: new RunCommitter(db, sqliteEngineSql(db)) };
}

/** Connections each engine thread keeps open at most on PostgreSQL (reads and its group commit). */
export const PG_CONNECTIONS_PER_THREAD = 4;

/** Tells the scheduler which runs are over, many per message, so it can claim more at once. */
function reportDone(id: number): void {
  if (!finished.length) {
    setImmediate(() => {
      const runIds = finished;
      finished = [];
      channel?.postMessage({ type: 'done', runIds } satisfies EngineMessage);
    });
  }
  finished.push(id);
}

export default async function executeRuns(task: RunTask): Promise<RunOutcome[]> {
  const ex = executorFor(workerData as EngineWorkerData);
  // Between tasks a Piscina thread sleeps (Atomics.wait) and runs no callback: counts not
  // yet sent go now, with the task's end, not with the next task.
  return Promise.all(
    task.runs.map((run) =>
      ex
        .execute(run)
        .catch((): RunOutcome => 'ERROR')
        .then((outcome) => {
          // A released run stays the scheduler's until it has given its lease back.
          if (outcome !== 'RELEASED') reportDone(run.id);
          return outcome;
        }),
    ),
  ).finally(flushDeliveryCounts);
}

/** A render for the API (a preview, a test email), done off the main thread (RenderPool). */
export interface RenderTask {
  content: Record<string, unknown>;
  ctx: RenderContext;
}

/** A render's result; a RenderError crosses the thread boundary as data. */
export type RenderAnswer = { rendered: Record<string, unknown> } | { error: { message: string; path: string | undefined } };

export async function render(task: RenderTask): Promise<RenderAnswer> {
  try {
    return { rendered: await renderContent(task.content, task.ctx) };
  } catch (err) {
    if (err instanceof RenderError) return { error: { message: err.message, path: err.path } };
    throw err;
  }
}
