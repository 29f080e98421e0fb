/**
 * The PostgreSQL store (schema.pg.ts, migrations/pg) mirrors the SQLite one (schema.ts,
 * migrations/*.sql) so that services can be shared between them (issue 12). Both are
 * migrated from scratch and read back from their catalogs: the same tables, columns
 * (nullability, default or not, primary key), indexes, unique constraints, foreign keys and
 * triggers, by name. Column types differ by design (integer ids are bigint, JSON is json (which keeps keys in order, as SQLite's text does),
 * flags are boolean) and are checked against that mapping only. The one documented
 * difference is the substring search: SQLite's FTS5 table and the trigger that feeds it on
 * update, PostgreSQL's trigram index and the generated column it covers (the searched text,
 * lower-cased), with the candidate buckets of a search and the triggers that keep them
 * (migrations/pg/0009).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type Database from 'better-sqlite3';
import pg from 'pg';
import { closeDatabase, openDatabase } from '../../src/core/db/connection.js';
import { migrate } from '../../src/core/db/migrate.js';
import { findPgMigrationsDir, migratePg } from '../../src/core/db/pgMigrate.js';
import { tempDir } from '../helpers.js';
import { createTestDatabase, skipOutsideCIWithoutPostgres } from '../pg.js';

const BOOKKEEPING = new Set(['svc_migrations']);
const SQLITE_ONLY_TABLES = /^(sqlite_|contacts_fts($|_))/;

/** What only one store has, by design: how each does `GET /contacts?q=`. */
const ONLY_SQLITE = ['trigger contacts.contacts_after_update AFTER UPDATE'];
const ONLY_POSTGRES = [
  'column contact_search_buckets.bucket not null default=no pk=0',
  'column contact_search_buckets.trigram not null default=no pk=0',
  'column contact_search_buckets.workspace_id not null default=no pk=0',
  'column contacts.search_text null default=no pk=0',
  'index contact_search_buckets.contact_search_buckets_idx (workspace_id,trigram,bucket) not unique whole',
  'index contacts.contacts_search_idx (search_text) gin',
  'table contact_search_buckets',
  'trigger contacts.contact_search_buckets_after_insert AFTER INSERT',
  'trigger contacts.contact_search_buckets_after_update AFTER UPDATE',
];

/** The PostgreSQL types a SQLite column's declared type may become (schema.pg.ts, top). */
const TYPE_MAP: Record<string, string[]> = {
  integer: ['bigint', 'integer', 'boolean'],
  text: ['text', 'json'],
  blob: ['bytea'],
  real: ['double precision'],
};

/** An ISO 8601 UTC timestamp with milliseconds, as `new Date().toISOString()` writes it. */
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

interface Shape {
  /** One line per fact ("column contacts.email null default=no pk=0"), sorted. */
  facts: string[];
  /** `table.column` → declared type. */
  types: Map<string, string>;
}

function sqliteShape(db: Database.Database): Shape {
  const facts: string[] = [];
  const types = new Map<string, string>();
  const tables = (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[])
    .map((r) => r.name)
    .filter((name) => !BOOKKEEPING.has(name) && !SQLITE_ONLY_TABLES.test(name));
  for (const table of tables) {
    facts.push(`table ${table}`);
    const columns = db.prepare(`PRAGMA table_info("${table}")`).all() as {
      name: string;
      type: string;
      notnull: number;
      dflt_value: string | null;
      pk: number;
    }[];
    for (const c of columns) {
      facts.push(`column ${table}.${c.name} ${c.notnull || c.pk ? 'not null' : 'null'} default=${c.dflt_value === null ? 'no' : 'yes'} pk=${c.pk}`);
      types.set(`${table}.${c.name}`, c.type.toLowerCase());
    }
    const indexes = db.prepare(`PRAGMA index_list("${table}")`).all() as { name: string; unique: number; origin: string; partial: number }[];
    for (const ix of indexes) {
      if (ix.origin === 'pk') continue; // the primary key is compared through its columns
      const cols = (db.prepare(`PRAGMA index_info("${ix.name}")`).all() as { seqno: number; name: string | null }[])
        .sort((a, b) => a.seqno - b.seqno)
        .map((c) => c.name ?? '<expression>')
        .join(',');
      if (ix.origin === 'u') facts.push(`unique constraint ${table} (${cols})`);
      else facts.push(`index ${table}.${ix.name} (${cols}) ${ix.unique ? 'unique' : 'not unique'} ${ix.partial ? 'partial' : 'whole'}`);
    }
    const fks = db.prepare(`PRAGMA foreign_key_list("${table}")`).all() as {
      id: number;
      seq: number;
      table: string;
      from: string;
      to: string;
      on_update: string;
      on_delete: string;
    }[];
    for (const id of new Set(fks.map((f) => f.id))) {
      const parts = fks.filter((f) => f.id === id).sort((a, b) => a.seq - b.seq);
      const first = parts[0];
      if (!first) continue;
      facts.push(
        `foreign key ${table} (${parts.map((p) => p.from).join(',')}) -> ${first.table} (${parts.map((p) => p.to).join(',')}) on delete ${first.on_delete} on update ${first.on_update}`,
      );
    }
  }
  const triggers = db.prepare("SELECT name, tbl_name, sql FROM sqlite_master WHERE type = 'trigger'").all() as {
    name: string;
    tbl_name: string;
    sql: string;
  }[];
  for (const tr of triggers) {
    const when = /\b(BEFORE|AFTER|INSTEAD OF)\s+(INSERT|UPDATE|DELETE)\b/i.exec(tr.sql);
    facts.push(`trigger ${tr.tbl_name}.${tr.name} ${when ? `${when[1]} ${when[2]}`.toUpperCase() : '?'}`);
  }
  return { facts: facts.sort(), types };
}

