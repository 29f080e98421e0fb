import { and, asc, eq, gt, isNull } from 'drizzle-orm';
import { createHmac } from 'node:crypto';
import { SignJWT, errors as joseErrors, jwtVerify, type JWTPayload } from 'jose';
import { recordAudit } from '../audit.js';
import { nowIso, withTransaction, type SystemContext, type WorkspaceContext } from '../context.js';
import { hashPassword, randomBase62, randomToken, sha256Hex, verifyPassword } from '../crypto.js';
import { memberships, sessions, users, workspaces, type Plan, type Role } from '../db/schema.js';
import { AppError, ForbiddenError, RateLimitError, UnauthorizedError, ValidationError } from '../errors.js';
import { findApiKey, isTestKey, isWellFormedApiKey, looksLikeApiKey, touchApiKey } from './apiKeys.js';
import { minimumPlanForKeyRole, planAtLeast } from '../roles.js';
import { normalizeEmail, passwordProblem } from '../validation.js';
import { LocalWindows, WindowCounter, type WindowRule, type Windows } from '../rateLimit.js';
import { Places, PlacesByKey } from '../places.js';
import { endSessions, type UserView } from './users.js';

export const ACCESS_TOKEN_SECONDS = 15 * 60;
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
  /** For a user: the session (refresh family) the access token was minted in. */
  sessionId: string | null;
  /** The workspace is a sandbox (reached with `svc_test_` keys or a session switched into it). */
  sandbox: boolean;
}

export interface LoginResult {
  token: string;
  expiresIn: number;
  refreshToken: string;
  /** Seconds the session has left (the refresh cookie's Max-Age). */
  refreshMaxAge: number;
  user: UserView;
  workspace: { id: number; name: string; plan: Plan; role: Role };
}

function jwtKey(ctx: Pick<SystemContext, 'config'>): Uint8Array {
  return new TextEncoder().encode(ctx.config.secrets.jwtSecret);
}

const invalidCredentials = () => new UnauthorizedError('invalid_credentials', 'The email or password is wrong');

interface ThrottleRule extends WindowRule {
  prefix: string;
}

/** Password checks under way at once from one address (LoginThrottle.begin). */
export const MAX_CHECKS_PER_ADDRESS = 4;
/** Logins of one address waiting for a place; one more is refused (429) at once. */
export const MAX_WAITING_PER_ADDRESS = 100;
/** Password checks under way at once on a node: a few per thread of the pool that runs scrypt. */
const MAX_CHECKS_IN_ALL = 16;
/** Logins of all addresses waiting for a place on the node; one more is refused (429). */
const MAX_WAITING_IN_ALL = 1_000;

/**
 * Counts failed logins in sliding windows, by three keys: the pair (email, source address),
 * which slows one guesser at once (`maxFailures` per window); the email alone with a
 * slower limit (twice as many per four windows), which bounds guessing from many
 * addresses without letting one address lock a user out; and the address alone with a
 * higher limit (five times as many per window), which slows spraying one password over
 * many emails. The windows are the node's own, in memory and bounded (see WindowCounter),
 * so a flood of made-up emails can neither grow them nor wipe everyone's counts; or, on a
 * cluster, Redis's (core/redis.ts), so that the nodes count together.
 */
export class LoginThrottle {
  private readonly failures: Windows;
  /** Places for password checks on this node, by source address and in all (see begin). */
  private readonly byAddress = new PlacesByKey(MAX_CHECKS_PER_ADDRESS, MAX_WAITING_PER_ADDRESS);
  private readonly inAll = new Places(MAX_CHECKS_IN_ALL, MAX_WAITING_IN_ALL);
  private readonly rules: { pair: ThrottleRule; email: ThrottleRule; address: ThrottleRule };

  constructor(maxFailures: number, windowMs = 15 * 60_000, opts: { maxEntries?: number; windows?: Windows } = {}) {
    this.rules = {
      pair: { prefix: 'pair', limit: maxFailures, windowMs },
      email: { prefix: 'email', limit: maxFailures * 2, windowMs: 4 * windowMs },
      address: { prefix: 'ip', limit: maxFailures * 5, windowMs },
    };
    this.failures = opts.windows ?? new LocalWindows(new WindowCounter(opts.maxEntries ?? 50_000));
  }

