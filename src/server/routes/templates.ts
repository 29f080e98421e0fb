import { Type } from '@sinclair/typebox';
import type { WorkspaceContext } from '../../core/context.js';
import { ValidationError } from '../../core/errors.js';
import { getContact } from '../../core/services/contacts.js';
import { createTemplate, deleteTemplate, getTemplate, listTemplates, updateTemplate } from '../../core/services/templates.js';
import { getWorkspace } from '../../core/services/workspaces.js';
import { jsonDepthExceeds, MAX_JSON_DEPTH } from '../../core/validation.js';
import { RenderError, type RenderContext } from '../../engine/render.js';
import type { RenderPool } from '../../engine/renderPool.js';
import type { App } from '../app.js';
import { FreeObject, IdParams, PageQuery, pageOf, Template, TemplateChannel, TemplatePreview } from '../schemas.js';

const read = { role: 'VIEWER' as const };
const write = { role: 'MEMBER' as const };

const Name = Type.String({ minLength: 1, maxLength: 200 });

const PreviewBody = Type.Object({ contactId: Type.Optional(IdParams.properties.id), trigger: Type.Optional(FreeObject) }, { additionalProperties: false });

/**
 * Renders a template as a run would: the same variables (a contact as the engine sees it,
 * the given trigger body, the workspace), with run = null since no run exists.
 */
async function previewTemplate(
  ctx: WorkspaceContext,
  renderPool: RenderPool,
  id: number,
  input: { contactId?: number | undefined; trigger?: Record<string, unknown> | undefined },
) {
  const template = await getTemplate(ctx, id);
  const trigger = input.trigger ?? {};
  if (jsonDepthExceeds(trigger, MAX_JSON_DEPTH)) {
    throw new ValidationError('validation_failed', 'The trigger is invalid', [
      { path: '/trigger', message: `must nest at most ${MAX_JSON_DEPTH} levels deep` },
    ]);
  }
  let contact: Record<string, unknown> = {};
  if (input.contactId !== undefined) {
    const { id: contactId, email, phone, firstName, lastName, attributes, tags } = await getContact(ctx, input.contactId);
    contact = { id: contactId, email, phone, firstName, lastName, attributes, tags };
  }
  const { id: workspaceId, name, plan } = await getWorkspace(ctx, ctx.workspaceId);
  const renderCtx: RenderContext = { contact, trigger, workspace: { id: workspaceId, name, plan }, run: null };
  try {
    return { channel: template.channel, rendered: await renderPool.render(template.content, renderCtx) };
  } catch (err) {
    if (!(err instanceof RenderError)) throw err;
    throw new ValidationError('template_render_error', `The template could not be rendered: ${err.message}`, [
      { path: `/content${err.path ?? ''}`, message: err.message },
    ]);
  }
}

export async function templateRoutes(app: App, opts: { renderPool: RenderPool }): Promise<void> {
  app.get(
    '/templates',
    {
      config: { access: read },
      schema: {
        querystring: Type.Object({ ...PageQuery, channel: Type.Optional(TemplateChannel) }, { additionalProperties: false }),
        response: { 200: pageOf(Template) },
      },
    },
    async (req) => listTemplates(req.workspaceCtx(), req.query),
  );

  app.post(
    '/templates',
    {
      config: { access: write },
      schema: {
        body: Type.Object({ name: Name, channel: TemplateChannel, content: FreeObject }, { additionalProperties: false }),
        response: { 201: Template },
      },
    },
    async (req, reply) => reply.code(201).send(await createTemplate(req.workspaceCtx(), req.body)),
  );

  app.get('/templates/:id', { config: { access: read }, schema: { params: IdParams, response: { 200: Template } } }, async (req) =>
    getTemplate(req.workspaceCtx(), req.params.id),
  );

  app.patch(
    '/templates/:id',
    {
      config: { access: write },
      schema: {
        params: IdParams,
        body: Type.Object(
          { name: Type.Optional(Name), channel: Type.Optional(TemplateChannel), content: Type.Optional(FreeObject) },
          { additionalProperties: false },
        ),
        response: { 200: Template },
      },
    },
    async (req) => updateTemplate(req.workspaceCtx(), req.params.id, req.body),
  );

  app.delete(
    '/templates/:id',
    {
      config: { access: write },
      schema: {
        description:
          'Deletes a template. Refused with 409 `template_in_use` while an ACTIVE workflow or automation has a send step naming it (the `detail` names them); DRAFT and PAUSED ones do not hold it, as activating them checks their templates again.',
        params: IdParams,
      },
    },
    async (req, reply) => {
      await deleteTemplate(req.workspaceCtx(), req.params.id);
      return reply.code(204).send();
    },
  );

  // VIEWER may preview: it renders, and changes nothing. Every field is optional, so a
  // POST with no body at all previews with an empty contact and trigger.
  app.post(
    '/templates/:id/preview',
    {
      config: { access: { ...read, limit: 'render' } },
      schema: { params: IdParams, body: PreviewBody, response: { 200: TemplatePreview } },
      preValidation: async (req) => {
        if (req.body === undefined) req.body = {};
      },
    },
    async (req) => previewTemplate(req.workspaceCtx(), opts.renderPool, req.params.id, req.body),
  );
}
