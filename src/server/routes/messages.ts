import { Type } from '@sinclair/typebox';
import type { DeliveryStatus } from '../../core/db/schema.js';
import { getDeliveryAttempt, listDeliveryAttempts } from '../../core/services/deliveries.js';
import { startTestEmail } from '../../engine/deliver.js';
import type { RenderPool } from '../../engine/renderPool.js';
import { closeSmtpTransports } from '../../engine/providers/smtp.js';
import type { App } from '../app.js';
import { DeliveryAttempt, DeliveryStatus as DeliveryStatusSchema, FreeObject, IdParams, PageQuery, pageOf, TestEmailAccepted } from '../schemas.js';

const read = { role: 'VIEWER' as const };
const write = { role: 'MEMBER' as const };

const TestEmailBody = Type.Object(
  {
    to: Type.String({ minLength: 1, maxLength: 320 }),
    templateId: Type.Optional(IdParams.properties.id),
    subject: Type.Optional(Type.String({ maxLength: 2000 })),
    html: Type.Optional(Type.String({ maxLength: 256 * 1024 })),
    text: Type.Optional(Type.String({ maxLength: 256 * 1024 })),
    data: Type.Optional(FreeObject),
  },
  { additionalProperties: false },
);

export async function messageRoutes(app: App, opts: { renderPool: RenderPool }): Promise<void> {
  // Test emails are sent (and retried) after the 202; closing the server stops the waiting
  // between tries and lets tries in flight finish.
  const closing = new AbortController();
  const inFlight = new Set<Promise<unknown>>();
  app.addHook('onClose', async () => {
    closing.abort();
    await Promise.allSettled(inFlight);
    closeSmtpTransports();
  });

  app.post(
    '/messages/test-email',
    { config: { access: { ...write, limit: 'render' } }, schema: { body: TestEmailBody, response: { 202: TestEmailAccepted } } },
    async (req, reply) => {
      const { accepted, done } = await startTestEmail(req.workspaceCtx(), req.body, {
        signal: closing.signal,
        render: (content, ctx) => opts.renderPool.render(content, ctx),
      });
      const tracked = done
        .then((outcome) => {
          if (outcome.status === 'FAILED') req.log.warn({ attemptId: outcome.attemptId, error: outcome.error }, 'test email not delivered');
        })
        .catch((err) => req.log.error({ err }, 'test email delivery crashed'))
        .finally(() => inFlight.delete(tracked));
      inFlight.add(tracked);
      return reply.code(202).send(accepted);
    },
  );

  app.get(
    '/messages/delivery-attempts',
    {
      config: { access: read },
      schema: {
        querystring: Type.Object(
          { ...PageQuery, runId: Type.Optional(IdParams.properties.id), status: Type.Optional(DeliveryStatusSchema) },
          { additionalProperties: false },
        ),
        response: { 200: pageOf(DeliveryAttempt) },
      },
    },
    async (req) => listDeliveryAttempts(req.workspaceCtx(), { ...req.query, status: req.query.status as DeliveryStatus | undefined }),
  );

  app.get('/messages/delivery-attempts/:id', { config: { access: read }, schema: { params: IdParams, response: { 200: DeliveryAttempt } } }, async (req) =>
    getDeliveryAttempt(req.workspaceCtx(), req.params.id),
  );
}
