import { Type } from '@sinclair/typebox';
import type { App } from '../app.js';
import { RunStarted } from '../schemas.js';
import { WEBHOOK_ROUTE, type WebhookIngress } from '../webhookIngress.js';

/**
 * POST /v1/webhooks/in/:token in Fastify's route table, for the OpenAPI document and for
 * requests Fastify routes itself (app.inject): answered by the same ingress the server hands
 * webhook requests to directly (webhookIngress.ts), taken over before the body is read. An
 * empty, over-long or multi-segment token is routed here too (see webhookUrlForRouting in
 * app.ts), so it is counted and answered like any unknown token.
 */
export async function webhookRoutes(app: App, opts: { ingress: WebhookIngress }): Promise<void> {
  app.post(
    WEBHOOK_ROUTE,
    {
      config: { access: 'public' },
      schema: { params: Type.Object({ token: Type.String() }), response: { 202: RunStarted } },
      onRequest: (req, reply) => {
        reply.hijack();
        opts.ingress.handle(req.raw, reply.raw, {
          id: req.id,
          log: req.log,
          answered: (problemCode, headers) => {
            reply.problemCode = problemCode;
            reply.headers(headers);
          },
        });
      },
    },
    // Never reached: the request was answered in onRequest.
    async () => undefined,
  );
}
