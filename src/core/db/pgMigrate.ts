import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { DatabaseTooNewError, findMigrationsDir, readJournal, splitStatements, type MigrationStatus } from './migrate.js';

/**
 * PostgreSQL has its own drizzle-kit migrations (migrations/pg): it starts at the schema the
 * SQLite history arrived at, so it does not replay that history. Bookkeeping is the same
 * svc_migrations table as on SQLite.
 */
export function findPgMigrationsDir(): string {
  return join(findMigrationsDir(), 'pg');
}

/**
 * Every node migrates on start; the first takes this session-level advisory lock and the
 * others wait for it, then find nothing left to apply. The number is arbitrary but fixed:
 * it names "svc schema migrations" in pg_locks.
 */
export const MIGRATION_LOCK_KEY = 7_140_001;

async function ensureTable(client: pg.ClientBase): Promise<void> {
  await client.query(
    'CREATE TABLE IF NOT EXISTS svc_migrations (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tag text NOT NULL UNIQUE, applied_at text NOT NULL)',
  );
}

async function statusOf(client: pg.ClientBase, dir: string): Promise<MigrationStatus> {
  const known = readJournal(dir).map((e) => e.tag);
  // Read without creating: a status check must not write to the database.
  const exists = await client.query<{ t: string | null }>("SELECT to_regclass('svc_migrations')::text AS t");
  const applied = exists.rows[0]?.t ? (await client.query<{ tag: string }>('SELECT tag FROM svc_migrations ORDER BY id')).rows.map((r) => r.tag) : [];
  const unknown = applied.filter((t) => !known.includes(t));
  if (unknown.length) throw new DatabaseTooNewError(unknown);
  return { applied, pending: known.filter((t) => !applied.includes(t)) };
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, application_name: 'svc migrate' });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export function pgMigrationStatus(url: string, dir = findPgMigrationsDir()): Promise<MigrationStatus> {
  return withClient(url, (client) => statusOf(client, dir));
}

/**
 * Applies pending migrations, each in its own transaction, under the migration lock so that
 * nodes starting together never race. Idempotent: returns what this call applied.
 */
export function migratePg(url: string, opts: { dir?: string; onApply?: (tag: string) => void } = {}): Promise<MigrationStatus> {
  const dir = opts.dir ?? findPgMigrationsDir();
  return withClient(url, async (client) => {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await ensureTable(client);
      const { pending } = await statusOf(client, dir);
      const applied: string[] = [];
      for (const tag of pending) {
        const statements = splitStatements(readFileSync(join(dir, `${tag}.sql`), 'utf8'));
        await client.query('BEGIN');
        try {
          for (const stmt of statements) await client.query(stmt);
          await client.query('INSERT INTO svc_migrations (tag, applied_at) VALUES ($1, $2)', [tag, new Date().toISOString()]);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK');
          throw new Error(`migration ${tag} failed: ${(err as Error).message}`, { cause: err });
        }
        applied.push(tag);
        opts.onApply?.(tag);
      }
      return { applied, pending: [] };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  });
}
