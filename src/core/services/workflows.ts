import { eq } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, selectPage, withTransaction, type PageRequest, type SystemContext, type WorkspaceContext } from '../context.js';
import { randomBase62 } from '../crypto.js';
import { workflows, type ContactDefaults, type LookupKind, type StepDefinition, type TriggerSource, type WorkflowStatus } from '../db/schema.js';
import { NotFoundError, ValidationError, type FieldError } from '../errors.js';
import { parsePath } from '../jsonPath.js';
import type { Page } from '../pagination.js';
import { encryptSecret } from '../secrets.js';
import { outboundPolicyFrom } from '../../engine/outbound.js';
import { MASKED, maskStepSecrets, validateSteps } from '../steps.js';
import { jsonDepthExceeds, MAX_JSON_DEPTH } from '../validation.js';
import { normalizeTags, withoutNulls } from './contacts.js';
import { baseUrlOf } from './sandbox.js';
import { sendStepTemplateErrors } from './templates.js';

export const WEBHOOK_TOKEN_LENGTH = 30;
export const WEBHOOK_PATH_PREFIX = '/v1/webhooks/in/';
/** A shorter shared secret could be guessed offline from one signed request. */
export const SIGNING_SECRET_MIN = 16;

export interface WebhookView {
  url: string | null;
  lookup: LookupKind | null;
  path: string | null;
  createIfNotFound: boolean;
  defaults: ContactDefaults;
  hasSigningSecret: boolean;
}

export interface WorkflowView {
  id: number;
  name: string;
  status: WorkflowStatus;
  triggerSource: TriggerSource;
  steps: StepDefinition[];
  webhook: WebhookView;
  createdAt: string;
  updatedAt: string;
}

export interface WebhookInput {
  lookup?: LookupKind | null | undefined;
  path?: string | null | undefined;
  createIfNotFound?: boolean | undefined;
  defaults?: ContactDefaults | undefined;
  signingSecret?: string | null | undefined;
}

export interface WorkflowInput {
  name?: string | undefined;
  status?: WorkflowStatus | undefined;
  triggerSource?: TriggerSource | undefined;
  steps?: unknown[] | undefined;
  webhook?: WebhookInput | undefined;
}

type WorkflowRow = typeof workflows.$inferSelect;

