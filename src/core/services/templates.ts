import { asc, eq } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, selectPage, withTransaction, type PageRequest, type WorkspaceContext } from '../context.js';
import { automations, CHANNELS, templates, workflows, type Channel, type TemplateContent } from '../db/schema.js';
import { ConflictError, NotFoundError, ValidationError, type FieldError } from '../errors.js';
import { escapePointerKey } from '../jsonPath.js';
import { liquidSyntaxProblem } from '../liquid.js';
import type { Page } from '../pagination.js';

export interface TemplateView {
  id: number;
  name: string;
  channel: Channel;
  content: TemplateContent;
  createdAt: string;
  updatedAt: string;
}

export interface TemplateInput {
  name?: string | undefined;
  channel?: Channel | undefined;
  content?: Record<string, unknown> | undefined;
}

export const TEMPLATE_NAME_MAX = 200;
/** Each string in a template's content, in UTF-8 bytes. */
export const TEMPLATE_STRING_MAX_BYTES = 100 * 1024;
export const WHATSAPP_PARAMETERS_MAX = 100;

type TemplateRow = typeof templates.$inferSelect;

function view(row: TemplateRow): TemplateView {
  return { id: row.id, name: row.name, channel: row.channel, content: row.content, createdAt: row.createdAt, updatedAt: row.updatedAt };
}

async function findRow(ctx: WorkspaceContext, id: number): Promise<TemplateRow | undefined> {
  const [row] = await ctx.db
    .select()
    .from(templates)
    .where(inWorkspace(ctx, templates.workspaceId, eq(templates.id, id)));
  return row;
}

/** The template, or undefined: for the run engine, which reports a missing template itself. */
export async function getTemplate(ctx: WorkspaceContext, id: number): Promise<TemplateView> {
  const row = await findRow(ctx, id);
  if (!row) throw new NotFoundError('template_not_found', `No template with id ${id}`);
  return view(row);
}

export function listTemplates(ctx: WorkspaceContext, filter: PageRequest & { channel?: Channel | undefined }): Promise<Page<TemplateView>> {
  return selectPage(ctx, templates, filter, view, filter.channel ? eq(templates.channel, filter.channel) : undefined);
}

/**
 * The content fields each channel takes. A WhatsApp template is either free text (inside
 * the 24-hour service window) or a pre-approved template with positional parameters.
 */
const CONTENT_SHAPES: Record<Channel, { fields: string[][]; describe: string }> = {
  EMAIL: { fields: [['subject', 'html', 'text']], describe: '{subject, html?, text?}' },
  SMS: { fields: [['text']], describe: '{text}' },
  WHATSAPP: { fields: [['text'], ['templateName', 'language', 'parameters']], describe: '{text} or {templateName, language, parameters}' },
};

class ContentChecker {
  readonly structure: FieldError[] = [];
  readonly syntax: FieldError[] = [];
  readonly out: Record<string, unknown> = {};

  constructor(private readonly content: Record<string, unknown>) {}

  /** A Liquid string: its type, size and syntax. Returns whether it was a string. */
  liquid(path: string, value: unknown, maxChars = Infinity): value is string {
    if (typeof value !== 'string') {
      this.structure.push({ path, message: 'must be string' });
      return false;
    }
    if (value.length > maxChars) this.structure.push({ path, message: `must be at most ${maxChars} characters` });
    else if (Buffer.byteLength(value) > TEMPLATE_STRING_MAX_BYTES) this.structure.push({ path, message: `must be at most ${TEMPLATE_STRING_MAX_BYTES} bytes` });
    else {
      const problem = liquidSyntaxProblem(value);
      if (problem) {
        const where = problem.line !== undefined ? ` at line ${problem.line}, column ${problem.col}` : '';
        this.syntax.push({ path, message: `template syntax error${where}: ${problem.message.replace(/, line:\d+, col:\d+$/, '')}` });
      }
    }
    return true;
  }

  field(key: string, required: boolean, maxChars?: number): void {
    const value = this.content[key];
    if (value === undefined) {
      if (required) this.structure.push({ path: `/content/${key}`, message: 'is required' });
      return;
    }
    if (!this.liquid(`/content/${key}`, value, maxChars)) return;
    if (required && value === '') this.structure.push({ path: `/content/${key}`, message: 'must not be empty' });
    this.out[key] = value;
  }

  parameters(): void {
    const value = this.content.parameters === undefined ? [] : this.content.parameters;
    if (!Array.isArray(value) || value.length > WHATSAPP_PARAMETERS_MAX) {
      this.structure.push({ path: '/content/parameters', message: `must be an array of at most ${WHATSAPP_PARAMETERS_MAX} strings` });
      return;
    }
    value.forEach((p, i) => this.liquid(`/content/parameters/${i}`, p));
    this.out.parameters = value;
  }
}

