import { and, count, eq, isNull } from 'drizzle-orm';
import { createCheckoutSession, StripeError } from '../../engine/stripe.js';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, withTransaction, type SystemContext, type WorkspaceContext } from '../context.js';
import { apiKeys, checkouts, memberships, runMonthCounts, templates, workflows, workspaceCounters, type Plan, type Role } from '../db/schema.js';
import { AppError, ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { minimumPlanForKeyRole, planAtLeast } from '../roles.js';
import { getWorkspace, setWorkspacePlan } from './workspaces.js';
import { assertNotSandbox } from './sandbox.js';

export type PaidPlan = Exclude<Plan, 'STARTER'>;

export interface PlanFeatures {
  auditLog: boolean;
  apiKeyRoles: Role[];
}

export interface PlanView {
  plan: Plan;
  features: PlanFeatures;
  usage: { contacts: number; workflows: number; templates: number; apiKeys: number; members: number; runsThisMonth: number };
}

export interface CheckoutView {
  checkoutId: number;
  plan: Plan;
  status: 'PENDING' | 'COMPLETED' | 'EXPIRED';
  url: string | null;
}

export interface CompletedCheckout {
  workspaceId: number;
  plan: Plan;
}

const KEY_ROLES: Role[] = ['VIEWER', 'MEMBER', 'ADMIN'];

export function featuresOf(plan: Plan): PlanFeatures {
  return {
    auditLog: planAtLeast(plan, 'GROWTH'),
    apiKeyRoles: KEY_ROLES.filter((r) => planAtLeast(plan, minimumPlanForKeyRole(r))),
  };
}

function startOfMonthIso(now = new Date()): string {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)).toISOString();
}

/** The workspace's contacts, from the counter triggers keep (migration 0008): no count of the table. */
export async function contactCount(ctx: WorkspaceContext): Promise<number> {
  const [row] = await ctx.db.select({ n: workspaceCounters.contacts }).from(workspaceCounters).where(inWorkspace(ctx, workspaceCounters.workspaceId));
  return row?.n ?? 0;
}

export async function getPlan(ctx: WorkspaceContext): Promise<PlanView> {
  const { plan } = await getWorkspace(ctx, ctx.workspaceId);
  const n = async (q: PromiseLike<{ n: number }[]>) => (await q)[0]?.n ?? 0;
  return {
    plan,
    features: featuresOf(plan),
    usage: {
      // Contacts and runs are counted by triggers as rows come and go (migration 0008): a
      // million contacts would otherwise be counted on every call.
      contacts: await contactCount(ctx),
      workflows: await n(ctx.db.select({ n: count() }).from(workflows).where(inWorkspace(ctx, workflows.workspaceId))),
      templates: await n(ctx.db.select({ n: count() }).from(templates).where(inWorkspace(ctx, templates.workspaceId))),
      apiKeys: await n(
        ctx.db
          .select({ n: count() })
          .from(apiKeys)
          .where(inWorkspace(ctx, apiKeys.workspaceId, isNull(apiKeys.revokedAt))),
      ),
      members: await n(ctx.db.select({ n: count() }).from(memberships).where(inWorkspace(ctx, memberships.workspaceId))),
      runsThisMonth: await n(
        ctx.db
          .select({ n: runMonthCounts.runs })
          .from(runMonthCounts)
          .where(inWorkspace(ctx, runMonthCounts.workspaceId, eq(runMonthCounts.month, startOfMonthIso().slice(0, 7)))),
      ),
    },
  };
}

function checkoutView(row: typeof checkouts.$inferSelect): CheckoutView {
  return { checkoutId: row.id, plan: row.plan, status: row.status, url: row.url };
}

/**
 * Starts an upgrade or change to a paid plan. With the manual provider the checkout waits
 * for an operator (`svc checkout complete ID`); with Stripe a Checkout Session is created
 * first and its URL returned. A Stripe failure leaves nothing behind and answers 502.
 */
