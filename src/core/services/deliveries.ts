import { and, asc, eq, isNull, lt } from 'drizzle-orm';
import { inWorkspace, nowIso, selectPage, withTransaction, type PageRequest, type SystemContext, type WorkspaceContext } from '../context.js';
import type { Db } from '../db/connection.js';
import { deliveryAttempts, templates, type Channel, type DeliveryStatus, type ProviderName } from '../db/schema.js';
import { NotFoundError, ValidationError } from '../errors.js';
import type { Page } from '../pagination.js';

/**
 * One row per try of one message: a retry is a new row with the next attempt number, so
 * the history of a message is the rows sharing its run and step (or, for a test email,
 * consecutive rows). Optional fields that are null are left out of the view.
 */
export interface DeliveryAttemptView {
  id: number;
  channel: Channel;
  provider: ProviderName;
  to: string;
  status: DeliveryStatus;
  attempt: number;
  error?: string;
  providerMessageId?: string;
  runId?: number;
  stepIndex?: number;
  templateId?: number;
  rendered: Record<string, unknown>;
  createdAt: string;
  updatedAt: string;
}

export interface NewAttempt {
  workspaceId: number;
  channel: Channel;
  provider: ProviderName;
  to: string;
  status: DeliveryStatus;
  attempt: number;
  rendered: Record<string, unknown>;
  runId?: number | undefined;
  stepIndex?: number | undefined;
  templateId?: number | undefined;
  providerMessageId?: string | null | undefined;
  error?: string | undefined;
}

export type AttemptOutcome = { status: 'SENT'; providerMessageId: string | null } | { status: 'FAILED'; error: string };

type AttemptRow = typeof deliveryAttempts.$inferSelect;

/** Provider and error texts are bounded so a chatty provider cannot bloat the table. */
const MAX_ERROR_LENGTH = 1000;

export function deliveryAttemptView(row: AttemptRow): DeliveryAttemptView {
  return {
    id: row.id,
    channel: row.channel,
    provider: row.provider,
    to: row.to,
    status: row.status,
    attempt: row.attempt,
    ...(row.error !== null ? { error: row.error } : {}),
    ...(row.providerMessageId !== null ? { providerMessageId: row.providerMessageId } : {}),
    ...(row.runId !== null ? { runId: row.runId } : {}),
    ...(row.stepIndex !== null ? { stepIndex: row.stepIndex } : {}),
    ...(row.templateId !== null ? { templateId: row.templateId } : {}),
    rendered: row.rendered,
    createdAt: row.createdAt,
    updatedAt: row.updatedAt,
  };
}

function clip(text: string): string {
  return text.length > MAX_ERROR_LENGTH ? `${text.slice(0, MAX_ERROR_LENGTH - 1)}…` : text;
}

/** Inserts one attempt row (committed at once unless ctx is inside a transaction). */
export function createAttempt(ctx: Pick<SystemContext, 'db' | 'store'>, input: NewAttempt): Promise<DeliveryAttemptView> {
  return withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .insert(deliveryAttempts)
      .values({
        workspaceId: input.workspaceId,
        channel: input.channel,
        provider: input.provider,
        to: input.to,
        status: input.status,
        attempt: input.attempt,
        rendered: input.rendered,
        runId: input.runId ?? null,
        stepIndex: input.stepIndex ?? null,
        templateId: input.templateId ?? null,
        providerMessageId: input.providerMessageId ?? null,
        error: input.error === undefined ? null : clip(input.error),
      })
      .returning();
    if (!row) throw new Error('the insert returned no row');
    return deliveryAttemptView(row);
  });
}

/** Records the outcome of a try. */
export async function markAttempt(ctx: Pick<SystemContext, 'db' | 'store'>, id: number, outcome: AttemptOutcome): Promise<void> {
  const set =
    outcome.status === 'SENT'
      ? { status: 'SENT' as const, providerMessageId: outcome.providerMessageId, error: null }
      : { status: 'FAILED' as const, error: clip(outcome.error) };
  await withTransaction(ctx, async (tx) => {
    await tx.db
      .update(deliveryAttempts)
      .set({ ...set, updatedAt: nowIso() })
      .where(eq(deliveryAttempts.id, id));
  });
}

/** A QUEUED attempt (a system email's) has its turn and leaves now. */
export async function markAttemptSending(ctx: Pick<SystemContext, 'db' | 'store'>, id: number): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    await tx.db.update(deliveryAttempts).set({ status: 'SENDING', updatedAt: nowIso() }).where(eq(deliveryAttempts.id, id));
  });
}

