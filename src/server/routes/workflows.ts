import { Type } from '@sinclair/typebox';
import { readsMasked } from '../../core/roles.js';
import { getRun, listRuns, listWorkspaceRuns } from '../../core/services/runs.js';
import { listWebhookEvents, replayWebhookEvent } from '../../core/services/webhooks.js';
import { createWorkflow, getWorkflow, listWorkflows, updateWorkflow } from '../../core/services/workflows.js';
import type { App } from '../app.js';
import {
  ContactDefaults,
  FreeObject,
  IdParams,
  ListQuery,
  LookupKind,
  Nullable,
  PageQuery,
  pageOf,
  Run,
  RunStarted,
  RunStatus,
  TriggerSource,
  WebhookEvent,
  Workflow,
  WorkflowStatus,
} from '../schemas.js';

const read = { role: 'VIEWER' as const };
const write = { role: 'MEMBER' as const };

const WebhookInput = Type.Object(
  {
    lookup: Type.Optional(Nullable(LookupKind)),
    path: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 256 }))),
    createIfNotFound: Type.Optional(Type.Boolean()),
    defaults: Type.Optional(ContactDefaults),
    signingSecret: Type.Optional(Nullable(Type.String({ minLength: 16, maxLength: 512, description: 'Write-only; at least 16 characters; null removes it' }))),
  },
  { additionalProperties: false },
);

const workflowFields = {
  status: Type.Optional(WorkflowStatus),
  triggerSource: Type.Optional(TriggerSource),
  steps: Type.Optional(Type.Array(FreeObject, { maxItems: 100 })),
  webhook: Type.Optional(WebhookInput),
};

const RunParams = Type.Object({ runId: IdParams.properties.id });

export async function workflowRoutes(app: App): Promise<void> {
  app.get('/workflows', { config: { access: read }, schema: { querystring: ListQuery, response: { 200: pageOf(Workflow) } } }, async (req) =>
    listWorkflows(req.workspaceCtx(), req.query, { masked: readsMasked(req.principal!.role) }),
  );

  app.post(
    '/workflows',
    {
      config: { access: write },
      schema: {
        body: Type.Object({ name: Type.String({ minLength: 1, maxLength: 200 }), ...workflowFields }, { additionalProperties: false }),
        response: { 201: Workflow },
      },
    },
    async (req, reply) => reply.code(201).send(await createWorkflow(req.workspaceCtx(), req.body)),
  );

  app.get('/workflows/:id', { config: { access: read }, schema: { params: IdParams, response: { 200: Workflow } } }, async (req) =>
    getWorkflow(req.workspaceCtx(), req.params.id, { masked: readsMasked(req.principal!.role) }),
  );

  app.patch(
    '/workflows/:id',
    {
      config: { access: write },
      schema: {
        params: IdParams,
        body: Type.Object({ name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })), ...workflowFields }, { additionalProperties: false }),
        response: { 200: Workflow },
      },
    },
    async (req) => updateWorkflow(req.workspaceCtx(), req.params.id, req.body),
  );

  app.get(
    '/workflows/:id/runs',
    {
      config: { access: read },
      schema: {
        params: IdParams,
        querystring: Type.Object({ ...PageQuery, status: Type.Optional(RunStatus) }, { additionalProperties: false }),
        response: { 200: pageOf(Run) },
      },
    },
    async (req) => listRuns(req.workspaceCtx(), req.params.id, req.query as Parameters<typeof listRuns>[2]),
  );

  // Every run of the workspace (the console's run list), newest first, with filters.
  app.get(
    '/runs',
    {
      config: { access: read },
      schema: {
        querystring: Type.Object(
          {
            ...PageQuery,
            status: Type.Optional(RunStatus),
            workflowId: Type.Optional(IdParams.properties.id),
            automationId: Type.Optional(IdParams.properties.id),
            contactId: Type.Optional(IdParams.properties.id),
          },
          { additionalProperties: false },
        ),
        response: { 200: pageOf(Run) },
      },
    },
    async (req) => listWorkspaceRuns(req.workspaceCtx(), req.query as Parameters<typeof listWorkspaceRuns>[1]),
  );

  app.get('/runs/:runId', { config: { access: read }, schema: { params: RunParams, response: { 200: Run } } }, async (req) =>
    getRun(req.workspaceCtx(), req.params.runId),
  );

  app.get(
    '/workflows/:id/webhook-events',
    { config: { access: read }, schema: { params: IdParams, querystring: ListQuery, response: { 200: pageOf(WebhookEvent) } } },
    async (req) => listWebhookEvents(req.workspaceCtx(), req.params.id, req.query),
  );

  app.post(
    '/webhook-events/:id/replay',
    {
      config: { access: { ...write, limit: 'runs' } },
      // It takes no body: one may be left out or be {}, but a field in it is refused, not ignored.
      schema: { params: IdParams, body: Type.Object({}, { additionalProperties: false }), response: { 202: RunStarted } },
      preValidation: async (req) => {
        req.body ??= {};
      },
    },
    async (req, reply) => {
      const started = await replayWebhookEvent(req.workspaceCtx(), req.params.id);
      app.runsQueued();
      return reply.code(202).send(started);
    },
  );
}
