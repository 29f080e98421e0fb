/**
 * The inbound webhook answered on node:http directly (issue 9, item 4: webhookIngress.ts):
 * the same answers whether the server hands the request to the ingress or Fastify routes it
 * (app.inject), one kept-alive connection carrying webhook and API requests in turn, a body
 * over the limit sent in chunks refused with Connection: close and recorded, 503 while
 * closing, and the metrics counting each request once on both doors. Real server, real file.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { connect } from 'node:net';
import { test } from 'node:test';
import { isWebhookRequest, webhookToken } from '../../src/server/webhookIngress.js';
import { parseMetrics, sampleValue } from '../prometheus.js';
import { assertProblem, build, type TestServer } from '../helpers.js';

const SECRET = 'a-signing-secret-of-32-characters';
const METRICS_TOKEN = 'metrics-token-0123456789abcdef';
const sign = (raw: string) => `sha256=${createHmac('sha256', SECRET).update(raw).digest('hex')}`;

async function signedWorkflow(s: TestServer, token: string): Promise<{ id: number; path: string }> {
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'carol@example.net' } });
  assert.equal(contact.status, 201, contact.text);
  const res = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'Inbound',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['x'] }],
      webhook: { lookup: 'email', path: 'email', signingSecret: SECRET },
    },
  });
  assert.equal(res.status, 201, res.text);
  return { id: res.body.id, path: new URL(res.body.webhook.url).pathname };
}

/** Writes `requests` on one connection, one after the other's answer, and gives back each answer's raw text. */
function onOneConnection(url: string, requests: string[]): Promise<string[]> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const answers: string[] = [];
    let buffer = '';
    const socket = connect({ host: hostname, port: Number(port) }, () => socket.write(requests[0]!));
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => {
      buffer += d;
      const end = buffer.indexOf('\r\n\r\n');
      if (end === -1) return;
      const length = Number(/\r\ncontent-length: (\d+)/i.exec(buffer.slice(0, end))?.[1] ?? 0);
      if (buffer.length < end + 4 + length) return;
      answers.push(buffer.slice(0, end + 4 + length));
      buffer = buffer.slice(end + 4 + length);
      if (answers.length === requests.length) return socket.end();
      socket.write(requests[answers.length]!);
    });
    socket.on('close', () => resolve(answers));
    socket.on('error', reject);
  });
}

const post = (path: string, body: string, headers: Record<string, string>) =>
  `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('')}\r\n${body}`;

test('which requests are the webhook’s, and their token', () => {
  for (const url of ['/v1/webhooks/in', '/v1/webhooks/in/', '/v1/webhooks/in/abc', '/v1/webhooks/in?x=1', '/v1/webhooks/in/a/b'])
    assert.ok(isWebhookRequest('POST', url), url);
  for (const [method, url] of [
    ['GET', '/v1/webhooks/in/abc'],
    ['PUT', '/v1/webhooks/in/abc'],
    ['POST', '/v1/webhooks/inbound'],
    ['POST', '/v1/webhooks'],
    ['POST', '/contacts'],
    ['POST', undefined],
  ] as const)
    assert.ok(!isWebhookRequest(method, url), `${method} ${url}`);
  assert.equal(webhookToken('/v1/webhooks/in/abc?x=1'), 'abc');
  assert.equal(webhookToken('/v1/webhooks/in/a%62c'), 'abc');
  for (const url of ['/v1/webhooks/in', '/v1/webhooks/in/', '/v1/webhooks/in/a/b', '/v1/webhooks/in/abc/', `/v1/webhooks/in/${'a'.repeat(257)}`])
    assert.equal(webhookToken(url), '', url);
  assert.equal(webhookToken(`/v1/webhooks/in/${'a'.repeat(256)}`), 'a'.repeat(256));
  assert.equal(webhookToken('/v1/webhooks/in/%E0%A4%A'), null);
});