/** What an attempt says when the process stopped while it was under way. */
export const STOPPED_WHILE_SENDING = 'the process stopped while this message was being sent; it is not sent again, to avoid a duplicate';

/**
 * Settles the attempts of system emails (a test email, an invitation: no run) left SENDING
 * or QUEUED since before `olderThan` by a process that stopped while sending them, or
 * before their turn: their retries lived
 * in that process, so nothing else ever would. A run's attempt is settled by its run when
 * the run is taken up again. Reads the few rows without a run through the run index.
 */
export async function settleAbandonedSends(ctx: Pick<SystemContext, 'db' | 'store'>, olderThan: string): Promise<number> {
  return withTransaction(ctx, async (tx) => {
    const now = nowIso();
    const stale = (status: 'SENDING' | 'QUEUED') =>
      and(isNull(deliveryAttempts.runId), eq(deliveryAttempts.status, status), lt(deliveryAttempts.updatedAt, olderThan));
    const sending = await tx.db
      .update(deliveryAttempts)
      .set({ status: 'FAILED', error: STOPPED_WHILE_SENDING, updatedAt: now })
      .where(stale('SENDING'))
      .returning({ id: deliveryAttempts.id });
    const queued = await tx.db
      .update(deliveryAttempts)
      .set({ status: 'FAILED', error: STOPPED_BEFORE_SENDING, updatedAt: now })
      .where(stale('QUEUED'))
      .returning({ id: deliveryAttempts.id });
    return sending.length + queued.length;
  });
}

/** What a system email's attempt says when the process stopped before its turn. */
export const STOPPED_BEFORE_SENDING = 'the process stopped before this message had its turn: it was not sent (send it again)';

export async function getDeliveryAttempt(ctx: WorkspaceContext, id: number): Promise<DeliveryAttemptView> {
  const [row] = await ctx.db
    .select()
    .from(deliveryAttempts)
    .where(inWorkspace(ctx, deliveryAttempts.workspaceId, eq(deliveryAttempts.id, id)));
  if (!row) throw new NotFoundError('delivery_attempt_not_found', `No delivery attempt with id ${id}`);
  return deliveryAttemptView(row);
}

export interface DeliveryAttemptFilter extends PageRequest {
  runId?: number | undefined;
  status?: DeliveryStatus | undefined;
}

export function listDeliveryAttempts(ctx: WorkspaceContext, filter: DeliveryAttemptFilter): Promise<Page<DeliveryAttemptView>> {
  return selectPage(
    ctx,
    deliveryAttempts,
    // One run's attempts are few: walk them (and sort them), not the workspace's.
    { ...filter, workspaceScope: filter.runId !== undefined ? 'row' : 'index' },
    deliveryAttemptView,
    filter.runId !== undefined ? eq(deliveryAttempts.runId, filter.runId) : undefined,
    filter.status !== undefined ? eq(deliveryAttempts.status, filter.status) : undefined,
  );
}

/**
 * The tries made so far for one message step of a run, oldest first: the engine reads
 * them to resume after a crash (a SENDING row without an outcome) and to number retries.
 */
export async function findAttemptsForStep(db: Db, runId: number, stepIndex: number): Promise<DeliveryAttemptView[]> {
  const rows = await db
    .select()
    .from(deliveryAttempts)
    .where(and(eq(deliveryAttempts.runId, runId), eq(deliveryAttempts.stepIndex, stepIndex)))
    .orderBy(asc(deliveryAttempts.attempt), asc(deliveryAttempts.id));
  return rows.map(deliveryAttemptView);
}

/**
 * The content of an EMAIL template of this workspace, for a test email. (Read here rather
 * than through the templates service so that test emails do not depend on its views.)
 */
export async function emailTemplateContent(ctx: WorkspaceContext, templateId: number): Promise<Record<string, unknown>> {
  const [row] = await ctx.db
    .select({ channel: templates.channel, content: templates.content })
    .from(templates)
    .where(inWorkspace(ctx, templates.workspaceId, eq(templates.id, templateId)));
  if (!row) throw new NotFoundError('template_not_found', `No template with id ${templateId}`);
  if (row.channel !== 'EMAIL') {
    throw new ValidationError('template_channel_mismatch', `Template ${templateId} is a ${row.channel} template; a test email needs an EMAIL template`, [
      { path: '/templateId', message: 'must be an EMAIL template' },
    ]);
  }
  return row.content;
}
