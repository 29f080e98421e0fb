import { listAuditLogs } from '../../core/services/auditLog.js';
import type { App } from '../app.js';
import { AuditLogEntry, AuditLogQuery, pageOf } from '../schemas.js';

/** The audit trail is a settings-area read (ADMIN and above) on Growth and Pro. */
const access = { role: 'ADMIN' as const, plan: 'GROWTH' as const };

export async function auditRoutes(app: App): Promise<void> {
  app.get('/audit-logs', { config: { access }, schema: { querystring: AuditLogQuery, response: { 200: pageOf(AuditLogEntry) } } }, async (req) =>
    listAuditLogs(req.workspaceCtx(), req.query),
  );
}
