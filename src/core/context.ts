import { and, desc, eq, gt, lt, sql, type SQL } from 'drizzle-orm';
import type { SQLiteColumn, SQLiteTable } from 'drizzle-orm/sqlite-core';
import { decodeCursor, LIST_SCAN_ROWS, readWithinBudget, toPage, type Page } from './pagination.js';
import type { Config } from './config.js';
import type { Db } from './db/connection.js';
import type { Store, TransactionOptions } from './db/store.js';
import type { ActorType } from './db/schema.js';

/** Who did something: recorded in the audit trail with every state change. */
export interface Actor {
  type: ActorType;
  id: number | null;
  label: string | null;
}

/** What every service call needs outside a workspace. */
export interface SystemContext {
  /** Reads (and, inside a transaction, the transaction): see Store.db. */
  db: Db;
  store: Store;
  config: Config;
  actor: Actor;
  ip: string | null;
}

/** A service call inside one workspace: every query it makes is scoped by workspaceId. */
export interface WorkspaceContext extends SystemContext {
  workspaceId: number;
}

/**
 * The workspace predicate, joined with any further conditions. Services build their
 * WHERE clauses through this so that forgetting the workspace scope takes effort.
 */
export function inWorkspace(ctx: { workspaceId: number }, column: SQLiteColumn, ...conditions: (SQL | undefined)[]): SQL {
  return and(eq(column, ctx.workspaceId), ...conditions) as SQL;
}

export function nowIso(): string {
  return new Date().toISOString();
}

/**
 * Runs fn in one transaction of the context's store (serializable on both stores; see
 * Store.transaction). Every write goes through here. Nested calls become savepoints. The
 * callback gets the same context bound to the transaction.
 */
export function withTransaction<C extends { db: Db; store: Store }, T>(ctx: C, fn: (tx: C) => Promise<T>, opts?: TransactionOptions): Promise<T> {
  return ctx.store.transaction((db) => fn({ ...ctx, db }), opts);
}

export interface PageRequest {
  limit: number;
  cursor?: string | undefined;
  /**
   * 'row': the workspace is checked on each row instead of chosen as the index to walk,
   * for a list whose other condition is the selective one (the runs of one workflow): with
   * both indexes equally good on paper, SQLite would otherwise walk the workspace's runs.
   */
  workspaceScope?: 'index' | 'row';
  /**
   * The condition whose index drives the list when the other conditions are checked on each
   * of its rows: a page then examines at most LIST_SCAN_ROWS of them and may end early
   * (short or empty) with a nextCursor past them.
   */
  driver?: SQL | undefined;
}

type PagedTable = SQLiteTable & { id: SQLiteColumn; workspaceId: SQLiteColumn; $inferSelect: { id: number } };

/**
 * One page of a workspace's rows, newest first (by id), after the cursor, with any further
 * conditions: the listing every collection endpoint shares.
 */
export async function selectPage<T extends PagedTable, R>(
  ctx: WorkspaceContext,
  table: T,
  page: PageRequest,
  shape: (row: T['$inferSelect']) => R,
  ...conditions: (SQL | undefined)[]
): Promise<Page<R>> {
  const cursor = decodeCursor(page.cursor);
  // The first row of the driver past the LIST_SCAN_ROWS this page may examine (none: it reads on).
  const beyond = page.driver ? await windowEnd(ctx, table, cursor, page.workspaceScope, page.driver) : null;
  const window = beyond !== null ? gt(table.id, beyond) : undefined;
  const { rows, limit } = await readWithinBudget(
    page.limit,
    async (last: T['$inferSelect'] | undefined, chunk) =>
      (await pageQuery(ctx, table, last?.id ?? cursor, chunk, page.workspaceScope, window, ...conditions)) as T['$inferSelect'][],
  );
  return toPage(rows, limit, shape, beyond);
}

/**
 * The id of the driver's row `rows` (LIST_SCAN_ROWS) below the cursor (one seek and a skip
 * along its index; no driver: the workspace's rows), or null when fewer remain.
 */
export async function windowEnd<T extends PagedTable>(
  ctx: WorkspaceContext,
  table: T,
  cursor: number | undefined,
  workspaceScope: PageRequest['workspaceScope'],
  driver?: SQL,
  rows = LIST_SCAN_ROWS,
): Promise<number | null> {
  const [row] = await windowEndQuery(ctx, table, cursor, workspaceScope, driver, rows);
  return (row?.id as number | undefined) ?? null;
}

/** windowEnd's statement (exported for tests that EXPLAIN it: it should read one index alone). */
export function windowEndQuery<T extends PagedTable>(
  ctx: WorkspaceContext,
  table: T,
  cursor: number | undefined,
  workspaceScope: PageRequest['workspaceScope'],
  driver?: SQL,
  rows = LIST_SCAN_ROWS,
) {
  return ctx.db
    .select({ id: table.id })
    .from(table as SQLiteTable)
    .where(pageWhere(ctx, table, cursor, workspaceScope, [driver]))
    .orderBy(desc(table.id))
    .limit(1)
    .offset(rows);
}

/**
 * The statement selectPage runs for each chunk: the workspace's rows below the cursor, newest
 * first. Exported so that tests can EXPLAIN it: every list needs an index that starts with
 * its equality columns and ends with the id (or the rowid SQLite appends to every index),
 * so that it seeks to the cursor and reads rows in order instead of sorting.
 */
export function pageQuery<T extends PagedTable>(
  ctx: WorkspaceContext,
  table: T,
  cursor: number | undefined,
  chunk: number,
  workspaceScope: PageRequest['workspaceScope'],
  ...conditions: (SQL | undefined)[]
) {
  return ctx.db
    .select()
    .from(table as SQLiteTable)
    .where(pageWhere(ctx, table, cursor, workspaceScope, conditions))
    .orderBy(desc(table.id))
    .limit(chunk);
}

/** The workspace's rows below the cursor that meet the conditions. */
function pageWhere<T extends PagedTable>(
  ctx: WorkspaceContext,
  table: T,
  cursor: number | undefined,
  workspaceScope: PageRequest['workspaceScope'],
  conditions: (SQL | undefined)[],
): SQL | undefined {
  const below = cursor ? lt(table.id, cursor) : undefined;
  // A unary + keeps the term out of index selection; the rows are filtered by it all the same.
  return workspaceScope === 'row'
    ? and(sql`+${table.workspaceId} = ${ctx.workspaceId}`, below, ...conditions)
    : inWorkspace(ctx, table.workspaceId, below, ...conditions);
}
