import { and, count, desc, eq, getTableName, inArray, lt, lte, sql } from 'drizzle-orm';
import type { SystemContext } from '../context.js';
import {
  workspaceCounters,
  DELIVERY_STATUSES,
  deliveryAttempts,
  memberships,
  RUN_STATUSES,
  users,
  workflowRuns,
  workflows,
  workspaces,
  type DeliveryStatus,
  type Plan,
  type Role,
  type RunStatus,
} from '../db/schema.js';
import { tableRows } from '../db/dialect.js';
import { NotFoundError } from '../errors.js';
import { decodeCursor, toPage, type Page } from '../pagination.js';

/**
 * Operator views across every workspace, for super-admins only (the route enforces it).
 * Read-only: nothing here changes state, so nothing is audited.
 */
type Ctx = Pick<SystemContext, 'db' | 'store'>;

export interface AdminWorkspaceView {
  id: number;
  name: string;
  plan: Plan;
  memberCount: number;
  contactCount: number;
  createdAt: string;
  updatedAt: string;
}

export interface AdminWorkspaceDetail extends AdminWorkspaceView {
  workflowCount: number;
  members: { userId: number; email: string; role: Role }[];
}

export interface AdminUserView {
  id: number;
  email: string;
  name: string | null;
  isSuperAdmin: boolean;
  createdAt: string;
  workspaces: { id: number; role: Role }[];
}

export interface AdminStats {
  workspaces: number;
  users: number;
  contacts: number;
  workflows: number;
  runs: Record<RunStatus, number>;
  queueDepth: number;
  deliveries: Record<DeliveryStatus, number>;
}

// Correlated subqueries spelled out: drizzle renders a column in a select without its
// table, so `${workspaces.id}` would bind to the inner table's own id.
const memberCount = sql<number>`(select count(*) from "memberships" m where m."workspace_id" = "workspaces"."id")`.mapWith(Number);
// Contacts from the counter triggers keep (migration 0008), as /billing/plan reads them: a
// count of the table took 19 ms a workspace of a million, on every row of a page.
const contactCount = sql<number>`coalesce((select c."contacts" from "workspace_counters" c where c."workspace_id" = "workspaces"."id"), 0)`.mapWith(Number);

const workspaceColumns = {
  id: workspaces.id,
  name: workspaces.name,
  plan: workspaces.plan,
  memberCount,
  contactCount,
  createdAt: workspaces.createdAt,
  updatedAt: workspaces.updatedAt,
};

export async function adminListWorkspaces(ctx: Ctx, page: { limit: number; cursor?: string | undefined }): Promise<Page<AdminWorkspaceView>> {
  const before = decodeCursor(page.cursor);
  const rows = await ctx.db
    .select(workspaceColumns)
    .from(workspaces)
    .where(before ? lt(workspaces.id, before) : undefined)
    .orderBy(desc(workspaces.id))
    .limit(page.limit + 1);
  return toPage(rows, page.limit, (r) => ({ ...r }));
}

export async function adminGetWorkspace(ctx: Ctx, id: number): Promise<AdminWorkspaceDetail> {
  const [row] = await ctx.db.select(workspaceColumns).from(workspaces).where(eq(workspaces.id, id));
  if (!row) throw new NotFoundError('workspace_not_found', `No workspace with id ${id}`);
  const [workflowCount] = await ctx.db.select({ n: count() }).from(workflows).where(eq(workflows.workspaceId, id));
  const members = await ctx.db
    .select({ userId: users.id, email: users.email, role: memberships.role })
    .from(memberships)
    .innerJoin(users, eq(users.id, memberships.userId))
    .where(eq(memberships.workspaceId, id))
    .orderBy(memberships.id);
  return { ...row, workflowCount: workflowCount?.n ?? 0, members };
}

