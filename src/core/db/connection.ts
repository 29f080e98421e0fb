import { closeSync, openSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { drizzle, type BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import * as schema from './schema.js';

export type Db = BetterSQLite3Database<typeof schema> & { $client: Database.Database };

export type SynchronousLevel = 'FULL' | 'NORMAL';

/**
 * The database holds password hashes, encrypted secrets and every contact: only its owner
 * may read it. A new file is created 0600 before SQLite opens it, and SQLite gives the
 * -wal and -shm files the mode of the database file; on the main thread the umask is
 * also narrowed while SQLite may create files (a worker thread cannot change it).
 */
function createPrivately(file: string): void {
  if (file === ':memory:' || file === '') return;
  try {
    closeSync(openSync(file, 'wx', 0o600));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
}

/**
 * Where SQLite writes its temporary files: `SQLITE_TMPDIR` when set, else the database's own
 * folder (set for the process, which SQLite reads when it first needs one). Intake's
 * multi-row INSERTs keep a statement journal that SQLite moves to a file past 64 KiB, so the
 * busiest path writes there: beside the database it takes its space from the disk svc
 * watches (a full one is reported as the data folder being full, not a full /var/tmp taken
 * for it), and a read-only root file system does not fail it. SQLite creates each file
 * 0600 and unlinks it at once. Answers the folder in effect.
 */
export function keepSqliteTempFilesIn(dir: string, env: NodeJS.ProcessEnv = process.env): string {
  if (!env.SQLITE_TMPDIR) env.SQLITE_TMPDIR = dir;
  return env.SQLITE_TMPDIR;
}

function withPrivateUmask<T>(fn: () => T): T {
  if (!isMainThread) return fn();
  const previous = process.umask(0o077);
  try {
    return fn();
  } finally {
    process.umask(previous);
  }
}

/**
 * Opens the database with the pragmas every connection (main thread or worker) needs.
 * busy_timeout comes first so that even the journal-mode switch waits for other writers.
 */
export function openDatabase(file: string, opts: { synchronous?: SynchronousLevel; readonly?: boolean } = {}): Db {
  const readonly = opts.readonly ?? false;
  const client = withPrivateUmask(() => {
    if (!readonly) createPrivately(file);
    const c = new Database(file, { readonly });
    c.pragma('busy_timeout = 5000');
    if (!readonly) c.pragma('journal_mode = WAL');
    return c;
  });
  client.pragma(`synchronous = ${opts.synchronous ?? 'FULL'}`);
  client.pragma('foreign_keys = ON');
  // SQLite's own lower() (and LIKE) fold ASCII letters only; this one folds every letter, as
  // the trigram search and PostgreSQL's lower() do. For what SQLite cannot fold itself.
  client.function('svc_lower', { deterministic: true }, (text: unknown) => (typeof text === 'string' ? text.toLowerCase() : text));
  return drizzle(client, { schema }) as Db;
}

export function closeDatabase(db: Db): void {
  if (db.$client.open) db.$client.close();
}
