import { and, eq, inArray, isNull, ne, type SQL } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { nowIso, withTransaction, type SystemContext } from '../context.js';
import { memberships, sessions, users, workspaces, type Role } from '../db/schema.js';
import { ConflictError, NotFoundError, ValidationError } from '../errors.js';
import { hashPassword } from '../crypto.js';
import { normalizeEmail, passwordProblem } from '../validation.js';
import { getWorkspace } from './workspaces.js';
import { assertNotSandbox } from './sandbox.js';

export interface UserView {
  id: number;
  email: string;
  name: string | null;
  isSuperAdmin: boolean;
}

export function userView(row: typeof users.$inferSelect): UserView {
  return { id: row.id, email: row.email, name: row.name, isSuperAdmin: row.isSuperAdmin };
}

export function requireEmail(value: string, path = '/email'): string {
  const email = normalizeEmail(value);
  if (!email) throw new ValidationError('invalid_email', 'The email address is not valid', [{ path, message: 'must be an email address' }]);
  return email;
}

export function requirePassword(password: string): void {
  const problem = passwordProblem(password);
  if (problem) throw new ValidationError('invalid_password', `The password ${problem}`, [{ path: '/password', message: problem }]);
}

export async function findUserByEmail(ctx: Pick<SystemContext, 'db'>, email: string): Promise<typeof users.$inferSelect | undefined> {
  const normalized = normalizeEmail(email);
  if (!normalized) return undefined;
  return (await ctx.db.select().from(users).where(eq(users.email, normalized)))[0];
}

async function requireUser(ctx: Pick<SystemContext, 'db'>, email: string): Promise<typeof users.$inferSelect> {
  const user = await findUserByEmail(ctx, email);
  if (!user) throw new NotFoundError('user_not_found', `No user with email ${email}`);
  return user;
}

export interface CreateUserInput {
  email: string;
  password?: string | undefined;
  name?: string | null | undefined;
  workspaceId: number;
  role: Role;
  isSuperAdmin?: boolean;
}

/**
 * Creates a user with a membership, or gives an existing user a membership in one more
 * workspace (their password stays as it is).
 */
export async function createUser(ctx: SystemContext, input: CreateUserInput): Promise<UserView & { created: boolean }> {
  const email = requireEmail(input.email);
  if (input.password !== undefined) requirePassword(input.password);
  const passwordHash = input.password === undefined ? null : await hashPassword(input.password);
  return withTransaction(ctx, async (tx) => {
    await getWorkspace(tx, input.workspaceId);
    // A sandbox has no members of its own: the live workspace's act in it (as invitations refuse).
    await assertNotSandbox(tx.db, input.workspaceId, 'Adding a member');
    let [user] = await tx.db.select().from(users).where(eq(users.email, email));
    const created = !user;
    if (!user) {
      [user] = await tx.db
        .insert(users)
        .values({ email, name: input.name ?? null, passwordHash, isSuperAdmin: input.isSuperAdmin ?? false })
        .returning();
      if (!user) throw new Error('the insert returned no row');
      await recordAudit(tx, { workspaceId: input.workspaceId, action: 'user.created', target: { type: 'user', id: user.id }, metadata: { email } });
    }
    const [existing] = await tx.db
      .select()
      .from(memberships)
      .where(and(eq(memberships.workspaceId, input.workspaceId), eq(memberships.userId, user.id)));
    if (existing) throw new ConflictError('membership_exists', `${email} is already a member of workspace ${input.workspaceId}`);
    const [membership] = await tx.db.insert(memberships).values({ workspaceId: input.workspaceId, userId: user.id, role: input.role }).returning();
    if (!membership) throw new Error('the insert returned no row');
    await recordAudit(tx, {
      workspaceId: input.workspaceId,
      action: 'membership.created',
      target: { type: 'membership', id: membership.id },
      metadata: { userId: user.id, email, role: input.role },
    });
    return { ...userView(user), created };
  });
}