  /** How many keys this node holds in memory (for tests and metrics). */
  get size(): number {
    return this.failures instanceof LocalWindows ? this.failures.counter.size : 0;
  }

  private keys(email: string, ip: string | null): { key: string; rule: ThrottleRule }[] {
    const { pair, email: byEmail, address } = this.rules;
    return [
      { key: `${pair.prefix}:${email}\u0000${ip ?? ''}`, rule: pair },
      { key: `${byEmail.prefix}:${email}`, rule: byEmail },
      ...(ip ? [{ key: `${address.prefix}:${ip}`, rule: address }] : []),
    ];
  }

  /** Throws 429 (with Retry-After) when any count is at its limit. */
  async check(email: string, ip: string | null, now = Date.now()): Promise<void> {
    const waits = await Promise.all(this.keys(email, ip).map(({ key, rule }) => this.failures.retryAfter(key, rule, now)));
    const wait = Math.max(...waits);
    if (wait > 0) throw new RateLimitError('too_many_login_attempts', 'Too many failed logins; try again later', wait);
  }

  async fail(email: string, ip: string | null, now = Date.now()): Promise<void> {
    await Promise.all(this.keys(email, ip).map(({ key, rule }) => this.failures.add(key, rule, now)));
  }

  /**
   * Waits for a place for one login's password check: MAX_CHECKS_PER_ADDRESS at once from one
   * address and MAX_CHECKS_IN_ALL on the node, the others waiting in order (refused, 429, only
   * past MAX_WAITING_PER_ADDRESS or MAX_WAITING_IN_ALL waiting). The failure counts are read
   * (check) once the place is held, and a failure is counted before it is given back: so a
   * burst of concurrent guesses is counted as it goes, at most the limit plus the places of
   * its address slipping past, where without places every one of them would pass check()
   * before the first failure was counted, each an scrypt of 32 MiB on Node's shared thread
   * pool. Answers the release.
   */
  async begin(ip: string | null): Promise<() => void> {
    const turn = this.byAddress.take(ip ?? '');
    if (!turn) throw new RateLimitError('too_many_login_attempts', 'Too many logins at once from this address; try again in a moment', 1);
    const releaseMine = await turn;
    const turnInAll = this.inAll.take();
    if (!turnInAll) {
      releaseMine();
      throw new RateLimitError('too_many_login_attempts', 'Too many logins at once; try again in a moment', 1);
    }
    await turnInAll;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inAll.give();
      releaseMine();
    };
  }

  /** A successful login clears its (email, address) count; the email's count runs out by itself. */
  async succeed(email: string, ip: string | null): Promise<void> {
    await this.failures.delete(this.keys(email, ip)[0]!.key);
  }
}

