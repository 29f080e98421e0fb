import { eq, gte, lt, sql, type SQL } from 'drizzle-orm';
import { selectPage, type PageRequest, type WorkspaceContext } from '../context.js';
import { auditLogs, type ActorType } from '../db/schema.js';
import { BadRequestError } from '../errors.js';
import type { Page } from '../pagination.js';

export interface AuditLogView {
  id: number;
  at: string;
  actor: { type: ActorType; id: number | null; label: string | null };
  action: string;
  target: { type: string; id: number | string | null } | null;
  ip: string | null;
  metadata: Record<string, unknown>;
}

export interface AuditLogFilter extends PageRequest {
  /** Exact action (`contact.created`), or a prefix ending in `.*` (`contact.*`). */
  action?: string | undefined;
  actorType?: ActorType | undefined;
  /** ISO 8601 timestamps: `since` inclusive, `until` exclusive. */
  since?: string | undefined;
  until?: string | undefined;
}

function view(row: typeof auditLogs.$inferSelect): AuditLogView {
  const targetId = row.targetId === null ? null : /^[1-9][0-9]{0,15}$/.test(row.targetId) ? Number(row.targetId) : row.targetId;
  return {
    id: row.id,
    at: row.at,
    actor: { type: row.actorType, id: row.actorId, label: row.actorLabel },
    action: row.action,
    target: row.targetType === null ? null : { type: row.targetType, id: targetId },
    ip: row.ip,
    metadata: row.metadata ?? {},
  };
}

// A date, or a date and time with an explicit zone, so "since" never means local time.
const ISO_RE = /^\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:\d{2}))?$/;

/** Parses an ISO 8601 timestamp into the stored form (UTC, milliseconds), or answers 400. */
export function parseTimestamp(value: string, name: string): string {
  const ms = ISO_RE.test(value) ? Date.parse(value) : NaN;
  if (Number.isNaN(ms)) throw new BadRequestError('invalid_query', `${name} must be an ISO 8601 timestamp such as 2026-01-31T12:00:00Z`);
  return new Date(ms).toISOString();
}

function actionCondition(action: string | undefined): SQL | undefined {
  if (action === undefined || action === '') return undefined;
  if (action.endsWith('.*')) {
    const prefix = action.slice(0, -1); // keeps the dot: "contact."
    // substr, not LIKE, so "_" and "%" in the prefix are taken literally.
    return sql`substr(${auditLogs.action}, 1, ${prefix.length}) = ${prefix}`;
  }
  return eq(auditLogs.action, action);
}

/** The workspace's audit trail, newest first, with optional filters. */
export async function listAuditLogs(ctx: WorkspaceContext, filter: AuditLogFilter): Promise<Page<AuditLogView>> {
  const since = filter.since === undefined ? undefined : parseTimestamp(filter.since, 'since');
  const until = filter.until === undefined ? undefined : parseTimestamp(filter.until, 'until');
  return selectPage(
    ctx,
    auditLogs,
    filter,
    view,
    actionCondition(filter.action),
    filter.actorType ? eq(auditLogs.actorType, filter.actorType) : undefined,
    since ? gte(auditLogs.at, since) : undefined,
    until ? lt(auditLogs.at, until) : undefined,
  );
}