/**
 * Ends sessions of a user: every refresh-token family (and so every access token minted
 * from it, which names its family) stops working at once. `workspaceId` limits it to
 * one workspace; `exceptFamily` spares the caller's own session. Returns how many
 * families ended.
 */
export async function endSessions(
  ctx: Pick<SystemContext, 'db'>,
  userId: number,
  opts: { workspaceId?: number; exceptFamily?: string | null } = {},
): Promise<number> {
  const conditions: SQL[] = [eq(sessions.userId, userId), isNull(sessions.revokedAt)];
  if (opts.workspaceId !== undefined) {
    // A workspace's sessions include those switched into its sandbox (a session there is
    // stored under the sandbox's id): they end with it, or a refresh would revive them once
    // the user is added back.
    const [sandbox] = await ctx.db.select({ id: workspaces.id }).from(workspaces).where(eq(workspaces.sandboxOf, opts.workspaceId));
    conditions.push(sandbox ? inArray(sessions.workspaceId, [opts.workspaceId, sandbox.id]) : eq(sessions.workspaceId, opts.workspaceId));
  }
  if (opts.exceptFamily) conditions.push(ne(sessions.familyId, opts.exceptFamily));
  const ended = await ctx.db
    .update(sessions)
    .set({ revokedAt: nowIso() })
    .where(and(...conditions))
    .returning({ familyId: sessions.familyId });
  return new Set(ended.map((r) => r.familyId)).size;
}

/**
 * An entry about a user made outside any workspace (the CLI's `svc user passwd`, `svc admin
 * grant|revoke`), in the audit log of every workspace the user belongs to: the log a
 * workspace's admins can read. A user of none: one entry of no workspace.
 */
async function auditForUser(ctx: SystemContext, userId: number, entry: Omit<Parameters<typeof recordAudit>[1], 'workspaceId'>): Promise<void> {
  const of = await ctx.db.select({ workspaceId: memberships.workspaceId }).from(memberships).where(eq(memberships.userId, userId));
  for (const workspaceId of of.length ? of.map((m) => m.workspaceId) : [null]) await recordAudit(ctx, { ...entry, workspaceId });
}

/** Sets a user's password (CLI `svc user passwd`) and ends every session of that user. */
export async function setPassword(ctx: SystemContext, email: string, password: string): Promise<UserView & { sessionsEnded: number }> {
  requirePassword(password);
  const passwordHash = await hashPassword(password);
  return withTransaction(ctx, async (tx) => {
    const user = await requireUser(tx, email);
    await tx.db.update(users).set({ passwordHash, updatedAt: nowIso() }).where(eq(users.id, user.id));
    const sessionsEnded = await endSessions(tx, user.id);
    await auditForUser(tx, user.id, { action: 'user.password_changed', target: { type: 'user', id: user.id }, metadata: { sessionsEnded } });
    return { ...userView(user), sessionsEnded };
  });
}

export function setSuperAdmin(ctx: SystemContext, email: string, isSuperAdmin: boolean): Promise<UserView> {
  return withTransaction(ctx, async (tx) => {
    const user = await requireUser(tx, email);
    // The last super-admin revoked would leave nobody who can reach /admin (or grant it back
    // but through the CLI on the server's machine): refused, as a workspace's last OWNER is.
    if (!isSuperAdmin && user.isSuperAdmin) {
      const others = await tx.db
        .select({ id: users.id })
        .from(users)
        .where(and(eq(users.isSuperAdmin, true), ne(users.id, user.id)))
        .limit(1);
      if (!others.length) throw new ConflictError('last_super_admin', `${user.email} is the last super-admin: grant the flag to another user first`);
    }
    const [row] = await tx.db.update(users).set({ isSuperAdmin, updatedAt: nowIso() }).where(eq(users.id, user.id)).returning();
    if (!row) throw new Error('the update returned no row');
    await auditForUser(tx, user.id, {
      action: isSuperAdmin ? 'user.super_admin_granted' : 'user.super_admin_revoked',
      target: { type: 'user', id: user.id },
    });
    return userView(row);
  });
}
