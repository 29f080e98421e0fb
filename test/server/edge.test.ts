/**
 * What every response and every client address looks like at the edge (issue 8):
 * security headers on every kind of response, and trusted proxies given as a hop count or
 * addresses/CIDRs (never "every hop"), so a spoofed X-Forwarded-For does not change the
 * client that the webhook limit, the login throttle and the logs count.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { writeInitialConfig, loadConfig, ConfigError } from '../../src/core/config.js';
import { writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { desc, eq } from 'drizzle-orm';
import { auditLogs } from '../../src/core/db/schema.js';
import { assertProblem, build, buildAsOwner, tempDir, type HttpResult, type TestServer } from '../helpers.js';

/** The source address the audit trail recorded for the latest login. */
async function lastLoginIp(s: TestServer): Promise<string | null | undefined> {
  const [row] = await s.db.select({ ip: auditLogs.ip }).from(auditLogs).where(eq(auditLogs.action, 'auth.login')).orderBy(desc(auditLogs.id)).limit(1);
  return row?.ip;
}

// ---------------------------------------------------------------------------------------
// Security headers
// ---------------------------------------------------------------------------------------

function assertSecurityHeaders(res: HttpResult, what: string): void {
  assert.equal(res.headers.get('x-content-type-options'), 'nosniff', `X-Content-Type-Options on ${what} (${res.status})`);
  assert.equal(res.headers.get('referrer-policy'), 'no-referrer', `Referrer-Policy on ${what} (${res.status})`);
}

async function activeHook(s: TestServer, token: string): Promise<string> {
  const res = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'Inbound',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'wait', seconds: 1 }],
      webhook: { lookup: 'email', createIfNotFound: true },
    },
  });
  assert.equal(res.status, 201, res.text);
  return new URL(res.body.webhook.url).pathname;
}

test('every kind of response carries X-Content-Type-Options: nosniff and Referrer-Policy: no-referrer', async (t) => {
  const { s, token } = await buildAsOwner(t, { env: { SVC_WEBHOOK_RATE_LIMIT: '3', SVC_WEBHOOK_BODY_LIMIT: '1024' } });
  const hook = await activeHook(s, token);
  const json = { 'content-type': 'application/json' };
  const cases: [string, () => Promise<HttpResult>, number][] = [
    ['healthz', () => s.request('GET', '/healthz'), 200],
    ['HEAD healthz', () => s.request('HEAD', '/healthz'), 200],
    ['an authenticated list', () => s.request('GET', '/contacts', { token }), 200],
    ['a created resource', () => s.request('POST', '/contacts', { token, body: { email: 'h@example.com' } }), 201],
    ['a 204', () => s.request('DELETE', '/contacts/1', { token }), 204],
    ['an unknown route', () => s.request('GET', '/no/such/route'), 404],
    ['an unknown id', () => s.request('GET', '/contacts/999999', { token }), 404],
    ['a missing credential', () => s.request('GET', '/contacts'), 401],
    ['a forged credential', () => s.request('GET', '/contacts', { token: 'svc_live_nope' }), 401],
    ['a bad query', () => s.request('GET', '/contacts?limit=0', { token }), 400],
    ['invalid JSON', () => s.request('POST', '/contacts', { token, raw: '{"email":', headers: json }), 400],
    ['a wrong Content-Type', () => s.request('POST', '/contacts', { token, raw: 'email=x', headers: { 'content-type': 'text/plain' } }), 415],
    ['a validation error', () => s.request('POST', '/contacts', { token, body: { nope: 1 } }), 422],
    ['a URL that does not decode', () => s.request('GET', '/contacts/%E0%A4%A'), 400],
    ['an over-long id', () => s.request('GET', `/contacts/${'9'.repeat(300)}`, { token }), 404],
    ['login refused', () => s.request('POST', '/auth/login', { body: { email: 'nobody@example.com', password: 'wrong-password' } }), 401],
    ['a webhook 202', () => s.request('POST', hook, { raw: '{"email":"w@example.com"}', headers: json }), 202],
    ['a webhook 413', () => s.request('POST', hook, { raw: JSON.stringify({ pad: 'x'.repeat(2000) }), headers: json }), 413],
    ['an unknown webhook token', () => s.request('POST', `/v1/webhooks/in/${'x'.repeat(500)}`, { raw: '{}', headers: json }), 404],
    ['a rate-limited webhook', () => s.request('POST', hook, { raw: '{"email":"w@example.com"}', headers: json }), 429],
  ];
  for (const [what, send, status] of cases) {
    const res = await send();
    assert.equal(res.status, status, `${what}: ${res.status} ${res.text.slice(0, 300)}`);
    assertSecurityHeaders(res, what);
  }

  // app.inject goes through the same hooks as a socket.
  for (const url of ['/healthz', '/nowhere']) {
    const res = await s.app.inject({ method: 'GET', url });
    assert.equal(res.headers['x-content-type-options'], 'nosniff', url);
    assert.equal(res.headers['referrer-policy'], 'no-referrer', url);
  }
});