/** An access token names its session (`sid`, the refresh family), so ending the session ends it too. */
async function signAccessToken(ctx: Pick<SystemContext, 'config'>, userId: number, workspaceId: number, role: Role, sessionId: string): Promise<string> {
  return new SignJWT({ wid: workspaceId, role, sid: sessionId })
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

function membershipsOf(ctx: Pick<SystemContext, 'db'>, userId: number): Promise<MembershipRow[]> {
  return ctx.db
    .select({ workspaceId: workspaces.id, name: workspaces.name, plan: workspaces.plan, role: memberships.role })
    .from(memberships)
    .innerJoin(workspaces, eq(workspaces.id, memberships.workspaceId))
    .where(eq(memberships.userId, userId))
    .orderBy(asc(memberships.id));
}

/**
 * The user's membership in one workspace. Members of a live workspace have the same role in
 * its sandbox (a sandbox has no members of its own), so for a sandbox this is the membership
 * in its live twin, named with the sandbox's id, name and plan.
 */
async function membershipIn(ctx: Pick<SystemContext, 'db'>, userId: number, workspaceId: number): Promise<(MembershipRow & { sandbox: boolean }) | undefined> {
  const [w] = await ctx.db
    .select({ id: workspaces.id, name: workspaces.name, plan: workspaces.plan, sandboxOf: workspaces.sandboxOf })
    .from(workspaces)
    .where(eq(workspaces.id, workspaceId));
  if (!w) return undefined;
  const [m] = await ctx.db
    .select({ role: memberships.role })
    .from(memberships)
    .where(and(eq(memberships.userId, userId), eq(memberships.workspaceId, w.sandboxOf ?? w.id)));
  return m && { workspaceId: w.id, name: w.name, plan: w.plan, role: m.role, sandbox: w.sandboxOf !== null };
}

/**
 * Stores a refresh token of a session family. `expiresAt` is the family's absolute end,
 * fixed at login (config.sessionMaxDays) and inherited by every rotation, so refreshing
 * never makes a session outlive it.
 */
async function issueRefreshToken(
  ctx: SystemContext,
  userId: number,
  workspaceId: number,
  familyId: string,
  expiresAt: string,
  token = randomToken(32),
): Promise<string> {
  await ctx.db.insert(sessions).values({ familyId, userId, workspaceId, tokenHash: sha256Hex(token), expiresAt });
  return token;
}

/**
 * The one token a refresh token rotates into: an HMAC of it under the server's secret, so that
 * presenting it again within the grace answers that same successor (API.md section 8), not a
 * new one each time: one line of tokens per session, never parallel ones that each live on. As
 * unguessable as a random token without both the token and the secret.
 */
function successorOf(ctx: Pick<SystemContext, 'config'>, token: string): string {
  return createHmac('sha256', ctx.config.secrets.jwtSecret).update(`svc-refresh-successor\u0000${token}`).digest('base64url');
}

/**
 * The token a reuse within the grace is answered with: the newest of the line its successors
 * make (a tab may have refreshed twice), never a rotated one whose next use would be reuse.
 * `issued`: it is stored already; null: the line was revoked.
 */
async function newestOfLine(ctx: SystemContext, token: string): Promise<{ token: string; issued: boolean } | null> {
  let next = successorOf(ctx, token);
  for (let hop = 0; hop < 32; hop++) {
    const [successor] = await ctx.db
      .select({ revokedAt: sessions.revokedAt, rotatedAt: sessions.rotatedAt })
      .from(sessions)
      .where(eq(sessions.tokenHash, sha256Hex(next)));
    if (!successor) return { token: next, issued: false };
    if (successor.revokedAt) return null;
    if (!successor.rotatedAt) return { token: next, issued: true };
    next = successorOf(ctx, next);
  }
  return { token: next, issued: false };
}

/** Seconds until an ISO time (at least 0), for the refresh cookie's Max-Age. */
function secondsUntil(iso: string): number {
  return Math.max(0, Math.floor((Date.parse(iso) - Date.now()) / 1000));
}

type UserRow = typeof users.$inferSelect;

/**
 * Opens a session family for a user in one of their workspaces: a refresh token (stored
 * hashed, ending at `expiresAt`) and an access token. `alsoInTransaction` runs in the same
 * transaction (the audit entry, ending a replaced session).
 */
async function openSession(
  ctx: SystemContext,
  user: UserRow,
  chosen: MembershipRow,
  expiresAt: string,
  alsoInTransaction: (tx: SystemContext) => Promise<void> = async () => {},
): Promise<LoginResult> {
  const familyId = randomToken(16);
  const refreshToken = await withTransaction(ctx, async (tx) => {
    await alsoInTransaction(tx);
    return issueRefreshToken(tx, user.id, chosen.workspaceId, familyId, expiresAt);
  });
  return {
    token: await signAccessToken(ctx, user.id, chosen.workspaceId, chosen.role, familyId),
    expiresIn: ACCESS_TOKEN_SECONDS,
    refreshToken,
    refreshMaxAge: secondsUntil(expiresAt),
    user: { id: user.id, email: user.email, name: user.name, isSuperAdmin: user.isSuperAdmin },
    workspace: { id: chosen.workspaceId, name: chosen.name, plan: chosen.plan, role: chosen.role },
  };
}

const newSessionEnd = (ctx: Pick<SystemContext, 'config'>) => new Date(Date.now() + ctx.config.sessionMaxDays * 86_400_000).toISOString();

export async function login(
  ctx: SystemContext,
  throttle: LoginThrottle,
  input: { email: string; password: string; workspaceId?: number | undefined },
): Promise<LoginResult> {
  const email = normalizeEmail(input.email) ?? input.email.trim().toLowerCase();
  const release = await throttle.begin(ctx.ip);
  let user: typeof users.$inferSelect | undefined;
  let chosen: MembershipRow | undefined;
  try {
    await throttle.check(email, ctx.ip);
    [user] = await ctx.db.select().from(users).where(eq(users.email, email));
    // Always verify, against a dummy hash for unknown users, so both failures take the same time.
    const ok = await verifyPassword(input.password, user?.passwordHash);
    if (!user || !ok) {
      await throttle.fail(email, ctx.ip);
      throw invalidCredentials();
    }
    chosen = input.workspaceId === undefined ? (await membershipsOf(ctx, user.id))[0] : await membershipIn(ctx, user.id, input.workspaceId);
    if (!chosen) {
      await throttle.fail(email, ctx.ip);
      throw input.workspaceId === undefined
        ? new AppError(403, 'no_workspace', 'This user belongs to no workspace')
        : new AppError(403, 'not_a_member', `This user is not a member of workspace ${input.workspaceId}`);
    }
    await throttle.succeed(email, ctx.ip);
  } finally {
    release();
  }
  return openSession(ctx, user, chosen, newSessionEnd(ctx), (tx) =>
    recordAudit(
      { ...tx, actor: { type: 'USER', id: user.id, label: user.email } },
      {
        workspaceId: chosen.workspaceId,
        action: 'auth.login',
        target: { type: 'user', id: user.id },
      },
    ),
  );
}

/**
 * `POST /auth/password`: a signed-in user changes their own password. The current one is
 * checked (401 invalid_credentials, counted by the login throttle like a failed login);
 * every other session of the user ends, the caller's own (`keepSession`) stays.
 */
export async function changePassword(
  ctx: WorkspaceContext,
  throttle: LoginThrottle,
  principal: Principal,
  input: { currentPassword: string; newPassword: string },
): Promise<{ sessionsEnded: number }> {
  if (principal.kind !== 'user' || principal.userId === null) throw new ForbiddenError('Only a signed-in user can change a password; API keys have none');
  const problem = passwordProblem(input.newPassword);
  if (problem) throw new ValidationError('invalid_password', `The new password ${problem}`, [{ path: '/newPassword', message: problem }]);
  const [user] = await ctx.db.select().from(users).where(eq(users.id, principal.userId));
  if (!user) throw invalidToken();
  await throttle.check(user.email, ctx.ip);
  if (!(await verifyPassword(input.currentPassword, user.passwordHash))) {
    await throttle.fail(user.email, ctx.ip);
    throw new UnauthorizedError('invalid_credentials', 'The current password is wrong');
  }
  const passwordHash = await hashPassword(input.newPassword);
  return withTransaction(ctx, async (tx) => {
    await tx.db.update(users).set({ passwordHash, updatedAt: nowIso() }).where(eq(users.id, user.id));
    const sessionsEnded = await endSessions(tx, user.id, { exceptFamily: principal.sessionId });
    await recordAudit(tx, { workspaceId: tx.workspaceId, action: 'user.password_changed', target: { type: 'user', id: user.id }, metadata: { sessionsEnded } });
    return { sessionsEnded };
  });
}

/** How long a rotated refresh token may still be presented by another tab (API.md section 8). */
export const REFRESH_REUSE_GRACE_MS = 10_000;

const invalidRefresh = () => new UnauthorizedError('invalid_refresh_token', 'The session has ended; log in again');

/**
 * Rotates a refresh token. A token that was already rotated more than
 * REFRESH_REUSE_GRACE_MS ago is a sign of theft: the whole family (every token descended
 * from that login) is revoked.
 */
export async function refresh(
  ctx: SystemContext,
  refreshToken: string | undefined,
): Promise<{ token: string; expiresIn: number; refreshToken: string; refreshMaxAge: number }> {
  if (!refreshToken) throw invalidRefresh();
  const outcome = await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .select()
      .from(sessions)
      .where(eq(sessions.tokenHash, sha256Hex(refreshToken)));
    if (!row || row.revokedAt || row.expiresAt <= nowIso()) return { error: true as const };
    const actor = { type: 'USER' as const, id: row.userId, label: null };
    // Tabs of one browser share one cookie: a token presented again within the grace after
    // its rotation (another tab refreshing at the same moment) is answered with its successor
    // instead of ending the family. Later reuse is theft and ends it.
    const inGrace = row.rotatedAt !== null && Date.parse(row.rotatedAt) > Date.now() - REFRESH_REUSE_GRACE_MS;
    if (row.rotatedAt && !inGrace) {
      await tx.db
        .update(sessions)
        .set({ revokedAt: nowIso() })
        .where(and(eq(sessions.familyId, row.familyId), isNull(sessions.revokedAt)));
      await recordAudit({ ...tx, actor }, { workspaceId: row.workspaceId, action: 'auth.refresh_reuse_detected', target: { type: 'user', id: row.userId } });
      return { error: true as const };
    }
    const membership = await membershipIn(tx, row.userId, row.workspaceId);
    if (!membership) return { error: true as const };
    if (!inGrace) await tx.db.update(sessions).set({ rotatedAt: nowIso() }).where(eq(sessions.id, row.id));
    const line = inGrace ? await newestOfLine(tx, refreshToken) : { token: successorOf(tx, refreshToken), issued: false };
    if (line === null) return { error: true as const };
    const next = line.token;
    if (!line.issued) await issueRefreshToken(tx, row.userId, row.workspaceId, row.familyId, row.expiresAt, next);
    return {
      error: false as const,
      next,
      userId: row.userId,
      workspaceId: row.workspaceId,
      role: membership.role,
      familyId: row.familyId,
      expiresAt: row.expiresAt,
    };
  });
  if (outcome.error) throw invalidRefresh();
  const token = await signAccessToken(ctx, outcome.userId, outcome.workspaceId, outcome.role, outcome.familyId);
  return { token, expiresIn: ACCESS_TOKEN_SECONDS, refreshToken: outcome.next, refreshMaxAge: secondsUntil(outcome.expiresAt) };
}

