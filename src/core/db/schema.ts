import { sql } from 'drizzle-orm';
import { blob, index, integer, primaryKey, sqliteTable, text, uniqueIndex, type AnySQLiteColumn } from 'drizzle-orm/sqlite-core';

/** ISO 8601 UTC timestamps are stored as text: they sort correctly and read well in the sqlite shell. */
const now = sql`(strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))`;
const createdAt = () => text('created_at').notNull().default(now);
const updatedAt = () => text('updated_at').notNull().default(now);

export const PLANS = ['STARTER', 'GROWTH', 'PRO'] as const;
export type Plan = (typeof PLANS)[number];

export const ROLES = ['VIEWER', 'MEMBER', 'ADMIN', 'OWNER'] as const;
export type Role = (typeof ROLES)[number];

export const workspaces = sqliteTable(
  'workspaces',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    name: text('name').notNull(),
    plan: text('plan', { enum: PLANS }).notNull().default('STARTER'),
    /**
     * Set on a sandbox: the live workspace it is the twin of (one sandbox per workspace).
     * A sandbox has its own data and `svc_test_` keys, and nothing leaves the machine from it.
     */
    sandboxOf: integer('sandbox_of').references((): AnySQLiteColumn => workspaces.id, { onDelete: 'cascade' }),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('workspaces_sandbox_of_unique').on(t.sandboxOf)],
);

export const users = sqliteTable(
  'users',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    email: text('email').notNull(),
    name: text('name'),
    passwordHash: text('password_hash'),
    isSuperAdmin: integer('is_super_admin', { mode: 'boolean' }).notNull().default(false),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('users_email_unique').on(t.email)],
);

export const memberships = sqliteTable(
  'memberships',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    role: text('role', { enum: ROLES }).notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('memberships_workspace_user_unique').on(t.workspaceId, t.userId), index('memberships_user_idx').on(t.userId)],
);

/** Refresh tokens. Each login starts a family; every refresh rotates within it. */
export const sessions = sqliteTable(
  'sessions',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    familyId: text('family_id').notNull(),
    userId: integer('user_id')
      .notNull()
      .references(() => users.id, { onDelete: 'cascade' }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    tokenHash: text('token_hash').notNull(),
    createdAt: createdAt(),
    expiresAt: text('expires_at').notNull(),
    rotatedAt: text('rotated_at'),
    revokedAt: text('revoked_at'),
  },
  (t) => [
    uniqueIndex('sessions_token_hash_unique').on(t.tokenHash),
    index('sessions_family_idx').on(t.familyId),
    // Retention prunes sessions some days after their end.
    index('sessions_expires_idx').on(t.expiresAt),
  ],
);

export const apiKeys = sqliteTable(
  'api_keys',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    role: text('role', { enum: ROLES }).notNull(),
    prefix: text('prefix').notNull(),
    keyHash: text('key_hash').notNull(),
    createdAt: createdAt(),
    lastUsedAt: text('last_used_at'),
    revokedAt: text('revoked_at'),
  },
  (t) => [uniqueIndex('api_keys_key_hash_unique').on(t.keyHash), index('api_keys_workspace_idx').on(t.workspaceId)],
);

export const ACTOR_TYPES = ['USER', 'API_KEY', 'SYSTEM', 'CLI'] as const;
export type ActorType = (typeof ACTOR_TYPES)[number];

export const auditLogs = sqliteTable(
  'audit_logs',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id').references(() => workspaces.id, { onDelete: 'cascade' }),
    at: text('at').notNull().default(now),
    actorType: text('actor_type', { enum: ACTOR_TYPES }).notNull(),
    actorId: integer('actor_id'),
    actorLabel: text('actor_label'),
    action: text('action').notNull(),
    targetType: text('target_type'),
    targetId: text('target_id'),
    ip: text('ip'),
    metadata: text('metadata', { mode: 'json' }).$type<Record<string, unknown>>().notNull().default({}),
  },
  (t) => [
    // The trail is listed newest first by (at, id) (services/auditLog.ts): each filter's
    // equality columns, then `at`, then the id that breaks ties (named, as on PostgreSQL).
    index('audit_logs_workspace_at_idx').on(t.workspaceId, t.at, t.id),
    index('audit_logs_action_at_idx').on(t.workspaceId, t.action, t.at, t.id),
    index('audit_logs_actor_at_idx').on(t.workspaceId, t.actorType, t.at, t.id),
    index('audit_logs_actor_action_at_idx').on(t.workspaceId, t.actorType, t.action, t.at, t.id),
    // Retention prunes by age.
    index('audit_logs_at_idx').on(t.at),
  ],
);