// ---------------------------------------------------------------------------------------
// Trusted proxies: configuration
// ---------------------------------------------------------------------------------------

function configWith(t: Parameters<typeof tempDir>[0], fileTrustProxy: unknown, env: Record<string, string> = {}) {
  const dataDir = tempDir(t);
  writeInitialConfig(dataDir);
  if (fileTrustProxy !== undefined) {
    const file = join(dataDir, 'config.json');
    writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, 'utf8')), trustProxy: fileTrustProxy }));
  }
  return () => loadConfig({ dataDir }, env);
}

test('SVC_TRUST_PROXY / trustProxy take a hop count or addresses/CIDRs; "true" and junk are refused naming the forms', async (t) => {
  const accepted: [string | undefined, unknown, unknown][] = [
    [undefined, undefined, false],
    ['false', undefined, false],
    ['0', undefined, false],
    ['1', undefined, 1],
    [' 2 ', undefined, 2],
    ['10.0.0.0/8,127.0.0.1', undefined, ['10.0.0.0/8', '127.0.0.1']],
    ['10.0.0.0/8, 127.0.0.1 , ::1, fd00::/8', undefined, ['10.0.0.0/8', '127.0.0.1', '::1', 'fd00::/8']],
    [undefined, 1, 1],
    [undefined, false, false],
    [undefined, ['192.168.1.10', '10.1.0.0/16'], ['192.168.1.10', '10.1.0.0/16']],
    [undefined, '172.16.0.0/12', ['172.16.0.0/12']],
    ['1', true, 1], // the environment wins over config.json
  ];
  for (const [env, file, expected] of accepted) {
    const config = configWith(t, file, env === undefined ? {} : { SVC_TRUST_PROXY: env })();
    assert.deepEqual(config.trustProxy, expected, `env ${JSON.stringify(env)}, file ${JSON.stringify(file)}`);
  }

  const refused: [string | undefined, unknown][] = [
    ['true', undefined],
    ['TRUE', undefined],
    ['yes', undefined],
    ['on', undefined],
    [undefined, true],
    [undefined, 'true'],
    ['banana', undefined],
    ['-1', undefined],
    ['1.5', undefined],
    ['33', undefined],
    ['0.0.0.0/0', undefined],
    ['::/0', undefined],
    ['10.0.0.0/33', undefined],
    ['10.0.0.0/8/1', undefined],
    ['10.0.0.0/x', undefined],
    ['127.0.0.1,true', undefined],
    ['10.0.0.256', undefined],
    ['loopback', undefined],
    [undefined, 1.5],
    [undefined, 0.5],
    [undefined, { hops: 1 }],
  ];
  for (const [env, file] of refused) {
    const load = configWith(t, file, env === undefined ? {} : { SVC_TRUST_PROXY: env });
    assert.throws(
      load,
      (err: unknown) => {
        assert.ok(err instanceof ConfigError, `a ConfigError for ${JSON.stringify(env ?? file)}`);
        assert.match(err.message, /trustProxy/);
        assert.match(err.message, /hop count/, 'names the hop-count form');
        assert.match(err.message, /10\.0\.0\.0\/8,127\.0\.0\.1/, 'names the list form');
        assert.doesNotMatch(err.message, /\n/, 'one line');
        return true;
      },
      `env ${JSON.stringify(env)}, file ${JSON.stringify(file)} must be refused`,
    );
  }
});

// ---------------------------------------------------------------------------------------
// Trusted proxies: the counted client
// ---------------------------------------------------------------------------------------

