import type { SystemContext } from './context.js';
import { auditLogs } from './db/schema.js';

export interface AuditEntry {
  workspaceId: number | null;
  action: string;
  target?: { type: string; id: number | string | null };
  metadata?: Record<string, unknown>;
}

/**
 * Appends an audit entry. Call it inside the same transaction as the change it records,
 * so that a change and its record are committed together or not at all.
 */
export async function recordAudit(ctx: SystemContext, entry: AuditEntry): Promise<void> {
  await ctx.db.insert(auditLogs).values({
    workspaceId: entry.workspaceId,
    actorType: ctx.actor.type,
    actorId: ctx.actor.id,
    actorLabel: ctx.actor.label,
    action: entry.action,
    targetType: entry.target?.type ?? null,
    targetId: entry.target?.id == null ? null : String(entry.target.id),
    ip: ctx.ip,
    metadata: entry.metadata ?? {},
  });
}
