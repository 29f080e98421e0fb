import { eq } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, selectPage, withTransaction, type PageRequest, type WorkspaceContext } from '../context.js';
import { countRunStarted } from '../db/runCounts.js';
import { automations, contacts, workflowRuns, type AutomationGraph, type WorkflowStatus } from '../db/schema.js';
import { NotFoundError, ValidationError, type FieldError } from '../errors.js';
import type { Page } from '../pagination.js';
import { changeRunsInSteps } from './cascade.js';
import { sendStepTemplateErrors } from './templates.js';
import { compileGraph } from '../program.js';
import { outboundPolicyFrom, type OutboundPolicy } from '../../engine/outbound.js';
import { checkStepFields, conditionProblem, isStepType, maskStepSecrets, newStepChecker } from '../steps.js';
import { jsonDepthExceeds, MAX_JSON_DEPTH } from '../validation.js';

export const MAX_NODES = 200;

export interface AutomationView {
  id: number;
  name: string;
  status: WorkflowStatus;
  graph: AutomationGraph;
  createdAt: string;
  updatedAt: string;
}

type AutomationRow = typeof automations.$inferSelect;

function view(row: AutomationRow): AutomationView {
  return { id: row.id, name: row.name, status: row.status, graph: row.graph, createdAt: row.createdAt, updatedAt: row.updatedAt };
}

/**
 * Checks a graph: node ids unique, edges between existing nodes, exactly one trigger
 * (`{type: "trigger", data: {source: "MANUAL"}}`) with no way in, no cycles, every other
 * node a step of the workflow catalog (or a condition) with valid data, branch edges only
 * from conditions (one `true`, one `false`), and one way out of any other node.
 * Every problem is reported with its JSON Pointer.
 */
export function validateGraph(graph: AutomationGraph, policy?: OutboundPolicy): AutomationGraph {
  const errors: FieldError[] = [];
  const fail = (path: string, message: string) => errors.push({ path, message });
  if (graph.nodes.length > MAX_NODES) fail('/graph/nodes', `must have at most ${MAX_NODES} nodes`);
  const ids = new Map<string, number>();
  graph.nodes.forEach((node, i) => {
    const base = `/graph/nodes/${i}`;
    if (ids.has(node.id)) fail(`${base}/id`, `duplicates the id of node ${ids.get(node.id)}`);
    else ids.set(node.id, i);
    if (jsonDepthExceeds(node.data, MAX_JSON_DEPTH)) return fail(`${base}/data`, 'is nested too deeply');
    if (node.type === 'trigger') {
      const keys = Object.keys(node.data);
      if (node.data.source !== 'MANUAL' || keys.some((k) => k !== 'source')) fail(`${base}/data`, 'a trigger node is {source: "MANUAL"}');
    } else if (node.type === 'condition') {
      const condition = node.data.condition;
      const extra = Object.keys(node.data).filter((k) => k !== 'condition');
      for (const k of extra) fail(`${base}/data/${k}`, 'is not a known field');
      if (typeof condition !== 'string' || conditionProblem(condition) !== undefined) {
        fail(`${base}/data/condition`, 'must be a Liquid condition such as trigger.total > 100');
      }
    } else if (isStepType(node.type)) {
      const check = newStepChecker(`${base}/data`, policy);
      checkStepFields(node.type, node.data, check);
      errors.push(...check.errors);
    } else fail(`${base}/type`, 'must be trigger, condition or a step type of the workflow catalog');
  });
  const triggers = graph.nodes.filter((n) => n.type === 'trigger');
  if (triggers.length !== 1) fail('/graph/nodes', `must have exactly one trigger node (found ${triggers.length})`);

  const out = new Map<string, (AutomationGraph['edges'][number] & { index: number })[]>();
  graph.edges.forEach((edge, i) => {
    const base = `/graph/edges/${i}`;
    if (!ids.has(edge.from)) fail(`${base}/from`, `no node has id ${JSON.stringify(edge.from)}`);
    if (!ids.has(edge.to)) fail(`${base}/to`, `no node has id ${JSON.stringify(edge.to)}`);
    const from = graph.nodes[ids.get(edge.from) ?? -1];
    const to = graph.nodes[ids.get(edge.to) ?? -1];
    if (to?.type === 'trigger') fail(`${base}/to`, 'no edge may lead into the trigger');
    if (from && from.type !== 'condition' && edge.branch !== undefined) fail(`${base}/branch`, 'only edges from a condition node have a branch');
    if (from?.type === 'condition' && edge.branch === undefined) fail(`${base}/branch`, 'edges from a condition node need branch: true or false');
    const siblings = out.get(edge.from) ?? [];
    if (from && from.type !== 'condition' && siblings.length)
      fail(base, `node ${JSON.stringify(edge.from)} already has a way out; branch with a condition node`);
    if (from?.type === 'condition' && siblings.some((s) => s.branch === edge.branch))
      fail(`${base}/branch`, `node ${JSON.stringify(edge.from)} already has a ${edge.branch} branch`);
    out.set(edge.from, [...siblings, { ...edge, index: i }]);
  });

  // Cycles: depth-first search with colours; the edge that closes a cycle is the one named,
  // so an editor can highlight it.
  const state = new Map<string, 1 | 2>();
  const visit = (id: string): (AutomationGraph['edges'][number] & { index: number }) | undefined => {
    state.set(id, 1);
    for (const e of out.get(id) ?? []) {
      const s = state.get(e.to);
      if (s === 1) return e;
      const closing = s === undefined && ids.has(e.to) ? visit(e.to) : undefined;
      if (closing) return closing;
    }
    state.set(id, 2);
    return undefined;
  };
  for (const id of ids.keys()) {
    const closing = state.has(id) ? undefined : visit(id);
    if (closing) {
      fail(
        `/graph/edges/${closing.index}`,
        `closes a cycle (${JSON.stringify(closing.from)} back to ${JSON.stringify(closing.to)}); a run must always move forward`,
      );
      break;
    }
  }
  if (errors.length) throw new ValidationError('invalid_graph', 'The automation graph is invalid', errors);
  return graph;
}