export async function createCheckout(ctx: WorkspaceContext, input: { plan: PaidPlan }): Promise<CheckoutView> {
  const { config } = ctx;
  await assertNotSandbox(ctx.db, ctx.workspaceId, 'A checkout');
  const current = (await getWorkspace(ctx, ctx.workspaceId)).plan;
  if (input.plan === current) {
    throw new ValidationError('plan_unchanged', `This workspace is already on ${current}`, [
      { path: '/plan', message: `must differ from the current plan ${current}` },
    ]);
  }
  const provider = config.billingProvider;
  const price = provider === 'stripe' ? config.stripe.prices[input.plan] : null;
  if (provider === 'stripe' && (!config.stripe.secretKey || !price)) {
    throw new AppError(
      503,
      'billing_not_configured',
      `Stripe billing is not fully configured on this server (secret key and a price for ${input.plan} are needed)`,
    );
  }
  const createdBy = ctx.actor.type === 'USER' ? ctx.actor.id : null;
  // Its own transaction, committed before Stripe is called: no transaction waits on HTTP.
  const row = await withTransaction(ctx, async (tx) => {
    const [inserted] = await tx.db.insert(checkouts).values({ workspaceId: ctx.workspaceId, plan: input.plan, provider, createdBy }).returning();
    if (!inserted) throw new Error('the insert returned no row');
    return inserted;
  });

  let providerRef: string | null = null;
  let url: string | null = null;
  if (provider === 'stripe') {
    try {
      const session = await createCheckoutSession(config, {
        checkoutId: row.id,
        price: price!,
        // Stripe sends the payer back to the console's Billing page, which shows the plan once the
        // signed webhook has changed it.
        successUrl: `${config.publicUrl}/app/settings/billing?checkout=${row.id}`,
        cancelUrl: `${config.publicUrl}/app/settings/billing?checkout=${row.id}&cancelled=1`,
      });
      providerRef = session.id;
      url = session.url;
    } catch (err) {
      await withTransaction(ctx, async (tx) => {
        await tx.db.delete(checkouts).where(eq(checkouts.id, row.id));
      });
      if (err instanceof StripeError) throw new AppError(502, 'payment_provider_error', 'The payment provider could not create a checkout; try again later');
      throw err;
    }
  }

  return withTransaction(ctx, async (tx) => {
    const updated = (await tx.db.update(checkouts).set({ providerRef, url }).where(eq(checkouts.id, row.id)).returning())[0]!;
    await recordAudit(tx, {
      workspaceId: ctx.workspaceId,
      action: 'billing.checkout_created',
      target: { type: 'checkout', id: row.id },
      metadata: { plan: input.plan, from: current, provider, ...(providerRef ? { providerRef } : {}) },
    });
    return checkoutView(updated);
  });
}

/**
 * Inside the caller's transaction: marks the checkout COMPLETED and changes the plan through
 * setWorkspacePlan (audited). That opens its own transaction, so it gets the root context: on
 * the same connection it becomes a savepoint of the caller's transaction.
 */
async function complete(root: SystemContext, tx: SystemContext, row: typeof checkouts.$inferSelect): Promise<CompletedCheckout> {
  await tx.db.update(checkouts).set({ status: 'COMPLETED', completedAt: nowIso() }).where(eq(checkouts.id, row.id));
  const w = await setWorkspacePlan(root, row.workspaceId, row.plan);
  await recordAudit(tx, {
    workspaceId: row.workspaceId,
    action: 'billing.checkout_completed',
    target: { type: 'checkout', id: row.id },
    metadata: { plan: row.plan, provider: row.provider, ...(row.providerRef ? { providerRef: row.providerRef } : {}) },
  });
  return { workspaceId: w.id, plan: w.plan };
}

/** The operator completes a manual checkout (`svc checkout complete`); a second time is refused. */
export async function completeManualCheckout(ctx: SystemContext, checkoutId: number): Promise<CompletedCheckout> {
  return withTransaction(ctx, async (tx) => {
    const [row] = await tx.db.select().from(checkouts).where(eq(checkouts.id, checkoutId));
    if (!row) throw new NotFoundError('checkout_not_found', `No checkout with id ${checkoutId}`);
    if (row.provider !== 'manual')
      throw new ValidationError('checkout_not_manual', `Checkout ${checkoutId} is paid through ${row.provider}; it completes on the provider's webhook`);
    if (row.status !== 'PENDING') throw new ConflictError('checkout_not_pending', `Checkout ${checkoutId} is already ${row.status}`);
    return await complete(ctx, tx, row);
  });
}

/**
 * A paid Stripe Checkout Session: completes the checkout whose stored session id it is.
 * Only when that checkout has no session id stored yet (the webhook overtook the answer
 * that carried it) is it found by `metadata.checkoutId`, which only svc's own secret key
 * can set; never by `client_reference_id`, which a Payment Link lets any buyer choose.
 * Idempotent: a replayed or unknown event changes nothing. Returns what it did, for the log.
 */
export async function completeStripeCheckout(
  ctx: SystemContext,
  ref: { sessionId: string; checkoutId?: number | undefined },
): Promise<'completed' | 'already_completed' | 'not_found'> {
  return withTransaction(ctx, async (tx) => {
    let [row] = await tx.db
      .select()
      .from(checkouts)
      .where(and(eq(checkouts.provider, 'stripe'), eq(checkouts.providerRef, ref.sessionId)))
      .limit(1);
    if (!row && ref.checkoutId) {
      [row] = await tx.db
        .select()
        .from(checkouts)
        .where(and(eq(checkouts.provider, 'stripe'), eq(checkouts.id, ref.checkoutId), isNull(checkouts.providerRef)));
    }
    if (!row) return 'not_found';
    if (row.status !== 'PENDING') return 'already_completed';
    await complete(ctx, tx, row);
    return 'completed';
  });
}
