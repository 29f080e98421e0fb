import fastifySwagger from '@fastify/swagger';
import { Type } from '@sinclair/typebox';
import type { FastifySchema, RouteOptions } from 'fastify';
import type { App } from './app.js';
import type { Access } from './plugins/auth.js';

/** RFC 9457 problem details, as every error of the API is answered. */
export const Problem = Type.Object(
  {
    type: Type.String(),
    title: Type.String(),
    status: Type.Integer({ minimum: 400, maximum: 599 }),
    code: Type.String({ description: 'A stable, machine-readable error code (see README)' }),
    detail: Type.String(),
    errors: Type.Optional(Type.Array(Type.Object({ path: Type.String({ description: 'A JSON Pointer into the request' }), message: Type.String() }))),
  },
  { additionalProperties: true },
);

const problemResponse = (description: string) => ({ description, content: { 'application/problem+json': { schema: Problem } } });

/** The operation id of a route: its method and path in camelCase (`GET /contacts/:id` → `getContactsById`). */
export function operationId(method: string, url: string): string {
  const words = url
    .split('/')
    .filter(Boolean)
    .map((seg) => (seg.startsWith(':') ? `by-${seg.slice(1)}` : seg))
    .flatMap((seg) => seg.split(/[-_.]/))
    .filter(Boolean);
  return [method.toLowerCase(), ...words.map((w) => w[0]!.toUpperCase() + w.slice(1))].join('');
}

const SUMMARIES: Record<string, string> = {
  'POST /auth/login': 'Sign in with email and password',
  'POST /auth/refresh': 'Exchange the refresh cookie for a new access token',
  'POST /auth/logout': 'End the session',
  'POST /auth/password': 'Change your own password',
  'POST /v1/webhooks/in/:token': 'Receive a webhook: starts one run for one contact',
  'POST /invitations/accept': 'Accept an invitation',
  'GET /healthz': 'Health check',
  'POST /automations/:id/runs': 'Start a run of an automation for a contact',
  'POST /webhook-events/:id/replay': 'Replay a received webhook event',
  'POST /templates/:id/preview': 'Render a template for a contact',
  'GET /billing/plan': "Get the workspace's plan and usage",
  'POST /contacts/:id/tags': 'Add tags to a contact',
  'DELETE /contacts/:id/tags/:tag': 'Remove a tag from a contact',
  'GET /settings/channels': 'Get the channel providers',
  'PUT /settings/channels': 'Set the channel providers',
  'POST /messages/test-email': 'Send a test email',
};

/** "a contact", "an automation". */
const article = (noun: string) => `${/^[aeiou]/.test(noun) ? 'an' : 'a'} ${noun}`;

const singular = (word: string) =>
  word
    .replace(/ies$/, 'y')
    .replace(/(ss|[^s])$/, '$1')
    .replace(/s$/, '');
const words = (segment: string) =>
  segment
    .replace(/[-_]/g, ' ')
    .replace(/([a-z])([A-Z])/g, '$1 $2')
    .toLowerCase();

/** A summary from the method and path, where SUMMARIES has none: "List contacts", "Get a contact", ... */
export function summaryOf(method: string, url: string): string {
  const given = SUMMARIES[`${method} ${url}`];
  if (given) return given;
  const segments = url.split('/').filter(Boolean);
  const last = segments[segments.length - 1] ?? '';
  const parent = segments
    .slice(0, -1)
    .filter((seg) => !seg.startsWith(':'))
    .pop();
  if (last.startsWith(':')) {
    const thing = article(singular(words(parent ?? 'resource')));
    return { GET: `Get ${thing}`, PATCH: `Update ${thing}`, PUT: `Replace ${thing}`, DELETE: `Delete ${thing}` }[method] ?? `${method} ${url}`;
  }
  const owner =
    segments.length > 1 && segments[segments.length - 2]!.startsWith(':') ? ` of ${article(singular(words(segments[segments.length - 3] ?? '')))}` : '';
  const thing = words(last);
  if (method === 'GET') return `List ${thing}${owner}`;
  if (method === 'POST') return owner ? `${thing[0]!.toUpperCase()}${thing.slice(1)}${owner}` : `Create ${article(singular(thing))}`;
  if (method === 'PUT') return `Set ${thing}${owner}`;
  if (method === 'DELETE') return `Delete ${thing}${owner}`;
  return `${method} ${url}`;
}

/** The tag of a route: its first path segment (the inbound webhook is "webhooks"). */
function tagOf(url: string): string {
  const segments = url.split('/').filter(Boolean);
  if (segments[0] === 'v1') return segments[1] ?? 'v1';
  return segments[0] ?? 'root';
}

