import { Type } from '@sinclair/typebox';
import { listApiKeys, mintApiKey, revokeApiKey } from '../../core/services/apiKeys.js';
import type { App } from '../app.js';
import { ApiKey, IdParams, ListQuery, MintedApiKey, pageOf, Role } from '../schemas.js';

const admin = { role: 'ADMIN' as const };

export async function apiKeyRoutes(app: App): Promise<void> {
  app.get('/api-keys', { config: { access: admin }, schema: { querystring: ListQuery, response: { 200: pageOf(ApiKey) } } }, async (req) =>
    listApiKeys(req.workspaceCtx(), req.query),
  );

  app.post(
    '/api-keys',
    {
      config: { access: admin },
      schema: {
        body: Type.Object(
          {
            name: Type.String({ minLength: 1, maxLength: 100 }),
            role: Type.Union(Role.anyOf, { description: 'OWNER is refused (422 `role_not_mintable`): it comes only with a membership' }),
          },
          { additionalProperties: false },
        ),
        response: { 201: MintedApiKey },
      },
    },
    async (req, reply) => reply.code(201).send(await mintApiKey(req.workspaceCtx(), req.body, req.principal!.role)),
  );

  app.delete('/api-keys/:id', { config: { access: admin }, schema: { params: IdParams } }, async (req, reply) => {
    await revokeApiKey(req.workspaceCtx(), req.params.id);
    return reply.code(204).send();
  });
}