async function findRow(ctx: WorkspaceContext, id: number): Promise<AutomationRow> {
  const [row] = await ctx.db
    .select()
    .from(automations)
    .where(inWorkspace(ctx, automations.workspaceId, eq(automations.id, id)));
  if (!row) throw new NotFoundError('automation_not_found', `No automation with id ${id}`);
  return row;
}

function checkName(name: string): string {
  const trimmed = name.trim();
  if (!trimmed || trimmed.length > 200)
    throw new ValidationError('validation_failed', 'The automation is invalid', [{ path: '/name', message: 'must be 1 to 200 characters' }]);
  return trimmed;
}

/** An automation as a read-only role (VIEWER) sees it: its http_request nodes' header values masked (maskStepSecrets). */
function maskedView(row: AutomationRow): AutomationView {
  const v = view(row);
  return { ...v, graph: { ...v.graph, nodes: v.graph.nodes.map((node) => ({ ...node, data: maskStepSecrets(node.type, node.data) })) } };
}

/** `opts.masked`: the caller may read but not write automations (VIEWER). */
export async function getAutomation(ctx: WorkspaceContext, id: number, opts: { masked?: boolean } = {}): Promise<AutomationView> {
  return (opts.masked ? maskedView : view)(await findRow(ctx, id));
}

export async function listAutomations(ctx: WorkspaceContext, page: PageRequest, opts: { masked?: boolean } = {}): Promise<Page<AutomationView>> {
  return selectPage(ctx, automations, page, opts.masked ? maskedView : view);
}

/**
 * An automation about to be ACTIVE, as a workflow (workflows.ts, activationColumns): its send
 * nodes name templates of this workspace and of their channel. Checked on activation and when
 * the graph of an ACTIVE automation changes; a draft may name any.
 */
async function checkSendTemplates(ctx: WorkspaceContext, graph: AutomationGraph): Promise<void> {
  const errors = await sendStepTemplateErrors(
    ctx,
    graph.nodes.map((node) => ({ ...node.data, type: node.type })),
    '/graph/nodes',
    'data/templateId',
  );
  if (errors.length)
    throw new ValidationError(
      'validation_failed',
      'The automation cannot be activated: a send node names a missing template or one of another channel',
      errors,
    );
}

export async function createAutomation(
  ctx: WorkspaceContext,
  input: { name: string; status?: WorkflowStatus | undefined; graph: AutomationGraph },
): Promise<AutomationView> {
  const name = checkName(input.name);
  const graph = validateGraph(input.graph, outboundPolicyFrom(ctx.config));
  return withTransaction(ctx, async (tx) => {
    if (input.status === 'ACTIVE') await checkSendTemplates(tx, graph);
    const [row] = await tx.db
      .insert(automations)
      .values({ workspaceId: ctx.workspaceId, name, status: input.status ?? 'DRAFT', graph })
      .returning();
    if (!row) throw new Error('the insert returned no row');
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'automation.created',
      target: { type: 'automation', id: row.id },
      metadata: { name, status: row.status },
    });
    return view(row);
  });
}