/**
 * Ends a session family: the one of this refresh token (the console's cookie), else the one
 * the access token was minted in (an API client that keeps no cookie). Unknown refresh tokens
 * end nothing and are not an error; an API key has no session to end (422).
 */
export async function logout(ctx: SystemContext, refreshToken: string | undefined, principal?: Principal): Promise<void> {
  if (!refreshToken && principal?.kind === 'api_key')
    throw new ValidationError('not_a_session', 'An API key has no session to end: revoke it with DELETE /api-keys/:id');
  const sessionId = principal?.kind === 'user' ? principal.sessionId : null;
  if (!refreshToken && !sessionId) return;
  await withTransaction(ctx, async (tx) => {
    const [row] = await tx.db
      .select()
      .from(sessions)
      .where(refreshToken ? eq(sessions.tokenHash, sha256Hex(refreshToken)) : eq(sessions.familyId, sessionId!))
      .limit(1);
    if (!row) return;
    await tx.db
      .update(sessions)
      .set({ revokedAt: nowIso() })
      .where(and(eq(sessions.familyId, row.familyId), isNull(sessions.revokedAt)));
    const [user] = await tx.db.select({ email: users.email }).from(users).where(eq(users.id, row.userId));
    await recordAudit(
      { ...tx, actor: { type: 'USER', id: row.userId, label: user?.email ?? null } },
      { workspaceId: row.workspaceId, action: 'auth.logout', target: { type: 'user', id: row.userId } },
    );
  });
}

