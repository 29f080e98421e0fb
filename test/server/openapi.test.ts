/**
 * GET /openapi.json (issue 10, item 3): an OpenAPI 3.1 document generated from the route
 * schemas, valid against the OpenAPI 3.1 schema (a real validator), listing every route
 * the server registers, and describing real answers correctly.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { build, type HttpResult } from '../helpers.js';

type Operation = {
  operationId: string;
  tags: string[];
  summary: string;
  security: unknown[];
  responses: Record<string, { content?: Record<string, { schema: unknown }> }>;
};
type Doc = { openapi: string; paths: Record<string, Record<string, Operation>> };

test('the document is valid OpenAPI 3.1 and lists every route with an id, a tag, a summary, its security and its errors', async (t) => {
  const routes: { method: string; url: string; access: unknown; hidden: boolean }[] = [];
  const s = await build(t, {
    onRoute: (r) => {
      for (const method of [r.method].flat())
        if (method !== 'HEAD')
          routes.push({ method, url: r.url, access: r.config?.access, hidden: (r.schema as { hide?: boolean } | undefined)?.hide === true });
    },
  });
  const res = await s.request('GET', '/openapi.json');
  assert.equal(res.status, 200, res.text.slice(0, 300));
  assert.match(res.headers.get('content-type') ?? '', /application\/json/);
  const doc = res.body as Doc;
  assert.equal(doc.openapi, '3.1.0');

  const validator = new Validator();
  const result = await validator.validate(doc);
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 1)?.slice(0, 2000));

  const documented = new Set<string>();
  const ids = new Set<string>();
  for (const [path, ops] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(ops)) {
      documented.add(`${method.toUpperCase()} ${path}`);
      assert.ok(op.operationId && !ids.has(op.operationId), `${method} ${path}: a unique operationId`);
      ids.add(op.operationId);
      assert.ok(op.tags?.length && op.summary, `${method} ${path}: a tag and a summary`);
      assert.ok(op.responses['500']?.content?.['application/problem+json'], `${method} ${path}: problem+json errors`);
    }
  }
  // Routes marked `hide` (the console's pages and files, the reference page) are not API.
  const expected = routes.filter((r) => r.url !== '/openapi.json' && !r.hidden && !r.url.includes('*'));
  assert.ok(expected.length > 40, `${expected.length} routes registered`);
  for (const r of expected) {
    const path = r.url.replace(/:([A-Za-z]+)/g, '{$1}');
    assert.ok(documented.has(`${r.method} ${path}`), `${r.method} ${r.url} is in the document`);
    const op = doc.paths[path]![r.method.toLowerCase()]!;
    if (r.access === 'public') {
      assert.deepEqual(op.security, [], `${r.method} ${r.url} is public`);
      // Login may be 403 (the user is in no workspace, or not in the one asked for), and the
      // cookie's routes (the cookie sent from another site or origin); no other public route.
      if (!['/auth/login', '/auth/refresh', '/auth/logout'].includes(r.url))
        assert.equal(op.responses['403'], undefined, `${r.method} ${r.url}: a public route has no role to lack`);
    } else {
      assert.deepEqual(op.security, [{ bearer: [] }], `${r.method} ${r.url} needs a token or key`);
      assert.ok(op.responses['401'] && op.responses['403']);
    }
  }
  assert.deepEqual(doc.paths['/auth/login']!.post!.security, []);
  assert.deepEqual(doc.paths['/v1/webhooks/in/{token}']!.post!.security, []);
  assert.deepEqual(doc.paths['/invitations/accept']!.post!.security, []);
});

test('real answers validate against the schemas the document gives for them', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const doc = (await s.request('GET', '/openapi.json')).body as Doc;
  const ajv = new Ajv2020({ strict: false, allErrors: true });
  const check = (path: string, method: string, res: HttpResult) => {
    const response = doc.paths[path]![method]!.responses[String(res.status)];
    assert.ok(response, `${method} ${path} documents ${res.status}`);
    const [type, media] = Object.entries(response.content ?? {})[0] ?? [];
    assert.ok(media, `${method} ${path} ${res.status} has a schema`);
    assert.match(res.headers.get('content-type') ?? '', new RegExp(type!.replace('+', '\\+')));
    const validate = ajv.compile(media.schema as object);
    assert.ok(validate(res.body), `${method} ${path} ${res.status}: ${ajv.errorsText(validate.errors)}`);
  };

  const created = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com', firstName: 'Ann', tags: ['vip'] } });
  check('/contacts', 'post', created);
  check('/contacts', 'get', await s.request('GET', '/contacts', { token }));
  check('/contacts/{id}', 'get', await s.request('GET', `/contacts/${created.body.id}`, { token }));
  check('/contacts/{id}', 'get', await s.request('GET', '/contacts/999999', { token }));
  check('/contacts', 'post', await s.request('POST', '/contacts', { token, body: { email: 'not an email' } }));
  check('/contacts', 'get', await s.request('GET', '/contacts'));
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'w', triggerSource: 'WEBHOOK', status: 'ACTIVE', webhook: { lookup: 'email', createIfNotFound: true } },
  });
  check('/workflows', 'post', wf);
  check('/workflows/{id}', 'get', await s.request('GET', `/workflows/${wf.body.id}`, { token }));
  const path = new URL(wf.body.webhook.url).pathname;
  check('/v1/webhooks/in/{token}', 'post', await s.request('POST', path, { body: { email: 'hook@example.com' } }));
  check('/auth/login', 'post', await s.request('POST', '/auth/login', { body: { email: s.owner.email, password: 'wrong-password' } }));
  check('/billing/plan', 'get', await s.request('GET', '/billing/plan', { token }));
  check('/templates', 'get', await s.request('GET', '/templates', { token }));
  check('/auth/me', 'get', await s.request('GET', '/auth/me', { token }));
  check(
    '/workflows/{id}/webhook/test',
    'post',
    await s.request('POST', `/workflows/${wf.body.id}/webhook/test`, { token, body: { body: { email: 'dry@example.com' } } }),
  );
  const invitation = await s.request('POST', '/memberships/invitations', { token, body: { email: 'new@example.com', role: 'VIEWER' } });
  check('/memberships/invitations', 'get', await s.request('GET', '/memberships/invitations', { token }));
  check('/invitations/inspect', 'post', await s.request('POST', '/invitations/inspect', { body: { token: invitation.body.token } }));
  check('/invitations/accept', 'post', await s.request('POST', '/invitations/accept', { body: { token: invitation.body.token, password: 'a-long-password' } }));
  check('/invitations/accept', 'post', await s.request('POST', '/invitations/accept', { body: { token: invitation.body.token, password: 'a-long-password' } }));
});

test('the document says what the routes answer beyond their schemas: 204s, 415s, optional parameters and bodies, raw bodies, headers', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const doc = (await s.request('GET', '/openapi.json')).body as {
    paths: Record<
      string,
      Record<
        string,
        {
          parameters?: { in: string; name: string; required: boolean }[];
          requestBody?: { required: boolean; content: Record<string, { schema: Record<string, unknown> }> };
          responses: Record<string, { content?: unknown; headers?: Record<string, unknown> }>;
        }
      >
    >;
  };
  for (const [path, operations] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(operations)) {
      const name = `${method.toUpperCase()} ${path}`;
      assert.ok(
        Object.keys(op.responses).some((status) => status < '400'),
        `${name} documents its success`,
      );
      if (method === 'delete') assert.ok(op.responses['204'] && !op.responses['204'].content, `${name}: 204, no body`);
      if (op.requestBody?.content['application/json']) assert.ok(op.responses['415'], `${name}: 415 for another Content-Type`);
      for (const p of op.parameters ?? []) if (p.in === 'query' && p.name === 'limit') assert.equal(p.required, false, `${name}: limit is optional`);
      if (op.responses['429']) assert.ok(op.responses['429'].headers?.['Retry-After'], `${name}: 429 names Retry-After`);
    }
  }
  const post = (path: string) => doc.paths[path]!.post!;
  assert.ok(post('/auth/logout').responses['204'] && post('/auth/password').responses['204']);
  assert.equal(doc.paths['/contacts/export']!.get!.parameters!.find((p) => p.name === 'format')!.required, false);
  for (const path of ['/sandbox', '/templates/{id}/preview', '/webhook-events/{id}/replay']) assert.equal(post(path).requestBody!.required, false, path);
  assert.equal(post('/contacts').requestBody!.required, true);
  const hook = post('/v1/webhooks/in/{token}');
  assert.ok(hook.requestBody!.content['application/json']);
  assert.deepEqual(
    hook.parameters!.filter((p) => p.in === 'header').map((p) => [p.name, p.required]),
    [
      ['X-Service-Signature', false],
      ['Idempotency-Key', false],
    ],
  );
  assert.ok(hook.responses['202']!.headers!['Idempotent-Replayed']);
  assert.deepEqual(Object.keys(post('/contacts/import').requestBody!.content).sort(), ['application/x-ndjson', 'text/csv']);
  const stripe = post('/billing/stripe/webhook');
  assert.ok(stripe.responses['200']?.content && stripe.responses['404']);
  assert.deepEqual(
    stripe.parameters!.filter((p) => p.in === 'header').map((p) => [p.name, p.required]),
    [['Stripe-Signature', true]],
  );
  assert.ok(doc.paths['/sandbox']!.get!.responses['404']);
  assert.ok(post('/billing/checkout').responses['502']);
  assert.ok(post('/messages/test-email').responses['404']);
  assert.ok(post('/auth/login').responses['403']);
  const secret = (post('/workflows').requestBody!.content['application/json']!.schema as any).properties.webhook.properties.signingSecret;
  assert.equal(JSON.stringify(secret).includes('"minLength":16'), true, JSON.stringify(secret));

  // The answers themselves.
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com' } });
  const wrongType = await s.request('POST', '/contacts', { token, raw: '{"email":"bob@example.com"}', headers: { 'content-type': 'text/plain' } });
  assert.equal(wrongType.status, 415);
  assert.equal((await s.request('DELETE', `/contacts/${contact.body.id}`, { token })).status, 204);
  const short = await s.request('POST', '/workflows', { token, body: { name: 'w', webhook: { lookup: 'email', signingSecret: 'fifteen-chars-!' } } });
  assert.equal(short.status, 422);
  assert.deepEqual(
    short.body.errors.map((e: { path: string }) => e.path),
    ['/webhook/signingSecret'],
  );
});
