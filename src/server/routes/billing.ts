import type { Config } from '../../core/config.js';
import { BadRequestError, NotFoundError } from '../../core/errors.js';
import { completeStripeCheckout, createCheckout, getPlan } from '../../core/services/billing.js';
import { STRIPE_SIGNATURE_HEADER, verifyStripeSignature } from '../../engine/stripe.js';
import type { App } from '../app.js';
import { BillingPlan, Checkout, CheckoutInput } from '../schemas.js';

interface StripeEvent {
  type?: unknown;
  data?: { object?: { id?: unknown; payment_status?: unknown; metadata?: { checkoutId?: unknown } } };
}

/** The events after which a Checkout Session may be paid (its payment_status says whether it is). */
const COMPLETING_EVENTS = new Set(['checkout.session.completed', 'checkout.session.async_payment_succeeded']);

function toCheckoutId(value: unknown): number | undefined {
  const s = typeof value === 'number' ? String(value) : typeof value === 'string' ? value : '';
  return /^[1-9][0-9]{0,15}$/.test(s) ? Number(s) : undefined;
}

/**
 * GET /billing/plan (VIEWER), POST /billing/checkout (OWNER) and the public Stripe webhook,
 * which reads its body as raw bytes so the signature covers exactly what Stripe sent.
 */
export async function billingRoutes(app: App, opts: { config: Config }): Promise<void> {
  const { config } = opts;

  app.get('/billing/plan', { config: { access: { role: 'VIEWER' } }, schema: { response: { 200: BillingPlan } } }, async (req) => getPlan(req.workspaceCtx()));

  app.post('/billing/checkout', { config: { access: { role: 'OWNER' } }, schema: { body: CheckoutInput, response: { 201: Checkout } } }, async (req, reply) =>
    reply.code(201).send(await createCheckout(req.workspaceCtx(), req.body)),
  );

  await app.register(async (hook: App) => {
    hook.removeAllContentTypeParsers();
    hook.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: config.webhookBodyLimit }, (_req, body, done) => done(null, body));

    hook.post('/billing/stripe/webhook', { bodyLimit: config.webhookBodyLimit, config: { access: 'public' } }, async (req) => {
      const secret = config.stripe.webhookSecret;
      if (config.billingProvider !== 'stripe' || !secret) throw new NotFoundError('not_found', 'Stripe billing is not enabled on this server');
      const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
      const header = req.headers[STRIPE_SIGNATURE_HEADER];
      if (!verifyStripeSignature(typeof header === 'string' ? header : undefined, raw, secret, config.stripe.toleranceSeconds)) {
        throw new BadRequestError('signature_invalid', 'The Stripe-Signature header is missing, stale or does not match the body');
      }
      let event: StripeEvent;
      try {
        event = JSON.parse(raw.toString('utf8')) as StripeEvent;
      } catch {
        throw new BadRequestError('invalid_json', 'The body is not valid JSON');
      }
      if (!event || typeof event !== 'object' || typeof event.type !== 'string' || !COMPLETING_EVENTS.has(event.type)) return { received: true, ignored: true };
      const session = event.data?.object;
      const sessionId = typeof session?.id === 'string' && session.id ? session.id : undefined;
      // A completed session is not a payment: delayed methods (bank debits) complete the
      // session as "unpaid" and pay later, in checkout.session.async_payment_succeeded.
      const paymentStatus = session?.payment_status;
      if (!sessionId || (paymentStatus !== 'paid' && paymentStatus !== 'no_payment_required')) {
        req.log.info({ type: event.type, sessionId, paymentStatus }, 'stripe checkout session not paid; plan unchanged');
        return { received: true, ignored: true };
      }
      const checkoutId = toCheckoutId(session?.metadata?.checkoutId);
      const outcome = await completeStripeCheckout(req.systemCtx({ type: 'SYSTEM', id: null, label: 'stripe' }), { sessionId, checkoutId });
      req.log.info({ type: event.type, sessionId, checkoutId, outcome }, 'stripe checkout session paid');
      return { received: true };
    });
  });
}