export async function adminListUsers(ctx: Ctx, page: { limit: number; cursor?: string | undefined }): Promise<Page<AdminUserView>> {
  const before = decodeCursor(page.cursor);
  // Named columns only: the password hash is never read here.
  const rows = await ctx.db
    .select({ id: users.id, email: users.email, name: users.name, isSuperAdmin: users.isSuperAdmin, createdAt: users.createdAt })
    .from(users)
    .where(before ? lt(users.id, before) : undefined)
    .orderBy(desc(users.id))
    .limit(page.limit + 1);
  const ids = rows.map((r) => r.id);
  const byUser = new Map<number, { id: number; role: Role }[]>();
  if (ids.length) {
    const ms = await ctx.db
      .select({ userId: memberships.userId, workspaceId: memberships.workspaceId, role: memberships.role })
      .from(memberships)
      .where(inArray(memberships.userId, ids))
      .orderBy(memberships.workspaceId);
    for (const m of ms) {
      const list = byUser.get(m.userId) ?? [];
      list.push({ id: m.workspaceId, role: m.role });
      byUser.set(m.userId, list);
    }
  }
  return toPage(rows, page.limit, (r) => ({ ...r, workspaces: byUser.get(r.id) ?? [] }));
}

/** The rows of a table in one status, one seek per workspace (exported for tests that EXPLAIN it). */
export function statusCountQuery(ctx: Pick<SystemContext, 'db'>, table: typeof workflowRuns | typeof deliveryAttempts, status: string) {
  const everyWorkspace = ctx.db.select({ id: workspaces.id }).from(workspaces);
  return ctx.db
    .select({ n: count() })
    .from(table)
    .where(and(inArray(table.workspaceId, everyWorkspace), sql`${table.status} = ${status}`));
}

/**
 * A table's rows by status without grouping them all: grouping a million runs and as many
 * deliveries held the thread that answers every request for about half a second (SQLite,
 * bench:scale), and the console's admin page asks every 15 s. Each status but `rest` is
 * counted along the workspace/status index, one seek per workspace (runs in flight, waiting
 * or failed, deliveries not yet sent or failed: usually few); `rest` (the finished, commonest
 * one) is the table's count less those, and SQLite counts a table by its index's pages, not
 * its rows; PostgreSQL's count of a large table is its estimate (tableRows), so `rest` is
 * estimated there, the other statuses exact.
 * Each count reads the store as it is then: a row changing status in between is counted in
 * its new status, or in `rest` until the next call; never below zero.
 */
async function countsByStatus<S extends string>(
  ctx: Ctx,
  table: typeof workflowRuns | typeof deliveryAttempts,
  statuses: readonly S[],
  rest: S,
): Promise<Record<S, number>> {
  const out = Object.fromEntries(statuses.map((s) => [s, 0])) as Record<S, number>;
  let counted = 0;
  for (const status of statuses) {
    if (status === rest) continue;
    const [row] = await statusCountQuery(ctx, table, status);
    out[status] = row?.n ?? 0;
    counted += out[status];
  }
  const total = await tableRows(ctx.store, ctx.db, getTableName(table));
  out[rest] = Math.max(0, total.rows - counted);
  return out;
}

export async function adminStats(ctx: Ctx, now = new Date()): Promise<AdminStats> {
  const total = async (table: typeof workspaces | typeof users | typeof workflows) => (await ctx.db.select({ n: count() }).from(table))[0]?.n ?? 0;
  // Contacts from the counters triggers keep per workspace (migration 0008), not a count of the table.
  const [contactTotal] = await ctx.db.select({ n: sql<number>`coalesce(sum(${workspaceCounters.contacts}), 0)`.mapWith(Number) }).from(workspaceCounters);
  const runs = await countsByStatus(ctx, workflowRuns, RUN_STATUSES, 'COMPLETED');
  const [due] = await ctx.db
    .select({ n: count() })
    .from(workflowRuns)
    // The status as a literal, which the partial index of WAITING runs answers (a parameter would not).
    .where(and(sql`${workflowRuns.status} = 'WAITING'`, lte(workflowRuns.runAt, now.toISOString())));
  const dueWaiting = due?.n ?? 0;
  const deliveries = await countsByStatus(ctx, deliveryAttempts, DELIVERY_STATUSES, 'SENT');
  return {
    workspaces: await total(workspaces),
    users: await total(users),
    contacts: contactTotal?.n ?? 0,
    workflows: await total(workflows),
    runs,
    queueDepth: runs.QUEUED + dueWaiting,
    deliveries,
  };
}
