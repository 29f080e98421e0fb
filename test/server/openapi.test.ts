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
