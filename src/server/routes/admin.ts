import { adminGetWorkspace, adminListUsers, adminListWorkspaces, adminStats } from '../../core/services/admin.js';
import type { App } from '../app.js';
import { AdminStats, AdminUser, AdminWorkspace, AdminWorkspaceDetail, IdParams, ListQuery, pageOf } from '../schemas.js';

/**
 * Operator endpoints across all workspaces. Only a super-admin user passes (the auth
 * plugin checks the flag before the role, so every API key is refused with 403).
 */
const superAdmin = { role: 'VIEWER' as const, superAdmin: true };

export async function adminRoutes(app: App): Promise<void> {
  app.get('/admin/workspaces', { config: { access: superAdmin }, schema: { querystring: ListQuery, response: { 200: pageOf(AdminWorkspace) } } }, async (req) =>
    adminListWorkspaces(req.systemCtx(), req.query),
  );

  app.get('/admin/workspaces/:id', { config: { access: superAdmin }, schema: { params: IdParams, response: { 200: AdminWorkspaceDetail } } }, async (req) =>
    adminGetWorkspace(req.systemCtx(), req.params.id),
  );

  app.get('/admin/users', { config: { access: superAdmin }, schema: { querystring: ListQuery, response: { 200: pageOf(AdminUser) } } }, async (req) =>
    adminListUsers(req.systemCtx(), req.query),
  );

  app.get('/admin/stats', { config: { access: superAdmin }, schema: { response: { 200: AdminStats } } }, async (req) => adminStats(req.systemCtx()));
}
