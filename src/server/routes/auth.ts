import cookie from '@fastify/cookie';
import { Type } from '@sinclair/typebox';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '../../core/errors.js';
import { authenticate, changePassword, login, logout, me, refresh, switchWorkspace, type LoginResult, type LoginThrottle } from '../../core/services/auth.js';
import type { App } from '../app.js';
import { Nullable, Plan, Role, User } from '../schemas.js';

export const REFRESH_COOKIE = 'svc_refresh';

const TokenResponse = { token: Type.String(), expiresIn: Type.Integer() };

/**
 * Sets the HttpOnly refresh cookie. It lives as long as the session may (its absolute
 * end), never longer, and is sent only to /auth.
 */
export function setRefreshCookie(reply: FastifyReply, publicUrl: string, token: string, maxAge: number): void {
  reply.setCookie(REFRESH_COOKIE, token, {
    httpOnly: true,
    sameSite: 'strict',
    path: '/auth',
    secure: reply.request.protocol === 'https' || publicUrl.startsWith('https:'),
    maxAge,
  });
}

/** A session as the login answers it (the refresh token goes in the cookie, never the body). */
export function sessionAnswer(result: LoginResult) {
  return { token: result.token, expiresIn: result.expiresIn, user: result.user, workspace: result.workspace };
}

const SessionResponse = Type.Object({
  ...TokenResponse,
  user: User,
  workspace: Type.Object({ id: Type.Integer(), name: Type.String(), plan: Plan, role: Role }),
});

const MeResponse = Type.Object({
  user: Nullable(Type.Object({ id: Type.Integer(), email: Type.String(), name: Nullable(Type.String()) })),
  apiKey: Nullable(Type.Object({ id: Type.Integer(), name: Type.String() })),
  superAdmin: Type.Boolean(),
  workspace: Type.Object({ id: Type.Integer(), name: Type.String(), plan: Plan }),
  role: Role,
  memberships: Type.Array(Type.Object({ workspaceId: Type.Integer(), name: Type.String(), role: Role })),
});

/**
 * The refresh cookie, unless the browser says the request comes from another site or another
 * origin of this one (`Sec-Fetch-Site`): SameSite=Strict keeps the cookie from other sites,
 * but a page on another port or a sibling subdomain is the same site, and could otherwise
 * rotate the session or end it with a bodiless fetch. Clients that are not browsers send no
 * such header.
 */
function sameOriginCookie(req: FastifyRequest): string | undefined {
  const token = req.cookies[REFRESH_COOKIE];
  const site = req.headers['sec-fetch-site'];
  if (token && (site === 'cross-site' || site === 'same-site'))
    throw new AppError(403, 'cross_origin_request', "The session cookie is accepted only from this server's own pages (Sec-Fetch-Site: same-origin)");
  return token;
}

export async function authRoutes(app: App, opts: { throttle: LoginThrottle; publicUrl: string }): Promise<void> {
  // Only the routes that set or read the refresh cookie parse cookies (its hooks would run on every request).
  await app.register(cookie);
  const setCookie = (reply: FastifyReply, token: string, maxAge: number) => setRefreshCookie(reply, opts.publicUrl, token, maxAge);

  app.post(
    '/auth/login',
    {
      config: { access: 'public' },
      schema: {
        body: Type.Object(
          {
            email: Type.String({ minLength: 1, maxLength: 320 }),
            password: Type.String({ minLength: 1, maxLength: 1024 }),
            workspaceId: Type.Optional(Type.Integer({ minimum: 1 })),
          },
          { additionalProperties: false },
        ),
        response: { 200: SessionResponse },
      },
    },
    async (req, reply) => {
      const result = await login(req.systemCtx(), opts.throttle, req.body);
      setCookie(reply, result.refreshToken, result.refreshMaxAge);
      return sessionAnswer(result);
    },
  );

  // Who is calling: the console's first request after a login or a reload.
  app.get(
    '/auth/me',
    {
      config: { access: { role: 'VIEWER' } },
      schema: { summary: 'Who is calling: the user or key, the workspace, the role and every membership', response: { 200: MeResponse } },
    },
    async (req) => me(req.workspaceCtx(), req.principal!),
  );

  // Another workspace of the same user: a new session there (the current one ends).
  app.post(
    '/auth/switch',
    {
      config: { access: { role: 'VIEWER' } },
      schema: {
        summary: 'Switch the signed-in user to another of their workspaces (a new session there)',
        body: Type.Object({ workspaceId: Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER }) }, { additionalProperties: false }),
        response: { 200: SessionResponse },
      },
    },
    async (req, reply) => {
      const result = await switchWorkspace(req.workspaceCtx(), req.principal!, req.body.workspaceId);
      setCookie(reply, result.refreshToken, result.refreshMaxAge);
      return sessionAnswer(result);
    },
  );

  app.post('/auth/refresh', { config: { access: 'public' }, schema: { response: { 200: Type.Object(TokenResponse) } } }, async (req, reply) => {
    const result = await refresh(req.systemCtx(), sameOriginCookie(req));
    setCookie(reply, result.refreshToken, result.refreshMaxAge);
    return { token: result.token, expiresIn: result.expiresIn };
  });

  // A user changes their own password; their other sessions end, this one stays.
  app.post(
    '/auth/password',
    {
      config: { access: { role: 'VIEWER' } },
      schema: {
        body: Type.Object(
          {
            currentPassword: Type.String({ minLength: 1, maxLength: 1024 }),
            newPassword: Type.String({ minLength: 1, maxLength: 1024, description: 'At least 8 characters, not only spaces (else 422 `invalid_password`)' }),
          },
          { additionalProperties: false },
        ),
      },
    },
    async (req, reply) => {
      await changePassword(req.workspaceCtx(), opts.throttle, req.principal!, req.body);
      return reply.code(204).send();
    },
  );

  // The session of the refresh cookie (the console), else of the access token sent (an API
  // client that keeps no cookie): a logout answered 204 has ended one when either was sent.
  app.post('/auth/logout', { config: { access: 'public' } }, async (req, reply) => {
    const cookieToken = sameOriginCookie(req);
    const principal = cookieToken || req.headers.authorization === undefined ? undefined : await authenticate(req.systemCtx(), req.headers.authorization);
    await logout(req.systemCtx(), cookieToken, principal);
    reply.clearCookie(REFRESH_COOKIE, {
      httpOnly: true,
      sameSite: 'strict',
      path: '/auth',
      secure: req.protocol === 'https' || opts.publicUrl.startsWith('https:'),
    });
    return reply.code(204).send();
  });
}
