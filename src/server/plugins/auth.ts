import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify';
import type { Config } from '../../core/config.js';
import type { Actor, SystemContext, WorkspaceContext } from '../../core/context.js';
import type { Store } from '../../core/db/store.js';
import type { Plan, Role } from '../../core/db/schema.js';
import { ForbiddenError, PlanError, UnauthorizedError } from '../../core/errors.js';
import { takeOrThrow, type WindowRule } from '../../core/rateLimit.js';
import { windowsFor, type SharedRedis } from '../../core/redis.js';
import { planAtLeast, roleAtLeast } from '../../core/roles.js';
import { authenticate, type Principal } from '../../core/services/auth.js';
import { sandboxHostMatcher } from '../../core/services/sandbox.js';

/**
 * What a route requires of its caller, declared in the route's `config.access`:
 * `'public'`, or the minimum role and, where a feature is plan-gated, the minimum plan.
 */
export type Access = 'public' | { role: Role; plan?: Plan; superAdmin?: boolean; limit?: CallerLimit };

/**
 * Per-caller rate limits of costly routes: `render` (template previews and test emails,
 * which render Liquid) and `runs` (runs started by hand: automation runs and replays).
 */
export type CallerLimit = 'render' | 'runs';

const LIMIT_WHAT: Record<CallerLimit, string> = { render: 'previews and test emails', runs: 'runs started by hand (runs and replays)' };

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: Access;
    /** The route stores nothing of its body, so U+0000 may be in it (app.ts refuses it elsewhere). */
    nulInBody?: boolean;
    /** A page of the console: its query string is the console's, not an API query (app.ts). */
    page?: boolean;
  }
  interface FastifyRequest {
    principal: Principal | null;
    /** The service context of the authenticated caller's workspace. */
    workspaceCtx(): WorkspaceContext;
    /** A service context for public routes. */
    systemCtx(actor?: Actor): SystemContext;
  }
}

export function actorOf(principal: Principal): Actor {
  return principal.kind === 'user'
    ? { type: 'USER', id: principal.userId, label: principal.label }
    : { type: 'API_KEY', id: principal.apiKeyId, label: principal.label };
}

export function registerAuth(app: FastifyInstance, deps: { store: Store; config: Config; redis?: SharedRedis | undefined }): void {
  // Counted across the cluster when the node has Redis (see RedisWindows).
  const calls = windowsFor(deps.redis, 'caller-limit');
  const onSandboxAddress = sandboxHostMatcher(deps.config);
  const limits: Record<CallerLimit, WindowRule> = {
    render: { limit: deps.config.renderRateLimit, windowMs: 60_000 },
    runs: { limit: deps.config.runStartRateLimit, windowMs: 60_000 },
  };
  app.decorateRequest('principal', null);
  app.decorateRequest('workspaceCtx', function (this: FastifyRequest): WorkspaceContext {
    const p = this.principal;
    if (!p) throw new Error('workspaceCtx() on a route without authentication');
    return { db: deps.store.db, store: deps.store, config: deps.config, workspaceId: p.workspaceId, actor: actorOf(p), ip: this.ip };
  });
  app.decorateRequest('systemCtx', function (this: FastifyRequest, actor?: Actor): SystemContext {
    return { db: deps.store.db, store: deps.store, config: deps.config, actor: actor ?? { type: 'SYSTEM', id: null, label: null }, ip: this.ip };
  });

  // Every route must say who may call it; a route that forgets is closed, not open.
  // Authentication runs before the body is read, so anonymous callers cannot make us parse:
  // an onRequest hook of each route that needs it, after the application's own. A public
  // route (the webhooks, the health checks) runs none, and no request looks its route's
  // options up (Fastify builds req.routeOptions anew on every read).
  app.addHook('onRoute', (route) => {
    const access = route.config?.access;
    if (access === undefined && !route.url.startsWith('*') && route.url !== '/*') {
      throw new Error(`route ${route.method} ${route.url} declares no config.access`);
    }
    if (access === undefined || access === 'public') return;
    const authenticateFirst: onRequestHookHandler = (req, _reply, done) => {
      check(req, access).then(() => done(), done);
    };
    const own = route.onRequest === undefined ? [] : Array.isArray(route.onRequest) ? route.onRequest : [route.onRequest];
    route.onRequest = [authenticateFirst, ...own];
  });

  async function check(req: FastifyRequest, access: Exclude<FastifyRequest['routeOptions']['config']['access'], undefined | 'public'>): Promise<void> {
    const principal = await authenticate(deps, req.headers.authorization);
    req.principal = principal;
    // On the sandbox address only sandbox credentials work, so a client pointed at the
    // sandbox can never act on live data by a key mix-up.
    if (!principal.sandbox && onSandboxAddress(req.host)) {
      throw new UnauthorizedError('live_credentials_on_sandbox', 'This is the sandbox address: use a svc_test_ key, or a session switched into the sandbox');
    }
    if (access.superAdmin && !(principal.kind === 'user' && principal.isSuperAdmin)) throw new ForbiddenError('Only super-admins may do this');
    if (!roleAtLeast(principal.role, access.role)) throw new ForbiddenError(`This needs the ${access.role} role or above; you have ${principal.role}`);
    if (access.plan && !planAtLeast(principal.plan, access.plan)) {
      throw new PlanError(`This needs the ${access.plan} plan or above; this workspace is on ${principal.plan}`);
    }
    if (access.limit) {
      const caller = principal.kind === 'user' ? `user:${principal.userId}` : `key:${principal.apiKeyId}`;
      await takeOrThrow(calls, `${access.limit}:${caller}`, limits[access.limit], LIMIT_WHAT[access.limit]);
    }
  }
}