/** The error answers a route can give, from what it declares: who may call it, its inputs, its limits. */
function errorResponses(route: RouteOptions, schema: FastifySchema): Record<string, unknown> {
  const access = route.config?.access as Access | undefined;
  const isPublic = access === 'public';
  const out: Record<string, unknown> = {
    '400': problemResponse('Bad request: unreadable JSON, an invalid cursor or header (`bad_request`, `invalid_cursor`, ...)'),
  };
  if (!isPublic) {
    out['401'] = problemResponse('No valid credentials: a missing, expired or revoked token or key (`unauthorized`, `session_ended`)');
    out['403'] = problemResponse('The caller may not do this: its role or plan is too low (`forbidden`, `plan_upgrade_required`)');
  }
  const method = [route.method].flat()[0]!;
  const webhook = route.url.startsWith('/v1/webhooks');
  if (route.url.startsWith('/auth/') || webhook) {
    out['401'] ??= problemResponse(
      'Refused credentials: a wrong email or password, a used refresh token, a bad webhook signature (`invalid_credentials`, `signature_invalid`, ...)',
    );
  }
  if (route.url.includes(':') || route.url.startsWith('/invitations/'))
    out['404'] = problemResponse("No such resource in the caller's workspace (`*_not_found`)");
  if (!isPublic && method !== 'GET') out['409'] = problemResponse('A conflict with the current state (`*_exists`, `last_owner`, ...)');
  if (route.url.startsWith('/invitations/')) out['410'] = problemResponse('The invitation was used or has expired (`invitation_used`, `invitation_expired`)');
  if (webhook) {
    out['413'] = problemResponse('The body is larger than the webhook body limit (`payload_too_large`)');
    out['415'] = problemResponse('The body is not JSON (`unsupported_media_type`), or is compressed (`unsupported_content_encoding`)');
  }
  if (route.url === '/contacts/export')
    out['429'] = problemResponse(
      'The workspace already has `SVC_EXPORT_CONCURRENCY` exports under way on this server; retry after `Retry-After` seconds (`too_many_exports`)',
    );
  if (route.url === '/contacts/import') {
    out['413'] = problemResponse(
      'The declared length is over the import limit, or a small gzip body inflated past it (`import_too_large`); in the second case rows before it may be committed, and `importId` and `Location` name the job',
    );
    out['415'] = problemResponse(
      'The body is neither NDJSON nor CSV (`unsupported_media_type`), names a charset no decoder knows (`unsupported_charset`), or is compressed other than by gzip (`unsupported_content_encoding`)',
    );
    out['429'] = problemResponse('The workspace already runs `SVC_IMPORT_CONCURRENCY` imports; retry after `Retry-After` seconds (`too_many_imports`)');
  }
  if (schema.body || schema.querystring || schema.params || webhook)
    out['422'] = problemResponse('Invalid input; `errors` lists each field as a JSON Pointer (`validation_failed`, ...)');
  if ((typeof access === 'object' && access.limit) || route.url.startsWith('/v1/webhooks') || route.url === '/auth/login') {
    out['429'] ??= problemResponse('Too many requests; wait for the `Retry-After` seconds (`rate_limited`, `too_many_login_attempts`)');
  }
  out['500'] = problemResponse('An internal error (`internal_error`); retry with backoff');
  if (method !== 'GET')
    out['503'] = problemResponse(
      "The data folder's disk is full, or the server is shutting down: nothing was kept; retry after `Retry-After` (`storage_full`, `shutting_down`)",
    );
  return out;
}

/**
 * The OpenAPI 3.1 document of the API, generated from the route schemas by @fastify/swagger:
 * every route gets an operation id, a tag, a summary, its security (none for public
 * routes, else a bearer access token or API key) and the problem+json errors it may
 * answer. Only the document is changed: the routes' own schemas, which validate and
 * serialise, are left as they are. Served at GET /openapi.json.
 */
export async function registerOpenApi(app: App, opts: { version: string; publicUrl: string; sandboxUrl?: string }): Promise<void> {
  await app.register(fastifySwagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'svc',
        version: opts.version,
        description: 'Self-hosted customer messaging and automation: contacts, workflows started by inbound webhooks, templates, runs and deliveries.',
      },
      servers: [
        { url: opts.publicUrl },
        ...(opts.sandboxUrl && opts.sandboxUrl !== opts.publicUrl
          ? [{ url: opts.sandboxUrl, description: 'The sandbox: svc_test_ keys; nothing is sent from it' }]
          : []),
      ],
      components: {
        securitySchemes: {
          bearer: {
            type: 'http',
            scheme: 'bearer',
            description: 'An access token from POST /auth/login, or an API key (svc_live_..., or svc_test_... for the sandbox)',
          },
        },
      },
    },
    transform: ({ schema, url, route }) => {
      const given = (schema ?? {}) as FastifySchema & { hide?: boolean };
      const method = Array.isArray(route.method) ? route.method[0]! : route.method;
      const access = route.config?.access as Access | undefined;
      const documented: FastifySchema & Record<string, unknown> = {
        ...given,
        operationId: given.operationId ?? operationId(method, url),
        tags: given.tags ?? [tagOf(url)],
        summary: given.summary ?? summaryOf(method, url),
        security: access === 'public' ? [] : [{ bearer: [] }],
        response: { ...errorResponses(route, given), ...((given.response as Record<string, unknown> | undefined) ?? {}) },
      };
      return { schema: documented, url };
    },
  });
  app.get('/openapi.json', { config: { access: 'public' }, schema: { hide: true } as FastifySchema }, async () => app.swagger());
}