let spoofCounter = 0;
/** A different made-up left-most address each time, as an attacker would send. */
const spoof = () => `198.18.${Math.floor(++spoofCounter / 250)}.${(spoofCounter % 250) + 1}`;

async function events(s: TestServer, token: string, path: string): Promise<any[]> {
  const wf = await s.request('GET', '/workflows', { token });
  const id = wf.body.data.find((w: any) => w.webhook?.url?.endsWith(path))?.id;
  const res = await s.request('GET', `/workflows/${id}/webhook-events?limit=200`, { token });
  assert.equal(res.status, 200, res.text);
  return res.body.data;
}

test('behind one trusted hop (SVC_TRUST_PROXY=1), a spoofed left-most X-Forwarded-For does not change the counted client', async (t) => {
  const { s, token } = await buildAsOwner(t, { env: { SVC_TRUST_PROXY: '1', SVC_WEBHOOK_RATE_LIMIT: '5' } });
  const hook = await activeHook(s, token);
  // The test client plays the proxy: it appends the address it saw (the real client).
  const via = (client: string, forged = true) =>
    s.request('POST', hook, {
      raw: '{"email":"p@example.com"}',
      headers: { 'content-type': 'application/json', 'x-forwarded-for': forged ? `${spoof()}, ${client}` : client },
    });

  for (let i = 0; i < 5; i++) {
    const res = await via('203.0.113.10');
    assert.equal(res.status, 202, res.text);
    assert.equal(res.headers.get('x-ratelimit-remaining'), String(4 - i));
  }
  for (let i = 0; i < 3; i++) assertProblem(await via('203.0.113.10'), 429, 'rate_limited');
  assertProblem(await via('203.0.113.10', false), 429, 'rate_limited');
  // Another real client behind the same proxy has its own budget.
  const other = await via('203.0.113.11');
  assert.equal(other.status, 202, other.text);
  assert.equal(other.headers.get('x-ratelimit-remaining'), '4');

  const evs = await events(s, token, hook);
  assert.deepEqual(new Set(evs.map((e) => e.sourceIp)), new Set(['203.0.113.10', '203.0.113.11']), 'the logged address is the real client');
});

test('with a list of proxies (SVC_TRUST_PROXY=10.0.0.0/8,127.0.0.1), only listed hops are skipped', async (t) => {
  const { s, token } = await buildAsOwner(t, { env: { SVC_TRUST_PROXY: '10.0.0.0/8,127.0.0.1', SVC_WEBHOOK_RATE_LIMIT: '3' } });
  const hook = await activeHook(s, token);
  const post = (xff: string) =>
    s.request('POST', hook, { raw: '{"email":"p@example.com"}', headers: { 'content-type': 'application/json', 'x-forwarded-for': xff } });

  // Through two proxies (10.1.2.3, then this socket's 127.0.0.1): the client is 203.0.113.20.
  for (let i = 0; i < 3; i++) assert.equal((await post(`${spoof()}, 203.0.113.20, 10.1.2.3`)).status, 202);
  assertProblem(await post(`${spoof()}, ${spoof()}, 203.0.113.20, 10.1.2.3`), 429);
  assertProblem(await post('203.0.113.20'), 429);
  // An address that is not a listed proxy is the client, whatever stands left of it.
  const untrusted = await post('203.0.113.20, 198.51.100.7');
  assert.equal(untrusted.status, 202, untrusted.text);
  assert.equal(untrusted.headers.get('x-ratelimit-remaining'), '2');
  const evs = await events(s, token, hook);
  assert.equal(evs[0].sourceIp, '198.51.100.7');
  assert.deepEqual(new Set(evs.map((e) => e.sourceIp)), new Set(['203.0.113.20', '198.51.100.7']));
});

test('behind one trusted hop, the login throttle and the audit log count the real client, not the spoofed one', async (t) => {
  const { s } = await buildAsOwner(t, { env: { SVC_TRUST_PROXY: '1', SVC_LOGIN_RATE_LIMIT: '3' } });
  const login = (password: string, client: string) =>
    s.request('POST', '/auth/login', { body: { email: s.owner.email, password }, headers: { 'x-forwarded-for': `${spoof()}, ${client}` } });

  const ok = await login(s.owner.password, '203.0.113.30');
  assert.equal(ok.status, 200, ok.text);
  const ip = await lastLoginIp(s);
  assert.equal(ip, '203.0.113.30', 'the audit entry names the real client');

  for (let i = 0; i < 3; i++) assertProblem(await login('wrong-password', '203.0.113.31'), 401, 'invalid_credentials');
  // A fresh spoofed address per attempt does not reset the count.
  const limited = await login('wrong-password', '203.0.113.31');
  assertProblem(limited, 429);
  assert.match(limited.headers.get('retry-after') ?? '', /^\d+$/);
  assertProblem(await login(s.owner.password, '203.0.113.31'), 429);
});