export const contacts = sqliteTable(
  'contacts',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    email: text('email'),
    phone: text('phone'),
    firstName: text('first_name'),
    lastName: text('last_name'),
    attributes: text('attributes', { mode: 'json' }).$type<Record<string, unknown>>().notNull().default({}),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    uniqueIndex('contacts_workspace_email_unique').on(t.workspaceId, t.email),
    uniqueIndex('contacts_workspace_phone_unique').on(t.workspaceId, t.phone),
    // The list order: one workspace's contacts, newest first, seeking to a cursor. Without
    // it SQLite took the email index for `workspace_id = ?` and sorted the whole workspace.
    index('contacts_workspace_idx').on(t.workspaceId, t.id),
  ],
);

/** Tags are compared case-insensitively (`tagKey` is the lower-cased name) but shown as written. */
export const contactTags = sqliteTable(
  'contact_tags',
  {
    contactId: integer('contact_id')
      .notNull()
      .references(() => contacts.id, { onDelete: 'cascade' }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    tagKey: text('tag_key').notNull(),
    name: text('name').notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.contactId, t.tagKey] }),
    // `?tag=` walks one tag's contacts newest first from a cursor, without touching contacts.
    index('contact_tags_workspace_tag_contact_idx').on(t.workspaceId, t.tagKey, t.contactId),
  ],
);

/**
 * Counts kept incrementally by triggers (migration 0008) in the same transaction as the rows
 * they count, so `/tags` and `/billing/plan` read one row instead of counting a million.
 */
export const tagCounts = sqliteTable(
  'tag_counts',
  {
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    tagKey: text('tag_key').notNull(),
    /** The spelling shown: the one the tag was first added with (while any contact has it). */
    name: text('name').notNull(),
    contacts: integer('contacts').notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.workspaceId, t.tagKey] })],
);

export const workspaceCounters = sqliteTable('workspace_counters', {
  workspaceId: integer('workspace_id')
    .primaryKey()
    .references(() => workspaces.id, { onDelete: 'cascade' }),
  contacts: integer('contacts').notNull().default(0),
});

/** Runs started per workspace and UTC month (`YYYY-MM`); pruning runs does not lower it. */
export const runMonthCounts = sqliteTable(
  'run_month_counts',
  {
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    month: text('month').notNull(),
    runs: integer('runs').notNull().default(0),
  },
  (t) => [primaryKey({ columns: [t.workspaceId, t.month] })],
);

export const WORKFLOW_STATUSES = ['DRAFT', 'ACTIVE', 'PAUSED'] as const;
export type WorkflowStatus = (typeof WORKFLOW_STATUSES)[number];
export const TRIGGER_SOURCES = ['WEBHOOK', 'MANUAL'] as const;
export type TriggerSource = (typeof TRIGGER_SOURCES)[number];
export const LOOKUP_KINDS = ['email', 'phone', 'contactId'] as const;
export type LookupKind = (typeof LOOKUP_KINDS)[number];

export interface ContactDefaults {
  firstName?: string;
  lastName?: string;
  attributes?: Record<string, unknown>;
  tags?: string[];
}

/**
 * A step as stored: `{type, ...fields}` (see core/steps.ts for the catalog). In a run's
 * program (core/program.ts) a step may also say where to go next: `next`, or for a
 * condition `onTrue`/`onFalse`; without them the next step is the one after it.
 */
export type StepDefinition = { type: string } & Record<string, unknown>;

