import { and, desc, eq, gt, isNull, lt, ne, type SQL } from 'drizzle-orm';
import { recordAudit } from '../audit.js';
import { inWorkspace, nowIso, withTransaction, type PageRequest, type SystemContext, type WorkspaceContext } from '../context.js';
import { hashPassword, randomToken, sha256Hex, verifyPassword } from '../crypto.js';
import { invitations, memberships, users, type Plan, type Role } from '../db/schema.js';
import { AppError, ConflictError, ForbiddenError, NotFoundError, UnauthorizedError, ValidationError } from '../errors.js';
import { decodeCursor, toPage, type Page } from '../pagination.js';
import { roleAtLeast } from '../roles.js';
import { passwordProblem } from '../validation.js';
import { endSessions, findUserByEmail, requireEmail, userView, type UserView } from './users.js';
import { assertNotSandbox } from './sandbox.js';
import type { LoginThrottle } from './auth.js';
import { getWorkspace } from './workspaces.js';

/**
 * Workspace members and invitations (API.md sections 2 and 5).
 *
 * Rules, checked in this order: a caller may not grant a role above their own; only an
 * OWNER grants OWNER, changes an OWNER's role or removes an OWNER (403 forbidden); the
 * last OWNER of a workspace is never demoted or removed (409 last_owner).
 */

export interface MembershipView {
  id: number;
  userId: number;
  email: string;
  name: string | null;
  role: Role;
  createdAt: string;
}

export interface InvitationCreated {
  id: number;
  email: string;
  role: Role;
  expiresAt: string;
  /** The accept token: shown once, only its SHA-256 is stored. */
  token: string;
}

/** An invitation as shown after it was sent: everything but the token. */
export type InvitationView = Omit<InvitationCreated, 'token'>;

/** The invitation email; `secrets` are sent to the invitee but never stored in clear. */
export interface InvitationEmail {
  to: string;
  rendered: { subject: string; text: string };
  secrets: string[];
}

export interface InvitationAccepted {
  user: UserView;
  workspace: { id: number; name: string; plan: Plan; role: Role };
  /** Whether the acceptance created the account (and so may sign the invitee in). */
  accountCreated: boolean;
}

/** `POST /invitations/inspect`: what the accept page shows before the invitee decides. */
export interface InvitationInspected {
  workspaceName: string;
  email: string;
  role: Role;
  expiresAt: string;
  accountExists: boolean;
}

const DAY_MS = 86_400_000;

function membershipRows(ctx: WorkspaceContext, ...conditions: (SQL | undefined)[]) {
  return ctx.db
    .select({ id: memberships.id, userId: memberships.userId, email: users.email, name: users.name, role: memberships.role, createdAt: memberships.createdAt })
    .from(memberships)
    .innerJoin(users, eq(users.id, memberships.userId))
    .where(inWorkspace(ctx, memberships.workspaceId, ...conditions));
}

export async function listMemberships(ctx: WorkspaceContext, page: PageRequest): Promise<Page<MembershipView>> {
  const before = decodeCursor(page.cursor);
  const rows = await membershipRows(ctx, before ? lt(memberships.id, before) : undefined)
    .orderBy(desc(memberships.id))
    .limit(page.limit + 1);
  return toPage(rows, page.limit, (row) => row);
}

async function requireMembership(ctx: WorkspaceContext, id: number): Promise<MembershipView> {
  const [row] = await membershipRows(ctx, eq(memberships.id, id));
  if (!row) throw new NotFoundError('membership_not_found', `No membership with id ${id}`);
  return row;
}

/** A caller may hand out only roles up to their own; OWNER is handed out by an OWNER alone. */
function assertMayGrant(callerRole: Role, role: Role): void {
  if (role === 'OWNER' && callerRole !== 'OWNER') throw new ForbiddenError('Only an OWNER can grant the OWNER role');
  if (!roleAtLeast(callerRole, role)) throw new ForbiddenError(`A ${callerRole} cannot grant the ${role} role`);
}

function assertMayManage(callerRole: Role, target: MembershipView): void {
  if (target.role === 'OWNER' && callerRole !== 'OWNER') throw new ForbiddenError("Only an OWNER can change or remove an OWNER's membership");
}

async function assertNotLastOwner(ctx: WorkspaceContext, target: MembershipView): Promise<void> {
  if (target.role !== 'OWNER') return;
  const [other] = await ctx.db
    .select({ id: memberships.id })
    .from(memberships)
    .where(inWorkspace(ctx, memberships.workspaceId, eq(memberships.role, 'OWNER'), ne(memberships.id, target.id)))
    .limit(1);
  if (!other) throw new ConflictError('last_owner', 'A workspace always keeps at least one OWNER; make someone else OWNER first');
}