test('without a trusted proxy (the default), X-Forwarded-For is ignored by the login throttle and the audit log', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '2' } });
  const ok = await s.request('POST', '/auth/login', {
    body: { email: s.owner.email, password: s.owner.password },
    headers: { 'x-forwarded-for': '203.0.113.40' },
  });
  assert.equal(ok.status, 200, ok.text);
  const ip = await lastLoginIp(s);
  assert.match(String(ip), /^(::ffff:)?127\.0\.0\.1$/);
});

test('text holding U+0000 is refused with 422 and the pointer to it, on every store, before anything is written', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const cases: [string, string, unknown, string][] = [
    ['POST', '/contacts', { email: 'nul@example.com', firstName: 'a\u0000b' }, '/firstName'],
    ['POST', '/contacts', { email: 'nul@example.com', attributes: { plan: { tier: 'x\u0000' } } }, '/attributes/plan/tier'],
    ['POST', '/contacts', { email: 'nul@example.com', attributes: { 'a/b\u0000': 1 } }, '/attributes/a~1b\u0000'],
    ['POST', '/contacts', { email: 'nul@example.com', tags: ['ok', 'n\u0000'] }, '/tags/1'],
    ['POST', '/templates', { name: 'n', channel: 'EMAIL', content: { subject: 'Hi\u0000', text: 'x' } }, '/content/subject'],
  ];
  for (const [method, path, body, pointer] of cases) {
    const res = await s.request(method, path, { token, body });
    assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(
      res.body.errors.map((e: { path: string }) => e.path),
      [pointer],
      `${method} ${path} ${JSON.stringify(body)}`,
    );
  }
  // Nothing of them was stored; the same contact without the character is.
  assert.equal((await s.request('GET', '/contacts?email=nul@example.com', { token })).body.data.length, 0);
  assert.equal((await s.request('POST', '/contacts', { token, body: { email: 'nul@example.com', firstName: 'ab' } })).status, 201);
  // A well-formed JSON escape of another control character is kept as it is.
  const tab = await s.request('POST', '/contacts', { token, body: { email: 'tab@example.com', firstName: 'a\tb' } });
  assert.equal(tab.status, 201, tab.text);
  assert.equal(tab.body.firstName, 'a\tb');
});

test('a lone surrogate (\\ud800 in JSON) is refused with 422 at its field, not stored as U+FFFD; a pair is a character like any other', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const cases: [string, string, unknown, string][] = [
    ['POST', '/contacts', { email: 'sur\ud800@example.com' }, '/email'],
    ['POST', '/contacts', { email: 'lone@example.com', lastName: 'x\udfffy' }, '/lastName'],
    ['POST', '/contacts', { email: 'lone@example.com', attributes: { 'k\ud83d': 1 } }, '/attributes/k\ud83d'],
    ['POST', '/templates', { name: 'n', channel: 'SMS', content: { text: 'end\ud83d' } }, '/content/text'],
  ];
  for (const [method, path, body, pointer] of cases) {
    const res = await s.request(method, path, { token, body });
    assertProblem(res, 422, 'validation_failed');
    assert.deepEqual(
      res.body.errors.map((e: { path: string }) => e.path),
      [pointer],
      `${method} ${path} ${JSON.stringify(body)}`,
    );
    assert.match(res.body.errors[0].message, /well-formed Unicode/);
  }
  assert.equal((await s.request('GET', '/contacts', { token })).body.data.length, 0, 'nothing was stored');
  const pair = await s.request('POST', '/contacts', { token, body: { email: 'pair@example.com', firstName: 'Ann \ud83d\ude00' } });
  assert.equal(pair.status, 201, pair.text);
  assert.equal(pair.body.firstName, 'Ann 😀');
  // In an import row, at its field; the other rows are imported.
  const imported = await s.request('POST', '/contacts/import', {
    token,
    raw: '{"email":"i1@example.com","firstName":"\\ud800"}\n{"email":"i2@example.com"}\n',
    headers: { 'content-type': 'application/x-ndjson' },
  });
  assert.equal(imported.status, 200, imported.text);
  assert.deepEqual(
    imported.body.errors.map((e: { line: number; field: string }) => [e.line, e.field]),
    [[1, 'firstName']],
  );
  assert.equal(imported.body.created, 1);
});

