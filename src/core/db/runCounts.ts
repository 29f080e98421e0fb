import { sql } from 'drizzle-orm';
import type { Db } from './connection.js';
import { runMonthCounts } from './schema.js';

/**
 * Counts one run started in a workspace this UTC month (GET /billing/plan's usage). Every code
 * path that inserts a run runs it in the same transaction (webhook intake has its own
 * prepared copy in db/intake.ts). A trigger did this before migration 0011: a trigger (like
 * RETURNING) makes SQLite journal each INSERT statement into the table, which on the webhook
 * path cost more than the insert itself. The month is the caller's clock on both stores.
 */
export async function countRunStarted(db: Db, workspaceId: number): Promise<void> {
  await db
    .insert(runMonthCounts)
    .values({ workspaceId, month: new Date().toISOString().slice(0, 7), runs: 1 })
    .onConflictDoUpdate({ target: [runMonthCounts.workspaceId, runMonthCounts.month], set: { runs: sql`${runMonthCounts.runs} + 1` } });
}
