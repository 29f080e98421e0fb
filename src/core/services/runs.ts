import { eq, type SQL } from 'drizzle-orm';
import { inWorkspace, selectPage, type PageRequest, type WorkspaceContext } from '../context.js';
import { workflowRuns, workflows, type RunStatus, type StepState } from '../db/schema.js';
import { NotFoundError } from '../errors.js';
import type { Page } from '../pagination.js';

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
  const filter = { workflowId, status: opts.status };
  return selectPage(ctx, workflowRuns, { ...opts, workspaceScope: 'row', driver: runDriver(filter) }, runView, ...runFilterConditions(filter));
}

export interface RunFilter extends PageRequest {
  status?: RunStatus | undefined;
  workflowId?: number | undefined;
  automationId?: number | undefined;
  contactId?: number | undefined;
}

/** The conditions of GET /runs (exported with the statement for tests that EXPLAIN it). */
export function runFilterConditions(filter: Omit<RunFilter, 'limit' | 'cursor'>): (SQL | undefined)[] {
  return [
    filter.status !== undefined ? eq(workflowRuns.status, filter.status) : undefined,
    filter.workflowId !== undefined ? eq(workflowRuns.workflowId, filter.workflowId) : undefined,
    filter.automationId !== undefined ? eq(workflowRuns.automationId, filter.automationId) : undefined,
    filter.contactId !== undefined ? eq(workflowRuns.contactId, filter.contactId) : undefined,
  ];
}

/**
 * Every run of the workspace, newest first, with optional filters (GET /runs). An id of
 * another workspace (or of nothing) in a filter simply matches no run: the filters are
 * conditions on this workspace's runs, so nothing about other workspaces can be learnt.
 */
export async function listWorkspaceRuns(ctx: WorkspaceContext, filter: RunFilter): Promise<Page<RunView>> {
  return selectPage(ctx, workflowRuns, { ...filter, workspaceScope: runScope(filter), driver: runDriver(filter) }, runView, ...runFilterConditions(filter));
}

/**
 * With a workflow, automation or contact named and a further filter, the index of the one
 * named walks and the others are checked on each run: a page examines a bounded part of it
 * (selectPage's driver). One filter alone seeks straight through its own index.
 */
export function runDriver(filter: Omit<RunFilter, 'limit' | 'cursor'>): SQL | undefined {
  const named = [filter.status, filter.workflowId, filter.automationId, filter.contactId].filter((f) => f !== undefined);
  if (named.length < 2 || runScope(filter) !== 'row') return undefined;
  if (filter.workflowId !== undefined) return eq(workflowRuns.workflowId, filter.workflowId);
  if (filter.automationId !== undefined) return eq(workflowRuns.automationId, filter.automationId);
  return eq(workflowRuns.contactId, filter.contactId!);
}

/** With a workflow, automation or contact named, its index is the one to walk (see PageRequest). */
export function runScope(filter: Omit<RunFilter, 'limit' | 'cursor'>): PageRequest['workspaceScope'] {
  return filter.workflowId !== undefined || filter.automationId !== undefined || filter.contactId !== undefined ? 'row' : 'index';
}

/** The workspace a run belongs to, for operator commands that name it by id alone. */
export async function runWorkspaceId(ctx: Pick<WorkspaceContext, 'db'>, runId: number): Promise<number> {
  const [row] = await ctx.db.select({ workspaceId: workflowRuns.workspaceId }).from(workflowRuns).where(eq(workflowRuns.id, runId));
  if (!row) throw new NotFoundError('run_not_found', `No run with id ${runId}`);
  return row.workspaceId;
}
