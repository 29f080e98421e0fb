import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { extractedFile, isExecutable } from '../runtime.js';
import type { Db } from './connection.js';

interface JournalEntry {
  idx: number;
  tag: string;
}

export interface MigrationStatus {
  applied: string[];
  pending: string[];
}

export class DatabaseTooNewError extends Error {
  constructor(readonly unknown: string[]) {
    super(`The database was migrated by a newer svc (unknown migrations: ${unknown.join(', ')}). ` + 'Upgrade svc, or restore a backup made by this version.');
    this.name = 'DatabaseTooNewError';
  }
}

/**
 * Finds the committed drizzle-kit output. In the bundle it sits beside dist/svc.js;
 * from source it is at the repository root. Walking up covers both. The single executable
 * extracts them to its cache folder.
 */
export function findMigrationsDir(start = dirname(fileURLToPath(import.meta.url))): string {
  if (isExecutable()) return extractedFile('migrations');
  let dir = start;
  for (;;) {
    const candidate = join(dir, 'migrations');
    if (existsSync(join(candidate, 'meta', '_journal.json'))) return candidate;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`migrations folder not found above ${start}`);
    dir = parent;
  }
}

export function readJournal(dir: string): JournalEntry[] {
  const journal = JSON.parse(readFileSync(join(dir, 'meta', '_journal.json'), 'utf8')) as { entries: JournalEntry[] };
  return [...journal.entries].sort((a, b) => a.idx - b.idx);
}

/** A drizzle-kit migration file's statements (separated by its breakpoint markers). */
export function splitStatements(sqlText: string): string[] {
  return sqlText
    .split('--> statement-breakpoint')
    .map((s) => s.trim())
    .filter(Boolean);
}

function ensureTable(db: Db): void {
  db.$client.exec('CREATE TABLE IF NOT EXISTS svc_migrations (id INTEGER PRIMARY KEY AUTOINCREMENT, tag TEXT NOT NULL UNIQUE, applied_at TEXT NOT NULL)');
}

function appliedTags(db: Db): string[] {
  ensureTable(db);
  return (db.$client.prepare('SELECT tag FROM svc_migrations ORDER BY id').all() as { tag: string }[]).map((r) => r.tag);
}

export function migrationStatus(db: Db, dir = findMigrationsDir()): MigrationStatus {
  const known = readJournal(dir).map((e) => e.tag);
  const applied = appliedTags(db);
  const unknown = applied.filter((t) => !known.includes(t));
  if (unknown.length) throw new DatabaseTooNewError(unknown);
  return { applied, pending: known.filter((t) => !applied.includes(t)) };
}

/** Applies pending migrations, each in its own transaction. Idempotent: returns what it applied. */
export function migrate(db: Db, dir = findMigrationsDir(), onApply?: (tag: string) => void): MigrationStatus {
  const { pending } = migrationStatus(db, dir);
  const applied: string[] = [];
  for (const tag of pending) {
    const sqlText = readFileSync(join(dir, `${tag}.sql`), 'utf8');
    const statements = splitStatements(sqlText);
    db.$client
      .transaction(() => {
        for (const stmt of statements) db.$client.exec(stmt);
        db.$client.prepare('INSERT INTO svc_migrations (tag, applied_at) VALUES (?, ?)').run(tag, new Date().toISOString());
      })
      .immediate();
    applied.push(tag);
    onApply?.(tag);
  }
  return { applied, pending: [] };
}

/** The schema version of a database: the tag of the latest migration applied to it (null: none). */
export function schemaVersion(db: Db): string | null {
  try {
    return (db.$client.prepare('SELECT tag FROM svc_migrations ORDER BY id DESC LIMIT 1').get() as { tag: string } | undefined)?.tag ?? null;
  } catch {
    return null; // no svc_migrations table: nothing was ever applied
  }
}

/** The schema version this binary carries: the tag of the last migration it knows. */
export function carriedSchemaVersion(dir = findMigrationsDir()): string | null {
  return readJournal(dir).at(-1)?.tag ?? null;
}
