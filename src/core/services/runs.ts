import { eq } from 'drizzle-orm';
import { inWorkspace, selectPage, type WorkspaceContext } from '../context.js';
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

export function getRun(ctx: WorkspaceContext, runId: number): RunView {
  const row = ctx.db.select().from(workflowRuns).where(inWorkspace(ctx, workflowRuns.workspaceId, eq(workflowRuns.id, runId))).get();
  if (!row) throw new NotFoundError('run_not_found', `No run with id ${runId}`);
  return runView(row);
}

export function listRuns(ctx: WorkspaceContext, workflowId: number, opts: { limit: number; cursor?: string | undefined; status?: RunStatus | undefined }): Page<RunView> {
  const workflow = ctx.db.select({ id: workflows.id }).from(workflows).where(inWorkspace(ctx, workflows.workspaceId, eq(workflows.id, workflowId))).get();
  if (!workflow) throw new NotFoundError('workflow_not_found', `No workflow with id ${workflowId}`);
  return selectPage(ctx, workflowRuns, opts, runView, eq(workflowRuns.workflowId, workflowId), opts.status ? eq(workflowRuns.status, opts.status) : undefined);
}

/** The workspace a run belongs to, for operator commands that name it by id alone. */
export function runWorkspaceId(ctx: Pick<WorkspaceContext, 'db'>, runId: number): number {
  const row = ctx.db.select({ workspaceId: workflowRuns.workspaceId }).from(workflowRuns).where(eq(workflowRuns.id, runId)).get();
  if (!row) throw new NotFoundError('run_not_found', `No run with id ${runId}`);
  return row.workspaceId;
}