export const workflows = sqliteTable(
  'workflows',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    status: text('status', { enum: WORKFLOW_STATUSES }).notNull().default('DRAFT'),
    triggerSource: text('trigger_source', { enum: TRIGGER_SOURCES }).notNull().default('MANUAL'),
    steps: text('steps', { mode: 'json' }).$type<StepDefinition[]>().notNull().default([]),
    webhookToken: text('webhook_token'),
    webhookLookup: text('webhook_lookup', { enum: LOOKUP_KINDS }),
    webhookPath: text('webhook_path'),
    createIfNotFound: integer('create_if_not_found', { mode: 'boolean' }).notNull().default(false),
    contactDefaults: text('contact_defaults', { mode: 'json' }).$type<ContactDefaults>().notNull().default({}),
    /** AES-256-GCM ciphertext of the signing secret (see core/secrets.ts); null when unsigned. */
    signingSecret: text('signing_secret'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [uniqueIndex('workflows_webhook_token_unique').on(t.webhookToken), index('workflows_workspace_idx').on(t.workspaceId, t.id)],
);

export const RUN_STATUSES = ['QUEUED', 'RUNNING', 'WAITING', 'COMPLETED', 'FAILED'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export interface StepState {
  status: 'PENDING' | 'RUNNING' | 'WAITING' | 'COMPLETED' | 'FAILED' | 'SKIPPED';
  startedAt: string | null;
  finishedAt: string | null;
  error?: string;
  /** Tries made so far (message steps retried after transient failures). */
  attempts?: number;
  /** Tries the provider answered with a rate limit (deferred, not counted as failed tries). */
  deferrals?: number;
  /** The branch a condition node took. */
  branch?: boolean;
}

export const workflowRuns = sqliteTable(
  'workflow_runs',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    /** The workflow that started the run; null for an automation's run. */
    workflowId: integer('workflow_id').references(() => workflows.id, { onDelete: 'cascade' }),
    automationId: integer('automation_id').references((): AnySQLiteColumn => automations.id, { onDelete: 'cascade' }),
    contactId: integer('contact_id').references(() => contacts.id, { onDelete: 'set null' }),
    status: text('status', { enum: RUN_STATUSES }).notNull().default('QUEUED'),
    /** The steps as they were when the run started, so later edits do not change it. */
    definition: text('definition', { mode: 'json' }).$type<StepDefinition[]>().notNull(),
    stepStates: text('step_states', { mode: 'json' }).$type<StepState[]>().notNull().default([]),
    trigger: text('trigger', { mode: 'json' }).$type<Record<string, unknown>>().notNull(),
    /** When the run may next be picked up (now when queued, later while waiting). */
    runAt: text('run_at').notNull().default(now),
    leaseOwner: text('lease_owner'),
    leaseUntil: text('lease_until'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
    finishedAt: text('finished_at'),
  },
  (t) => [
    index('workflow_runs_workflow_idx').on(t.workflowId, t.id),
    // Partial indexes (migration 0012): a webhook's QUEUED run is written to 5 indexes, not 8,
    // and a run's claim and end move it in 3 rather than 7; each lists only the rows its
    // queries look for (automation runs, WAITING, QUEUED, RUNNING, finished).
    index('workflow_runs_automation_idx').on(t.automationId, t.id).where(sql`${t.automationId} IS NOT NULL`),
    // GET /runs: the workspace's runs newest first, by status, by contact (the contact index
    // also serves ON DELETE SET NULL when a contact is deleted).
    index('workflow_runs_workspace_idx').on(t.workspaceId, t.id),
    index('workflow_runs_workspace_status_idx').on(t.workspaceId, t.status, t.id),
    index('workflow_runs_contact_idx').on(t.contactId, t.id),
    index('workflow_runs_due_idx').on(t.runAt).where(sql`${t.status} = 'WAITING'`),
    // Fair claiming walks the workspaces that have QUEUED runs and takes the oldest of each.
    index('workflow_runs_ready_idx').on(t.workspaceId, t.runAt, t.id).where(sql`${t.status} = 'QUEUED'`),
    // Expired claims are looked for among RUNNING runs only.
    index('workflow_runs_running_idx').on(t.leaseUntil).where(sql`${t.status} = 'RUNNING'`),
    // Retention prunes finished runs by age.
    index('workflow_runs_finished_idx').on(t.finishedAt).where(sql`${t.finishedAt} IS NOT NULL`),
  ],
);

export const webhookEvents = sqliteTable(
  'webhook_events',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    workflowId: integer('workflow_id')
      .notNull()
      .references(() => workflows.id, { onDelete: 'cascade' }),
    receivedAt: text('received_at').notNull().default(now),
    statusCode: integer('status_code').notNull(),
    code: text('code'),
    runId: integer('run_id'),
    contactId: integer('contact_id'),
    sourceIp: text('source_ip'),
    contentType: text('content_type'),
    idempotencyKey: text('idempotency_key'),
    /**
     * The exact bytes received (null when refused before the body was read); for a request
     * refused before its signature was verified, only the first 1 KiB (see bodySha256).
     */
    body: blob('body', { mode: 'buffer' }),
    /** Bytes received (null when the body was not read, and on rows older than this column). */
    bodySize: integer('body_size'),
    /** SHA-256 (hex) of the whole body, set when the request was refused before its signature was verified (`body` then keeps at most 1 KiB). */
    bodySha256: text('body_sha256'),
    /** For a request answered from an earlier one's Idempotency-Key: that event's id. */
    replayOf: integer('replay_of'),
  },
  (t) => [
    index('webhook_events_workflow_idx').on(t.workflowId, t.id),
    // No index on received_at (migration 0014): retention deletes the oldest ids first (an
    // event's received_at grows with its id), and every accepted webhook wrote an entry.
    // Only requests that sent an Idempotency-Key are looked up by it.
    index('webhook_events_idempotency_idx').on(t.workflowId, t.idempotencyKey).where(sql`${t.idempotencyKey} IS NOT NULL`),
  ],
);

export const CHANNELS = ['EMAIL', 'SMS', 'WHATSAPP'] as const;
export type Channel = (typeof CHANNELS)[number];

/** EMAIL {subject, html?, text?}; SMS {text}; WHATSAPP {text} or {templateName, language, parameters}. */
export type TemplateContent = Record<string, unknown>;

export const templates = sqliteTable(
  'templates',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    channel: text('channel', { enum: CHANNELS }).notNull(),
    content: text('content', { mode: 'json' }).$type<TemplateContent>().notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('templates_workspace_idx').on(t.workspaceId, t.id)],
);

