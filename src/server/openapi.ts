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
  'GET /admin/stats': "Get the server's counts (super-admin)",
  'GET /contacts/export': "Export the workspace's contacts as NDJSON or CSV (streamed)",
  'POST /contacts/import': 'Import contacts from NDJSON or CSV (streamed; large files become a background job)',
  'POST /billing/stripe/webhook': 'Receive a Stripe event (signed with Stripe-Signature)',
  'DELETE /api-keys/:id': 'Revoke an API key',
  'GET /api-keys': 'List API keys',
  'POST /api-keys': 'Mint an API key (its raw key is shown once)',
  'POST /memberships': 'Add someone to the workspace: an invitation, answered alike whether the email has an account',
  'DELETE /memberships/:id': 'Remove a member from the workspace',
  'GET /admin/workspaces': 'List every workspace (super-admin)',
  'GET /admin/workspaces/:id': 'Get any workspace (super-admin)',
  'GET /admin/users': 'List every user (super-admin)',
  'POST /billing/checkout': 'Start a checkout to change the plan',
};

/**
 * Answers a route may give that errorResponses cannot tell from its declaration; the route
 * itself is unchanged (only the document lists them).
 */
const EXTRA_ANSWERS: Record<string, Record<string, string>> = {
  'GET /sandbox': { '404': 'The workspace has no sandbox yet (`sandbox_not_found`)' },
  'POST /billing/checkout': {
    '502': 'The payment provider could not be reached or refused the checkout (`payment_provider_error`); the plan is unchanged',
  },
  'POST /messages/test-email': { '404': 'No such template in the workspace (`template_not_found`)' },
  'POST /auth/login': { '403': 'The user belongs to no workspace, or not to the one asked for (`no_workspace`, `not_a_member`)' },
  'POST /billing/stripe/webhook': { '404': 'Stripe billing is not enabled on this server (`not_found`)' },
  'DELETE /templates/:id': { '409': 'An ACTIVE workflow or automation sends with the template (`template_in_use`); `detail` names them' },
  'POST /auth/logout': {
    '401': 'The access token sent is invalid or has expired',
    '403': 'The refresh cookie came from another site or origin (`cross_origin_request`)',
    '422': 'An API key has no session to end (`not_a_session`)',
  },
  'POST /auth/refresh': { '403': 'The refresh cookie came from another site or origin (`cross_origin_request`)' },
  'POST /invitations/accept': {
    '401': 'The email has an account and the password given is not its own (`invalid_credentials`)',
    '429': 'Too many wrong passwords for the account; wait for the `Retry-After` seconds (`too_many_login_attempts`)',
  },
};

/** Operations whose JSON body may be left out (sent, it is checked like any other). */
const OPTIONAL_BODIES = new Set(['POST /sandbox', 'POST /templates/{id}/preview', 'POST /webhook-events/{id}/replay']);

/** Operations that answer 204 with no body on success. */
const NO_CONTENT = new Set(['POST /auth/logout', 'POST /auth/password']);

const header = (name: string, description: string, required = false) => ({ name, in: 'header', required, description, schema: { type: 'string' } });

/** Bodies the routes read themselves (raw bytes, streamed), which no route schema describes. */
const RAW_BODIES: Record<string, { content: Record<string, unknown>; parameters?: unknown[] }> = {
  'POST /v1/webhooks/in/{token}': {
    content: { 'application/json': { schema: { type: 'object', additionalProperties: true, description: "Any JSON object: the sender's event" } } },
    parameters: [
      header('X-Service-Signature', '`sha256=<hex>` HMAC-SHA256 of the exact body bytes with the signing secret; required when the workflow has one'),
      header('Idempotency-Key', '1 to 255 characters; a repeat within 24 hours answers the first run (`Idempotent-Replayed: true`)'),
    ],
  },
  'POST /contacts/import': {
    content: {
      'application/x-ndjson': { schema: { type: 'string', description: 'One JSON object a line: email, phone, firstName, lastName, tags, attributes' } },
      'text/csv': {
        schema: {
          type: 'string',
          description: 'A header row; columns email, phone, firstName, lastName, tags (separated by `;`), any other column into attributes',
        },
      },
    },
    parameters: [header('Content-Encoding', '`gzip` or none')],
  },
  'POST /billing/stripe/webhook': {
    content: { 'application/json': { schema: { type: 'object', additionalProperties: true, description: 'A Stripe event' } } },
    parameters: [header('Stripe-Signature', "Stripe's signature of the exact body bytes", true)],
  },
};

