import { Type } from '@sinclair/typebox';
import { createAutomation, deleteAutomation, getAutomation, listAutomations, startAutomationRun, updateAutomation } from '../../core/services/automations.js';
import { readsMasked } from '../../core/roles.js';
import type { App } from '../app.js';
import { FreeObject, IdParams, ListQuery, pageOf, RunStarted, WorkflowStatus } from '../schemas.js';

const read = { role: 'VIEWER' as const };
const write = { role: 'MEMBER' as const };

/** Where the console's editor drew a node; finite numbers within a generous canvas. */
const Coordinate = Type.Number({ minimum: -1e6, maximum: 1e6 });
const Position = Type.Object({ x: Coordinate, y: Coordinate }, { additionalProperties: false });

const Graph = Type.Object(
  {
    nodes: Type.Array(
      Type.Object(
        {
          id: Type.String({ minLength: 1, maxLength: 100 }),
          type: Type.String({ minLength: 1, maxLength: 50 }),
          data: FreeObject,
          position: Type.Optional(Position),
        },
        { additionalProperties: false },
      ),
      { maxItems: 200 },
    ),
    edges: Type.Array(
      Type.Object(
        { from: Type.String({ minLength: 1, maxLength: 100 }), to: Type.String({ minLength: 1, maxLength: 100 }), branch: Type.Optional(Type.Boolean()) },
        { additionalProperties: false },
      ),
      { maxItems: 1000 },
    ),
  },
  { additionalProperties: false },
);

export const Automation = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  status: WorkflowStatus,
  graph: Type.Object({
    nodes: Type.Array(Type.Object({ id: Type.String(), type: Type.String(), data: FreeObject, position: Type.Optional(Position) })),
    edges: Type.Array(Type.Object({ from: Type.String(), to: Type.String(), branch: Type.Optional(Type.Boolean()) })),
  }),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export async function automationRoutes(app: App): Promise<void> {
  app.get('/automations', { config: { access: read }, schema: { querystring: ListQuery, response: { 200: pageOf(Automation) } } }, async (req) =>
    listAutomations(req.workspaceCtx(), req.query, { masked: readsMasked(req.principal!.role) }),
  );

  app.post(
    '/automations',
    {
      config: { access: write },
      schema: {
        body: Type.Object(
          { name: Type.String({ minLength: 1, maxLength: 200 }), status: Type.Optional(WorkflowStatus), graph: Graph },
          { additionalProperties: false },
        ),
        response: { 201: Automation },
      },
    },
    async (req, reply) => reply.code(201).send(await createAutomation(req.workspaceCtx(), req.body)),
  );

  app.get('/automations/:id', { config: { access: read }, schema: { params: IdParams, response: { 200: Automation } } }, async (req) =>
    getAutomation(req.workspaceCtx(), req.params.id, { masked: readsMasked(req.principal!.role) }),
  );

  app.patch(
    '/automations/:id',
    {
      config: { access: write },
      schema: {
        params: IdParams,
        body: Type.Object(
          { name: Type.Optional(Type.String({ minLength: 1, maxLength: 200 })), status: Type.Optional(WorkflowStatus), graph: Type.Optional(Graph) },
          { additionalProperties: false },
        ),
        response: { 200: Automation },
      },
    },
    async (req) => updateAutomation(req.workspaceCtx(), req.params.id, req.body),
  );

  app.delete('/automations/:id', { config: { access: write }, schema: { params: IdParams } }, async (req, reply) => {
    await deleteAutomation(req.workspaceCtx(), req.params.id);
    return reply.code(204).send();
  });

  app.post(
    '/automations/:id/runs',
    {
      config: { access: { ...write, limit: 'runs' } },
      schema: {
        params: IdParams,
        body: Type.Object({ contactId: Type.Integer({ minimum: 1 }), trigger: Type.Optional(FreeObject) }, { additionalProperties: false }),
        response: { 202: RunStarted },
      },
    },
    async (req, reply) => {
      const started = await startAutomationRun(req.workspaceCtx(), req.params.id, req.body);
      app.runsQueued();
      return reply.code(202).send(started);
    },
  );
}
