import { Type, type TSchema } from '@sinclair/typebox';
import { DEFAULT_LIMIT, MAX_LIMIT } from '../core/pagination.js';

export const Nullable = <T extends TSchema>(schema: T) => Type.Union([schema, Type.Null()]);

export const IdParams = Type.Object({ id: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }) });

export const PageQuery = {
  limit: Type.Integer({ minimum: 1, maximum: MAX_LIMIT, default: DEFAULT_LIMIT }),
  cursor: Type.Optional(Type.String({ maxLength: 200 })),
};

export const ListQuery = Type.Object(PageQuery, { additionalProperties: false });

export const pageOf = <T extends TSchema>(item: T) => Type.Object({ data: Type.Array(item), nextCursor: Nullable(Type.String()) });

export const Role = Type.Union([Type.Literal('VIEWER'), Type.Literal('MEMBER'), Type.Literal('ADMIN'), Type.Literal('OWNER')]);
export const Plan = Type.Union([Type.Literal('STARTER'), Type.Literal('GROWTH'), Type.Literal('PRO')]);

export const FreeObject = Type.Object({}, { additionalProperties: true });

export const User = Type.Object({ id: Type.Integer(), email: Type.String(), name: Nullable(Type.String()), isSuperAdmin: Type.Boolean() });

export const Contact = Type.Object({
  id: Type.Integer(),
  email: Nullable(Type.String()),
  phone: Nullable(Type.String()),
  firstName: Nullable(Type.String()),
  lastName: Nullable(Type.String()),
  attributes: FreeObject,
  tags: Type.Array(Type.String()),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const ApiKey = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  role: Role,
  prefix: Type.String(),
  createdAt: Type.String(),
  lastUsedAt: Nullable(Type.String()),
  revokedAt: Nullable(Type.String()),
});

export const MintedApiKey = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  role: Role,
  key: Type.String(),
  prefix: Type.String(),
  createdAt: Type.String(),
});