const invalidToken = (detail = 'The access token is invalid or has expired') => new UnauthorizedError('invalid_token', detail);

async function authenticateJwt(ctx: Pick<SystemContext, 'db' | 'config'>, token: string): Promise<Principal> {
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(token, jwtKey(ctx), { algorithms: [JWT_ALG], issuer: JWT_ISSUER, requiredClaims: ['exp', 'sub'] }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw new UnauthorizedError('token_expired', 'The access token has expired; refresh it or log in again');
    throw invalidToken();
  }
  const userId = Number(payload.sub);
  const workspaceId = payload.wid;
  const sessionId = payload.sid;
  if (!Number.isSafeInteger(userId) || typeof workspaceId !== 'number' || !Number.isSafeInteger(workspaceId) || typeof sessionId !== 'string')
    throw invalidToken();
  // A session ended by logout, a password change, a removal or its age ends its access tokens too.
  const [live] = await ctx.db
    .select({ id: sessions.id })
    .from(sessions)
    .where(and(eq(sessions.familyId, sessionId), eq(sessions.userId, userId), isNull(sessions.revokedAt), gt(sessions.expiresAt, nowIso())))
    .limit(1);
  if (!live) throw new UnauthorizedError('session_ended', 'The session has ended; log in again');
  // The role comes from the membership as it is now, so a demotion or removal applies at once
  // (for a sandbox: the membership in its live twin).
  const membership = await membershipIn(ctx, userId, workspaceId);
  const user = membership && (await ctx.db.select({ email: users.email, isSuperAdmin: users.isSuperAdmin }).from(users).where(eq(users.id, userId)))[0];
  if (!membership || !user) throw invalidToken('The user is no longer a member of this workspace');
  return {
    kind: 'user',
    workspaceId,
    role: membership.role,
    plan: membership.plan,
    userId,
    apiKeyId: null,
    isSuperAdmin: user.isSuperAdmin,
    label: user.email,
    sessionId,
    sandbox: membership.sandbox,
  };
}

