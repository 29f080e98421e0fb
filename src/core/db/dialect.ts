import { sql, type SQL } from 'drizzle-orm';
import type { Db } from './connection.js';
import { DatabaseTooNewError, migrationStatus, readJournal, schemaVersion, type MigrationStatus } from './migrate.js';
import { findPgMigrationsDir } from './pgMigrate.js';
import type { Store } from './store.js';

/**
 * The few statements that services need and the two dialects spell differently (see
 * docs/stores.md): raw statements, the schema's own description, and contact search. Each
 * takes the store for its dialect and the handle to run on (a transaction's, or ctx.db).
 */

interface PgHandle {
  execute(query: SQL): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** Runs a raw statement; answers the rows it changed. */
export async function execute(store: Pick<Store, 'dialect'>, db: Db, query: SQL): Promise<number> {
  if (store.dialect === 'pg') return (await (db as unknown as PgHandle).execute(query)).rowCount ?? 0;
  return db.run(query).changes;
}

/** Runs a raw query; answers its rows. */
export async function queryRows<T extends Record<string, unknown>>(store: Pick<Store, 'dialect'>, db: Db, query: SQL): Promise<T[]> {
  if (store.dialect === 'pg') return (await (db as unknown as PgHandle).execute(query)).rows as T[];
  return db.all<T>(query);
}

/** The tables that have a workspace_id column, by name, from the database's own description. */
export async function tablesWithWorkspaceId(store: Pick<Store, 'dialect'>, db: Db): Promise<string[]> {
  const rows =
    store.dialect === 'pg'
      ? await queryRows<{ name: string }>(
          store,
          db,
          sql`SELECT table_name AS name FROM information_schema.columns
               WHERE table_schema = current_schema() AND column_name = 'workspace_id' ORDER BY table_name`,
        )
      : await queryRows<{ name: string }>(
          store,
          db,
          sql`SELECT m.name AS name FROM sqlite_master m
               WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND substr(m.name, 1, 2) != '__'
                 AND EXISTS (SELECT 1 FROM pragma_table_info(m.name) c WHERE c.name = 'workspace_id')
               ORDER BY m.name`,
        );
  return rows.map((r) => r.name);
}

/** Above this many rows (by PostgreSQL's own estimate), tableRows gives the estimate. */
export const COUNT_EXACTLY_BELOW = 100_000;

/**
 * How many rows `table` holds. SQLite counts a table from its index's pages: exact, and at a
 * million rows about 10 ms. PostgreSQL reads every entry of an index to count (about 50 ms a
 * million runs here: GET /admin/stats took p50 106 ms over a million runs and as many
 * deliveries, bench:scale), so there a table its planner estimates at COUNT_EXACTLY_BELOW rows
 * or more is given that estimate, the planner's own: the rows per page its statistics last
 * found (ANALYZE, autovacuum) times the pages the table has now. `estimated` says which.
 */
export async function tableRows(store: Pick<Store, 'dialect'>, db: Db, table: string): Promise<{ rows: number; estimated: boolean }> {
  if (store.dialect === 'pg') {
    const [row] = await queryRows<{ estimate: unknown }>(
      store,
      db,
      sql`SELECT CASE WHEN c.reltuples < 0 OR c.relpages = 0 THEN NULL
                      ELSE c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int) END AS estimate
            FROM pg_class c WHERE c.oid = to_regclass(${table})`,
    );
    const estimate = row?.estimate === null || row?.estimate === undefined ? null : Math.round(Number(row.estimate));
    if (estimate !== null && estimate >= COUNT_EXACTLY_BELOW) return { rows: estimate, estimated: true };
  }
  const [row] = await queryRows<{ n: unknown }>(store, db, sql`SELECT count(*) AS n FROM ${sql.identifier(table)}`);
  return { rows: Number(row?.n ?? 0), estimated: false };
}

/** LIKE's wildcards and its escape character, escaped with a backslash. */
export function escapeLike(s: string): string {
  return s.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/**
 * A rowid bound for an FTS5 table, as an INTEGER. better-sqlite3 binds a JavaScript number as
 * a REAL, and FTS5 takes a rowid constraint only when its value is an integer: it ignored the
 * bound and walked every match from its start, SQLite checking the bound on each (with a
 * cursor anywhere in a q that a million contacts match, a page took p50 125 / p99 241 ms in
 * bench:scale; a bound of `rowid = ?` matched every row).
 */
export function ftsRowid(value: number): SQL {
  return sql`CAST(${value} AS INTEGER)`;
}

/**
 * Substring search in a workspace's contacts (email, phone, first and last name, each field
 * matched on its own, case-insensitively), through the index each store has for it:
 * SQLite's FTS5 trigram table `contacts_fts`, PostgreSQL's pg_trgm GIN index on the stored
 * column `search_text` (migrations/pg/0008).
 */
export const contactSearch = {
  /**
   * SQLite: the ids of matching contacts, newest first, below the cursor, at most `limit` when
   * given (after `offset`): a subquery to drive a list. (PostgreSQL reads a q's page through
   * pgWalk and pgIndexed, and a tag drives beside a q there: contacts.ts, listPlan.)
   */
  ids(workspaceId: number, q: string, before: number | undefined, limit: number | undefined, offset = 0): SQL {
    const limitSql = limit !== undefined ? sql` LIMIT ${limit}${offset ? sql` OFFSET ${offset}` : sql``}` : sql``;
    // A window is a LIMIT from the cursor down.
    const below = before ? sql` AND rowid < ${ftsRowid(before)}` : sql``;
    return sql`SELECT rowid FROM contacts_fts WHERE contacts_fts MATCH ${ftsQuery(workspaceId, q)}${below} ORDER BY rowid DESC${limitSql}`;
  },
  /**
   * SQLite: the ids of matching contacts below the cursor, oldest first, at most `limit`. FTS5
   * walks its lists forward several times faster than backward: at a million contacts a
   * search with one match took 1-4 ms oldest first and 12-16 ms newest first (`npm run
   * bench:search`). A search with at most a page of matches is read this way, in full, and
   * turned round (contacts.ts, fewMatches).
   */
  oldestIds(workspaceId: number, q: string, before: number | undefined, limit: number): SQL {
    const below = before ? sql` AND rowid < ${ftsRowid(before)}` : sql``;
    return sql`SELECT rowid FROM contacts_fts WHERE contacts_fts MATCH ${ftsQuery(workspaceId, q)}${below} ORDER BY rowid LIMIT ${limit}`;
  },
  /**
   * PostgreSQL: the ids of matching contacts below `before`, newest first, at most `limit`,
   * found through the trigram index alone: the workspace and the bound are checked on each
   * match (`+ 0`), so that neither the (workspace_id, id) index nor the primary key can stand in
   * for it. Run with the planner's index and sequential scans off (contacts.ts, pgMatches), the
   * trigram index's bitmap is its one plan. Without `+ 0` it took the primary key's bitmap
   * for the range below `before` instead, every contact in it checked
   * (test/server/pgPlans.test.ts shows it on 20,000 contacts).
   * `lookUp`, a part of q (pgLookUpPart), is what the index looks up; q itself is then checked on
   * each contact found, outside the index (strpos, which no index serves).
   */
  pgIndexed(workspaceId: number, q: string, before: number, limit: number, lookUp: string = q): SQL {
    const whole = lookUp === q ? sql`` : sql` AND strpos(search_text, lower(${q})) > 0`;
    return sql`SELECT id FROM contacts WHERE workspace_id + 0 = ${workspaceId} AND ${pgMatch(lookUp)}${whole} AND id + 0 < ${before} ORDER BY id DESC LIMIT ${limit}`;
  },
  /**
   * PostgreSQL: of the workspace's newest PG_SEARCH_SAMPLE_ROWS contacts, how many (`n`) and
   * how many hold each of `parts` (`hits`, in order): how common each part of a q is
   * (pgLookUpPart).
   */
  pgSample(workspaceId: number, parts: string[], rows: number): SQL {
    const hits = sql.join(
      parts.map((part) => sql`count(*) FILTER (WHERE strpos(search_text, lower(${part})) > 0)`),
      sql`, `,
    );
    return sql`SELECT count(*) AS n, ARRAY[${hits}] AS hits FROM (SELECT search_text FROM contacts WHERE workspace_id = ${workspaceId} ORDER BY id DESC LIMIT ${rows}) s`;
  },
  /**
   * PostgreSQL: the workspace's `window` contacts below the cursor, newest first, walked along
   * its (workspace_id, id) index and each matched: one row of the window's last id (`end`, null when the
   * window is empty), how many it held (`n`) and its first `take` matches' ids, newest first
   * (`ids`). A walk of 2,000 costs about 1.5 ms at any size (contacts.ts, pgMatches).
   */
  pgWalk(workspaceId: number, q: string, before: number | undefined, window: number, take: number): SQL {
    const below = before ? sql` AND id < ${before}` : sql``;
    return sql`SELECT min(id) AS "end", count(*) AS n, (array_agg(id ORDER BY id DESC) FILTER (WHERE ${pgMatch(q)}))[1:${take}] AS ids
      FROM (SELECT id, search_text FROM contacts WHERE workspace_id = ${workspaceId}${below} ORDER BY id DESC LIMIT ${window}) w`;
  },
  /**
   * PostgreSQL: the workspace's next `buckets` candidate buckets at or below `before`'s,
   * newest first (each holds every one of `pieces`, trigrams every contact matching q holds:
   * contact_search_buckets, migrations/pg/0009), each with its first `take` matches below
   * `before`, newest first, read along the primary key: one row a match, `id` null for a
   * candidate holding none (pgMatches). q, without a newline, is checked with strpos, which no
   * index serves: with LIKE the planner read the trigram index for each bucket (28 ms each for
   * `q=555000`, whose pieces every contact's phone holds), not its 2,048 contacts. Each piece's
   * buckets are a LATERAL of their own, so that the piece is always in the index's condition:
   * a planner without statistics of the table read the whole workspace's rows.
   */
  pgBuckets(workspaceId: number, q: string, pieces: string[], before: number, take: number, buckets: number): SQL {
    const list = sql.join(
      pieces.map((piece) => sql`${piece}`),
      sql`, `,
    );
    return sql`WITH p AS (SELECT DISTINCT unnest(ARRAY[${list}]::text[]) AS trigram),
      b AS (SELECT s.bucket FROM p CROSS JOIN LATERAL (
               SELECT DISTINCT bucket FROM contact_search_buckets
                WHERE workspace_id = ${workspaceId} AND trigram = p.trigram AND bucket <= (${before}::bigint >> 11)) s
             GROUP BY s.bucket HAVING count(*) = (SELECT count(*) FROM p) ORDER BY s.bucket DESC LIMIT ${buckets})
      SELECT b.bucket, m.id FROM b LEFT JOIN LATERAL (
        SELECT id FROM contacts
         WHERE workspace_id = ${workspaceId} AND id >= (b.bucket::bigint << 11) AND id < ((b.bucket::bigint + 1) << 11) AND id < ${before} AND strpos(search_text, lower(${q}::text)) > 0
         ORDER BY id DESC LIMIT ${take}) m ON true`;
  },
  /** A condition on the row `contacts.id = idColumn`: whether it matches (checked per row, for a list driven by another filter). */
  matches(store: Pick<Store, 'dialect'>, workspaceId: number, q: string, id: unknown): SQL {
    if (store.dialect === 'pg') return pgMatch(q);
    return sql`EXISTS (SELECT 1 FROM contacts_fts WHERE contacts_fts MATCH ${ftsQuery(workspaceId, q)} AND rowid = ${id})`;
  },
};

/**
 * PostgreSQL: contact_search_buckets (migrations/pg/0009) made anew from the contacts, for
 * writers that bypass its triggers: svc db copy, which disables them, and the benchmark's
 * seeding.
 */
export const PG_REBUILD_SEARCH_BUCKETS = `WITH gone AS (DELETE FROM contact_search_buckets)
  INSERT INTO contact_search_buckets (workspace_id, trigram, bucket)
  SELECT DISTINCT c.workspace_id, t, (c.id >> 11)::integer FROM contacts c CROSS JOIN LATERAL unnest(show_trgm(c.search_text)) AS t`;

/** PostgreSQL's tables that are an index of others, kept by triggers and never copied (svc db copy rebuilds them). */
export const PG_DERIVED_TABLES = ['contact_search_buckets'];

/**
 * The substring condition on a contact's searched text (`search_text`: its email, phone and
 * names, each on a line, lower-cased when the row is written; migrations/pg/0008), which the
 * trigram index contacts_search_idx covers. ILIKE is LIKE over lower() of both sides: the
 * pattern is folded here, once, the text was when it was stored. A newline in q would span
 * two fields, and PostgreSQL text cannot hold NUL: such a q matches nothing, as in FTS5.
 */
function pgMatch(q: string): SQL {
  if (q.includes('\n') || q.includes('\u0000')) return sql`false`;
  return sql`search_text LIKE lower(${`%${escapeLike(q)}%`})`;
}

/** An FTS5 query: the workspace's marker in `ws`, and the text as one quoted phrase in the contact columns. */
function ftsQuery(workspaceId: number, q: string): string {
  return `ws : "w${workspaceId}w" AND {email phone first_name last_name} : "${q.replace(/"/g, '""')}"`;
}

/** The tag of the latest migration applied to the store's database (null: none). */
export async function storeSchemaVersion(store: Store): Promise<string | null> {
  if (store.dialect === 'sqlite') return schemaVersion(store.db);
  const rows = await queryRows<{ tag: string }>(store, store.db, sql`SELECT tag FROM svc_migrations ORDER BY id DESC LIMIT 1`);
  return rows[0]?.tag ?? null;
}

/** Which of this build's migrations the store's database has, and which it still needs. */
export async function storeMigrationStatus(store: Store): Promise<MigrationStatus> {
  if (store.dialect === 'sqlite') return migrationStatus(store.db);
  const known = readJournal(findPgMigrationsDir()).map((e) => e.tag);
  const applied = (await queryRows<{ tag: string }>(store, store.db, sql`SELECT tag FROM svc_migrations ORDER BY id`)).map((r) => r.tag);
  const unknown = applied.filter((t) => !known.includes(t));
  if (unknown.length) throw new DatabaseTooNewError(unknown);
  return { applied, pending: known.filter((t) => !applied.includes(t)) };
}

/**
 * Every table of svc's schema with rows of its own, by name: not SQLite's internal tables, its
 * full-text index (a virtual table, read through its shadow tables) or the WITHOUT ROWID
 * config table of that index.
 */
export async function allTables(store: Pick<Store, 'dialect'>, db: Db): Promise<string[]> {
  if (store.dialect === 'pg') {
    const rows = await queryRows<{ name: string }>(
      store,
      db,
      sql`SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name`,
    );
    return rows.map((r) => r.name);
  }
  const rows = await queryRows<{ name: string; sql: string }>(
    store,
    db,
    sql`SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name`,
  );
  return rows.filter((r) => !/WITHOUT\s+ROWID|^CREATE\s+VIRTUAL/i.test(r.sql)).map((r) => r.name);
}

/**
 * Statements written once with `?` placeholders, for the bulk paths (import) that build their
 * SQL by hand: prepared and cached per connection on SQLite (run synchronously; the promise
 * only hands the result on), numbered `$n` parameters through drizzle on PostgreSQL.
 */
export interface RawSql {
  all<T>(text: string, params: unknown[]): Promise<T[]>;
  /** Answers the rows the statement changed. */
  run(text: string, params: unknown[]): Promise<number>;
}

type Prepared = { all(...params: unknown[]): unknown[]; run(...params: unknown[]): { changes: number } };
const prepared = new WeakMap<object, Map<string, Prepared>>();

export function rawSql(store: Pick<Store, 'dialect'>, db: Db): RawSql {
  if (store.dialect === 'pg') {
    const toSql = (text: string, params: unknown[]): SQL => {
      const parts = text.split('?');
      if (parts.length !== params.length + 1) throw new Error(`${parts.length - 1} placeholders for ${params.length} parameters`);
      return sql.join(parts.flatMap((part, i) => (i < params.length ? [sql.raw(part), sql`${params[i]}`] : [sql.raw(part)])));
    };
    return {
      all: <T>(text: string, params: unknown[]) => queryRows(store, db, toSql(text, params)) as Promise<T[]>,
      run: (text, params) => execute(store, db, toSql(text, params)),
    };
  }
  const client = db.$client;
  const cache = prepared.get(client) ?? new Map<string, Prepared>();
  prepared.set(client, cache);
  const statement = (text: string) => {
    let s = cache.get(text);
    if (!s) {
      if (cache.size > 200) cache.clear();
      s = client.prepare(text) as unknown as Prepared;
      cache.set(text, s);
    }
    return s;
  };
  return {
    all: async <T>(text: string, params: unknown[]) => statement(text).all(...params) as T[],
    run: async (text, params) => statement(text).run(...params).changes,
  };
}
