import { sql } from 'drizzle-orm';
import { SQLiteSyncDialect } from 'drizzle-orm/sqlite-core';
import type { Db } from './connection.js';

/**
 * Counts one run started in a workspace this UTC month (GET /billing/plan's usage). Every code
 * path that inserts a run runs it in the same transaction. A trigger did this before migration
 * 0011: a trigger (like RETURNING) makes SQLite journal each INSERT statement into the table,
 * which on the webhook path cost more than the insert itself.
 */
const countRunStartedQuery = (workspaceId: number) =>
  sql`INSERT INTO run_month_counts (workspace_id, month, runs) VALUES (${workspaceId}, strftime('%Y-%m', 'now'), 1)
        ON CONFLICT (workspace_id, month) DO UPDATE SET runs = runs + 1`;

/** The same statement as SQL text with one `?` for the workspace, for the webhook path to prepare once. */
export const COUNT_RUN_STARTED_SQL = new SQLiteSyncDialect().sqlToQuery(countRunStartedQuery(0)).sql;

/** Through drizzle, on a database or inside a transaction. */
export async function countRunStarted(db: Db, workspaceId: number): Promise<void> {
  await db.run(countRunStartedQuery(workspaceId));
}