export const PROVIDERS = ['outbox', 'smtp', 'twilio', 'whatsapp'] as const;
export type ProviderName = (typeof PROVIDERS)[number];

/** A workspace's provider for one channel; absent rows mean the built-in outbox. */
export const channelSettings = sqliteTable(
  'channel_settings',
  {
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    channel: text('channel', { enum: CHANNELS }).notNull(),
    provider: text('provider', { enum: PROVIDERS }).notNull(),
    /** Non-secret settings (host, port, base URL, sender). */
    settings: text('settings', { mode: 'json' }).$type<Record<string, unknown>>().notNull().default({}),
    /** AES-256-GCM ciphertext (core/secrets.ts) of a JSON object of credentials. */
    credentials: text('credentials'),
    updatedAt: updatedAt(),
  },
  (t) => [primaryKey({ columns: [t.workspaceId, t.channel] })],
);

export const DELIVERY_STATUSES = ['QUEUED', 'SENDING', 'SENT', 'FAILED'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

export const deliveryAttempts = sqliteTable(
  'delivery_attempts',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    channel: text('channel', { enum: CHANNELS }).notNull(),
    provider: text('provider', { enum: PROVIDERS }).notNull(),
    to: text('to').notNull(),
    status: text('status', { enum: DELIVERY_STATUSES }).notNull().default('QUEUED'),
    /** 1 for the first try; each retry is a row of its own with the next number. */
    attempt: integer('attempt').notNull().default(1),
    error: text('error'),
    providerMessageId: text('provider_message_id'),
    runId: integer('run_id'),
    stepIndex: integer('step_index'),
    templateId: integer('template_id'),
    rendered: text('rendered', { mode: 'json' }).$type<Record<string, unknown>>().notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [
    index('delivery_attempts_workspace_idx').on(t.workspaceId, t.id),
    index('delivery_attempts_run_step_idx').on(t.runId, t.stepIndex),
    index('delivery_attempts_status_idx').on(t.workspaceId, t.status),
    // Retention prunes attempts by age.
    index('delivery_attempts_created_idx').on(t.createdAt),
  ],
);

export const invitations = sqliteTable(
  'invitations',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    email: text('email').notNull(),
    role: text('role', { enum: ROLES }).notNull(),
    /** SHA-256 of the accept token; the token itself is shown once. */
    tokenHash: text('token_hash').notNull(),
    invitedBy: integer('invited_by').references(() => users.id, { onDelete: 'set null' }),
    expiresAt: text('expires_at').notNull(),
    acceptedAt: text('accepted_at'),
    revokedAt: text('revoked_at'),
    createdAt: createdAt(),
  },
  (t) => [uniqueIndex('invitations_token_hash_unique').on(t.tokenHash), index('invitations_workspace_idx').on(t.workspaceId, t.id)],
);

export const CHECKOUT_STATUSES = ['PENDING', 'COMPLETED', 'EXPIRED'] as const;
export type CheckoutStatus = (typeof CHECKOUT_STATUSES)[number];