/**
 * `POST /memberships {email, role}`: invites someone who is not in this workspace. Whether
 * the email has an account is never revealed (API.md section 7): known and unknown emails
 * get the same invitation, the same email and the same answer. Someone already in the
 * workspace is 409 membership_exists (the workspace's own members are no secret to an ADMIN).
 */
export async function inviteMember(
  ctx: WorkspaceContext,
  input: { email: string; role: Role },
  caller: { role: Role; userId: number | null },
): Promise<{ invitation: InvitationView; email: InvitationEmail }> {
  const { invitation, email } = await createInvitation(ctx, input, caller);
  const { token: _token, ...shown } = invitation;
  return { invitation: shown, email };
}

export function changeMembershipRole(ctx: WorkspaceContext, id: number, role: Role, callerRole: Role): Promise<MembershipView> {
  return withTransaction(ctx, async (tx) => {
    const target = await requireMembership(tx, id);
    assertMayManage(callerRole, target);
    assertMayGrant(callerRole, role);
    if (target.role === role) return target;
    if (role !== 'OWNER') await assertNotLastOwner(tx, target);
    await tx.db
      .update(memberships)
      .set({ role, updatedAt: nowIso() })
      .where(inWorkspace(tx, memberships.workspaceId, eq(memberships.id, id)));
    await recordAudit(tx, {
      workspaceId: tx.workspaceId,
      action: 'membership.role_changed',
      target: { type: 'membership', id },
      metadata: { userId: target.userId, email: target.email, from: target.role, to: role },
    });
    return { ...target, role };
  });
}

export async function removeMembership(ctx: WorkspaceContext, id: number, callerRole: Role): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const target = await requireMembership(tx, id);
    assertMayManage(callerRole, target);
    await assertNotLastOwner(tx, target);
    await tx.db.delete(memberships).where(inWorkspace(tx, memberships.workspaceId, eq(memberships.id, id)));
    // Sessions are per workspace: the removed user's sessions here end; others stay.
    await endSessions(tx, target.userId, { workspaceId: tx.workspaceId });
    await recordAudit(tx, {
      workspaceId: tx.workspaceId,
      action: 'membership.removed',
      target: { type: 'membership', id },
      metadata: { userId: target.userId, email: target.email, role: target.role },
    });
  });
}

/**
 * Creates an invitation and the email that carries it. The token is 32 random bytes
 * (base64url), returned once; only its SHA-256 is stored, and it is never audited.
 */
export async function createInvitation(
  ctx: WorkspaceContext,
  input: { email: string; role: Role },
  caller: { role: Role; userId: number | null },
): Promise<{ invitation: InvitationCreated; email: InvitationEmail }> {
  const email = requireEmail(input.email);
  assertMayGrant(caller.role, input.role);
  // A sandbox has no members of its own: its live workspace's members have their roles there.
  await assertNotSandbox(ctx.db, ctx.workspaceId, 'Inviting someone');
  const token = randomToken(32);
  const expiresAt = new Date(Date.now() + ctx.config.invitationDays * DAY_MS).toISOString();
  return withTransaction(ctx, async (tx) => {
    const workspace = await getWorkspace(tx, tx.workspaceId);
    const user = await findUserByEmail(tx, email);
    if (
      user &&
      (
        await tx.db
          .select({ id: memberships.id })
          .from(memberships)
          .where(inWorkspace(tx, memberships.workspaceId, eq(memberships.userId, user.id)))
      )[0]
    ) {
      throw new ConflictError('membership_exists', `${email} is already a member of this workspace`);
    }
    const [row] = await tx.db
      .insert(invitations)
      .values({ workspaceId: tx.workspaceId, email, role: input.role, tokenHash: sha256Hex(token), invitedBy: caller.userId, expiresAt })
      .returning();
    if (!row) throw new Error('the insert returned no row');
    await recordAudit(tx, {
      workspaceId: tx.workspaceId,
      action: 'invitation.created',
      target: { type: 'invitation', id: row.id },
      metadata: { email, role: input.role, expiresAt },
    });
    const publicUrl = tx.config.publicUrl.replace(/\/+$/, '');
    // The token travels in the fragment, which browsers never send, so it reaches no log.
    const text = [
      `You have been invited to join the workspace "${workspace.name}" as ${input.role}.`,
      '',
      `Accept the invitation: ${publicUrl}/invite#${token}`,
      '',
      `Or POST {"token": "${token}", "name": "...", "password": "..."} to ${publicUrl}/invitations/accept`,
      `(name and password are needed only if you do not have an account yet).`,
      `The invitation expires at ${expiresAt} and can be used once.`,
    ].join('\n');
    return {
      invitation: { id: row.id, email, role: row.role, expiresAt, token },
      email: { to: email, rendered: { subject: `You're invited to ${workspace.name}`, text }, secrets: [token] },
    };
  });
}

