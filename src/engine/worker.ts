// The worker-thread entry of the run engine's Piscina pool: each thread keeps its own
// database connection (opened with the same pragmas as the main thread) and executor.
import { workerData } from 'node:worker_threads';
import type { Config } from '../core/config.js';
import { openDatabase } from '../core/db/connection.js';
import { setProcessWriteLock, WriteLock } from '../core/db/writeLock.js';
import { RunExecutor, type BatchResult } from './executor.js';

export interface RunTask {
  runIds: number[];
  owner: string;
}

let executor: RunExecutor | undefined;

interface EngineWorkerData {
  config: Config;
  writeLock: SharedArrayBuffer;
}

function executorFor(data: EngineWorkerData): RunExecutor {
  if (!executor) {
    setProcessWriteLock(new WriteLock(data.writeLock));
    executor = new RunExecutor(openDatabase(data.config.dbFile, { synchronous: data.config.dbSynchronous }), data.config);
  }
  return executor;
}

export default async function executeRuns(task: RunTask): Promise<BatchResult> {
  return executorFor(workerData as EngineWorkerData).executeBatch(task.runIds, task.owner);
}
