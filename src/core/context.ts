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

/**
 * A list of the workspace's rows newest first, read along an index that starts with
 * `workspaceColumn` and ends with `idColumn`: its WHERE (inWorkspace's) and its ORDER BY.
 * PostgreSQL's planner takes `workspace_id = $1` for a constant, drops the column from the
 * ORDER BY and, guessing the workspace's rows spread evenly over the ids, may walk the primary
 * key backward instead, filtering: for a workspace whose rows are older than others', it read
 * every newer row of the others (a million contacts under 800,000 newer ones: about 300 ms a
 * page, runs and delivery attempts alike, where the workspace's index takes 0.1). Written as
 * `= ANY(ARRAY[$1])`, the condition is not one it folds, and with workspace_id leading the
 * ORDER BY only an index that starts with it gives the order (PostgreSQL keeps an index's
 * order under an array condition on its first column), in custom and generic plans alike
 * (test/server/pgListPlans.test.ts). SQLite's statements are unchanged.
 */
export function newestInWorkspace(
  ctx: { workspaceId: number; store: Pick<Store, 'dialect'> },
  workspaceColumn: SQLiteColumn,
  idColumn: SQLiteColumn,
  ...conditions: (SQL | undefined)[]
): { where: SQL; orderBy: SQL[] } {
  if (ctx.store.dialect !== 'pg') return { where: inWorkspace(ctx, workspaceColumn, ...conditions), orderBy: [desc(idColumn)] };
  return {
    where: and(sql`${workspaceColumn} = ANY(ARRAY[${ctx.workspaceId}::bigint])`, ...conditions) as SQL,
    orderBy: [desc(workspaceColumn), desc(idColumn)],
  };
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

/**
 * How a list finds the workspace's rows: along the workspace's index ('index'), or along
 * another, the workspace checked on each row ('row'; the selective condition among the
 * list's own). `{ parent, id }`: 'row', the rows of one parent (a workflow's webhook events)
 * along the parent's index, which on PostgreSQL also gives the order (newestInWorkspace says
 * why: an old workflow's page under newer workflows' rows walked the primary key).
 */
export type WorkspaceScope = 'index' | 'row' | { parent: SQLiteColumn; id: number };

export interface PageRequest {
  limit: number;
  cursor?: string | undefined;
  /**
   * 'row': the workspace is checked on each row instead of chosen as the index to walk,
   * for a list whose other condition is the selective one (the runs of one workflow): with
   * both indexes equally good on paper, SQLite would otherwise walk the workspace's runs.
   */
  workspaceScope?: WorkspaceScope;
  /**
   * The condition whose index drives the list when the other conditions are checked on each
   * of its rows: a page then examines at most LIST_SCAN_ROWS of them and may end early
   * (short or empty) with a nextCursor past them. 'parent': the scope's parent is the driver
   * (WorkspaceScope's parent form; its condition is the scope's, not written twice).
   */
  driver?: SQL | 'parent' | undefined;
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
  const beyond = page.driver ? await windowEnd(ctx, table, cursor, page.workspaceScope, page.driver === 'parent' ? undefined : page.driver) : null;
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
  workspaceScope: WorkspaceScope | undefined,
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
  workspaceScope: WorkspaceScope | undefined,
  driver?: SQL,
  rows = LIST_SCAN_ROWS,
) {
  const { where, orderBy } = pageOrder(ctx, table, cursor, workspaceScope, [driver]);
  return ctx.db
    .select({ id: table.id })
    .from(table as SQLiteTable)
    .where(where)
    .orderBy(...orderBy)
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
  workspaceScope: WorkspaceScope | undefined,
  ...conditions: (SQL | undefined)[]
) {
  const { where, orderBy } = pageOrder(ctx, table, cursor, workspaceScope, conditions);
  return ctx.db
    .select()
    .from(table as SQLiteTable)
    .where(where)
    .orderBy(...orderBy)
    .limit(chunk);
}

/** The workspace's rows below the cursor that meet the conditions, newest first. */
function pageOrder<T extends PagedTable>(
  ctx: WorkspaceContext,
  table: T,
  cursor: number | undefined,
  workspaceScope: WorkspaceScope | undefined,
  conditions: (SQL | undefined)[],
): { where: SQL | undefined; orderBy: SQL[] } {
  const below = cursor ? lt(table.id, cursor) : undefined;
  // A unary + keeps the term out of index selection; the rows are filtered by it all the same.
  const onEachRow = sql`+${table.workspaceId} = ${ctx.workspaceId}`;
  if (workspaceScope === 'row') return { where: and(onEachRow, below, ...conditions), orderBy: [desc(table.id)] };
  if (typeof workspaceScope === 'object') {
    const { parent, id } = workspaceScope;
    if (ctx.store.dialect !== 'pg') return { where: and(onEachRow, eq(parent, id), below, ...conditions), orderBy: [desc(table.id)] };
    // A plain condition on the workspace here: PostgreSQL estimates `+workspace_id = $1` at half
    // a percent of the rows, and with so few expected it read them all (a bitmap of the
    // parent's index, or the whole table) and sorted, where the parent's index gives the order.
    return {
      where: and(eq(table.workspaceId, ctx.workspaceId), sql`${parent} = ANY(ARRAY[${id}::bigint])`, below, ...conditions),
      orderBy: [desc(parent), desc(table.id)],
    };
  }
  return newestInWorkspace(ctx, table.workspaceId, table.id, below, ...conditions);
}