/**
 * Accepts an invitation by its token: creates the user when the invited email has no
 * account yet (a password is then required), or adds the membership to the existing user,
 * whose password must then be given: the token proves access to the mailbox at most, and the
 * inviting admin holds it too (the 201 hands it over). Without that check an admin could add
 * anyone with an account to their workspace unasked, or make the account of an email that
 * had none with a password of their own (accepting their own invitation), and then own every
 * membership another workspace later gave that email. A wrong password is 401
 * invalid_credentials, counted by the login throttle like a failed login. Unknown tokens are
 * 404 invitation_not_found; a token used once already is 410 invitation_used (single use:
 * the acceptedAt update is guarded, so two concurrent accepts cannot both succeed); past
 * expiresAt is 410 invitation_expired.
 */
export async function acceptInvitation(
  ctx: SystemContext,
  throttle: LoginThrottle,
  input: { token: string; name?: string | undefined; password?: string | undefined },
): Promise<InvitationAccepted> {
  const first = await usableInvitation(ctx, input.token);
  // Hash outside the transaction (it is slow); only needed when the account is new.
  let passwordHash: string | null = null;
  const account = await findUserByEmail(ctx, first.email);
  if (account) await provePassword(ctx, throttle, account, input.password);
  else {
    if (input.password === undefined) {
      throw new ValidationError('password_required', 'A password is needed to create your account', [
        { path: '/password', message: 'is required for a new account' },
      ]);
    }
    const problem = passwordProblem(input.password);
    if (problem) throw new ValidationError('invalid_password', `The password ${problem}`, [{ path: '/password', message: problem }]);
    passwordHash = await hashPassword(input.password);
  }
  return withTransaction(ctx, async (tx) => {
    const invitation = await usableInvitation(tx, input.token);
    const wctx: WorkspaceContext = { ...tx, workspaceId: invitation.workspaceId };
    const workspace = await getWorkspace(tx, invitation.workspaceId);
    let user = await findUserByEmail(tx, invitation.email);
    // An account made for the email since the check above has not had its password proven.
    if (user && user.id !== account?.id) {
      throw accountPasswordRequired();
    }
    const created = !user;
    if (!user) {
      if (passwordHash === null)
        throw new ValidationError('password_required', 'A password is needed to create your account', [
          { path: '/password', message: 'is required for a new account' },
        ]);
      [user] = await tx.db
        .insert(users)
        .values({ email: invitation.email, name: input.name?.trim() || null, passwordHash })
        .returning();
      if (!user) throw new Error('the insert returned no row');
    }
    const actor = { type: 'USER' as const, id: user.id, label: user.email };
    const audited = { ...wctx, actor };
    if (created) {
      await recordAudit(audited, { workspaceId: workspace.id, action: 'user.created', target: { type: 'user', id: user.id }, metadata: { email: user.email } });
    }
    const [existing] = await tx.db
      .select({ id: memberships.id })
      .from(memberships)
      .where(inWorkspace(wctx, memberships.workspaceId, eq(memberships.userId, user.id)));
    if (existing) throw new ConflictError('membership_exists', `${user.email} is already a member of this workspace`);
    const used = await tx.db
      .update(invitations)
      .set({ acceptedAt: nowIso() })
      .where(and(eq(invitations.id, invitation.id), isNull(invitations.acceptedAt)))
      .returning({ id: invitations.id });
    if (used.length !== 1) throw new AppError(410, 'invitation_used', 'This invitation has already been accepted');
    const [membership] = await tx.db.insert(memberships).values({ workspaceId: workspace.id, userId: user.id, role: invitation.role }).returning();
    if (!membership) throw new Error('the insert returned no row');
    await recordAudit(audited, {
      workspaceId: workspace.id,
      action: 'invitation.accepted',
      target: { type: 'invitation', id: invitation.id },
      metadata: { userId: user.id, email: user.email, role: invitation.role, membershipId: membership.id },
    });
    await recordAudit(audited, {
      workspaceId: workspace.id,
      action: 'membership.created',
      target: { type: 'membership', id: membership.id },
      metadata: { userId: user.id, email: user.email, role: invitation.role, invitationId: invitation.id },
    });
    return {
      user: userView(user),
      workspace: { id: workspace.id, name: workspace.name, plan: workspace.plan, role: membership.role },
      accountCreated: created,
    };
  });
}

