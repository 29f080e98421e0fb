import { and, asc, eq, isNull } from 'drizzle-orm';
import { SignJWT, errors as joseErrors, jwtVerify } from 'jose';
import { recordAudit } from '../audit.js';
import { nowIso, withTransaction, type SystemContext } from '../context.js';
import { randomBase62, randomToken, sha256Hex, verifyPassword } from '../crypto.js';
import { memberships, sessions, users, workspaces, type Plan, type Role } from '../db/schema.js';
import { AppError, RateLimitError, UnauthorizedError } from '../errors.js';
import { findApiKey, isWellFormedApiKey, looksLikeApiKey, touchApiKey } from './apiKeys.js';
import { minimumPlanForKeyRole, planAtLeast } from '../roles.js';
import { normalizeEmail } from '../validation.js';
import type { UserView } from './users.js';

export const ACCESS_TOKEN_SECONDS = 15 * 60;
export const REFRESH_TOKEN_DAYS = 30;
const JWT_ALG = 'HS256';
const JWT_ISSUER = 'svc';

/** Who is calling, resolved from a bearer token on every request. */
export interface Principal {
  kind: 'user' | 'api_key';
  workspaceId: number;
  role: Role;
  plan: Plan;
  userId: number | null;
  apiKeyId: number | null;
  isSuperAdmin: boolean;
  label: string;
}

export interface LoginResult {
  token: string;
  expiresIn: number;
  refreshToken: string;
  user: UserView;
  workspace: { id: number; name: string; plan: Plan; role: Role };
}

function jwtKey(ctx: Pick<SystemContext, 'config'>): Uint8Array {
  return new TextEncoder().encode(ctx.config.secrets.jwtSecret);
}

const invalidCredentials = () => new UnauthorizedError('invalid_credentials', 'The email or password is wrong');

/**
 * Counts failed logins per email and per source address in a sliding window. Kept in
 * memory: it slows guessing against one process, and a restart forgets only failures.
 */
export class LoginThrottle {
  private readonly failures = new Map<string, number[]>();
  constructor(
    private readonly maxFailures: number,
    private readonly windowMs = 15 * 60_000,
  ) {}

  private recent(key: string, now: number): number[] {
    const list = (this.failures.get(key) ?? []).filter((t) => now - t < this.windowMs);
    if (list.length) this.failures.set(key, list);
    else this.failures.delete(key);
    return list;
  }

  check(keys: string[], now = Date.now()): void {
    for (const key of keys) {
      const list = this.recent(key, now);
      if (list.length >= this.maxFailures) {
        const retryAfter = (list[0]! + this.windowMs - now) / 1000;
        throw new RateLimitError('too_many_login_attempts', 'Too many failed logins; try again later', retryAfter);
      }
    }
  }

  fail(keys: string[], now = Date.now()): void {
    if (this.failures.size > 100_000) this.failures.clear();
    for (const key of keys) this.failures.set(key, [...this.recent(key, now), now]);
  }

  succeed(keys: string[]): void {
    for (const key of keys) if (key.startsWith('email:')) this.failures.delete(key);
  }
}

async function signAccessToken(ctx: Pick<SystemContext, 'config'>, userId: number, workspaceId: number, role: Role): Promise<string> {
  return new SignJWT({ wid: workspaceId, role })
    .setProtectedHeader({ alg: JWT_ALG, typ: 'JWT' })
    .setSubject(String(userId))
    .setIssuer(JWT_ISSUER)
    .setIssuedAt()
    .setJti(randomBase62(16))
    .setExpirationTime(`${ACCESS_TOKEN_SECONDS}s`)
    .sign(jwtKey(ctx));
}

interface MembershipRow {
  workspaceId: number;
  name: string;
  plan: Plan;
  role: Role;
}

function membershipsOf(ctx: Pick<SystemContext, 'db'>, userId: number): MembershipRow[] {
  return ctx.db
    .select({ workspaceId: workspaces.id, name: workspaces.name, plan: workspaces.plan, role: memberships.role })
    .from(memberships)
    .innerJoin(workspaces, eq(workspaces.id, memberships.workspaceId))
    .where(eq(memberships.userId, userId))
    .orderBy(asc(memberships.id))
    .all();
}

