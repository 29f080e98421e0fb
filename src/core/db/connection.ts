import Database from 'better-sqlite3';
import { drizzle, type BetterSQLite3Database } from 'drizzle-orm/better-sqlite3';
import * as schema from './schema.js';

export type Db = BetterSQLite3Database<typeof schema> & { $client: Database.Database };

export type SynchronousLevel = 'FULL' | 'NORMAL';

/**
 * Opens the database with the pragmas every connection (main thread or worker) needs.
 * busy_timeout comes first so that even the journal-mode switch waits for other writers.
 */
export function openDatabase(file: string, opts: { synchronous?: SynchronousLevel; readonly?: boolean } = {}): Db {
  const client = new Database(file, { readonly: opts.readonly ?? false });
  client.pragma('busy_timeout = 5000');
  if (!opts.readonly) client.pragma('journal_mode = WAL');
  client.pragma(`synchronous = ${opts.synchronous ?? 'FULL'}`);
  client.pragma('foreign_keys = ON');
  return drizzle(client, { schema }) as Db;
}

export function closeDatabase(db: Db): void {
  if (db.$client.open) db.$client.close();
}
