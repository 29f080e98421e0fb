import type { Command } from 'commander';
import type { WorkspaceContext } from '../core/context.js';
import { getWorkspace } from '../core/services/workspaces.js';
import { MAX_LIMIT } from '../core/pagination.js';
import { getRun, listRuns, runWorkspaceId, type RunView } from '../core/services/runs.js';
import { listWebhookEvents, replayWebhookEvent, webhookEventWorkspaceId, type WebhookEventView } from '../core/services/webhooks.js';
import { listWorkflows, setWorkflowStatus, workflowWorkspaceId, type WorkflowView } from '../core/services/workflows.js';
import { allPages, output, parseId, printable, table, withSession } from './io.js';

const workflowRow = (w: WorkflowView) => ({ id: w.id, name: w.name, status: w.status, trigger: w.triggerSource, steps: w.steps.length, url: w.webhook.url });

function describeWorkflow(w: WorkflowView): string {
  const lines = [`workflow ${w.id} "${printable(w.name)}": ${w.status} (${w.triggerSource}, ${w.steps.length} step(s))`];
  if (w.webhook.url)
    lines.push(
      `  webhook URL  ${w.webhook.url}`,
      `  lookup       ${w.webhook.lookup} at ${w.webhook.path}${w.webhook.createIfNotFound ? ', created if not found' : ''}`,
      `  signed       ${w.webhook.hasSigningSecret ? 'yes' : 'no'}`,
    );
  return lines.join('\n');
}

export function registerWorkflow(program: Command): void {
  const wf = program.command('workflow').description('list, activate and deactivate workflows');

  wf.command('list')
    .description("list a workspace's workflows")
    .requiredOption('--workspace <id>', 'workspace id')
    .action((opts: { workspace: string }, cmd: Command) =>
      withSession(cmd, async (session) => {
        const workspaceId = parseId(opts.workspace, 'workspace id');
        await getWorkspace(session.ctx, workspaceId); // "No workspace with id N", as every command says
        const ctx = session.inWorkspace(workspaceId);
        const all = await allPages((cursor) => listWorkflows(ctx, { limit: MAX_LIMIT, cursor }));
        output(cmd, all, () => table(all.map(workflowRow), ['id', 'name', 'status', 'trigger', 'steps', 'url']));
      }),
    );

  for (const [name, status, verb] of [
    ['activate', 'ACTIVE', 'activate a workflow (a WEBHOOK workflow gets its URL on first activation)'],
    ['deactivate', 'PAUSED', 'pause a workflow (its webhook URL answers 404 until it is activated again)'],
  ] as const) {
    wf.command(name)
      .description(verb)
      .argument('<id>', 'workflow id')
      .action((id: string, _opts: unknown, cmd: Command) =>
        withSession(cmd, async ({ ctx, inWorkspace }) => {
          const workflowId = parseId(id, 'workflow id');
          const w = await setWorkflowStatus(inWorkspace(await workflowWorkspaceId(ctx, workflowId)), workflowId, status);
          output(cmd, w, () => describeWorkflow(w));
        }),
      );
  }
}

const eventRow = (e: WebhookEventView) => ({
  id: e.id,
  receivedAt: e.receivedAt,
  status: e.statusCode,
  code: e.code,
  runId: e.runId,
  contactId: e.contactId,
  sourceIp: e.sourceIp,
});
const runRow = (r: RunView) => ({
  runId: r.runId,
  status: r.status,
  contactId: r.contactId,
  steps: r.steps.length,
  createdAt: r.createdAt,
  finishedAt: r.finishedAt,
});

function describeRun(r: RunView): string {
  const owner = r.workflowId !== null ? `workflow ${r.workflowId}` : `automation ${r.automationId}`;
  const lines = [`run ${r.runId} of ${owner}: ${r.status} for contact ${r.contactId ?? '-'} (created ${r.createdAt})`];
  lines.push(table(r.steps as unknown as Record<string, unknown>[], ['index', 'type', 'status', 'startedAt', 'finishedAt', 'error']));
  return lines.join('\n');
}

export function registerWebhook(program: Command): void {
  const wh = program.command('webhook').description('inspect and replay received webhook events');

  wh.command('events')
    .description('list the events a workflow received, newest first')
    .requiredOption('--workflow <id>', 'workflow id')
    .option('--limit <n>', 'how many (most recent first)', '50')
    .action((opts: { workflow: string; limit: string }, cmd: Command) =>
      withSession(cmd, async ({ ctx, inWorkspace }) => {
        const workflowId = parseId(opts.workflow, 'workflow id');
        const limit = Math.min(parseId(opts.limit, 'limit'), MAX_LIMIT);
        const page = await listWebhookEvents(inWorkspace(await workflowWorkspaceId(ctx, workflowId)), workflowId, { limit });
        output(cmd, page.data, () => table(page.data.map(eventRow), ['id', 'receivedAt', 'status', 'code', 'runId', 'contactId', 'sourceIp']));
      }),
    );

  wh.command('replay')
    .description('start a new run from a stored event, with the workflow as it is now')
    .argument('<eventId>', 'event id')
    .action((eventId: string, _opts: unknown, cmd: Command) =>
      withSession(cmd, async ({ ctx, inWorkspace }) => {
        const id = parseId(eventId, 'event id');
        const started = await replayWebhookEvent(inWorkspace(await webhookEventWorkspaceId(ctx, id)), id);
        output(cmd, started, `started run ${started.runId} for contact ${started.contactId}`);
      }),
    );
}

export function registerRuns(program: Command): void {
  const runs = program.command('runs').description('inspect workflow runs');

  runs
    .command('list')
    .description("list a workflow's runs, newest first")
    .requiredOption('--workflow <id>', 'workflow id')
    .option('--limit <n>', 'how many (most recent first)', '50')
    .action((opts: { workflow: string; limit: string }, cmd: Command) =>
      withSession(cmd, async ({ ctx, inWorkspace }) => {
        const workflowId = parseId(opts.workflow, 'workflow id');
        const wctx: WorkspaceContext = inWorkspace(await workflowWorkspaceId(ctx, workflowId));
        const page = await listRuns(wctx, workflowId, { limit: Math.min(parseId(opts.limit, 'limit'), MAX_LIMIT) });
        output(cmd, page.data, () => table(page.data.map(runRow), ['runId', 'status', 'contactId', 'steps', 'createdAt', 'finishedAt']));
      }),
    );

  runs
    .command('show')
    .description('show one run with its steps')
    .argument('<runId>', 'run id')
    .action((runId: string, _opts: unknown, cmd: Command) =>
      withSession(cmd, async ({ ctx, inWorkspace }) => {
        const id = parseId(runId, 'run id');
        const r = await getRun(inWorkspace(await runWorkspaceId(ctx, id)), id);
        output(cmd, r, () => describeRun(r));
      }),
    );
}