/** Each GET is 400 invalid_query with one error, at the JSON Pointer given beside it. */
async function assertRefusedAt(s: TestServer, token: string, queries: [string, string][]): Promise<void> {
  for (const [path, pointer] of queries) {
    const res = await s.request('GET', path, { token });
    assertProblem(res, 400, 'invalid_query');
    assert.deepEqual(
      res.body.errors.map((e: { path: string }) => e.path),
      [pointer],
      path,
    );
  }
}

test('a query string that is not valid percent-encoding is 400 invalid_query at its name, not a filter matching nothing', async (t) => {
  const { s, token } = await buildAsOwner(t);
  await s.request('POST', '/contacts', { token, body: { email: 'pct@example.com', firstName: '100%' } });
  const queries: [string, string][] = [
    ['/contacts?email=%E0%A4%A', '/email'],
    ['/contacts?limit=10&q=50%', '/q'],
    ['/contacts?tag=%zz', '/tag'],
    // Well-formed escapes of bytes that are not UTF-8 (a lone continuation byte, Latin-1 é).
    ['/contacts?q=%80', '/q'],
    ['/audit-logs?action=caf%E9', '/action'],
    ['/runs?st%atus=QUEUED', '/st%atus'],
    ['/contacts/export?format=csv&q=%', '/q'],
  ];
  await assertRefusedAt(s, token, queries);
  // Well-formed escapes, '+' for a space and a literal '%' sent as %25 are read as before.
  const found = await s.request('GET', '/contacts?q=100%25', { token });
  assert.equal(found.status, 200, found.text);
  assert.deepEqual(
    found.body.data.map((c: { email: string }) => c.email),
    ['pct@example.com'],
  );
  assert.equal((await s.request('GET', '/contacts?email=pct%40example.com', { token })).body.data.length, 1);
  assert.equal((await s.request('GET', '/contacts?q=%F0%9F%98%80+x', { token })).status, 200);
  // The check comes after authentication: without a token it is still 401.
  assert.equal((await s.request('GET', '/contacts?email=%E0%A4%A')).status, 401);
});

test('U+0000 in the URL: a query value is 400 invalid_query at its name, a path segment 404, on every store', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'nulurl@example.com', tags: ['vip'] } });
  const queries: [string, string][] = [
    ['/contacts?tag=v%00ip', '/tag'],
    ['/contacts?email=nulurl%00@example.com', '/email'],
    ['/audit-logs?action=contact.created%00', '/action'],
    ['/runs?status=QUEUED&cursor=%00', '/cursor'],
    ['/contacts/export?q=%00abc', '/q'],
  ];
  await assertRefusedAt(s, token, queries);
  assertProblem(await s.request('DELETE', `/contacts/${contact.body.id}/tags/v%00ip`, { token }), 404, 'not_found');
  assertProblem(await s.request('GET', '/contacts/1%00', { token }), 404);
  // The tag is still there, and the same filters without the character work.
  assert.equal((await s.request('GET', '/contacts?tag=vip', { token })).body.data.length, 1);
  assert.equal((await s.request('GET', '/audit-logs?action=contact.created', { token })).status, 200);
});

