import { Type } from '@sinclair/typebox';
import type { FastifyReply } from 'fastify';
import { changePassword, login, logout, refresh, type LoginThrottle } from '../../core/services/auth.js';
import type { App } from '../app.js';
import { Plan, Role, User } from '../schemas.js';

export const REFRESH_COOKIE = 'svc_refresh';

const TokenResponse = { token: Type.String(), expiresIn: Type.Integer() };

export async function authRoutes(app: App, opts: { throttle: LoginThrottle; publicUrl: string }): Promise<void> {
  /** The cookie lives as long as the session may (its absolute end), never longer. */
  function setRefreshCookie(reply: FastifyReply, token: string, maxAge: number): void {
    reply.setCookie(REFRESH_COOKIE, token, {
      httpOnly: true,
      sameSite: 'strict',
      path: '/auth',
      secure: reply.request.protocol === 'https' || opts.publicUrl.startsWith('https:'),
      maxAge,
    });
  }

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
        response: {
          200: Type.Object({
            ...TokenResponse,
            user: User,
            workspace: Type.Object({ id: Type.Integer(), name: Type.String(), plan: Plan, role: Role }),
          }),
        },
      },
    },
    async (req, reply) => {
      const result = await login(req.systemCtx(), opts.throttle, req.body);
      setRefreshCookie(reply, result.refreshToken, result.refreshMaxAge);
      return { token: result.token, expiresIn: result.expiresIn, user: result.user, workspace: result.workspace };
    },
  );

  app.post(
    '/auth/refresh',
    { config: { access: 'public' }, schema: { response: { 200: Type.Object(TokenResponse) } } },
    async (req, reply) => {
      const result = await refresh(req.systemCtx(), req.cookies[REFRESH_COOKIE]);
      setRefreshCookie(reply, result.refreshToken, result.refreshMaxAge);
      return { token: result.token, expiresIn: result.expiresIn };
    },
  );

  // A user changes their own password; their other sessions end, this one stays.
  app.post(
    '/auth/password',
    {
      config: { access: { role: 'VIEWER' } },
      schema: {
        body: Type.Object(
          { currentPassword: Type.String({ minLength: 1, maxLength: 1024 }), newPassword: Type.String({ minLength: 1, maxLength: 1024 }) },
          { additionalProperties: false },
        ),
      },
    },
    async (req, reply) => {
      await changePassword(req.workspaceCtx(), opts.throttle, req.principal!, req.body);
      return reply.code(204).send();
    },
  );

  app.post('/auth/logout', { config: { access: 'public' } }, async (req, reply) => {
    logout(req.systemCtx(), req.cookies[REFRESH_COOKIE]);
    reply.clearCookie(REFRESH_COOKIE, { path: '/auth' });
    return reply.code(204).send();
  });
}