function issueRefreshToken(ctx: SystemContext, userId: number, workspaceId: number, familyId: string): string {
  const token = randomToken(32);
  const expiresAt = new Date(Date.now() + REFRESH_TOKEN_DAYS * 86_400_000).toISOString();
  ctx.db.insert(sessions).values({ familyId, userId, workspaceId, tokenHash: sha256Hex(token), expiresAt }).run();
  return token;
}

export async function login(
  ctx: SystemContext,
  throttle: LoginThrottle,
  input: { email: string; password: string; workspaceId?: number | undefined },
): Promise<LoginResult> {
  const email = normalizeEmail(input.email) ?? input.email.trim().toLowerCase();
  const keys = [`email:${email}`, ...(ctx.ip ? [`ip:${ctx.ip}`] : [])];
  throttle.check(keys);
  const user = ctx.db.select().from(users).where(eq(users.email, email)).get();
  // Always verify, against a dummy hash for unknown users, so both failures take the same time.
  const ok = await verifyPassword(input.password, user?.passwordHash);
  if (!user || !ok) {
    throttle.fail(keys);
    throw invalidCredentials();
  }
  const all = membershipsOf(ctx, user.id);
  const chosen = input.workspaceId === undefined ? all[0] : all.find((m) => m.workspaceId === input.workspaceId);
  if (!chosen) {
    throttle.fail(keys);
    throw input.workspaceId === undefined
      ? new AppError(403, 'no_workspace', 'This user belongs to no workspace')
      : new AppError(403, 'not_a_member', `This user is not a member of workspace ${input.workspaceId}`);
  }
  throttle.succeed(keys);
  const token = await signAccessToken(ctx, user.id, chosen.workspaceId, chosen.role);
  const refreshToken = withTransaction(ctx, (tx) => {
    const rt = issueRefreshToken(tx, user.id, chosen.workspaceId, randomToken(16));
    recordAudit({ ...tx, actor: { type: 'USER', id: user.id, label: user.email } }, {
      workspaceId: chosen.workspaceId,
      action: 'auth.login',
      target: { type: 'user', id: user.id },
    });
    return rt;
  });
  return {
    token,
    expiresIn: ACCESS_TOKEN_SECONDS,
    refreshToken,
    user: { id: user.id, email: user.email, name: user.name, isSuperAdmin: user.isSuperAdmin },
    workspace: { id: chosen.workspaceId, name: chosen.name, plan: chosen.plan, role: chosen.role },
  };
}

const invalidRefresh = () => new UnauthorizedError('invalid_refresh_token', 'The session has ended; log in again');

/**
 * Rotates a refresh token. A token that was already rotated is a sign of theft: the
 * whole family (every token descended from that login) is revoked.
 */
export async function refresh(ctx: SystemContext, refreshToken: string | undefined): Promise<{ token: string; expiresIn: number; refreshToken: string }> {
  if (!refreshToken) throw invalidRefresh();
  const outcome = withTransaction(ctx, (tx) => {
    const row = tx.db.select().from(sessions).where(eq(sessions.tokenHash, sha256Hex(refreshToken))).get();
    if (!row || row.revokedAt || row.expiresAt <= nowIso()) return { error: true as const };
    const actor = { type: 'USER' as const, id: row.userId, label: null };
    if (row.rotatedAt) {
      tx.db.update(sessions).set({ revokedAt: nowIso() }).where(and(eq(sessions.familyId, row.familyId), isNull(sessions.revokedAt))).run();
      recordAudit({ ...tx, actor }, { workspaceId: row.workspaceId, action: 'auth.refresh_reuse_detected', target: { type: 'user', id: row.userId } });
      return { error: true as const };
    }
    const membership = tx.db
      .select({ role: memberships.role })
      .from(memberships)
      .where(and(eq(memberships.userId, row.userId), eq(memberships.workspaceId, row.workspaceId)))
      .get();
    if (!membership) return { error: true as const };
    tx.db.update(sessions).set({ rotatedAt: nowIso() }).where(eq(sessions.id, row.id)).run();
    const next = issueRefreshToken(tx, row.userId, row.workspaceId, row.familyId);
    return { error: false as const, next, userId: row.userId, workspaceId: row.workspaceId, role: membership.role };
  });
  if (outcome.error) throw invalidRefresh();
  const token = await signAccessToken(ctx, outcome.userId, outcome.workspaceId, outcome.role);
  return { token, expiresIn: ACCESS_TOKEN_SECONDS, refreshToken: outcome.next };
}