type Operation = {
  parameters?: { in: string; name: string; required?: boolean; schema?: { default?: unknown } }[];
  requestBody?: { required?: boolean; content: Record<string, unknown> };
  responses: Record<string, { description: string; content?: Record<string, unknown>; headers?: Record<string, unknown> }>;
};

/**
 * What @fastify/swagger cannot know from the route schemas, put into the document it made:
 * query parameters with a default are optional; a body sent as JSON may be refused for its
 * Content-Type (415); routes that answer 204 say so; bodies the routes read as raw bytes
 * are described; optional bodies are optional; and the headers of 401, 429 and the
 * webhook's 202 are named.
 */
export function finishDocument(doc: { paths: Record<string, Record<string, Operation>> }): void {
  for (const [path, operations] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(operations)) {
      const key = `${method.toUpperCase()} ${path}`;
      for (const p of op.parameters ?? []) if (p.in === 'query' && p.schema?.default !== undefined) p.required = false;
      const raw = RAW_BODIES[key];
      if (raw) {
        op.requestBody = { required: true, content: raw.content };
        op.parameters = [...(op.parameters ?? []), ...((raw.parameters ?? []) as Operation['parameters'] & object)];
      }
      if (op.requestBody && OPTIONAL_BODIES.has(key)) op.requestBody.required = false;
      if (op.requestBody?.content['application/json'] && !op.responses['415'])
        op.responses['415'] = problemResponse('The body is not sent as `Content-Type: application/json` (`unsupported_media_type`)');
      const succeeds = Object.keys(op.responses).some((status) => status < '400');
      if (!succeeds && (method === 'delete' || NO_CONTENT.has(key))) op.responses['204'] = { description: 'Done; no body' };
      if (op.responses['401']) op.responses['401'].headers = { 'WWW-Authenticate': { description: '`Bearer`', schema: { type: 'string' } } };
      if (op.responses['429'])
        op.responses['429'].headers = { 'Retry-After': { description: 'Seconds to wait before trying again', schema: { type: 'integer' } } };
    }
  }
  const webhook = doc.paths['/v1/webhooks/in/{token}']?.post?.responses['202'];
  if (webhook)
    webhook.headers = {
      'Idempotent-Replayed': { description: '`true` when this answers a repeat of an earlier Idempotency-Key', schema: { type: 'string' } },
      'X-RateLimit-Limit': { description: 'Webhook requests a minute this address may send', schema: { type: 'integer' } },
      'X-RateLimit-Remaining': { description: 'What is left of it this minute', schema: { type: 'integer' } },
      'X-RateLimit-Reset': { description: 'Seconds until the minute ends', schema: { type: 'integer' } },
    };
  const stripe = doc.paths['/billing/stripe/webhook']?.post?.responses;
  if (stripe && !stripe['200'])
    stripe['200'] = {
      description: 'The event was received (`ignored` when it changes nothing)',
      content: {
        'application/json': {
          schema: { type: 'object', required: ['received'], properties: { received: { type: 'boolean' }, ignored: { type: 'boolean' } } },
        },
      },
    };
}

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
  for (const [status, description] of Object.entries(EXTRA_ANSWERS[`${method} ${route.url}`] ?? {})) out[status] = problemResponse(description);
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
  let finished: unknown;
  app.get('/openapi.json', { config: { access: 'public' }, schema: { hide: true } as FastifySchema }, async () => {
    if (!finished) {
      const doc = structuredClone(app.swagger()) as unknown as Parameters<typeof finishDocument>[0];
      finishDocument(doc);
      finished = doc;
    }
    return finished;
  });
}
