import { eq, sql, type SQL } from 'drizzle-orm';
import type { SQLiteColumn } from 'drizzle-orm/sqlite-core';
import { inWorkspace, selectPage, windowEnd, type PageRequest, type WorkspaceContext } from '../context.js';
import { automations, contacts, workflowRuns, workflows, type RunStatus, type StepState } from '../db/schema.js';
import { NotFoundError } from '../errors.js';
import { decodeCursor, type Page } from '../pagination.js';

export interface RunStepView {
  index: number;
  type: string;
  status: StepState['status'];
  startedAt: string | null;
  finishedAt: string | null;
  error?: string;
  /** For an automation's run: the graph node this step was compiled from. */
  nodeId?: string;
}

export interface RunView {
  runId: number;
  /** Set for a workflow's run; null for an automation's. */
  workflowId: number | null;
  /** Set for an automation's run; null for a workflow's. */
  automationId: number | null;
  contactId: number | null;
  status: RunStatus;
  steps: RunStepView[];
  trigger: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
  finishedAt: string | null;
}

type RunRow = typeof workflowRuns.$inferSelect;

export function runView(row: RunRow): RunView {
  return {
    runId: row.id,
    workflowId: row.workflowId,
    automationId: row.automationId,
    contactId: row.contactId,
    status: row.status,
    steps: row.definition.map((step, index) => {
      const state = row.stepStates[index];
      return {
        index,
        ...(typeof step.nodeId === 'string' ? { nodeId: step.nodeId } : {}),
        type: step.type,
        status: state?.status ?? 'PENDING',
        startedAt: state?.startedAt ?? null,
        finishedAt: state?.finishedAt ?? null,
        ...(state?.error ? { error: state.error } : {}),
      };
    }),
    trigger: row.trigger,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
    finishedAt: row.finishedAt,
  };
}

export async function getRun(ctx: WorkspaceContext, runId: number): Promise<RunView> {
  const [row] = await ctx.db
    .select()
    .from(workflowRuns)
    .where(inWorkspace(ctx, workflowRuns.workspaceId, eq(workflowRuns.id, runId)));
  if (!row) throw new NotFoundError('run_not_found', `No run with id ${runId}`);
  return runView(row);
}

export async function listRuns(
  ctx: WorkspaceContext,
  workflowId: number,
  opts: { limit: number; cursor?: string | undefined; status?: RunStatus | undefined },
): Promise<Page<RunView>> {
  const [workflow] = await ctx.db
    .select({ id: workflows.id })
    .from(workflows)
    .where(inWorkspace(ctx, workflows.workspaceId, eq(workflows.id, workflowId)));
  if (!workflow) throw new NotFoundError('workflow_not_found', `No workflow with id ${workflowId}`);
  return runPage(ctx, { ...opts, workflowId });
}

export interface RunFilter extends PageRequest {
  status?: RunStatus | undefined;
  workflowId?: number | undefined;
  automationId?: number | undefined;
  contactId?: number | undefined;
}

/** The conditions of GET /runs (exported with the statement for tests that EXPLAIN it). */
export function runFilterConditions(filter: Omit<RunFilter, 'limit' | 'cursor'>): (SQL | undefined)[] {
  // The parent the scope names is its condition already (written twice, PostgreSQL counted it twice in its estimate).
  const scope = runScope(filter);
  const parent = typeof scope === 'object' ? scope.parent : undefined;
  const named = (column: SQLiteColumn, value: number | undefined) => (value === undefined || column === parent ? undefined : eq(column, value));
  return [
    filter.status !== undefined ? eq(workflowRuns.status, filter.status) : undefined,
    named(workflowRuns.workflowId, filter.workflowId),
    named(workflowRuns.automationId, filter.automationId),
    named(workflowRuns.contactId, filter.contactId),
  ];
}

/**
 * Every run of the workspace, newest first, with optional filters (GET /runs). An id of
 * another workspace (or of nothing) in a filter matches no run, and is found out before any
 * run is read: walked through that one's index, the workspace checked on each run, its runs
 * would have taken time to refuse (as many as a window holds), which told how busy another
 * workspace's workflow, automation or contact was.
 */
export async function listWorkspaceRuns(ctx: WorkspaceContext, filter: RunFilter): Promise<Page<RunView>> {
  decodeCursor(filter.cursor); // a bad cursor is refused whatever the filters name
  if (!(await ownsNamed(ctx, filter))) return { data: [], nextCursor: null };
  return runPage(ctx, filter);
}