export const checkouts = sqliteTable(
  'checkouts',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    plan: text('plan', { enum: PLANS }).notNull(),
    provider: text('provider', { enum: ['manual', 'stripe'] }).notNull(),
    status: text('status', { enum: CHECKOUT_STATUSES }).notNull().default('PENDING'),
    /** The payment provider's id for it (a Stripe Checkout Session id). */
    providerRef: text('provider_ref'),
    url: text('url'),
    createdBy: integer('created_by').references(() => users.id, { onDelete: 'set null' }),
    createdAt: createdAt(),
    completedAt: text('completed_at'),
  },
  (t) => [index('checkouts_workspace_idx').on(t.workspaceId, t.id), uniqueIndex('checkouts_provider_ref_unique').on(t.providerRef)],
);

/**
 * A visual graph: `{nodes: [{id, type, data, position?}], edges: [{from, to, branch?}]}`.
 * A node's `position` is where the console's editor drew it: stored and returned, ignored
 * by the engine.
 */
export interface AutomationGraph {
  nodes: { id: string; type: string; data: Record<string, unknown>; position?: { x: number; y: number } }[];
  edges: { from: string; to: string; branch?: boolean }[];
}

export const automations = sqliteTable(
  'automations',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    name: text('name').notNull(),
    status: text('status', { enum: WORKFLOW_STATUSES }).notNull().default('DRAFT'),
    graph: text('graph', { mode: 'json' }).$type<AutomationGraph>().notNull(),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
  },
  (t) => [index('automations_workspace_idx').on(t.workspaceId, t.id)],
);

export const IMPORT_STATUSES = ['RUNNING', 'COMPLETED', 'FAILED'] as const;
export type ImportStatus = (typeof IMPORT_STATUSES)[number];
export const IMPORT_MODES = ['create', 'update', 'upsert'] as const;
export type ImportMode = (typeof IMPORT_MODES)[number];
export const IMPORT_FORMATS = ['ndjson', 'csv'] as const;
export type ImportFormat = (typeof IMPORT_FORMATS)[number];

/** One row an import refused: its line in the file, the field at fault (if one), why. */
export interface ImportRowError {
  line: number;
  field: string | null;
  reason: string;
}

/**
 * A contact import (POST /contacts/import, `svc contacts import`). Its counts are written in
 * the same transaction as each batch of contacts, so they always say what is committed. A
 * RUNNING job whose process stopped beating is reported FAILED `interrupted`.
 */
export const contactImports = sqliteTable(
  'contact_imports',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    status: text('status', { enum: IMPORT_STATUSES }).notNull().default('RUNNING'),
    format: text('format', { enum: IMPORT_FORMATS }).notNull(),
    mode: text('mode', { enum: IMPORT_MODES }).notNull(),
    created: integer('created').notNull().default(0),
    updated: integer('updated').notNull().default(0),
    skipped: integer('skipped').notNull().default(0),
    errorCount: integer('error_count').notNull().default(0),
    /** The first 100 refused rows. */
    errors: text('errors', { mode: 'json' }).$type<ImportRowError[]>().notNull().default([]),
    /** Lines of the file committed so far (a client that resends can start after them). */
    lines: integer('lines').notNull().default(0),
    bytesRead: integer('bytes_read').notNull().default(0),
    /** The declared length, when there was one. */
    bytesTotal: integer('bytes_total'),
    /** Why a FAILED job stopped: a stable code and a sentence. */
    failureCode: text('failure_code'),
    failureDetail: text('failure_detail'),
    createdAt: createdAt(),
    updatedAt: updatedAt(),
    /** Written every few seconds by the process running the job. */
    heartbeatAt: text('heartbeat_at').notNull().default(now),
    finishedAt: text('finished_at'),
  },
  (t) => [index('contact_imports_workspace_idx').on(t.workspaceId, t.id), index('contact_imports_status_idx').on(t.status)],
);

/**
 * What an http_request step of a sandbox run would have sent: recorded instead of sent
 * (GET /sandbox/requests), since nothing leaves the machine from a sandbox.
 */
export const sandboxRequests = sqliteTable(
  'sandbox_requests',
  {
    id: integer('id').primaryKey({ autoIncrement: true }),
    workspaceId: integer('workspace_id')
      .notNull()
      .references(() => workspaces.id, { onDelete: 'cascade' }),
    runId: integer('run_id'),
    stepIndex: integer('step_index'),
    method: text('method').notNull(),
    url: text('url').notNull(),
    headers: text('headers', { mode: 'json' }).$type<Record<string, string>>().notNull().default({}),
    body: text('body'),
    createdAt: createdAt(),
  },
  (t) => [index('sandbox_requests_workspace_idx').on(t.workspaceId, t.id), index('sandbox_requests_created_idx').on(t.createdAt)],
);