async function authenticateApiKey(ctx: Pick<SystemContext, 'db' | 'store'>, key: string): Promise<Principal> {
  if (!isWellFormedApiKey(key)) throw new UnauthorizedError('invalid_api_key', 'The API key is malformed');
  const found = await findApiKey(ctx, key);
  if (!found) throw new UnauthorizedError('invalid_api_key', 'The API key is not valid');
  // A key acts only on its own side: svc_test_ keys on sandboxes, svc_live_ keys on live workspaces.
  if (found.sandbox !== isTestKey(key)) throw new UnauthorizedError('invalid_api_key', 'The API key is not valid');
  if (found.revoked) throw new UnauthorizedError('api_key_revoked', 'The API key has been revoked');
  if (!planAtLeast(found.plan, minimumPlanForKeyRole(found.role))) {
    throw new UnauthorizedError(
      'api_key_plan_restricted',
      `${found.role} keys do not authenticate on the ${found.plan} plan; raise the plan or use a VIEWER key`,
    );
  }
  await touchApiKey(ctx, found.id);
  return {
    kind: 'api_key',
    workspaceId: found.workspaceId,
    role: found.role,
    plan: found.plan,
    userId: null,
    apiKeyId: found.id,
    isSuperAdmin: false,
    label: found.name,
    sessionId: null,
    sandbox: found.sandbox,
  };
}

/** Resolves the value of an Authorization header to a principal, or throws 401. */
export async function authenticate(deps: Pick<SystemContext, 'store' | 'config'>, authorization: string | undefined): Promise<Principal> {
  const ctx = { db: deps.store.db, store: deps.store, config: deps.config };
  if (!authorization) throw new UnauthorizedError('missing_credentials', 'Send Authorization: Bearer <token or API key>');
  const match = /^Bearer[ ]+(\S+)\s*$/i.exec(authorization);
  if (!match) throw new UnauthorizedError('invalid_authorization', 'The Authorization header must be "Bearer <token>"');
  const token = match[1]!;
  return looksLikeApiKey(token) ? authenticateApiKey(ctx, token) : authenticateJwt(ctx, token);
}

