// The worker-thread entry of the run engine's Piscina pool: each thread keeps its own
// database connection (opened with the same pragmas as the main thread) and executor.
import { workerData } from 'node:worker_threads';
import type { Config } from '../core/config.js';
import { openDatabase } from '../core/db/connection.js';
import { RunExecutor, type BatchResult } from './executor.js';

export interface RunTask {
  runIds: number[];
  owner: string;
}

let executor: RunExecutor | undefined;

function executorFor(config: Config): RunExecutor {
  if (!executor) executor = new RunExecutor(openDatabase(config.dbFile, { synchronous: config.dbSynchronous }), config);
  return executor;
}

export default async function executeRuns(task: RunTask): Promise<BatchResult> {
  return executorFor((workerData as { config: Config }).config).executeBatch(task.runIds, task.owner);
}