/** Whether the workflow, automation and contact the filter names (any it names) are the workspace's: one lookup by id each. */
async function ownsNamed(ctx: WorkspaceContext, filter: RunFilter): Promise<boolean> {
  const named: [typeof workflows | typeof automations | typeof contacts, number | undefined][] = [
    [workflows, filter.workflowId],
    [automations, filter.automationId],
    [contacts, filter.contactId],
  ];
  for (const [table, id] of named) {
    if (id === undefined) continue;
    const [row] = await ctx.db
      .select({ id: table.id })
      .from(table)
      .where(inWorkspace(ctx, table.workspaceId, eq(table.id, id)));
    if (!row) return false;
  }
  return true;
}

async function runPage(ctx: WorkspaceContext, filter: RunFilter): Promise<Page<RunView>> {
  const query = runQuery(filter, await fewInStatus(ctx, filter));
  return selectPage(ctx, workflowRuns, { ...filter, workspaceScope: query.scope, driver: query.driver }, runView, ...query.conditions);
}

/** How a page of runs is read: the index that drives it and the conditions checked (exported for tests that EXPLAIN it). */
export interface RunQuery {
  scope: PageRequest['workspaceScope'];
  driver: PageRequest['driver'];
  conditions: (SQL | undefined)[];
}

/**
 * A status beside a workflow, automation or contact: whichever index reaches the page's runs
 * sooner drives it. `statusFirst` (fewInStatus): the status has fewer than LIST_SCAN_ROWS runs
 * below the cursor (as the runs in flight or waiting usually are), so its own index walks them
 * all, the named id checked on each (a unary + keeps that term out of index selection), and
 * the page is whole. Otherwise the named id's index drives, the status checked on each run,
 * LIST_SCAN_ROWS a page at most (runDriver).
 */
export function runQuery(filter: Omit<RunFilter, 'limit' | 'cursor'>, statusFirst: boolean): RunQuery {
  if (!statusFirst || filter.status === undefined) return { scope: runScope(filter), driver: runDriver(filter), conditions: runFilterConditions(filter) };
  const onEach = (column: SQLiteColumn, value: number | undefined) => (value === undefined ? undefined : sql`+${column} = ${value}`);
  return {
    scope: 'index',
    driver: undefined,
    conditions: [
      eq(workflowRuns.status, filter.status),
      onEach(workflowRuns.workflowId, filter.workflowId),
      onEach(workflowRuns.automationId, filter.automationId),
      onEach(workflowRuns.contactId, filter.contactId),
    ],
  };
}

/**
 * Whether the filter names a status beside a workflow, automation or contact, and the workspace
 * has fewer than LIST_SCAN_ROWS runs in that status below the cursor: one walk along the
 * status's index, reading no run (a million runs of one workflow, none WAITING: its WAITING
 * runs are found at once instead of LIST_SCAN_ROWS runs being read for an empty page).
 */
async function fewInStatus(ctx: WorkspaceContext, filter: RunFilter): Promise<boolean> {
  if (filter.status === undefined || runScope(filter) === 'index') return false;
  return (await windowEnd(ctx, workflowRuns, decodeCursor(filter.cursor), 'index', eq(workflowRuns.status, filter.status))) === null;
}

/**
 * With a workflow, automation or contact named and a further filter, the index of the one
 * named walks and the others are checked on each run: a page examines a bounded part of it
 * (selectPage's driver). One filter alone seeks straight through its own index.
 */
export function runDriver(filter: Omit<RunFilter, 'limit' | 'cursor'>): 'parent' | undefined {
  const named = [filter.status, filter.workflowId, filter.automationId, filter.contactId].filter((f) => f !== undefined);
  return named.length < 2 || runScope(filter) === 'index' ? undefined : 'parent';
}

/**
 * With a workflow, automation or contact named, its index is the one to walk, the workspace
 * checked on each run (WorkspaceScope's parent form, the one runDriver drives by). On
 * PostgreSQL the parent's index then also gives the order: told `workflow_id = $1 ORDER BY id
 * DESC` with the workspace on each row, the planner guessed few rows and read the whole table
 * and sorted it, or walked the primary key through every newer run.
 */
export function runScope(filter: Omit<RunFilter, 'limit' | 'cursor'>): PageRequest['workspaceScope'] {
  if (filter.workflowId !== undefined) return { parent: workflowRuns.workflowId, id: filter.workflowId };
  if (filter.automationId !== undefined) return { parent: workflowRuns.automationId, id: filter.automationId };
  if (filter.contactId !== undefined) return { parent: workflowRuns.contactId, id: filter.contactId };
  return 'index';
}

/** The workspace a run belongs to, for operator commands that name it by id alone. */
export async function runWorkspaceId(ctx: Pick<WorkspaceContext, 'db'>, runId: number): Promise<number> {
  const [row] = await ctx.db.select({ workspaceId: workflowRuns.workspaceId }).from(workflowRuns).where(eq(workflowRuns.id, runId));
  if (!row) throw new NotFoundError('run_not_found', `No run with id ${runId}`);
  return row.workspaceId;
}
