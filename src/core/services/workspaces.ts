import { desc, eq, or } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { nowIso, withTransaction, type SystemContext } from '../context.js';
import { workspaces, type Plan } from '../db/schema.js';
import { AppError, NotFoundError, ValidationError } from '../errors.js';

export interface WorkspaceView {
  id: number;
  name: string;
  plan: Plan;
  /** For a sandbox: the live workspace it is the twin of; null for a live workspace. */
  sandboxOf: number | null;
  createdAt: string;
  updatedAt: string;
}

function view(row: typeof workspaces.$inferSelect): WorkspaceView {
  return { id: row.id, name: row.name, plan: row.plan, sandboxOf: row.sandboxOf, createdAt: row.createdAt, updatedAt: row.updatedAt };
}

export function validateWorkspaceName(name: string): string {
  const trimmed = name.trim();
  if (trimmed.length < 1 || trimmed.length > 100) {
    throw new ValidationError('invalid_workspace_name', 'A workspace name is 1 to 100 characters', [{ path: '/name', message: 'must be 1 to 100 characters' }]);
  }
  return trimmed;
}

export function createWorkspace(ctx: SystemContext, input: { name: string; plan?: Plan }): Promise<WorkspaceView> {
  const name = validateWorkspaceName(input.name);
  return withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .insert(workspaces)
      .values({ name, plan: input.plan ?? 'STARTER' })
      .returning();
    if (!row) throw new Error('the insert returned no row');
    await recordAudit(tx, { workspaceId: row.id, action: 'workspace.created', target: { type: 'workspace', id: row.id }, metadata: { name, plan: row.plan } });
    return view(row);
  });
}

export async function listWorkspaces(ctx: Pick<SystemContext, 'db'>): Promise<WorkspaceView[]> {
  return (await ctx.db.select().from(workspaces).orderBy(desc(workspaces.id))).map(view);
}

export async function getWorkspace(ctx: Pick<SystemContext, 'db'>, id: number): Promise<WorkspaceView> {
  const [row] = await ctx.db.select().from(workspaces).where(eq(workspaces.id, id));
  if (!row) throw new NotFoundError('workspace_not_found', `No workspace with id ${id}`);
  return view(row);
}

export function setWorkspacePlan(ctx: SystemContext, id: number, plan: Plan): Promise<WorkspaceView> {
  return withTransaction(ctx, async (tx) => {
    const before = await getWorkspace(tx, id);
    if (before.sandboxOf !== null)
      throw new AppError(422, 'not_in_sandbox', `Workspace ${id} is a sandbox: it follows the plan of workspace ${before.sandboxOf}`);
    // A sandbox is on its live twin's plan, so what is tried there behaves the same live.
    const rows = await tx.db
      .update(workspaces)
      .set({ plan, updatedAt: nowIso() })
      .where(or(eq(workspaces.id, id), eq(workspaces.sandboxOf, id)))
      .returning();
    const row = rows.find((r) => r.id === id);
    if (!row) throw new NotFoundError('workspace_not_found', `No workspace with id ${id}`);
    await recordAudit(tx, { workspaceId: id, action: 'workspace.plan_changed', target: { type: 'workspace', id }, metadata: { from: before.plan, to: plan } });
    return view(row);
  });
}