export function workflowView(row: WorkflowRow, publicUrl: string): WorkflowView {
  return {
    id: row.id,
    name: row.name,
    status: row.status,
    triggerSource: row.triggerSource,
    steps: row.steps,
    webhook: {
      url: row.webhookToken ? `${publicUrl}${WEBHOOK_PATH_PREFIX}${row.webhookToken}` : null,
      lookup: row.webhookLookup,
      path: row.webhookPath ?? row.webhookLookup,
      createIfNotFound: row.createIfNotFound,
      defaults: row.contactDefaults,
      hasSigningSecret: row.signingSecret !== null,
    },
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

/**
 * The view a VIEWER gets: the webhook URL alone lets anyone post (when no secret is set),
 * so a read-only role sees only its last 4 characters (`…/v1/webhooks/in/••••Ab3x`),
 * enough to tell URLs apart; and the header values of its http_request steps, which hold
 * the keys of the APIs it calls, masked. MEMBER and above see it whole.
 */
export function maskedWorkflowView(view: WorkflowView, publicUrl: string): WorkflowView {
  const steps = view.steps.map((step) => maskStepSecrets(step.type, step));
  const url = view.webhook.url;
  if (!url) return { ...view, steps };
  return { ...view, steps, webhook: { ...view.webhook, url: `${publicUrl}${WEBHOOK_PATH_PREFIX}${MASKED}${url.slice(-4)}` } };
}

/** 30 base62 characters from a CSPRNG: about 178 bits, unguessable and URL-safe. */
export function mintWebhookToken(): string {
  return randomBase62(WEBHOOK_TOKEN_LENGTH);
}

async function findRow(ctx: WorkspaceContext, id: number): Promise<WorkflowRow> {
  const [row] = await ctx.db
    .select()
    .from(workflows)
    .where(inWorkspace(ctx, workflows.workspaceId, eq(workflows.id, id)));
  if (!row) throw new NotFoundError('workflow_not_found', `No workflow with id ${id}`);
  return row;
}

/** `opts.masked`: the caller may read but not write workflows (VIEWER); see maskedWorkflowView. */
export async function getWorkflow(ctx: WorkspaceContext, id: number, opts: { masked?: boolean } = {}): Promise<WorkflowView> {
  const baseUrl = await baseUrlOf(ctx);
  const view = workflowView(await findRow(ctx, id), baseUrl);
  return opts.masked ? maskedWorkflowView(view, baseUrl) : view;
}

export async function listWorkflows(ctx: WorkspaceContext, page: PageRequest, opts: { masked?: boolean } = {}): Promise<Page<WorkflowView>> {
  const baseUrl = await baseUrlOf(ctx);
  return selectPage(ctx, workflows, page, (r) => {
    const view = workflowView(r, baseUrl);
    return opts.masked ? maskedWorkflowView(view, baseUrl) : view;
  });
}

/** The workspace a workflow belongs to, for operator commands that name it by id alone. */
export async function workflowWorkspaceId(ctx: Pick<SystemContext, 'db'>, id: number): Promise<number> {
  const [row] = await ctx.db.select({ workspaceId: workflows.workspaceId }).from(workflows).where(eq(workflows.id, id));
  if (!row) throw new NotFoundError('workflow_not_found', `No workflow with id ${id}`);
  return row.workspaceId;
}

function normalizeDefaults(defaults: ContactDefaults): ContactDefaults {
  const out: ContactDefaults = {};
  if (defaults.firstName !== undefined) out.firstName = defaults.firstName;
  if (defaults.lastName !== undefined) out.lastName = defaults.lastName;
  if (defaults.attributes !== undefined) {
    if (jsonDepthExceeds(defaults.attributes, MAX_JSON_DEPTH)) {
      throw new ValidationError('validation_failed', 'The workflow is invalid', [
        { path: '/webhook/defaults/attributes', message: `must nest at most ${MAX_JSON_DEPTH} levels deep` },
      ]);
    }
    // A new contact has no attribute whose value is null (contacts.ts, withoutNulls).
    out.attributes = withoutNulls(defaults.attributes);
  }
  if (defaults.tags !== undefined) out.tags = normalizeTags(defaults.tags, '/webhook/defaults/tags');
  return out;
}

/** Column values for the fields present in the input; everything is validated first. */
function columnsFrom(ctx: WorkspaceContext, input: WorkflowInput): Partial<WorkflowRow> {
  const errors: FieldError[] = [];
  const set: Partial<WorkflowRow> = {};
  if (input.name !== undefined) {
    const name = input.name.trim();
    if (!name || name.length > 200) errors.push({ path: '/name', message: 'must be 1 to 200 characters' });
    set.name = name;
  }
  if (input.triggerSource !== undefined) set.triggerSource = input.triggerSource;
  if (input.steps !== undefined) set.steps = validateSteps(input.steps, '/steps', outboundPolicyFrom(ctx.config));
  const webhook = input.webhook;
  if (webhook) {
    if (webhook.lookup !== undefined) set.webhookLookup = webhook.lookup;
    if (webhook.path !== undefined) {
      if (webhook.path !== null && !parsePath(webhook.path)) {
        errors.push({ path: '/webhook/path', message: 'must be a dot path such as customer.email or fields[0].value' });
      }
      set.webhookPath = webhook.path;
    }
    if (webhook.createIfNotFound !== undefined) set.createIfNotFound = webhook.createIfNotFound;
    if (webhook.defaults !== undefined) set.contactDefaults = normalizeDefaults(webhook.defaults);
    if (typeof webhook.signingSecret === 'string' && webhook.signingSecret.length < SIGNING_SECRET_MIN) {
      errors.push({ path: '/webhook/signingSecret', message: `must be at least ${SIGNING_SECRET_MIN} characters (or null to remove it)` });
    } else if (webhook.signingSecret !== undefined) {
      set.signingSecret = webhook.signingSecret === null ? null : encryptSecret(ctx.config, webhook.signingSecret);
    }
  }
  if (errors.length) throw new ValidationError('validation_failed', 'The workflow is invalid', errors);
  return set;
}

/**
 * Brings a row that is about to be ACTIVE into a runnable state: its send steps name
 * templates of this workspace and of their channel (checked on activation and when the
 * steps of an ACTIVE workflow change), a WEBHOOK workflow needs a lookup, and gets its
 * token on first activation (kept through pauses so senders' URLs keep working).
 */
async function activationColumns(ctx: WorkspaceContext, row: WorkflowRow, checkTemplates: boolean): Promise<Partial<WorkflowRow>> {
  if (checkTemplates) {
    const errors = await sendStepTemplateErrors(ctx, row.steps);
    if (errors.length)
      throw new ValidationError(
        'validation_failed',
        'The workflow cannot be activated: a send step names a missing template or one of another channel',
        errors,
      );
  }
  if (row.triggerSource !== 'WEBHOOK') return {};
  if (!row.webhookLookup) {
    throw new ValidationError('webhook_lookup_required', 'A WEBHOOK workflow needs webhook.lookup (email, phone or contactId) before it can be ACTIVE', [
      { path: '/webhook/lookup', message: 'is required to activate a WEBHOOK workflow' },
    ]);
  }
  return row.webhookToken ? {} : { webhookToken: mintWebhookToken() };
}

async function auditChanges(ctx: WorkspaceContext, before: WorkflowRow | undefined, after: WorkflowRow, input: WorkflowInput): Promise<void> {
  const target = { type: 'workflow', id: after.id };
  const base = { workspaceId: ctx.workspaceId, target };
  if (!before) await recordAudit(ctx, { ...base, action: 'workflow.created', metadata: { name: after.name, triggerSource: after.triggerSource } });
  else {
    const fields = Object.keys(input).filter((k) => k !== 'status');
    if (fields.length) await recordAudit(ctx, { ...base, action: 'workflow.updated', metadata: { fields } });
  }
  if (before?.status !== after.status && (before || after.status !== 'DRAFT')) {
    const action = after.status === 'ACTIVE' ? 'workflow.activated' : after.status === 'PAUSED' ? 'workflow.paused' : 'workflow.drafted';
    await recordAudit(ctx, { ...base, action, metadata: { from: before?.status ?? null, to: after.status } });
  }
  if (!before ? after.signingSecret !== null : input.webhook?.signingSecret !== undefined) {
    await recordAudit(ctx, { ...base, action: 'workflow.signing_secret_changed', metadata: { set: after.signingSecret !== null } });
  }
}

export async function createWorkflow(ctx: WorkspaceContext, input: WorkflowInput & { name: string }): Promise<WorkflowView> {
  const set = columnsFrom(ctx, input);
  return withTransaction(ctx, async (tx) => {
    const [inserted] = await tx.db
      .insert(workflows)
      .values({ workspaceId: ctx.workspaceId, name: set.name ?? input.name, ...set, status: 'DRAFT' })
      .returning();
    if (!inserted) throw new Error('the insert returned no row');
    let row = inserted;
    if (input.status && input.status !== 'DRAFT') {
      const extra = input.status === 'ACTIVE' ? await activationColumns(tx, row, true) : {};
      row = (
        await tx.db
          .update(workflows)
          .set({ status: input.status, ...extra })
          .where(eq(workflows.id, row.id))
          .returning()
      )[0]!;
    }
    await auditChanges(tx, undefined, row, input);
    return workflowView(row, await baseUrlOf(tx));
  });
}

export async function updateWorkflow(ctx: WorkspaceContext, id: number, input: WorkflowInput): Promise<WorkflowView> {
  const set = columnsFrom(ctx, input);
  return withTransaction(ctx, async (tx) => {
    const before = await findRow(tx, id);
    const merged = { ...before, ...set, ...(input.status ? { status: input.status } : {}) };
    const extra = merged.status === 'ACTIVE' ? await activationColumns(tx, merged, input.status === 'ACTIVE' || input.steps !== undefined) : {};
    const row = (
      await tx.db
        .update(workflows)
        .set({ ...set, ...(input.status ? { status: input.status } : {}), ...extra, updatedAt: nowIso() })
        .where(inWorkspace(tx, workflows.workspaceId, eq(workflows.id, id)))
        .returning()
    )[0]!;
    await auditChanges(tx, before, row, input);
    return workflowView(row, await baseUrlOf(tx));
  });
}

export async function setWorkflowStatus(ctx: WorkspaceContext, id: number, status: WorkflowStatus): Promise<WorkflowView> {
  return updateWorkflow(ctx, id, { status });
}
