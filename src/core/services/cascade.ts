import { inArray, sql, type SQL } from 'drizzle-orm';
import { withTransaction, type WorkspaceContext } from '../context.js';
import { workflowRuns } from '../db/schema.js';

/** Runs a deletion's cascade changes per transaction when it is done ahead, in steps. */
export const CASCADE_STEP = 1000;

/**
 * Does ahead of a deletion, in transactions of at most CASCADE_STEP runs, what its foreign
 * key would do to the runs in one: unlink them from a contact (`ON DELETE SET NULL`), or
 * delete them with their automation (`ON DELETE CASCADE`). A contact every webhook resolves
 * to, or an automation run for a whole audience, may have millions of runs, and one
 * statement changing them all would hold the store's writer until it is done, every
 * webhook's commit waiting behind it. In steps, other writes take turns between them. The
 * deletion itself then changes only the runs started since.
 *
 * A deletion cut short (a crash, a shutdown) leaves what its steps did, which is what the
 * deletion asked for: a DELETE sent again finishes it.
 */
export async function changeRunsInSteps(ctx: WorkspaceContext, of: SQL, change: 'unlink' | 'delete'): Promise<void> {
  for (;;) {
    const done = await withTransaction(ctx, async (tx) => {
      // The workspace as a unary + term, checked on each row: the condition's own index is
      // the one to walk (without statistics SQLite may choose the workspace's).
      const rows = await tx.db
        .select({ id: workflowRuns.id })
        .from(workflowRuns)
        .where(sql`${of} AND +${workflowRuns.workspaceId} = ${ctx.workspaceId}`)
        .limit(CASCADE_STEP);
      const ids = rows.map((r) => r.id);
      if (!ids.length) return 0;
      if (change === 'unlink') await tx.db.update(workflowRuns).set({ contactId: null }).where(inArray(workflowRuns.id, ids));
      else await tx.db.delete(workflowRuns).where(inArray(workflowRuns.id, ids));
      return ids.length;
    });
    if (done < CASCADE_STEP) return;
  }
}