/** Ends the session family of this refresh token. Unknown tokens end nothing and are not an error. */
export function logout(ctx: SystemContext, refreshToken: string | undefined): void {
  if (!refreshToken) return;
  withTransaction(ctx, (tx) => {
    const row = tx.db.select().from(sessions).where(eq(sessions.tokenHash, sha256Hex(refreshToken))).get();
    if (!row) return;
    tx.db.update(sessions).set({ revokedAt: nowIso() }).where(and(eq(sessions.familyId, row.familyId), isNull(sessions.revokedAt))).run();
    recordAudit({ ...tx, actor: { type: 'USER', id: row.userId, label: null } }, { workspaceId: row.workspaceId, action: 'auth.logout', target: { type: 'user', id: row.userId } });
  });
}

const invalidToken = (detail = 'The access token is invalid or has expired') => new UnauthorizedError('invalid_token', detail);

async function authenticateJwt(ctx: Pick<SystemContext, 'db' | 'config'>, token: string): Promise<Principal> {
  let payload;
  try {
    ({ payload } = await jwtVerify(token, jwtKey(ctx), { algorithms: [JWT_ALG], issuer: JWT_ISSUER, requiredClaims: ['exp', 'sub'] }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw new UnauthorizedError('token_expired', 'The access token has expired; refresh it or log in again');
    throw invalidToken();
  }
  const userId = Number(payload.sub);
  const workspaceId = payload.wid;
  if (!Number.isSafeInteger(userId) || typeof workspaceId !== 'number' || !Number.isSafeInteger(workspaceId)) throw invalidToken();
  // The role comes from the membership as it is now, so a demotion or removal applies at once.
  const row = ctx.db
    .select({ role: memberships.role, plan: workspaces.plan, email: users.email, isSuperAdmin: users.isSuperAdmin })
    .from(memberships)
    .innerJoin(users, eq(users.id, memberships.userId))
    .innerJoin(workspaces, eq(workspaces.id, memberships.workspaceId))
    .where(and(eq(memberships.userId, userId), eq(memberships.workspaceId, workspaceId)))
    .get();
  if (!row) throw invalidToken('The user is no longer a member of this workspace');
  return { kind: 'user', workspaceId, role: row.role, plan: row.plan, userId, apiKeyId: null, isSuperAdmin: row.isSuperAdmin, label: row.email };
}

function authenticateApiKey(ctx: Pick<SystemContext, 'db'>, key: string): Principal {
  if (!isWellFormedApiKey(key)) throw new UnauthorizedError('invalid_api_key', 'The API key is malformed');
  const found = findApiKey(ctx, key);
  if (!found) throw new UnauthorizedError('invalid_api_key', 'The API key is not valid');
  if (found.revoked) throw new UnauthorizedError('api_key_revoked', 'The API key has been revoked');
  if (!planAtLeast(found.plan, minimumPlanForKeyRole(found.role))) {
    throw new UnauthorizedError('api_key_plan_restricted', `${found.role} keys do not authenticate on the ${found.plan} plan; raise the plan or use a VIEWER key`);
  }
  touchApiKey(ctx, found.id);
  return { kind: 'api_key', workspaceId: found.workspaceId, role: found.role, plan: found.plan, userId: null, apiKeyId: found.id, isSuperAdmin: false, label: found.name };
}

/** Resolves the value of an Authorization header to a principal, or throws 401. */
export async function authenticate(ctx: Pick<SystemContext, 'db' | 'config'>, authorization: string | undefined): Promise<Principal> {
  if (!authorization) throw new UnauthorizedError('missing_credentials', 'Send Authorization: Bearer <token or API key>');
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(authorization);
  if (!match) throw new UnauthorizedError('invalid_authorization', 'The Authorization header must be "Bearer <token>"');
  const token = match[1]!;
  return looksLikeApiKey(token) ? authenticateApiKey(ctx, token) : authenticateJwt(ctx, token);
}
