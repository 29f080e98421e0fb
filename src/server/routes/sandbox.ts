import { Type } from '@sinclair/typebox';
import { ensureSandbox, getSandbox, listSandboxRequests } from '../../core/services/sandbox.js';
import { readsMasked } from '../../core/roles.js';
import type { App } from '../app.js';
import { ListQuery, pageOf, Plan } from '../schemas.js';

const Sandbox = Type.Object({
  id: Type.Integer(),
  liveWorkspaceId: Type.Integer(),
  name: Type.String(),
  plan: Plan,
  baseUrl: Type.String({ description: 'The sandbox base address (SVC_SANDBOX_URL): its webhook URLs are minted under it' }),
  createdAt: Type.String(),
});

const SandboxResult = Type.Object({
  ...Sandbox.properties,
  created: Type.Boolean({ description: 'The sandbox was created by this call' }),
  reset: Type.Boolean({ description: 'The sandbox data was deleted by this call' }),
});

const SandboxRequest = Type.Object({
  id: Type.Integer(),
  runId: Type.Union([Type.Integer(), Type.Null()]),
  stepIndex: Type.Union([Type.Integer(), Type.Null()]),
  method: Type.String(),
  url: Type.String(),
  headers: Type.Record(Type.String(), Type.String()),
  body: Type.Union([Type.String(), Type.Null()]),
  createdAt: Type.String(),
});

/**
 * The sandbox twin of the caller's workspace. Called from inside a sandbox (a `svc_test_`
 * key, a session switched into it), these act on that sandbox.
 */
export async function sandboxRoutes(app: App): Promise<void> {
  app.post(
    '/sandbox',
    {
      config: { access: { role: 'ADMIN' } },
      schema: {
        summary: 'Create or reset the sandbox',
        description:
          "Creates the workspace's sandbox (201), or answers the existing one (200); with `reset: true` deletes its data and keeps its id and keys (200).",
        body: Type.Object({ reset: Type.Optional(Type.Boolean()) }, { additionalProperties: false }),
        response: { 200: SandboxResult, 201: SandboxResult },
      },
      // The body is optional: no body is `{}` (create, or answer the existing sandbox).
      preValidation: async (req) => {
        req.body ??= {};
      },
    },
    async (req, reply) => {
      const ctx = req.workspaceCtx();
      const result = await ensureSandbox(ctx, ctx.workspaceId, { reset: req.body.reset === true });
      return reply.code(result.created ? 201 : 200).send({ ...result.sandbox, created: result.created, reset: result.reset });
    },
  );

  app.get('/sandbox', { config: { access: { role: 'VIEWER' } }, schema: { summary: 'Get the sandbox', response: { 200: Sandbox } } }, async (req) => {
    const ctx = req.workspaceCtx();
    return getSandbox(ctx, ctx.workspaceId);
  });

  app.get(
    '/sandbox/requests',
    {
      config: { access: { role: 'VIEWER' } },
      schema: {
        summary: 'List recorded http_request steps',
        description: "What the http_request steps of this sandbox's runs would have sent: recorded, never sent. Empty in a live workspace.",
        querystring: ListQuery,
        response: { 200: pageOf(SandboxRequest) },
      },
    },
    async (req) => listSandboxRequests(req.workspaceCtx(), req.query, { masked: readsMasked(req.principal!.role) }),
  );
}