/** Checks content against its channel's shape and every string's Liquid syntax. */
export function validateContent(channel: Channel, content: unknown): TemplateContent {
  if (!content || typeof content !== 'object' || Array.isArray(content)) {
    throw new ValidationError('validation_failed', 'The template is invalid', [
      { path: '/content', message: `must be an object ${CONTENT_SHAPES[channel].describe}` },
    ]);
  }
  const fields = content as Record<string, unknown>;
  const check = new ContentChecker(fields);
  const shape = CONTENT_SHAPES[channel];
  // WhatsApp's two forms are told apart by whether a templateName is given.
  const allowed = channel === 'WHATSAPP' && Object.hasOwn(fields, 'templateName') ? shape.fields[1]! : shape.fields[0]!;
  for (const key of Object.keys(fields)) {
    if (!allowed.includes(key))
      check.structure.push({
        path: `/content/${escapePointerKey(key)}`,
        message: `is not a known field of ${channel} content ${shape.describe}`,
      });
  }
  switch (channel) {
    case 'EMAIL':
      check.field('subject', true);
      check.field('html', false);
      check.field('text', false);
      if (!fields.html && !fields.text) check.structure.push({ path: '/content', message: 'must have a non-empty html or text' });
      break;
    case 'SMS':
      check.field('text', true);
      break;
    case 'WHATSAPP':
      if (allowed.includes('templateName')) {
        check.field('templateName', true, 512);
        check.field('language', true, 200);
        check.parameters();
      } else check.field('text', true);
      break;
  }
  if (check.structure.length) throw new ValidationError('validation_failed', `The ${channel} content is invalid; it takes ${shape.describe}`, check.structure);
  if (check.syntax.length) throw new ValidationError('template_syntax_error', 'A template has a Liquid syntax error', check.syntax);
  return check.out;
}

function validName(name: string): string {
  const trimmed = name.trim();
  if (trimmed.length < 1 || trimmed.length > TEMPLATE_NAME_MAX) {
    throw new ValidationError('validation_failed', 'The template is invalid', [{ path: '/name', message: `must be 1 to ${TEMPLATE_NAME_MAX} characters` }]);
  }
  return trimmed;
}

function validChannel(channel: unknown): Channel {
  if (!(CHANNELS as readonly unknown[]).includes(channel)) {
    throw new ValidationError('validation_failed', 'The template is invalid', [{ path: '/channel', message: `must be one of ${CHANNELS.join(', ')}` }]);
  }
  return channel as Channel;
}

export function createTemplate(ctx: WorkspaceContext, input: { name: string; channel: Channel; content: Record<string, unknown> }): Promise<TemplateView> {
  const name = validName(input.name);
  const channel = validChannel(input.channel);
  const content = validateContent(channel, input.content);
  return withTransaction(ctx, async (tx) => {
    const [row] = await tx.db.insert(templates).values({ workspaceId: ctx.workspaceId, name, channel, content }).returning();
    if (!row) throw new Error('the insert returned no row');
    await recordAudit(tx, { workspaceId: ctx.workspaceId, action: 'template.created', target: { type: 'template', id: row.id }, metadata: { name, channel } });
    return view(row);
  });
}

/**
 * Updates the name and/or content. The channel may change only with content valid for
 * the new channel, so a stored template always matches its channel.
 */
export function updateTemplate(ctx: WorkspaceContext, id: number, input: TemplateInput): Promise<TemplateView> {
  const name = input.name === undefined ? undefined : validName(input.name);
  const channel = input.channel === undefined ? undefined : validChannel(input.channel);
  return withTransaction(ctx, async (tx) => {
    const before = await findRow(tx, id);
    if (!before) throw new NotFoundError('template_not_found', `No template with id ${id}`);
    const set: Partial<TemplateRow> = {};
    if (name !== undefined) set.name = name;
    if (channel !== undefined && channel !== before.channel) {
      if (input.content === undefined) {
        throw new ValidationError('content_required', 'Changing the channel needs content for the new channel', [
          { path: '/content', message: `is required to change the channel to ${channel}` },
        ]);
      }
      // A send step names the template for its own channel: moved to another, an ACTIVE
      // workflow's or automation's runs would fail at that step, as if it were deleted.
      const users = await activeTemplateUsers(tx, id);
      if (users.length) {
        throw new ConflictError(
          'template_in_use',
          `Template ${id} is used by the ACTIVE ${describeUsers(users)} to send ${before.channel}; change their send steps, or pause them, before changing its channel`,
        );
      }
      set.channel = channel;
    }
    if (input.content !== undefined) set.content = validateContent(set.channel ?? before.channel, input.content);
    const [row] = await tx.db
      .update(templates)
      .set({ ...set, updatedAt: nowIso() })
      .where(inWorkspace(tx, templates.workspaceId, eq(templates.id, id)))
      .returning();
    if (!row) throw new NotFoundError('template_not_found', `No template with id ${id}`);
    const fields = Object.keys(input).filter((k) => input[k as keyof TemplateInput] !== undefined);
    await recordAudit(tx, { workspaceId: ctx.workspaceId, action: 'template.updated', target: { type: 'template', id }, metadata: { fields } });
    return view(row);
  });
}

