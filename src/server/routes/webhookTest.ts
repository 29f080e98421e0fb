import { Type } from '@sinclair/typebox';
import { testWebhook } from '../../core/services/webhookTest.js';
import type { App } from '../app.js';
import { IdParams, Nullable } from '../schemas.js';

const WebhookTestResult = Type.Object({
  wouldAccept: Type.Boolean(),
  status: Type.Integer(),
  code: Nullable(Type.String()),
  detail: Nullable(Type.String()),
  active: Type.Boolean(),
  signatureRequired: Type.Boolean(),
  signatureHeader: Type.String(),
  lookup: Nullable(
    Type.Object({
      kind: Type.Union([Type.Literal('email'), Type.Literal('phone'), Type.Literal('contactId')]),
      path: Type.String(),
      value: Type.Union([Type.String(), Type.Integer()]),
    }),
  ),
  contact: Nullable(
    Type.Object({
      outcome: Type.Union([Type.Literal('existing'), Type.Literal('created'), Type.Literal('missing')]),
      id: Nullable(Type.Integer()),
      email: Nullable(Type.String()),
      phone: Nullable(Type.String()),
      firstName: Nullable(Type.String()),
      lastName: Nullable(Type.String()),
    }),
  ),
});

/** A dry run of the inbound webhook for the console's "Test payload" panel: nothing is written. */
export async function webhookTestRoutes(app: App): Promise<void> {
  app.post(
    '/workflows/:id/webhook/test',
    {
      // U+0000 in the body is a real POST's to judge (at its lookup, or nowhere), as a real POST does.
      config: { access: { role: 'MEMBER' }, nulInBody: true },
      schema: {
        summary: 'Dry-run a webhook body: what a real POST would do, writing nothing',
        params: IdParams,
        // `body` is any JSON value, so that a non-object is reported as a real POST would refuse it.
        body: Type.Object({ body: Type.Unknown() }, { additionalProperties: false, required: ['body'] }),
        response: { 200: WebhookTestResult },
      },
    },
    async (req) => testWebhook(req.workspaceCtx(), req.params.id, req.body.body),
  );
}