test('a body nested thousands of levels deep is refused with 422, never a 500; a run trigger or test email data past 32 levels too, and run lists stay readable', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const deep = (levels: number): string => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
  const contact = (await s.request('POST', '/contacts', { token, body: { email: 'deep@example.com' } })).body;
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
      { id: 'a', type: 'add_tags', data: { tags: ['d'] } },
    ],
    edges: [{ from: 't', to: 'a' }],
  };
  const automation = (await s.request('POST', '/automations', { token, body: { name: 'noop', status: 'ACTIVE', graph } })).body;
  const json = { 'content-type': 'application/json' };
  for (const levels of [200, 5_000]) {
    for (const [path, raw] of [
      [`/automations/${automation.id}/runs`, `{"contactId":${contact.id},"trigger":{"x":${deep(levels)}}}`],
      ['/messages/test-email', `{"to":"a@example.com","subject":"s","text":"t","data":{"x":${deep(levels)}}}`],
      ['/contacts', `{"email":"d2@example.com","attributes":{"x":${deep(levels)}}}`],
      [`/templates`, `{"name":"n","channel":"SMS","content":{"text":"x"},"extra":${deep(levels)}}`],
    ] as const) {
      const res = await s.request('POST', path, { token, raw, headers: json });
      assertProblem(res, 422, 'body_too_deep');
      assert.match(res.body.detail, /more than 128 levels/);
    }
  }
  // Within the API's bound, the fields that hold JSON keep their own (a trigger is read back
  // in every list of runs).
  const run = await s.request('POST', `/automations/${automation.id}/runs`, { token, raw: `{"contactId":${contact.id},"trigger":${deep(33)}}`, headers: json });
  assertProblem(run, 422, 'validation_failed');
  assert.deepEqual(
    run.body.errors.map((e: { path: string }) => e.path),
    ['/trigger'],
  );
  const mail = await s.request('POST', '/messages/test-email', {
    token,
    raw: `{"to":"a@example.com","subject":"s","text":"t","data":${deep(33)}}`,
    headers: json,
  });
  assertProblem(mail, 422, 'validation_failed');
  assert.deepEqual(
    mail.body.errors.map((e: { path: string }) => e.path),
    ['/data'],
  );
  const ok = await s.request('POST', `/automations/${automation.id}/runs`, { token, raw: `{"contactId":${contact.id},"trigger":${deep(32)}}`, headers: json });
  assert.equal(ok.status, 202, ok.text);
  const runs = await s.request('GET', '/runs', { token });
  assert.equal(runs.status, 200, runs.text);
  assert.equal(runs.body.data.length, 1);
  assert.equal((await s.request('GET', `/runs/${ok.body.runId}`, { token })).status, 200);
});

test('a JSON body is UTF-8 or 400; a refused key is named; a DELETE saying JSON with no body is a DELETE', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const post = (raw: string | Buffer) => s.request('POST', '/contacts', { token, raw, headers: { 'content-type': 'application/json' } });
  // Latin-1 é, a lone continuation byte, an overlong encoding: not UTF-8, not stored as U+FFFD.
  for (const bytes of [
    Buffer.from('{"email":"caf\xe9@example.com"}', 'latin1'),
    Buffer.from([...Buffer.from('{"email":"x'), 0xff, ...Buffer.from('@example.com"}')]),
    Buffer.from([...Buffer.from('{"firstName":"'), 0xc0, 0xaf, ...Buffer.from('","email":"o@example.com"}')]),
  ]) {
    const res = await post(bytes);
    assertProblem(res, 400, 'invalid_json');
    assert.match(res.body.detail, /not UTF-8/);
  }
  assert.equal((await s.request('GET', '/contacts', { token })).body.data.length, 0, 'nothing was stored');
  const bom = await post(Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"email":"bom@example.com","firstName":"Zoë"}')]));
  assert.equal(bom.status, 201, bom.text);
  assert.equal(bom.body.firstName, 'Zoë');

  for (const raw of ['{"__proto__":{"x":1},"email":"p@example.com"}', '{"email":"p@example.com","attributes":{"constructor":{"prototype":{"x":1}}}}']) {
    const res = await post(raw);
    assertProblem(res, 400, 'invalid_json');
    assert.match(res.body.detail, /"__proto__", or "constructor" holding "prototype"/);
  }
  assert.match((await post('{"email":')).body.detail, /not valid JSON/);
  assertProblem(await post(''), 400, 'invalid_json');

  const json = { 'content-type': 'application/json' };
  const del = await s.request('DELETE', `/contacts/${bom.body.id}`, { token, headers: json });
  assert.equal(del.status, 204, del.text);
  const key = await s.request('POST', '/api-keys', { token, body: { name: 'k', role: 'VIEWER' } });
  assert.equal((await s.request('DELETE', `/api-keys/${key.body.id}`, { token, headers: json })).status, 204);
});