test('the socket and app.inject answer a webhook alike, and each is counted once in the metrics', async (t) => {
  const s = await build(t, { env: { SVC_METRICS_TOKEN: METRICS_TOKEN, SVC_WEBHOOK_RATE_LIMIT: '100' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const { path } = await signedWorkflow(s, token);
  const good = JSON.stringify({ email: 'carol@example.net' });
  const cases: { name: string; path: string; body: string; headers: Record<string, string>; status: number; code?: string }[] = [
    { name: 'accepted', path, body: good, headers: { 'content-type': 'application/json', 'x-service-signature': sign(good) }, status: 202 },
    {
      name: 'bad signature',
      path,
      body: good,
      headers: { 'content-type': 'application/json', 'x-service-signature': 'sha256=00' },
      status: 401,
      code: 'signature_invalid',
    },
    {
      name: 'unknown token',
      path: '/v1/webhooks/in/no-such-token',
      body: good,
      headers: { 'content-type': 'application/json' },
      status: 404,
      code: 'webhook_not_found',
    },
    { name: 'no token', path: '/v1/webhooks/in/', body: good, headers: { 'content-type': 'application/json' }, status: 404, code: 'webhook_not_found' },
    { name: 'text', path, body: good, headers: { 'content-type': 'text/plain' }, status: 415, code: 'unsupported_media_type' },
    {
      name: 'not JSON',
      path,
      body: '{x',
      headers: { 'content-type': 'application/json', 'x-service-signature': sign('{x') },
      status: 400,
      code: 'invalid_json',
    },
    { name: 'bad escape', path: '/v1/webhooks/in/%E0%A4%A', body: good, headers: { 'content-type': 'application/json' }, status: 400, code: 'bad_url' },
  ];
  const scrape = async () => parseMetrics((await s.request('GET', '/metrics', { token: METRICS_TOKEN })).text);
  for (const c of cases) {
    const before = await scrape();
    const viaSocket = await s.request('POST', c.path, { raw: Buffer.from(c.body), headers: { ...c.headers, 'x-request-id': `socket-${c.status}` } });
    const viaInject = await s.app.inject({ method: 'POST', url: c.path, payload: c.body, headers: { ...c.headers, 'x-request-id': `inject-${c.status}` } });
    for (const [door, status, headers, text] of [
      ['socket', viaSocket.status, Object.fromEntries(viaSocket.headers), viaSocket.text],
      ['inject', viaInject.statusCode, viaInject.headers as Record<string, string>, viaInject.body],
    ] as const) {
      const what = `${c.name} through the ${door}`;
      assert.equal(status, c.status, `${what}: ${text}`);
      assert.equal(headers['x-request-id'], `${door}-${c.status}`, what);
      assert.equal(headers['x-content-type-options'], 'nosniff', what);
      assert.equal(headers['referrer-policy'], 'no-referrer', what);
      const body = JSON.parse(text);
      if (c.code) {
        assert.match(String(headers['content-type']), /^application\/problem\+json/, what);
        assert.deepEqual({ status: body.status, code: body.code, type: body.type }, { status: c.status, code: c.code, type: 'about:blank' }, what);
      } else {
        assert.match(String(headers['content-type']), /^application\/json/, what);
        assert.deepEqual(Object.keys(body), ['runId', 'contactId'], what);
      }
      // The per-address limit counts every request that got as far as it (all but a URL that cannot be read).
      if (c.code !== 'bad_url') assert.equal(headers['x-ratelimit-limit'], '100', what);
    }
    const after = await scrape();
    const requests = (m: typeof after) =>
      sampleValue(m, 'svc_http_requests_total', { method: 'POST', route: '/v1/webhooks/in/:token', status: String(c.status) });
    if (c.code !== 'bad_url') assert.equal(requests(after) - requests(before), 2, `${c.name}: one request through each door`);
    if (c.status === 202) {
      const accepted = (m: typeof after) => sampleValue(m, 'svc_webhooks_accepted_total', { replayed: 'false' });
      assert.equal(accepted(after) - accepted(before), 2, c.name);
    } else if (c.code && c.code !== 'bad_url') {
      const refused = (m: typeof after) => sampleValue(m, 'svc_webhooks_refused_total', { code: c.code! });
      assert.equal(refused(after) - refused(before), 2, c.name);
    }
  }
});

test('one kept-alive connection carries webhook and API requests in turn', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const { path } = await signedWorkflow(s, token);
  assert.equal(s.app.server.keepAliveTimeout, 72_000, "Fastify's own keep-alive timeout");
  const good = JSON.stringify({ email: 'carol@example.net' });
  const webhook = post(path, good, { 'Content-Type': 'application/json', 'X-Service-Signature': sign(good) });
  const refused = post(path, good, { 'Content-Type': 'application/json', 'X-Service-Signature': 'sha256=00' });
  const api = `GET /runs?limit=5 HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${token}\r\n\r\n`;
  const answers = await onOneConnection(s.url, [webhook, api, refused, webhook, api]);
  assert.deepEqual(
    answers.map((a) => a.split(' ', 2)[1]),
    ['202', '200', '401', '202', '200'],
    answers.join('\n'),
  );
  for (const a of answers) assert.doesNotMatch(a, /\r\nconnection: close/i, a);
  const runs = JSON.parse(answers[4]!.split('\r\n\r\n')[1]!);
  assert.equal(runs.data.length, 2);
});

test('a chunked body over the limit: 413, Connection: close, recorded against the workflow', async (t) => {
  const s = await build(t, { env: { SVC_WEBHOOK_BODY_LIMIT: '2048' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const { id, path } = await signedWorkflow(s, token);
  const chunk = `{"email":"carol@example.net","pad":"${'a'.repeat(3000)}"}`;
  const { hostname, port } = new URL(s.url);
  const answer = await new Promise<string>((resolve, reject) => {
    let received = '';
    const socket = connect({ host: hostname, port: Number(port) }, () => {
      socket.write(`POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`);
      socket.write(`${Buffer.byteLength(chunk).toString(16)}\r\n${chunk}\r\n`);
      // The rest never comes: the answer does not wait for it, and the server closes.
    });
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (received += d));
    socket.on('close', () => resolve(received));
    socket.on('error', reject);
  });
  assert.match(answer, /^HTTP\/1\.1 413 /, answer);
  assert.match(answer, /\r\nconnection: close/i, answer);
  assert.equal(JSON.parse(answer.split('\r\n\r\n')[1]!).code, 'payload_too_large');
  const events = await s.request('GET', `/workflows/${id}/webhook-events`, { token });
  assert.deepEqual(
    events.body.data.map((e: { statusCode: number; code: string }) => [e.statusCode, e.code]),
    [[413, 'payload_too_large']],
  );
});

test('while the server closes, a webhook on a kept-alive connection is answered 503 shutting_down', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const { path } = await signedWorkflow(s, token);
  const good = JSON.stringify({ email: 'carol@example.net' });
  const { hostname, port } = new URL(s.url);
  const answers = await new Promise<string>((resolve, reject) => {
    let received = '';
    let closing: Promise<void> | undefined;
    const socket = connect({ host: hostname, port: Number(port) }, () => {
      // The request's head is under way when closing starts; its rest comes after.
      socket.write(`POST ${path} HTTP/1.1\r\nHost: localhost\r\n`);
      setTimeout(() => {
        closing = s.app.close();
        setTimeout(
          () => socket.write(`Content-Type: application/json\r\nContent-Length: ${good.length}\r\nX-Service-Signature: ${sign(good)}\r\n\r\n${good}`),
          100,
        );
      }, 100);
    });
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (received += d));
    socket.on('close', () => void closing?.then(() => resolve(received), reject));
    socket.on('error', reject);
  });
  assert.match(answers, /^HTTP\/1\.1 503 /, answers);
  assert.match(answers, /\r\nconnection: close/i);
  assert.match(answers, /\r\nretry-after: 5/i);
  assert.match(answers, /\r\nx-request-id: /i);
  assertProblem(
    { status: 503, headers: new Headers({ 'content-type': 'application/problem+json' }), body: JSON.parse(answers.split('\r\n\r\n')[1]!), text: '' },
    503,
    'shutting_down',
  );
});
