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

export const LookupKind = Type.Union([Type.Literal('email'), Type.Literal('phone'), Type.Literal('contactId')]);
export const WorkflowStatus = Type.Union([Type.Literal('DRAFT'), Type.Literal('ACTIVE'), Type.Literal('PAUSED')]);
export const TriggerSource = Type.Union([Type.Literal('WEBHOOK'), Type.Literal('MANUAL')]);

export const ContactDefaults = Type.Object(
  {
    firstName: Type.Optional(Type.String({ maxLength: 200 })),
    lastName: Type.Optional(Type.String({ maxLength: 200 })),
    attributes: Type.Optional(FreeObject),
    tags: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 100 })),
  },
  { additionalProperties: false },
);

export const Workflow = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  status: WorkflowStatus,
  triggerSource: TriggerSource,
  steps: Type.Array(FreeObject),
  webhook: Type.Object({
    url: Nullable(Type.String()),
    lookup: Nullable(LookupKind),
    path: Nullable(Type.String()),
    createIfNotFound: Type.Boolean(),
    defaults: ContactDefaults,
    hasSigningSecret: Type.Boolean(),
  }),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const RunStatus = Type.Union(['QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED'].map((s) => Type.Literal(s)));

export const Run = Type.Object({
  runId: Type.Integer(),
  workflowId: Nullable(Type.Integer()),
  automationId: Nullable(Type.Integer()),
  contactId: Nullable(Type.Integer()),
  status: RunStatus,
  steps: Type.Array(
    Type.Object({
      index: Type.Integer(),
      /** For an automation's run: the graph node of this step. */
      nodeId: Type.Optional(Type.String()),
      type: Type.String(),
      status: Type.String(),
      startedAt: Nullable(Type.String()),
      finishedAt: Nullable(Type.String()),
      error: Type.Optional(Type.String()),
    }),
  ),
  trigger: FreeObject,
  createdAt: Type.String(),
  updatedAt: Type.String(),
  finishedAt: Nullable(Type.String()),
});

export const WebhookEvent = Type.Object({
  id: Type.Integer(),
  workflowId: Type.Integer(),
  receivedAt: Type.String(),
  statusCode: Type.Integer(),
  code: Nullable(Type.String()),
  runId: Nullable(Type.Integer()),
  contactId: Nullable(Type.Integer()),
  sourceIp: Nullable(Type.String()),
  contentType: Nullable(Type.String()),
  idempotencyKey: Nullable(Type.String()),
  body: Type.Unknown(),
  bodyText: Nullable(Type.String()),
  bodySize: Nullable(Type.Integer()),
  bodyTruncated: Type.Boolean(),
  bodySha256: Nullable(Type.String()),
});

export const RunStarted = Type.Object({ runId: Type.Integer(), contactId: Type.Integer() });

export const TemplateChannel = Type.Union([Type.Literal('EMAIL'), Type.Literal('SMS'), Type.Literal('WHATSAPP')]);

export const Template = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  channel: TemplateChannel,
  content: FreeObject,
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const TemplatePreview = Type.Object({ channel: TemplateChannel, rendered: FreeObject });

export const ChannelName = Type.Union([Type.Literal('EMAIL'), Type.Literal('SMS'), Type.Literal('WHATSAPP')]);
export const ProviderName = Type.Union([Type.Literal('outbox'), Type.Literal('smtp'), Type.Literal('twilio'), Type.Literal('whatsapp')]);

/** One channel's provider as shown: credentials are never part of it, only whether some are set. */
export const ChannelSetting = Type.Object({ provider: ProviderName, settings: FreeObject, hasCredentials: Type.Boolean() });
export const ChannelSettings = Type.Object({ EMAIL: ChannelSetting, SMS: ChannelSetting, WHATSAPP: ChannelSetting });

/** Per-provider fields are checked by the channels service, which names the offending path. */
const ChannelSettingInput = Type.Object(
  { provider: Type.String({ maxLength: 32 }), settings: Type.Optional(FreeObject), credentials: Type.Optional(FreeObject) },
  { additionalProperties: false },
);
export const ChannelSettingsInput = Type.Object(
  { EMAIL: Type.Optional(ChannelSettingInput), SMS: Type.Optional(ChannelSettingInput), WHATSAPP: Type.Optional(ChannelSettingInput) },
  { additionalProperties: false },
);

export const DeliveryStatus = Type.Union(['QUEUED', 'SENDING', 'SENT', 'FAILED'].map((s) => Type.Literal(s)));

