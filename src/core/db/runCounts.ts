import { sql } from 'drizzle-orm';
import type { Db } from './connection.js';

/**
 * Counts one run started in a workspace this UTC month (GET /billing/plan's usage). Every code
 * path that inserts a run runs it in the same transaction. A trigger did this before migration
 * 0011: a trigger (like RETURNING) makes SQLite journal each INSERT statement into the table,
 * which on the webhook path cost more than the insert itself.
 */
export const COUNT_RUN_STARTED_SQL = `INSERT INTO run_month_counts (workspace_id, month, runs) VALUES (?, strftime('%Y-%m', 'now'), 1)
  ON CONFLICT (workspace_id, month) DO UPDATE SET runs = runs + 1`;

/** COUNT_RUN_STARTED_SQL through drizzle (a database or a transaction); the webhook path prepares it once instead. */
export function countRunStarted(db: Db, workspaceId: number): void {
  db.run(
    sql`INSERT INTO run_month_counts (workspace_id, month, runs) VALUES (${workspaceId}, strftime('%Y-%m', 'now'), 1)
          ON CONFLICT (workspace_id, month) DO UPDATE SET runs = runs + 1`,
  );
}