export async function updateAutomation(
  ctx: WorkspaceContext,
  id: number,
  input: { name?: string | undefined; status?: WorkflowStatus | undefined; graph?: AutomationGraph | undefined },
): Promise<AutomationView> {
  const set: Partial<AutomationRow> = {};
  if (input.name !== undefined) set.name = checkName(input.name);
  if (input.graph !== undefined) set.graph = validateGraph(input.graph, outboundPolicyFrom(ctx.config));
  if (input.status !== undefined) set.status = input.status;
  return withTransaction(ctx, async (tx) => {
    const before = await findRow(tx, id);
    if ((set.status ?? before.status) === 'ACTIVE' && (before.status !== 'ACTIVE' || set.graph !== undefined))
      await checkSendTemplates(tx, set.graph ?? before.graph);
    const row = (
      await tx.db
        .update(automations)
        .set({ ...set, updatedAt: nowIso() })
        .where(inWorkspace(tx, automations.workspaceId, eq(automations.id, id)))
        .returning()
    )[0]!;
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'automation.updated',
      target: { type: 'automation', id },
      metadata: { fields: Object.keys(input) },
    });
    if (input.status !== undefined && input.status !== before.status) {
      await recordAudit(tx, {
        workspaceId: ctx.workspaceId,
        action: input.status === 'ACTIVE' ? 'automation.activated' : input.status === 'PAUSED' ? 'automation.paused' : 'automation.drafted',
        target: { type: 'automation', id },
        metadata: { from: before.status, to: input.status },
      });
    }
    return view(row);
  });
}

export async function deleteAutomation(ctx: WorkspaceContext, id: number): Promise<void> {
  await findRow(ctx, id);
  // Its runs are deleted in steps first: the DELETE's own cascade would do them in one.
  await changeRunsInSteps(ctx, eq(workflowRuns.automationId, id), 'delete');
  return withTransaction(ctx, async (tx) => {
    await findRow(tx, id);
    await tx.db.delete(automations).where(inWorkspace(tx, automations.workspaceId, eq(automations.id, id)));
    await recordAudit(tx, { workspaceId: ctx.workspaceId, action: 'automation.deleted', target: { type: 'automation', id } });
  });
}

/** Starts a run of an ACTIVE automation for one contact: its graph compiled into the run's program. */
export async function startAutomationRun(
  ctx: WorkspaceContext,
  id: number,
  input: { contactId: number; trigger?: Record<string, unknown> | undefined },
): Promise<{ runId: number; contactId: number }> {
  // As a template preview's: a trigger is stored with the run and read back in every list of runs.
  if (input.trigger !== undefined && jsonDepthExceeds(input.trigger, MAX_JSON_DEPTH))
    throw new ValidationError('validation_failed', 'The trigger is invalid', [
      { path: '/trigger', message: `must nest at most ${MAX_JSON_DEPTH} levels deep` },
    ]);
  return withTransaction(ctx, async (tx) => {
    const row = await findRow(tx, id);
    if (row.status !== 'ACTIVE') throw new ValidationError('automation_not_active', `Automation ${id} is ${row.status}; activate it first`);
    const [contact] = await tx.db
      .select({ id: contacts.id })
      .from(contacts)
      .where(inWorkspace(tx, contacts.workspaceId, eq(contacts.id, input.contactId)));
    if (!contact) throw new NotFoundError('contact_not_found', `No contact with id ${input.contactId}`);
    const [run] = await tx.db
      .insert(workflowRuns)
      .values({ workspaceId: ctx.workspaceId, automationId: id, contactId: contact.id, definition: compileGraph(row.graph), trigger: input.trigger ?? {} })
      .returning({ id: workflowRuns.id });
    if (!run) throw new Error('the insert returned no row');
    await countRunStarted(tx.db, ctx.workspaceId);
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'automation.run_started',
      target: { type: 'automation', id },
      metadata: { runId: run.id, contactId: contact.id },
    });
    return { runId: run.id, contactId: contact.id };
  });
}