const PG_ACTIONS: Record<string, string> = { a: 'NO ACTION', r: 'RESTRICT', c: 'CASCADE', n: 'SET NULL', d: 'SET DEFAULT' };

async function postgresShape(client: pg.Client): Promise<Shape> {
  const facts: string[] = [];
  const types = new Map<string, string>();
  const q = async <T extends pg.QueryResultRow>(text: string): Promise<T[]> => (await client.query<T>(text)).rows;

  const tables = (
    await q<{ name: string }>("SELECT table_name AS name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'")
  )
    .map((r) => r.name)
    .filter((name) => !BOOKKEEPING.has(name));
  for (const table of tables) facts.push(`table ${table}`);
  const inScope = (table: string) => tables.includes(table);

  const primaryKeys = await q<{ table: string; column: string; position: number }>(`
    SELECT c.conrelid::regclass::text AS table, a.attname AS column, k.ord::int AS position
    FROM pg_constraint c
    CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
    JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
    WHERE c.contype = 'p' AND c.connamespace = 'public'::regnamespace`);
  const pkPosition = new Map(primaryKeys.map((r) => [`${r.table}.${r.column}`, r.position]));

  const columns = await q<{ table: string; column: string; nullable: string; default: string | null; type: string }>(`
    SELECT table_name AS table, column_name AS column, is_nullable AS nullable, column_default AS default, data_type AS type
    FROM information_schema.columns WHERE table_schema = 'public'`);
  for (const c of columns.filter((c) => inScope(c.table))) {
    const key = `${c.table}.${c.column}`;
    // An identity is PostgreSQL's AUTOINCREMENT: no default on either side.
    facts.push(`column ${key} ${c.nullable === 'NO' ? 'not null' : 'null'} default=${c.default === null ? 'no' : 'yes'} pk=${pkPosition.get(key) ?? 0}`);
    types.set(key, c.type);
  }

  const indexes = await q<{
    table: string;
    name: string;
    unique: boolean;
    partial: boolean;
    method: string;
    columns: (string | null)[];
    constraint: string | null;
  }>(`
    SELECT t.relname AS table, i.relname AS name, x.indisunique AS unique, x.indpred IS NOT NULL AS partial, am.amname AS method,
      (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
         LEFT JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum) AS columns,
      (SELECT c.contype::text FROM pg_constraint c WHERE c.conindid = x.indexrelid AND c.conrelid = x.indrelid) AS constraint
    FROM pg_index x
    JOIN pg_class i ON i.oid = x.indexrelid
    JOIN pg_class t ON t.oid = x.indrelid
    JOIN pg_am am ON am.oid = i.relam
    WHERE t.relnamespace = 'public'::regnamespace AND NOT x.indisprimary`);
  for (const ix of indexes.filter((ix) => inScope(ix.table))) {
    const cols = ix.columns.map((c) => c ?? '<expression>').join(',');
    if (ix.constraint === 'u') facts.push(`unique constraint ${ix.table} (${cols})`);
    else if (ix.method === 'btree')
      facts.push(`index ${ix.table}.${ix.name} (${cols}) ${ix.unique ? 'unique' : 'not unique'} ${ix.partial ? 'partial' : 'whole'}`);
    else facts.push(`index ${ix.table}.${ix.name} (${cols}) ${ix.method}`);
  }

  const fks = await q<{ table: string; from: string[]; target: string; to: string[]; on_delete: string; on_update: string }>(`
    SELECT c.conrelid::regclass::text AS table, c.confrelid::regclass::text AS target, c.confdeltype::text AS on_delete, c.confupdtype::text AS on_update,
      (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord) JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum) AS from,
      (SELECT array_agg(a.attname::text ORDER BY k.ord) FROM unnest(c.confkey) WITH ORDINALITY AS k(attnum, ord) JOIN pg_attribute a ON a.attrelid = c.confrelid AND a.attnum = k.attnum) AS to
    FROM pg_constraint c WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace`);
  for (const fk of fks.filter((fk) => inScope(fk.table))) {
    facts.push(
      `foreign key ${fk.table} (${fk.from.join(',')}) -> ${fk.target} (${fk.to.join(',')}) on delete ${PG_ACTIONS[fk.on_delete]} on update ${PG_ACTIONS[fk.on_update]}`,
    );
  }

  const triggers = await q<{ table: string; name: string; type: number }>(`
    SELECT t.tgrelid::regclass::text AS table, t.tgname AS name, t.tgtype::int AS type
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace`);
  for (const tr of triggers.filter((tr) => inScope(tr.table))) {
    // tgtype bits (pg_trigger.h): 2 BEFORE, 64 INSTEAD, else AFTER; 4 INSERT, 8 DELETE, 16 UPDATE.
    const timing = tr.type & 64 ? 'INSTEAD OF' : tr.type & 2 ? 'BEFORE' : 'AFTER';
    const events = [tr.type & 4 && 'INSERT', tr.type & 16 && 'UPDATE', tr.type & 8 && 'DELETE'].filter(Boolean).join(' OR ');
    facts.push(`trigger ${tr.table}.${tr.name} ${timing} ${events}`);
  }
  return { facts: facts.sort(), types };
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

function migratedSqlite(t: Parameters<typeof tempDir>[0]) {
  const db = openDatabase(join(tempDir(t, 'svc-parity-'), 'svc.db'));
  t.after(() => closeDatabase(db));
  migrate(db);
  return db;
}

test('the PostgreSQL schema has the same tables, columns, indexes, keys and triggers as SQLite', { skip: skipOutsideCIWithoutPostgres() }, async (t) => {
  const sqlite = sqliteShape(migratedSqlite(t).$client);
  const url = await createTestDatabase(t);
  await migratePg(url);
  const postgres = await withClient(url, postgresShape);

  const onlySqlite = sqlite.facts.filter((f) => !postgres.facts.includes(f));
  const onlyPostgres = postgres.facts.filter((f) => !sqlite.facts.includes(f));
  assert.deepEqual(onlySqlite, ONLY_SQLITE, `only in SQLite:\n  ${onlySqlite.join('\n  ')}\nonly in PostgreSQL:\n  ${onlyPostgres.join('\n  ')}`);
  assert.deepEqual(onlyPostgres, ONLY_POSTGRES, `only in PostgreSQL:\n  ${onlyPostgres.join('\n  ')}\nonly in SQLite:\n  ${onlySqlite.join('\n  ')}`);

  const mistyped = [...sqlite.types].filter(([column, type]) => !(TYPE_MAP[type] ?? []).includes(postgres.types.get(column) ?? '?'));
  assert.deepEqual(
    mistyped.map(([column, type]) => `${column}: ${type} on SQLite, ${postgres.types.get(column)} on PostgreSQL`),
    [],
    'column types outside the mapping',
  );
});

test('PostgreSQL writes default timestamps in the same ISO 8601 UTC form as SQLite', { skip: skipOutsideCIWithoutPostgres() }, async (t) => {
  const sqlite = migratedSqlite(t).$client;
  const fromSqlite = sqlite.prepare("INSERT INTO workspaces (name) VALUES ('a') RETURNING created_at, updated_at").get() as {
    created_at: string;
    updated_at: string;
  };
  const url = await createTestDatabase(t);
  await migratePg(url);
  const fromPostgres = await withClient(
    url,
    async (c) => (await c.query("INSERT INTO workspaces (name) VALUES ('a') RETURNING created_at, updated_at")).rows[0],
  );

  for (const [store, row] of [
    ['SQLite', fromSqlite],
    ['PostgreSQL', fromPostgres],
  ] as const) {
    for (const value of [row.created_at, row.updated_at]) {
      assert.match(value, ISO_UTC, `${store} default timestamp`);
      assert.equal(new Date(value).toISOString(), value, `${store}: ${value} is what toISOString writes`);
      assert.ok(Math.abs(Date.parse(value) - Date.now()) < 60_000, `${store}: ${value} is now, in UTC`);
    }
  }
});

test('PostgreSQL keeps the contact and tag counters as the SQLite triggers do', { skip: skipOutsideCIWithoutPostgres() }, async (t) => {
  // The same statements on both stores, then the counters compared with each other.
  const statements = [
    "INSERT INTO workspaces (id, name) VALUES (1, 'one'), (2, 'two')",
    "INSERT INTO contacts (id, workspace_id, email) VALUES (1, 1, 'a@x'), (2, 1, 'b@x'), (3, 1, 'c@x'), (4, 2, 'd@x')",
    "INSERT INTO contact_tags (contact_id, workspace_id, tag_key, name) VALUES (1, 1, 'vip', 'VIP'), (2, 1, 'vip', 'vip'), (3, 1, 'new', 'New'), (4, 2, 'vip', 'Vip')",
    "DELETE FROM contact_tags WHERE contact_id = 1 AND tag_key = 'vip'",
    'DELETE FROM contacts WHERE id = 3',
    "UPDATE contacts SET email = 'z@x' WHERE id = 2",
  ];
  const counters = 'SELECT workspace_id, contacts FROM workspace_counters ORDER BY workspace_id';
  const tags = 'SELECT workspace_id, tag_key, name, contacts FROM tag_counts ORDER BY workspace_id, tag_key';

  const sqlite = migratedSqlite(t).$client;
  for (const s of statements) sqlite.exec(s);
  const url = await createTestDatabase(t);
  await migratePg(url);
  const [pgCounters, pgTags] = await withClient(url, async (c) => {
    for (const s of statements) await c.query(s);
    return [(await c.query(counters)).rows, (await c.query(tags)).rows];
  });

  const expectedCounters = [
    { workspace_id: 1, contacts: 2 },
    { workspace_id: 2, contacts: 1 },
  ];
  // The spelling kept is the first one added while any contact has the tag; 'new' went with contact 3.
  const expectedTags = [
    { workspace_id: 1, tag_key: 'vip', name: 'VIP', contacts: 1 },
    { workspace_id: 2, tag_key: 'vip', name: 'Vip', contacts: 1 },
  ];
  assert.deepEqual(sqlite.prepare(counters).all(), expectedCounters, 'SQLite workspace_counters');
  assert.deepEqual(sqlite.prepare(tags).all(), expectedTags, 'SQLite tag_counts');
  // bigint comes back from pg as a string: compare as numbers.
  assert.deepEqual(
    pgCounters.map((r) => ({ workspace_id: Number(r.workspace_id), contacts: Number(r.contacts) })),
    expectedCounters,
    'PostgreSQL workspace_counters',
  );
  assert.deepEqual(
    pgTags.map((r) => ({ ...r, workspace_id: Number(r.workspace_id), contacts: Number(r.contacts) })),
    expectedTags,
    'PostgreSQL tag_counts',
  );
});

test('drizzle-kit finds nothing to generate for schema.pg.ts beyond migrations/pg', (t) => {
  // Generated into a copy, so the check never writes into the repository.
  const dir = tempDir(t, 'svc-pg-generate-');
  const out = join(dir, 'pg');
  cpSync(findPgMigrationsDir(), out, { recursive: true });
  const config = join(dir, 'drizzle.config.js');
  const before = readdirSync(out).sort();
  // A plain-object config: the temp folder has no node_modules to resolve drizzle-kit from.
  // drizzle-kit reads `out` relative to the working directory, even when it is absolute.
  const schema = fileURLToPath(new URL('../../src/core/db/schema.pg.ts', import.meta.url));
  writeFileSync(config, `export default ${JSON.stringify({ dialect: 'postgresql', schema, out: './pg' })};\n`);
  const bin = fileURLToPath(new URL('../../node_modules/drizzle-kit/bin.cjs', import.meta.url));
  const run = spawnSync(process.execPath, [bin, 'generate', '--config', config], { cwd: dir, encoding: 'utf8' });
  const output = `${run.stdout}${run.stderr}`;
  // drizzle-kit exits 0 even when it fails, so the test asks for its "nothing to do" line.
  assert.deepEqual(readdirSync(out).sort(), before, `drizzle-kit generated a migration: schema.pg.ts and migrations/pg disagree\n${output}`);
  assert.match(output, /No schema changes/, output);
});