/** `GET /auth/me`: who is calling, in which workspace, and which other workspaces they may switch to. */
export interface MeView {
  user: { id: number; email: string; name: string | null } | null;
  /** Set when the caller is an API key rather than a signed-in user. */
  apiKey: { id: number; name: string } | null;
  superAdmin: boolean;
  workspace: { id: number; name: string; plan: Plan };
  role: Role;
  memberships: { workspaceId: number; name: string; role: Role }[];
}

export async function me(ctx: WorkspaceContext, principal: Principal): Promise<MeView> {
  const [workspace] = await ctx.db
    .select({ id: workspaces.id, name: workspaces.name, plan: workspaces.plan })
    .from(workspaces)
    .where(eq(workspaces.id, principal.workspaceId));
  if (!workspace) throw invalidToken('The workspace no longer exists');
  if (principal.kind === 'api_key') {
    return {
      user: null,
      apiKey: { id: principal.apiKeyId!, name: principal.label },
      superAdmin: false,
      workspace,
      role: principal.role,
      memberships: [{ workspaceId: workspace.id, name: workspace.name, role: principal.role }],
    };
  }
  const [user] = await ctx.db.select({ id: users.id, email: users.email, name: users.name }).from(users).where(eq(users.id, principal.userId!));
  if (!user) throw invalidToken();
  return {
    user,
    apiKey: null,
    superAdmin: principal.isSuperAdmin,
    workspace,
    role: principal.role,
    memberships: (await membershipsOf(ctx, user.id)).map((m) => ({ workspaceId: m.workspaceId, name: m.name, role: m.role })),
  };
}

/**
 * `POST /auth/switch`: a signed-in user moves to another of their workspaces. The answer is
 * a new session for that workspace, ending at the same time as the one it replaces (a
 * switch never lengthens a session); the session it replaces ends, like a logout.
 */
export async function switchWorkspace(ctx: WorkspaceContext, principal: Principal, workspaceId: number): Promise<LoginResult> {
  if (principal.kind !== 'user' || principal.userId === null || principal.sessionId === null) {
    throw new ForbiddenError('Only a signed-in user can switch workspaces; an API key belongs to one');
  }
  const userId = principal.userId;
  const [user] = await ctx.db.select().from(users).where(eq(users.id, userId));
  if (!user) throw invalidToken();
  const target = await membershipIn(ctx, userId, workspaceId);
  if (!target) throw new AppError(403, 'not_a_member', `You are not a member of workspace ${workspaceId}`);
  const [current] = await ctx.db
    .select({ expiresAt: sessions.expiresAt })
    .from(sessions)
    .where(and(eq(sessions.familyId, principal.sessionId), isNull(sessions.revokedAt)))
    .orderBy(asc(sessions.id))
    .limit(1);
  if (!current) throw new UnauthorizedError('session_ended', 'The session has ended; log in again');
  const replaced = principal.sessionId;
  return openSession(ctx, user, target, current.expiresAt, async (tx) => {
    await tx.db
      .update(sessions)
      .set({ revokedAt: nowIso() })
      .where(and(eq(sessions.familyId, replaced), isNull(sessions.revokedAt)));
    await recordAudit(
      { ...tx, actor: { type: 'USER', id: userId, label: user.email } },
      {
        workspaceId,
        action: 'auth.switched',
        target: { type: 'user', id: userId },
        metadata: { fromWorkspaceId: principal.workspaceId },
      },
    );
  });
}

/**
 * A new session for a user who has just proved who they are another way (accepting an
 * invitation): the same answer as a login, in the given workspace.
 */
export async function startSession(ctx: SystemContext, userId: number, workspaceId: number): Promise<LoginResult> {
  const [user] = await ctx.db.select().from(users).where(eq(users.id, userId));
  const chosen = await membershipIn(ctx, userId, workspaceId);
  if (!user || !chosen) throw new AppError(403, 'not_a_member', `This user is not a member of workspace ${workspaceId}`);
  return openSession(ctx, user, chosen, newSessionEnd(ctx));
}