const accountPasswordRequired = () =>
  new ValidationError('password_required', "You have an account: your account's password accepts the invitation", [
    { path: '/password', message: 'is required: the password of your account' },
  ]);

/** The existing account's own password, checked as a login checks it (throttled, constant time). */
async function provePassword(
  ctx: SystemContext,
  throttle: LoginThrottle,
  account: { email: string; passwordHash: string | null },
  password: string | undefined,
): Promise<void> {
  if (account.passwordHash === null) {
    throw new ValidationError('password_not_set', 'Your account has no password yet: set one (svc user passwd), then accept the invitation', [
      { path: '/password', message: 'the account has no password to check' },
    ]);
  }
  if (password === undefined) {
    throw accountPasswordRequired();
  }
  const release = await throttle.begin(ctx.ip);
  try {
    await throttle.check(account.email, ctx.ip);
    if (!(await verifyPassword(password, account.passwordHash))) {
      await throttle.fail(account.email, ctx.ip);
      throw new UnauthorizedError('invalid_credentials', 'The password is not the one of the account this invitation is for');
    }
    await throttle.succeed(account.email, ctx.ip);
  } finally {
    release();
  }
}

/** The invitation a token names, if it can still be accepted (the same refusals as accepting). */
async function usableInvitation(ctx: Pick<SystemContext, 'db'>, token: string): Promise<typeof invitations.$inferSelect> {
  const [row] = await ctx.db
    .select()
    .from(invitations)
    .where(eq(invitations.tokenHash, sha256Hex(token)));
  if (!row || row.revokedAt) throw new NotFoundError('invitation_not_found', 'No invitation has this token');
  if (row.acceptedAt) throw new AppError(410, 'invitation_used', 'This invitation has already been accepted');
  if (row.expiresAt <= nowIso()) throw new AppError(410, 'invitation_expired', 'This invitation has expired; ask for a new one');
  return row;
}

/** Reads an invitation by its token without using it: the accept page asks for a name and password only when the account is new. */
export async function inspectInvitation(ctx: SystemContext, token: string): Promise<InvitationInspected> {
  const row = await usableInvitation(ctx, token);
  const workspace = await getWorkspace(ctx, row.workspaceId);
  return {
    workspaceName: workspace.name,
    email: row.email,
    role: row.role,
    expiresAt: row.expiresAt,
    accountExists: (await findUserByEmail(ctx, row.email)) !== undefined,
  };
}

/** `GET /memberships/invitations`: the workspace's pending invitations (never their tokens), newest first. */
export async function listInvitations(ctx: WorkspaceContext, page: PageRequest): Promise<Page<InvitationView & { createdAt: string }>> {
  const after = decodeCursor(page.cursor);
  const rows = await ctx.db
    .select({ id: invitations.id, email: invitations.email, role: invitations.role, expiresAt: invitations.expiresAt, createdAt: invitations.createdAt })
    .from(invitations)
    .where(
      inWorkspace(
        ctx,
        invitations.workspaceId,
        isNull(invitations.acceptedAt),
        isNull(invitations.revokedAt),
        gt(invitations.expiresAt, nowIso()),
        after === undefined ? undefined : lt(invitations.id, after),
      ),
    )
    .orderBy(desc(invitations.id))
    .limit(page.limit + 1);
  return toPage(rows, page.limit, (r) => r);
}

/** `DELETE /memberships/invitations/:id`: withdraws a pending invitation; its token stops working at once. */
export async function revokeInvitation(ctx: WorkspaceContext, id: number): Promise<void> {
  await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .select({ id: invitations.id, email: invitations.email, acceptedAt: invitations.acceptedAt, revokedAt: invitations.revokedAt })
      .from(invitations)
      .where(inWorkspace(tx, invitations.workspaceId, eq(invitations.id, id)));
    if (!row || row.revokedAt) throw new NotFoundError('invitation_not_found', `No invitation with id ${id}`);
    if (row.acceptedAt) throw new ConflictError('invitation_used', 'This invitation has already been accepted; remove the membership instead');
    await tx.db
      .update(invitations)
      .set({ revokedAt: nowIso() })
      .where(and(eq(invitations.id, id), isNull(invitations.acceptedAt)));
    await recordAudit(tx, { workspaceId: tx.workspaceId, action: 'invitation.revoked', target: { type: 'invitation', id }, metadata: { email: row.email } });
  });
}