/** The channel each send step delivers on. */
const SEND_STEP_CHANNEL: Record<string, Channel> = { send_email: 'EMAIL', send_sms: 'SMS', send_whatsapp: 'WHATSAPP' };

/** A workflow or automation whose send steps name a template. */
interface TemplateUser {
  kind: 'workflow' | 'automation';
  id: number;
  name: string;
}

/** How many users a template_in_use problem names before "and N more". */
const USERS_NAMED = 3;

const sendsWith = (templateId: number) => (step: { type: string } & Record<string, unknown>) =>
  Object.hasOwn(SEND_STEP_CHANNEL, step.type) && step.templateId === templateId;

/**
 * The ACTIVE workflows and automations of the template's workspace whose send steps name it:
 * those start runs that would fail on a missing template. DRAFT and PAUSED ones do not count,
 * since activating them (resuming included) checks their templates again and refuses a
 * missing one. Read inside the deleting transaction, so that an activation cannot slip in
 * between (serializable on both stores).
 */
async function activeTemplateUsers(ctx: WorkspaceContext, templateId: number): Promise<TemplateUser[]> {
  const uses = sendsWith(templateId);
  const flows = await ctx.db
    .select({ id: workflows.id, name: workflows.name, steps: workflows.steps })
    .from(workflows)
    .where(inWorkspace(ctx, workflows.workspaceId, eq(workflows.status, 'ACTIVE')))
    .orderBy(asc(workflows.id));
  const graphs = await ctx.db
    .select({ id: automations.id, name: automations.name, graph: automations.graph })
    .from(automations)
    .where(inWorkspace(ctx, automations.workspaceId, eq(automations.status, 'ACTIVE')))
    .orderBy(asc(automations.id));
  return [
    ...flows.filter((w) => w.steps.some(uses)).map(({ id, name }) => ({ kind: 'workflow' as const, id, name })),
    ...graphs
      .filter((a) => a.graph.nodes.some((node) => uses({ ...node.data, type: node.type })))
      .map(({ id, name }) => ({ kind: 'automation' as const, id, name })),
  ];
}

/** `workflow "Welcome" (id 3), automation "Onboarding" (id 5) and 2 more`. */
function describeUsers(users: readonly TemplateUser[]): string {
  const named = users.slice(0, USERS_NAMED).map((u) => `${u.kind} ${JSON.stringify(u.name)} (id ${u.id})`);
  const more = users.length - named.length;
  if (more > 0) return `${named.join(', ')} and ${more} more`;
  return named.length > 1 ? `${named.slice(0, -1).join(', ')} and ${named.at(-1)}` : named.join('');
}

/**
 * Deletes a template, unless an ACTIVE workflow or automation sends with it (409
 * template_in_use): its runs would otherwise fail at that step. The check and the delete
 * are one transaction.
 */
export async function deleteTemplate(ctx: WorkspaceContext, id: number): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const row = await findRow(tx, id);
    if (!row) throw new NotFoundError('template_not_found', `No template with id ${id}`);
    const users = await activeTemplateUsers(tx, id);
    if (users.length) {
      throw new ConflictError(
        'template_in_use',
        `Template ${id} is used by the ACTIVE ${describeUsers(users)}; change their send steps, or pause them, before deleting it`,
      );
    }
    await tx.db.delete(templates).where(inWorkspace(tx, templates.workspaceId, eq(templates.id, id)));
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'template.deleted',
      target: { type: 'template', id },
      metadata: { name: row.name, channel: row.channel },
    });
  });
}

/**
 * What stops steps from sending: a send step naming a template that is not in this
 * workspace, or a template of another channel. One error per such step, at
 * `${base}/<index>/templateId`. Checked when a workflow is activated.
 */
export async function sendStepTemplateErrors(
  ctx: WorkspaceContext,
  steps: readonly ({ type: string } & Record<string, unknown>)[],
  base = '/steps',
  field = 'templateId',
): Promise<FieldError[]> {
  const errors: FieldError[] = [];
  for (const [index, step] of steps.entries()) {
    const channel = SEND_STEP_CHANNEL[step.type];
    if (!channel) continue;
    const path = `${base}/${index}/${field}`;
    const id = step.templateId;
    const row = typeof id === 'number' && Number.isSafeInteger(id) ? await findRow(ctx, id) : undefined;
    if (!row) errors.push({ path, message: `names no template of this workspace (${JSON.stringify(id ?? null)})` });
    else if (row.channel !== channel)
      errors.push({ path, message: `is template ${row.id}, a ${row.channel} template; ${step.type} needs a ${channel} template` });
  }
  return errors;
}