export const DeliveryAttempt = Type.Object({
  id: Type.Integer(),
  channel: ChannelName,
  provider: ProviderName,
  to: Type.String(),
  status: DeliveryStatus,
  attempt: Type.Integer(),
  error: Type.Optional(Type.String()),
  providerMessageId: Type.Optional(Type.String()),
  runId: Type.Optional(Type.Integer()),
  stepIndex: Type.Optional(Type.Integer()),
  templateId: Type.Optional(Type.Integer()),
  rendered: FreeObject,
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const TestEmailAccepted = Type.Object({ deliveryAttemptId: Type.Integer(), status: DeliveryStatus });

export const PlanName = Type.Union(['STARTER', 'GROWTH', 'PRO'].map((p) => Type.Literal(p)));

export const BillingPlan = Type.Object({
  plan: PlanName,
  features: Type.Object({ auditLog: Type.Boolean(), apiKeyRoles: Type.Array(Role) }),
  usage: Type.Object({
    contacts: Type.Integer(),
    workflows: Type.Integer(),
    templates: Type.Integer(),
    apiKeys: Type.Integer(),
    members: Type.Integer(),
    runsThisMonth: Type.Integer(),
  }),
});

export const CheckoutInput = Type.Object({ plan: Type.Union([Type.Literal('GROWTH'), Type.Literal('PRO')]) }, { additionalProperties: false });

export const Checkout = Type.Object({
  checkoutId: Type.Integer(),
  plan: PlanName,
  status: Type.Union(['PENDING', 'COMPLETED', 'EXPIRED'].map((s) => Type.Literal(s))),
  url: Type.Union([Type.String(), Type.Null()]),
});

export const Membership = Type.Object({
  id: Type.Integer(),
  userId: Type.Integer(),
  email: Type.String(),
  name: Nullable(Type.String()),
  role: Role,
  createdAt: Type.String(),
});

export const MembershipInput = Type.Object({ email: Type.String({ minLength: 1, maxLength: 320 }), role: Role }, { additionalProperties: false });

export const InvitationCreated = Type.Object({ id: Type.Integer(), email: Type.String(), role: Role, expiresAt: Type.String(), token: Type.String() });

export const InvitationAcceptInput = Type.Object(
  {
    token: Type.String({ minLength: 1, maxLength: 200 }),
    name: Type.Optional(Type.String({ maxLength: 200 })),
    password: Type.Optional(Type.String({ maxLength: 1024 })),
  },
  { additionalProperties: false },
);

export const InvitationAccepted = Type.Object({
  user: User,
  workspace: Type.Object({ id: Type.Integer(), name: Type.String(), plan: Plan, role: Role }),
  accountCreated: Type.Boolean(),
  /** True when the answer carries a session (a new account); an existing account logs in as usual. */
  signedIn: Type.Boolean(),
  token: Type.Optional(Type.String()),
  expiresIn: Type.Optional(Type.Integer()),
});

export const ActorType = Type.Union([Type.Literal('USER'), Type.Literal('API_KEY'), Type.Literal('SYSTEM'), Type.Literal('CLI')]);

export const AuditLogQuery = Type.Object(
  {
    ...PageQuery,
    action: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    actorType: Type.Optional(ActorType),
    since: Type.Optional(Type.String({ maxLength: 64 })),
    until: Type.Optional(Type.String({ maxLength: 64 })),
  },
  { additionalProperties: false },
);

export const AuditLogEntry = Type.Object({
  id: Type.Integer(),
  at: Type.String(),
  actor: Type.Object({ type: ActorType, id: Nullable(Type.Integer()), label: Nullable(Type.String()) }),
  action: Type.String(),
  target: Nullable(Type.Object({ type: Type.String(), id: Type.Union([Type.Integer(), Type.String(), Type.Null()]) })),
  ip: Nullable(Type.String()),
  metadata: FreeObject,
});

export const AdminWorkspace = Type.Object({
  id: Type.Integer(),
  name: Type.String(),
  plan: Plan,
  memberCount: Type.Integer(),
  contactCount: Type.Integer(),
  createdAt: Type.String(),
  updatedAt: Type.String(),
});

export const AdminWorkspaceDetail = Type.Composite([
  AdminWorkspace,
  Type.Object({
    workflowCount: Type.Integer(),
    members: Type.Array(Type.Object({ userId: Type.Integer(), email: Type.String(), role: Role })),
  }),
]);

export const AdminUser = Type.Object({
  id: Type.Integer(),
  email: Type.String(),
  name: Nullable(Type.String()),
  isSuperAdmin: Type.Boolean(),
  createdAt: Type.String(),
  workspaces: Type.Array(Type.Object({ id: Type.Integer(), role: Role })),
});

export const AdminStats = Type.Object({
  workspaces: Type.Integer(),
  users: Type.Integer(),
  contacts: Type.Integer(),
  workflows: Type.Integer(),
  runs: Type.Object({ QUEUED: Type.Integer(), RUNNING: Type.Integer(), WAITING: Type.Integer(), COMPLETED: Type.Integer(), FAILED: Type.Integer() }),
  queueDepth: Type.Integer(),
  deliveries: Type.Object({ QUEUED: Type.Integer(), SENDING: Type.Integer(), SENT: Type.Integer(), FAILED: Type.Integer() }),
});
