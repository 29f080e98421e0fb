import { existsSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type Database from 'better-sqlite3';
import pg from 'pg';
import { configPath, privateDataDir, redactDatabaseUrl } from '../config.js';
import { openDatabase } from '../db/connection.js';
import { PG_DERIVED_TABLES, PG_REBUILD_SEARCH_BUCKETS } from '../db/dialect.js';
import { DatabaseTooNewError, findMigrationsDir, migrate, readJournal } from '../db/migrate.js';
import { migratePg, pgMigrationStatus } from '../db/pgMigrate.js';
import { ConflictError, ValidationError } from '../errors.js';
import { decryptSecret } from '../secrets.js';
import { assertNoServer } from '../serverLock.js';

/**
 * `svc db copy`: every table of svc's schema from one store to the other, both ways.
 *
 * - SQLite → PostgreSQL (copySqliteToPg): the data folder's svc.db into an empty PostgreSQL
 *   database, which is migrated to this build's schema first.
 * - PostgreSQL → SQLite (copyPgToSqlite): into a new data folder: its svc.db is created and
 *   migrated, and its config.json gets the secrets the data was encrypted and signed with.
 *
 * How (docs: README, "Moving to PostgreSQL: svc db copy"):
 * - The tables are the source database's own (its base tables, not SQLite's FTS5 index or its
 *   shadow tables, nor svc_migrations, which each store keeps for itself), so a table a later
 *   migration adds is copied without a change here. Both stores must be at this build's
 *   schema and have the same tables and columns.
 * - The source is only read, in one read transaction (a consistent snapshot: SQLite opened
 *   read-only; PostgreSQL REPEATABLE READ, READ ONLY), streamed in batches (a cursor on
 *   PostgreSQL), never a whole table in memory. A data folder a server is running on is
 *   refused: what it accepted after the snapshot would be left behind.
 * - The target is written in one transaction, so the copy is all or nothing: on any failure
 *   PostgreSQL is rolled back (left migrated and empty) and a new data folder is removed.
 *   Row counts are compared per table before the COMMIT.
 * - Derived rows kept by triggers end up as the source has them, never counted twice:
 *   on PostgreSQL the copied tables' own triggers are disabled for the transaction
 *   (`ALTER TABLE … DISABLE TRIGGER USER`, which the tables' owner may do, no superuser
 *   needed) and every table, counters included, is copied as it is; on SQLite the triggers
 *   run (they fill the FTS5 search index as the contacts arrive) and the tables they write
 *   (the counters) are cleared and copied last.
 * - Identities: PostgreSQL's sequences and SQLite's sqlite_sequence are set past the highest
 *   id copied, or the source's own counter when that is higher (ids are never handed out
 *   twice, as before the move).
 */

export interface DbCopyProgress {
  table: string;
  /** Rows of this table copied so far. */
  rows: number;
  /** Rows of this table in the source. */
  total: number;
  /** 1-based position of the table in the copy, of tableCount. */
  tableIndex: number;
  tableCount: number;
}

export type DbCopyStep = 'checking' | 'migrating' | 'copying' | 'verifying' | 'committing';

export interface DbCopyOptions {
  onProgress?: (p: DbCopyProgress) => void;
  onStep?: (step: DbCopyStep) => void;
  /** Rows read and written at a time (default 1000; fewer on PostgreSQL for wide tables). */
  batchRows?: number;
  /** Stops the copy between two batches, with the signal's reason, and undoes it like any failure. */
  signal?: AbortSignal;
}

export interface DbCopyResult {
  /** Every copied table with its rows, verified equal in source and target, in copy order. */
  tables: { table: string; rows: number }[];
  totalRows: number;
  ms: number;
}

export interface PgToSqliteResult extends DbCopyResult {
  dataDir: string;
  dbFile: string;
  configFile: string;
}

export interface Secrets {
  jwtSecret: string;
  encryptionKey: string;
}

/** Columns holding values encrypted with the encryption key (core/secrets.ts): one is tried before writing. */
const ENCRYPTED_COLUMNS: [table: string, column: string, what: string][] = [
  ['workflows', 'signing_secret', "a workflow's webhook signing secret"],
  ['channel_settings', 'credentials', "a channel's credentials"],
];

const MIGRATIONS_TABLE = 'svc_migrations';
const PG_MAX_PARAMS = 65_535;
const DEFAULT_BATCH = 1000;

interface Column {
  name: string;
  /** The declared type, lower-cased: `integer`, `text`, `blob` on SQLite; `bigint`, `boolean`, `json`, `bytea`… on PostgreSQL. */
  type: string;
}

interface TableShape {
  name: string;
  columns: Column[];
  /** The primary key's columns (the read order, and how a row is named in a message). */
  key: string[];
  /** The tables its foreign keys point to. */
  references: string[];
  /** SQLite: the table has a rowid (not WITHOUT ROWID), the order its rows were written in. */
  rowid?: boolean;
}

interface Source {
  describe(): Promise<TableShape[]>;
  count(table: string): Promise<number>;
  /** The table's rows in key order, each as an array of the given columns, a batch at a time. */
  batches(table: TableShape, columns: string[], size: number): AsyncGenerator<unknown[][]>;
  /** The highest id each table's own counter has handed out (SQLite's sqlite_sequence, PostgreSQL's sequences). */
  lastIds(): Promise<Map<string, number>>;
  /** The first non-null value of a column, or undefined (none, or no such column). */
  firstValue(table: string, column: string): Promise<unknown>;
  close(): Promise<void>;
}

interface Target {
  describe(): Promise<TableShape[]>;
  /** Tables that triggers write while other tables are copied: cleared, then copied after the rest. */
  derived(tables: TableShape[]): Promise<Set<string>>;
  begin(tables: TableShape[]): Promise<void>;
  clear(table: string): Promise<void>;
  /** Rows in target form (converted), of the given columns. */
  insert(table: TableShape, columns: string[], rows: unknown[][]): Promise<void>;
  /** Rows per batch for a table this wide. */
  batchSize(width: number): number;
  /** How a source value becomes this target's value for a column (throws a ValidationError for one it cannot hold). */
  converter(column: Column): (value: unknown) => unknown;
  count(table: string): Promise<number>;
  /** Sets every identity counter past the highest id copied, or the source's counter when that is higher. */
  setIdentities(sourceLastIds: Map<string, number>): Promise<void>;
  commit(): Promise<void>;
  abort(): Promise<void>;
}

const quote = (name: string) => `"${name.replace(/"/g, '""')}"`;

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

function migrationsPending(where: string, pending: string[], command: string): ConflictError {
  return new ConflictError(
    'migrations_pending',
    `${where} is not at this build's schema (${plural(pending.length, 'pending migration')}: ${pending.join(', ')}); run "${command}" first`,
  );
}

// ---------------------------------------------------------------------------------------
// SQLite

function sqliteTables(db: Database.Database): TableShape[] {
  // table_list says which tables are an FTS5 index's shadow tables and which are virtual.
  const names = (
    db
      .prepare("SELECT name FROM pragma_table_list WHERE schema = 'main' AND type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")
      .all() as {
      name: string;
    }[]
  )
    .map((r) => r.name)
    .filter((n) => n !== MIGRATIONS_TABLE);
  return names.map((name) => {
    const { sql } = db.prepare("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) as { sql: string };
    const info = db.prepare('SELECT name, type, pk FROM pragma_table_info(?) ORDER BY cid').all(name) as { name: string; type: string; pk: number }[];
    const fks = db.prepare('SELECT DISTINCT "table" AS ref FROM pragma_foreign_key_list(?)').all(name) as { ref: string }[];
    return {
      name,
      columns: info.map((c) => ({ name: c.name, type: c.type.toLowerCase() })),
      key: info
        .filter((c) => c.pk > 0)
        .sort((a, b) => a.pk - b.pk)
        .map((c) => c.name),
      references: fks.map((f) => f.ref),
      rowid: !/WITHOUT\s+ROWID/i.test(sql),
    };
  });
}

function sqliteLastIds(db: Database.Database): Map<string, number> {
  const ids = new Map<string, number>();
  const exists = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_sequence'").get();
  if (!exists) return ids;
  for (const r of db.prepare('SELECT name, seq FROM sqlite_sequence').all() as { name: string; seq: number }[]) ids.set(r.name, Number(r.seq));
  return ids;
}

/** The data folder's svc.db, read-only, in one read transaction. */
function openSqliteSource(file: string): Source {
  if (!existsSync(file)) throw new ConflictError('source_missing', `There is no SQLite database at ${file}: nothing to copy`);
  const db = openDatabase(file, { readonly: true }).$client;
  let shape: TableShape[] | undefined;
  try {
    // A deferred transaction: the first read below takes the snapshot every later read sees.
    db.exec('BEGIN');
    let applied: string[];
    try {
      applied = (db.prepare(`SELECT tag FROM ${MIGRATIONS_TABLE} ORDER BY id`).all() as { tag: string }[]).map((r) => r.tag);
    } catch {
      throw new ConflictError('not_svc_database', `${file} is not an svc database (it has no ${MIGRATIONS_TABLE} table)`);
    }
    const known = readJournal(findMigrationsDir()).map((e) => e.tag);
    const unknown = applied.filter((t) => !known.includes(t));
    if (unknown.length) throw new DatabaseTooNewError(unknown);
    const pending = known.filter((t) => !applied.includes(t));
    if (pending.length) throw migrationsPending(file, pending, 'svc migrate');
  } catch (err) {
    db.close();
    throw err;
  }
  return {
    async describe() {
      shape ??= sqliteTables(db);
      return shape;
    },
    async count(table) {
      return Number((db.prepare(`SELECT count(*) AS n FROM ${quote(table)}`).get() as { n: number }).n);
    },
    async *batches(table, columns, size) {
      // The rowid order is the id order (INTEGER PRIMARY KEY) or the order rows were written.
      const order = table.rowid ? 'rowid' : table.key.map(quote).join(', ');
      const stmt = db.prepare(`SELECT ${columns.map(quote).join(', ')} FROM ${quote(table.name)}${order ? ` ORDER BY ${order}` : ''}`);
      stmt.raw(true).safeIntegers(true);
      const rows = stmt.iterate() as IterableIterator<unknown[]>;
      try {
        let batch: unknown[][] = [];
        for (const row of rows) {
          batch.push(row);
          if (batch.length >= size) {
            yield batch;
            batch = [];
          }
        }
        if (batch.length) yield batch;
      } finally {
        rows.return?.();
      }
    },
    async lastIds() {
      return sqliteLastIds(db);
    },
    async firstValue(table, column) {
      try {
        const row = db.prepare(`SELECT ${quote(column)} AS v FROM ${quote(table)} WHERE ${quote(column)} IS NOT NULL LIMIT 1`).get() as
          | { v: unknown }
          | undefined;
        return row?.v;
      } catch {
        return undefined;
      }
    },
    async close() {
      if (!db.open) return;
      if (db.inTransaction) db.exec('COMMIT');
      db.close();
    },
  };
}

/**
 * A new data folder's svc.db, created and migrated. The triggers stay on: they fill the FTS5
 * search index as the contacts arrive, and the tables they write (the counters) are cleared
 * and copied from the source after the rest.
 */
function openSqliteTarget(file: string, batchRows: number): Target {
  const handle = openDatabase(file);
  const db = handle.$client;
  try {
    migrate(handle);
  } catch (err) {
    db.close();
    throw err;
  }
  const statements = new Map<string, Database.Statement>();
  return {
    async describe() {
      return sqliteTables(db);
    },
    async derived(tables) {
      const names = new Set(tables.map((t) => t.name));
      const derived = new Set<string>();
      for (const trigger of db.prepare("SELECT tbl_name AS own, sql FROM sqlite_master WHERE type = 'trigger'").all() as { own: string; sql: string }[]) {
        for (const m of trigger.sql.matchAll(/\b(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+[`"[]?(\w+)/gi)) {
          const name = m[1]!;
          if (name !== trigger.own && names.has(name)) derived.add(name);
        }
      }
      return derived;
    },
    async begin() {
      db.exec('BEGIN IMMEDIATE');
      // Foreign keys are checked at the COMMIT, so no order of tables can trip them.
      db.pragma('defer_foreign_keys = ON');
    },
    async clear(table) {
      db.prepare(`DELETE FROM ${quote(table)}`).run();
    },
    async insert(table, columns, rows) {
      let stmt = statements.get(table.name);
      if (!stmt) {
        stmt = db.prepare(`INSERT INTO ${quote(table.name)} (${columns.map(quote).join(', ')}) VALUES (${columns.map(() => '?').join(', ')})`);
        statements.set(table.name, stmt);
      }
      for (const row of rows) stmt.run(row);
    },
    batchSize() {
      return batchRows;
    },
    converter(column) {
      const integer = /int/.test(column.type);
      return (v) => {
        if (typeof v === 'boolean') return v ? 1 : 0;
        // bigint arrives from PostgreSQL as its text, exactly.
        if (integer && typeof v === 'string' && /^-?[0-9]+$/.test(v)) return BigInt(v);
        if (v instanceof Date) return v.toISOString();
        return v;
      };
    },
    async count(table) {
      return Number((db.prepare(`SELECT count(*) AS n FROM ${quote(table)}`).get() as { n: number }).n);
    },
    async setIdentities(sourceLastIds) {
      // SQLite raised sqlite_sequence to the highest id inserted; the source's counter may be higher.
      const autoincrement = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE '%AUTOINCREMENT%'").all() as { name: string }[];
      const current = sqliteLastIds(db);
      for (const { name } of autoincrement) {
        if (name === MIGRATIONS_TABLE) continue;
        const wanted = sourceLastIds.get(name) ?? 0;
        if (wanted <= (current.get(name) ?? 0)) continue;
        if (current.has(name)) db.prepare('UPDATE sqlite_sequence SET seq = ? WHERE name = ?').run(wanted, name);
        else db.prepare('INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)').run(name, wanted);
      }
    },
    async commit() {
      db.exec('COMMIT');
      db.pragma('wal_checkpoint(TRUNCATE)');
      db.close();
    },
    async abort() {
      if (!db.open) return;
      if (db.inTransaction) db.exec('ROLLBACK');
      db.close();
    },
  };
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

/**
 * Values as their text where JavaScript would change them: bigint exactly (not a float), and
 * json as written (keys in their order). Set per client, not for the whole process.
 */
const PG_TYPES = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === pg.types.builtins.INT8 || oid === pg.types.builtins.JSON || oid === pg.types.builtins.JSONB) return (v: string) => v;
    return (pg.types.getTypeParser as (oid: number, format?: 'text' | 'binary') => (v: string) => unknown)(oid, format);
  },
};

async function connect(url: string, applicationName: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: applicationName, types: PG_TYPES });
  // A connection lost between two queries fails the next query, which is handled there.
  client.on('error', () => {});
  await client.connect();
  return client;
}

async function pgTables(client: pg.ClientBase): Promise<TableShape[]> {
  const tables = await client.query<{ name: string }>(
    `SELECT table_name AS name FROM information_schema.tables
      WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' AND table_name <> ALL($1) ORDER BY table_name`,
    // Tables PostgreSQL alone has, an index of others kept by triggers: never copied, rebuilt (openPgTarget's commit).
    [[MIGRATIONS_TABLE, ...PG_DERIVED_TABLES]],
  );
  const columns = await client.query<{ table: string; name: string; type: string }>(
    // A generated column (contacts.search_text, PostgreSQL's alone) is computed by the target, never copied.
    `SELECT table_name AS "table", column_name AS name, data_type AS type FROM information_schema.columns
      WHERE table_schema = current_schema() AND is_generated = 'NEVER' ORDER BY table_name, ordinal_position`,
  );
  const keys = await client.query<{ table: string; name: string }>(
    `SELECT c.relname AS "table", a.attname AS name
       FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
      WHERE i.indisprimary AND n.nspname = current_schema() ORDER BY c.relname, k.ord`,
  );
  const refs = await client.query<{ table: string; ref: string }>(
    `SELECT DISTINCT c.relname AS "table", r.relname AS ref
       FROM pg_constraint f JOIN pg_class c ON c.oid = f.conrelid JOIN pg_class r ON r.oid = f.confrelid
       JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE f.contype = 'f' AND n.nspname = current_schema()`,
  );
  return tables.rows.map(({ name }) => ({
    name,
    columns: columns.rows.filter((c) => c.table === name).map((c) => ({ name: c.name, type: c.type.toLowerCase() })),
    key: keys.rows.filter((k) => k.table === name).map((k) => k.name),
    references: refs.rows.filter((r) => r.table === name).map((r) => r.ref),
  }));
}

/** Every identity (or serial) column of the schema with its sequence. */
async function pgSequences(client: pg.ClientBase): Promise<{ table: string; column: string; sequence: string }[]> {
  const rows = await client.query<{ table: string; column: string; sequence: string | null }>(
    `SELECT table_name AS "table", column_name AS "column",
            pg_get_serial_sequence(format('%I.%I', table_schema, table_name), column_name) AS sequence
       FROM information_schema.columns
      WHERE table_schema = current_schema() AND table_name <> $1 AND (is_identity = 'YES' OR column_default LIKE 'nextval(%')`,
    [MIGRATIONS_TABLE],
  );
  return rows.rows.filter((r): r is { table: string; column: string; sequence: string } => r.sequence !== null);
}

/** A PostgreSQL database at this build's schema, read in one REPEATABLE READ, READ ONLY transaction. */
async function openPgSource(url: string): Promise<Source> {
  const where = redactDatabaseUrl(url);
  const status = await pgMigrationStatus(url);
  if (!status.applied.length) throw new ConflictError('not_svc_database', `${where} holds no svc schema (no migration was ever applied): nothing to copy`);
  if (status.pending.length) throw migrationsPending(where, status.pending, `svc migrate --database-url ${where}`);
  const client = await connect(url, 'svc db copy (source)');
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY');
  } catch (err) {
    await client.end().catch(() => {});
    throw err;
  }
  let cursors = 0;
  let shape: TableShape[] | undefined;
  return {
    async describe() {
      shape ??= await pgTables(client);
      return shape;
    },
    async count(table) {
      return Number((await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${quote(table)}`)).rows[0]!.n);
    },
    async *batches(table, columns, size) {
      const cursor = `svc_copy_${++cursors}`;
      const order = table.key.length ? ` ORDER BY ${table.key.map(quote).join(', ')}` : '';
      await client.query(`DECLARE ${cursor} NO SCROLL CURSOR FOR SELECT ${columns.map(quote).join(', ')} FROM ${quote(table.name)}${order}`);
      const fetch = () => client.query<unknown[]>({ text: `FETCH FORWARD ${size} FROM ${cursor}`, rowMode: 'array' }).then((r) => r.rows as unknown[][]);
      // The next batch is asked for while the caller writes this one.
      let next = fetch();
      for (;;) {
        const rows = await next;
        if (!rows.length) break;
        next = fetch();
        next.catch(() => {}); // awaited in the next turn, or dropped with the transaction
        yield rows;
      }
      await client.query(`CLOSE ${cursor}`);
    },
    async lastIds() {
      const ids = new Map<string, number>();
      for (const s of await pgSequences(client)) {
        const r = (await client.query<{ last_value: string; is_called: boolean }>(`SELECT last_value, is_called FROM ${s.sequence}`)).rows[0];
        if (r) ids.set(s.table, Math.max(ids.get(s.table) ?? 0, r.is_called ? Number(r.last_value) : Number(r.last_value) - 1));
      }
      return ids;
    },
    async firstValue(table, column) {
      const has = shape?.find((t) => t.name === table)?.columns.some((c) => c.name === column);
      if (!has) return undefined;
      return (await client.query<{ v: unknown }>(`SELECT ${quote(column)} AS v FROM ${quote(table)} WHERE ${quote(column)} IS NOT NULL LIMIT 1`)).rows[0]?.v;
    },
    async close() {
      await client.query('COMMIT').catch(() => {});
      await client.end().catch(() => {});
    },
  };
}

/**
 * Before anything is written: the target database holds nothing but svc's (still empty)
 * tables, and is not at a newer schema than this build's.
 */
async function assertPgTargetEmpty(url: string, tables: string[]): Promise<void> {
  const where = redactDatabaseUrl(url);
  await pgMigrationStatus(url); // refuses a database migrated by a newer svc
  const client = await connect(url, 'svc db copy (target)');
  try {
    const relations = await client.query<{ name: string; kind: string }>(
      `SELECT c.relname AS name, c.relkind::text AS kind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') ORDER BY c.relname`,
    );
    const ours = new Set([...tables, MIGRATIONS_TABLE, ...PG_DERIVED_TABLES]);
    const KINDS: Record<string, string> = { v: 'view', m: 'materialized view', f: 'foreign table' };
    const foreign = relations.rows.filter((r) => !ours.has(r.name) || KINDS[r.kind]);
    if (foreign.length) {
      const names = foreign.map((r) => (KINDS[r.kind] ? `${r.name} (${KINDS[r.kind]})` : r.name));
      throw new ConflictError(
        'target_not_empty',
        `The target database ${where} holds ${plural(foreign.length, 'table')} that ${foreign.length === 1 ? 'is' : 'are'} not svc's (${list(names)}): copy into a new, empty database (createdb)`,
      );
    }
    await assertNoRows(
      client,
      where,
      relations.rows.map((r) => r.name).filter((n) => n !== MIGRATIONS_TABLE),
    );
  } finally {
    await client.end().catch(() => {});
  }
}

function list(names: string[], max = 8): string {
  return names.length > max ? `${names.slice(0, max).join(', ')} and ${names.length - max} more` : names.join(', ');
}

async function assertNoRows(client: pg.ClientBase, where: string, tables: string[]): Promise<void> {
  const full: string[] = [];
  for (const t of tables) {
    const r = await client.query<{ n: string }>(`SELECT count(*) AS n FROM (SELECT 1 FROM ${quote(t)} LIMIT 1000001) s`);
    const n = Number(r.rows[0]!.n);
    if (n > 0) full.push(`${t} (${n > 1_000_000 ? 'over 1000000' : n} ${n === 1 ? 'row' : 'rows'})`);
  }
  if (full.length)
    throw new ConflictError(
      'target_not_empty',
      `The target database ${where} is not empty: ${list(full)}; svc db copy only fills an empty database (create a new one with createdb)`,
    );
}

/**
 * An empty PostgreSQL database migrated to this build's schema, written in one transaction
 * with the tables locked against other writers and their own triggers disabled (the counters
 * are copied as they are): all or nothing.
 */
async function openPgTarget(url: string, batchRows: number): Promise<Target> {
  // PostgreSQL takes at most 65535 parameters a statement.
  const batchSize = (width: number) => Math.max(1, Math.min(batchRows, Math.floor(PG_MAX_PARAMS / Math.max(1, width))));
  const where = redactDatabaseUrl(url);
  const client = await connect(url, 'svc db copy (target)');
  let names: string[] = [];
  let withTriggers: string[] = [];
  return {
    async describe() {
      return pgTables(client);
    },
    async derived() {
      return new Set();
    },
    async begin(tables) {
      names = tables.map((t) => t.name);
      await client.query('BEGIN');
      // Another process writing meanwhile (a node started on this database) waits, or we give up.
      await client.query("SET LOCAL lock_timeout = '10s'");
      try {
        if (names.length) await client.query(`LOCK TABLE ${names.map(quote).join(', ')} IN EXCLUSIVE MODE`);
      } catch (err) {
        if ((err as { code?: string }).code === '55P03')
          throw new ConflictError(
            'target_busy',
            `The target database ${where} is in use (its tables stayed locked for 10 s): stop what uses it and copy again`,
          );
        throw err;
      }
      await assertNoRows(client, where, names);
      withTriggers = (
        await client.query<{ name: string }>(
          `SELECT DISTINCT c.relname AS name FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE NOT t.tgisinternal AND n.nspname = current_schema() ORDER BY 1`,
        )
      ).rows
        .map((r) => r.name)
        .filter((n) => names.includes(n));
      try {
        for (const t of withTriggers) await client.query(`ALTER TABLE ${quote(t)} DISABLE TRIGGER USER`);
      } catch (err) {
        if ((err as { code?: string }).code === '42501')
          throw new ConflictError(
            'target_not_owner',
            `svc db copy disables the tables' triggers while it copies, which only their owner may do: connect to ${where} as the role that owns svc's tables (the one that migrated it)`,
          );
        throw err;
      }
    },
    async clear(table) {
      await client.query(`DELETE FROM ${quote(table)}`);
    },
    async insert(table, columns, rows) {
      const width = columns.length;
      const values = rows.map((_, r) => `(${columns.map((_c, c) => `$${r * width + c + 1}`).join(', ')})`).join(', ');
      const text = `INSERT INTO ${quote(table.name)} (${columns.map(quote).join(', ')}) OVERRIDING SYSTEM VALUE VALUES ${values}`;
      const params = rows.flat();
      // A full batch has the same text every time: prepared once, by name.
      if (rows.length === batchSize(width)) {
        const name = `svc_copy_${table.name}`.slice(0, 63);
        await client.query({ name, text, values: params });
      } else {
        await client.query(text, params);
      }
    },
    batchSize,
    converter(column) {
      switch (column.type) {
        case 'boolean':
          return (v) => (v === null || v === undefined ? null : typeof v === 'boolean' ? v : typeof v === 'bigint' ? v !== 0n : Number(v) !== 0);
        case 'bytea':
          return (v) => (typeof v === 'string' ? Buffer.from(v, 'utf8') : v);
        default:
          return (v) => {
            if (typeof v === 'bigint') return v.toString();
            if (typeof v === 'string' && v.includes('\u0000')) throw new NulInText();
            return v;
          };
      }
    },
    async count(table) {
      return Number((await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${quote(table)}`)).rows[0]!.n);
    },
    async setIdentities(sourceLastIds) {
      for (const s of await pgSequences(client)) {
        if (!names.includes(s.table)) continue;
        const max = Number((await client.query<{ m: string | null }>(`SELECT max(${quote(s.column)}) AS m FROM ${quote(s.table)}`)).rows[0]?.m ?? 0);
        const next = Math.max(max, sourceLastIds.get(s.table) ?? 0);
        // setval is not undone by a ROLLBACK: it runs last, once the rows are in and counted.
        if (next >= 1) await client.query('SELECT setval($1::regclass, $2::bigint, true)', [s.sequence, next]);
        else await client.query('SELECT setval($1::regclass, 1, false)', [s.sequence]);
      }
    },
    async commit() {
      // The search's buckets, whose triggers were off while the contacts came in.
      await client.query(PG_REBUILD_SEARCH_BUCKETS);
      for (const t of withTriggers) await client.query(`ALTER TABLE ${quote(t)} ENABLE TRIGGER USER`);
      await client.query('COMMIT');
      await client.end();
    },
    async abort() {
      await client.query('ROLLBACK').catch(() => {});
      await client.end().catch(() => {});
    },
  };
}

/** Thrown by a converter; the copy names the table, row and column. */
class NulInText extends Error {}

// ---------------------------------------------------------------------------------------
// The copy

/** Parents before children (by foreign key); a cycle, if one ever appears, keeps name order. */
function foreignKeyOrder(tables: TableShape[]): TableShape[] {
  const byName = new Map(tables.map((t) => [t.name, t]));
  const done = new Set<string>();
  const order: TableShape[] = [];
  const visiting = new Set<string>();
  const visit = (t: TableShape) => {
    if (done.has(t.name) || visiting.has(t.name)) return;
    visiting.add(t.name);
    for (const ref of [...t.references].sort()) {
      const parent = byName.get(ref);
      if (parent && parent.name !== t.name) visit(parent);
    }
    visiting.delete(t.name);
    done.add(t.name);
    order.push(t);
  };
  for (const t of [...tables].sort((a, b) => a.name.localeCompare(b.name))) visit(t);
  return order;
}

function assertSameSchema(source: TableShape[], target: TableShape[]): void {
  const problems: string[] = [];
  const targets = new Map(target.map((t) => [t.name, t]));
  for (const s of source) {
    const t = targets.get(s.name);
    if (!t) {
      problems.push(`table ${s.name} is missing in the target`);
      continue;
    }
    const tc = new Set(t.columns.map((c) => c.name));
    const sc = new Set(s.columns.map((c) => c.name));
    for (const c of sc) if (!tc.has(c)) problems.push(`column ${s.name}.${c} is missing in the target`);
    for (const c of tc) if (!sc.has(c)) problems.push(`column ${s.name}.${c} is missing in the source`);
  }
  const sources = new Set(source.map((s) => s.name));
  for (const t of target) if (!sources.has(t.name)) problems.push(`table ${t.name} is missing in the source`);
  if (problems.length)
    throw new ConflictError('schema_mismatch', `The two databases do not have the same tables (${list(problems, 5)}); both must be at this build's schema`);
}

/** The first value of a batch in a JSON column that is not JSON, as an error naming it (undefined: none). */
function badJson(table: TableShape, columns: string[], types: Map<string, Column>, batch: unknown[][], offset: number): ValidationError | undefined {
  const json = columns.flatMap((c, i) => (/^jsonb?$/.test(types.get(c)?.type ?? '') ? [i] : []));
  for (const [r, row] of batch.entries()) {
    for (const c of json) {
      const v = row[c];
      if (typeof v !== 'string') continue;
      try {
        JSON.parse(v);
      } catch {
        return new ValidationError(
          'invalid_json',
          `${table.name} (${describeRow(table, columns, row, offset + r + 1)}) holds text that is not JSON in ${columns[c]}; change that value and copy again (nothing was copied)`,
        );
      }
    }
  }
  return undefined;
}

/** How a row is named in a message: its key, else its position. */
function describeRow(table: TableShape, columns: string[], row: unknown[], position: number): string {
  if (!table.key.length) return `row ${position}`;
  return table.key.map((k) => `${k} ${String(row[columns.indexOf(k)])}`).join(', ');
}

async function copyTables(source: Source, target: Target, opts: DbCopyOptions): Promise<DbCopyResult> {
  const started = Date.now();
  const sourceTables = await source.describe();
  assertSameSchema(sourceTables, await target.describe());
  const derived = await target.derived(sourceTables);
  const ordered = foreignKeyOrder(sourceTables);
  const order = [...ordered.filter((t) => !derived.has(t.name)), ...ordered.filter((t) => derived.has(t.name))];
  const totals = new Map<string, number>();
  for (const t of order) totals.set(t.name, await source.count(t.name));
  const targetShapes = new Map((await target.describe()).map((t) => [t.name, t]));

  opts.onStep?.('copying');
  await target.begin(order);
  const tables: DbCopyResult['tables'] = [];
  for (const [i, table] of order.entries()) {
    const total = totals.get(table.name) ?? 0;
    const columns = table.columns.map((c) => c.name);
    const targetColumns = new Map(targetShapes.get(table.name)!.columns.map((c) => [c.name, c]));
    const convert = columns.map((c) => target.converter(targetColumns.get(c)!));
    const progress = (rows: number) => opts.onProgress?.({ table: table.name, rows, total, tableIndex: i + 1, tableCount: order.length });
    if (derived.has(table.name)) await target.clear(table.name);
    progress(0);
    let copied = 0;
    // One write in flight while the next batch is read and converted.
    let inflight: Promise<void> | null = null;
    for await (const batch of source.batches(table, columns, target.batchSize(columns.length))) {
      opts.signal?.throwIfAborted();
      const rows = batch.map((row, r) =>
        row.map((value, c) => {
          try {
            return convert[c]!(value);
          } catch (err) {
            if (!(err instanceof NulInText)) throw err;
            throw new ValidationError(
              'nul_in_text',
              `${table.name} (${describeRow(table, columns, row, copied + r + 1)}) holds U+0000 (a NUL character) in ${columns[c]}, which PostgreSQL text cannot store; change that value and copy again (nothing was copied)`,
            );
          }
        }),
      );
      if (inflight) await inflight;
      const offset = copied;
      inflight = target.insert(table, columns, rows).catch((err: unknown) => {
        // Name the row when it is JSON the target refuses; else the table and the target's words.
        const bad = badJson(table, columns, targetColumns, batch, offset);
        throw bad ?? new Error(`copying ${table.name}: ${(err as Error).message}`, { cause: err });
      });
      inflight.catch(() => {}); // awaited below
      copied += rows.length;
      progress(copied);
    }
    if (inflight) await inflight;
    tables.push({ table: table.name, rows: copied });
  }

  opts.signal?.throwIfAborted();
  opts.onStep?.('verifying');
  const differ: string[] = [];
  for (const t of order) {
    const want = totals.get(t.name) ?? 0;
    const got = await target.count(t.name);
    if (got !== want) differ.push(`${t.name}: ${want} in the source, ${got} in the target`);
  }
  if (differ.length) throw new ConflictError('count_mismatch', `The row counts differ after copying (${list(differ, 5)}); nothing was committed`);
  await target.setIdentities(await source.lastIds());
  opts.onStep?.('committing');
  await target.commit();
  return { tables, totalRows: tables.reduce((n, t) => n + t.rows, 0), ms: Date.now() - started };
}

/**
 * Copies a data folder's SQLite database into an empty PostgreSQL database, which is migrated
 * to this build's schema first. Refuses while a server runs on the data folder, a source not
 * at this build's schema, and a target that holds anything (nothing is written then).
 */
export async function copySqliteToPg(from: { dataDir: string; dbFile: string }, url: string, opts: DbCopyOptions = {}): Promise<DbCopyResult> {
  opts.onStep?.('checking');
  assertNoServer(from.dataDir);
  const source = openSqliteSource(from.dbFile);
  try {
    const tables = (await source.describe()).map((t) => t.name);
    await assertPgTargetEmpty(url, tables);
    opts.onStep?.('migrating');
    await migratePg(url);
    const target = await openPgTarget(url, opts.batchRows ?? DEFAULT_BATCH);
    try {
      return await copyTables(source, target, opts);
    } catch (err) {
      await target.abort();
      throw err;
    }
  } finally {
    await source.close();
  }
}

/**
 * Copies a PostgreSQL database into a new data folder (a new or empty folder): its svc.db,
 * and its config.json with the given secrets (those the source's data was encrypted and
 * signed with: an encrypted value of the source is tried first). Nothing is left behind on
 * failure.
 */
export async function copyPgToSqlite(url: string, toDataDir: string, secrets: Secrets, opts: DbCopyOptions = {}): Promise<PgToSqliteResult> {
  opts.onStep?.('checking');
  const dataDir = resolve(toDataDir);
  assertNewFolder(dataDir);
  const source = await openPgSource(url);
  const dbFile = join(dataDir, 'svc.db');
  const configFile = configPath(dataDir);
  // Set once something is written: what to remove if the copy fails.
  let written: { firstCreated: string | undefined } | undefined;
  try {
    await source.describe();
    await assertSecretsOpen(source, secrets, url);
    opts.onStep?.('migrating');
    written = { firstCreated: existsSync(dataDir) ? undefined : mkdirSync(dataDir, { recursive: true, mode: 0o700 }) };
    privateDataDir(dataDir);
    const target = openSqliteTarget(dbFile, opts.batchRows ?? DEFAULT_BATCH);
    let result: DbCopyResult;
    try {
      result = await copyTables(source, target, opts);
    } catch (err) {
      await target.abort();
      throw err;
    }
    writeFileSync(configFile, `${JSON.stringify({ secrets: { jwtSecret: secrets.jwtSecret, encryptionKey: secrets.encryptionKey } }, null, 2)}\n`, {
      mode: 0o600,
      flag: 'wx',
    });
    return { ...result, dataDir, dbFile, configFile };
  } catch (err) {
    if (written) removeWritten(dataDir, written.firstCreated);
    throw err;
  } finally {
    await source.close();
  }
}

/** The folder a PostgreSQL database is copied into: new, or an empty folder. */
function assertNewFolder(dataDir: string): void {
  if (!existsSync(dataDir)) return;
  if (!statSync(dataDir).isDirectory()) throw new ConflictError('target_not_empty', `${dataDir} is a file: give a new or empty folder for the copy`);
  const entries = readdirSync(dataDir);
  if (entries.length)
    throw new ConflictError(
      'target_not_empty',
      `${dataDir} is not empty (${list(entries.sort(), 5)}): svc db copy writes a new data folder; give a new or empty one`,
    );
}

/** Removes what a failed copy wrote: the folders it created, else its files in the empty folder it was given. */
function removeWritten(dataDir: string, firstCreated: string | undefined): void {
  if (firstCreated) {
    rmSync(firstCreated, { recursive: true, force: true });
    return;
  }
  for (const name of ['svc.db', 'svc.db-wal', 'svc.db-shm', 'svc.db-journal', 'config.json']) rmSync(join(dataDir, name), { force: true });
}

/** Refuses secrets that do not open what the source stores encrypted (the wrong data folder's config). */
async function assertSecretsOpen(source: Source, secrets: Secrets, url: string): Promise<void> {
  for (const [table, column, what] of ENCRYPTED_COLUMNS) {
    const value = await source.firstValue(table, column);
    if (typeof value !== 'string') continue;
    try {
      decryptSecret({ secrets }, value);
    } catch {
      throw new ConflictError(
        'secrets_mismatch',
        `The encryption key given does not decrypt ${what} stored in ${redactDatabaseUrl(url)}: use the data folder (--data-dir) or SVC_ENCRYPTION_KEY of the nodes that serve this database`,
      );
    }
    return;
  }
}
