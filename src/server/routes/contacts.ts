import { Type } from '@sinclair/typebox';
import {
  addTags,
  CONTACT_FIELD_MAX_LENGTH,
  createContact,
  deleteContact,
  getContact,
  listContacts,
  listTags,
  removeTag,
  TAG_CURSOR_MAX_LENGTH,
  TAG_MAX_LENGTH,
  TAGS_PER_WRITE_MAX,
  updateContact,
} from '../../core/services/contacts.js';
import type { App } from '../app.js';
import { Contact, FreeObject, IdParams, Nullable, PageQuery, pageOf } from '../schemas.js';

const read = { role: 'VIEWER' as const };
const write = { role: 'MEMBER' as const };

const TagName = Type.String({ minLength: 1, maxLength: TAG_MAX_LENGTH });
const limit = CONTACT_FIELD_MAX_LENGTH;
const contactFields = {
  email: Type.Optional(Nullable(Type.String({ maxLength: limit.email }))),
  phone: Type.Optional(Nullable(Type.String({ maxLength: limit.phone }))),
  firstName: Type.Optional(Nullable(Type.String({ maxLength: limit.firstName }))),
  lastName: Type.Optional(Nullable(Type.String({ maxLength: limit.lastName }))),
  attributes: Type.Optional(FreeObject),
};

export async function contactRoutes(app: App): Promise<void> {
  app.get(
    '/contacts',
    {
      config: { access: read },
      schema: {
        description:
          'Contacts, newest first, filtered by tag, email, phone or q (a substring of email, phone or name). A page that checks filters row by row (a one- or two-character q, or a tag with a q) examines at most 10,000 rows and may end early, short or empty, with a nextCursor: follow nextCursor until it is null to see every match.',
        querystring: Type.Object(
          {
            ...PageQuery,
            tag: Type.Optional(Type.String({ maxLength: 64 })),
            email: Type.Optional(Type.String({ maxLength: 320 })),
            phone: Type.Optional(Type.String({ maxLength: 64 })),
            q: Type.Optional(Type.String({ maxLength: 200 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: pageOf(Contact) },
      },
    },
    async (req) => listContacts(req.workspaceCtx(), req.query),
  );

  app.post(
    '/contacts',
    {
      config: { access: write },
      schema: {
        body: Type.Object({ ...contactFields, tags: Type.Optional(Type.Array(TagName, { maxItems: TAGS_PER_WRITE_MAX })) }, { additionalProperties: false }),
        response: { 201: Contact },
      },
    },
    async (req, reply) => reply.code(201).send(await createContact(req.workspaceCtx(), req.body)),
  );

  app.get('/contacts/:id', { config: { access: read }, schema: { params: IdParams, response: { 200: Contact } } }, async (req) =>
    getContact(req.workspaceCtx(), req.params.id),
  );

  app.patch(
    '/contacts/:id',
    {
      config: { access: write },
      schema: { params: IdParams, body: Type.Object(contactFields, { additionalProperties: false }), response: { 200: Contact } },
    },
    async (req) => updateContact(req.workspaceCtx(), req.params.id, req.body),
  );

  app.delete('/contacts/:id', { config: { access: write }, schema: { params: IdParams } }, async (req, reply) => {
    await deleteContact(req.workspaceCtx(), req.params.id);
    return reply.code(204).send();
  });

  app.post(
    '/contacts/:id/tags',
    {
      config: { access: write },
      schema: {
        params: IdParams,
        body: Type.Object({ tags: Type.Array(TagName, { minItems: 1, maxItems: TAGS_PER_WRITE_MAX }) }, { additionalProperties: false }),
        response: { 200: Contact },
      },
    },
    async (req) => addTags(req.workspaceCtx(), req.params.id, req.body.tags),
  );

  app.delete(
    '/contacts/:id/tags/:tag',
    { config: { access: write }, schema: { params: Type.Object({ id: IdParams.properties.id, tag: TagName }) } },
    async (req, reply) => {
      await removeTag(req.workspaceCtx(), req.params.id, req.params.tag);
      return reply.code(204).send();
    },
  );

  // Paged like every list, by a cursor on the tag's name (case-insensitive order), not by id.
  app.get(
    '/tags',
    {
      config: { access: read },
      schema: {
        querystring: Type.Object(
          { limit: PageQuery.limit, cursor: Type.Optional(Type.String({ maxLength: TAG_CURSOR_MAX_LENGTH })) },
          { additionalProperties: false },
        ),
        response: { 200: pageOf(Type.Object({ name: Type.String(), count: Type.Integer() })) },
      },
    },
    async (req) => listTags(req.workspaceCtx(), req.query),
  );
}
