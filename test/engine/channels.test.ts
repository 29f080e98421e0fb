import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { build, waitForRun } from '../helpers.js';
import { smtpSink } from '../smtpSink.js';

/** A run through a real provider: the engine renders, sends, retries and records. */
async function setUp(
  t: TestContext,
  channel: 'EMAIL' | 'SMS',
  settings: Record<string, unknown>,
  content: Record<string, unknown>,
  stepType: string,
  env: NodeJS.ProcessEnv = {},
) {
  const s = await build(t, {
    engine: { pollMs: 50 },
    env: { SVC_DELIVERY_RETRY_BASE_MS: '50', SVC_DELIVERY_MAX_ATTEMPTS: '4', SVC_HTTP_ALLOW_PRIVATE: '1', ...env },
  });
  const token = await s.login(s.owner.email, s.owner.password);
  const put = await s.request('PUT', '/settings/channels', { token, body: { [channel]: settings } });
  assert.equal(put.status, 200, put.text);
  const template = await s.request('POST', '/templates', { token, body: { name: 'n', channel, content } });
  assert.equal(template.status, 201, template.text);
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'w',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [
        { type: stepType, templateId: template.body.id },
        { type: 'add_tags', tags: ['notified'] },
      ],
      webhook: { lookup: channel === 'EMAIL' ? 'email' : 'phone', createIfNotFound: true },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const post = async (body: unknown) => {
    const res = await s.request('POST', new URL(wf.body.webhook.url).pathname, { body });
    assert.equal(res.status, 202, res.text);
    return res.body as { runId: number; contactId: number };
  };
  return { s, token, post };
}

async function fakeSmsApi(t: TestContext, answer: (n: number) => { status: number; body: unknown; headers?: Record<string, string> }) {
  const calls: { path: string; body: string; at: number }[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      calls.push({ path: req.url ?? '', body, at: Date.now() });
      const a = answer(calls.length);
      res.writeHead(a.status, { 'content-type': 'application/json', ...a.headers }).end(JSON.stringify(a.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return { calls, baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

const smsSettings = (baseUrl: string) => ({
  provider: 'twilio',
  settings: { baseUrl, accountSid: 'AC123', from: '+15005550006' },
  credentials: { authToken: 'secret-token' },
});

test('a run sends its email through a real SMTP server with the rendered content', async (t) => {
  const { port, received } = await smtpSink(t);
  const { s, token, post } = await setUp(
    t,
    'EMAIL',
    { provider: 'smtp', settings: { host: '127.0.0.1', port, secure: false, from: 'shop@example.com' } },
    { subject: 'Order {{ trigger.order }} confirmed', text: 'Thanks {{ trigger.name }}!' },
    'send_email',
  );
  const { runId } = await post({ email: 'buyer@example.com', order: 'A-9', name: 'Ann' });
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  assert.equal(received.length, 1);
  assert.match(received[0]!.raw, /Subject: Order A-9 confirmed/);
  assert.match(received[0]!.raw, /Thanks Ann!/);
  const attempts = await s.request('GET', `/messages/delivery-attempts?runId=${runId}`, { token });
  assert.equal(attempts.body.data[0].provider, 'smtp');
  assert.equal(attempts.body.data[0].status, 'SENT');
});

test('an SMS provider failing twice (503) then succeeding: the run retries with backoff and completes, one attempt row per try', async (t) => {
  const api = await fakeSmsApi(t, (n) => (n <= 2 ? { status: 503, body: { message: 'busy' } } : { status: 201, body: { sid: 'SM42' } }));
  const { s, token, post } = await setUp(t, 'SMS', smsSettings(api.baseUrl), { text: 'Code {{ trigger.code }}' }, 'send_sms');
  const { runId } = await post({ phone: '+14155552671', code: '1234' });
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  assert.equal(api.calls.length, 3);
  assert.match(decodeURIComponent(api.calls[2]!.body.replaceAll('+', ' ')), /Body=Code 1234/);
  const attempts = await s.request('GET', `/messages/delivery-attempts?runId=${runId}`, { token });
  const rows = attempts.body.data.sort((a: { attempt: number }, b: { attempt: number }) => a.attempt - b.attempt);
  assert.deepEqual(
    rows.map((a: { attempt: number; status: string }) => [a.attempt, a.status]),
    [
      [1, 'FAILED'],
      [2, 'FAILED'],
      [3, 'SENT'],
    ],
  );
  assert.equal(rows[2].providerMessageId, 'SM42');
});

test('an SMS provider answering 429 with Retry-After: 2 gets the send retried after 2 s, never failed, however often it asks', async (t) => {
  // Four rate-limit answers: as many as deliveryMaxAttempts (4) here. A deferral is not a
  // failed try, so the fifth call still happens and the run completes.
  const api = await fakeSmsApi(t, (n) =>
    n <= 4 ? { status: 429, body: { code: 20429, message: 'Too Many Requests' }, headers: { 'retry-after': '2' } } : { status: 201, body: { sid: 'SM429' } },
  );
  const { s, token, post } = await setUp(t, 'SMS', smsSettings(api.baseUrl), { text: 'Code {{ trigger.code }}' }, 'send_sms');
  const { runId } = await post({ phone: '+14155552671', code: '429' });
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED'], 30_000);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  assert.equal(api.calls.length, 5);
  for (let i = 1; i < api.calls.length; i++) {
    const gap = api.calls[i]!.at - api.calls[i - 1]!.at;
    assert.ok(gap >= 1_950, `call ${i + 1} came ${gap} ms after the one answered 429 with Retry-After: 2`);
  }
  const attempts = await s.request('GET', `/messages/delivery-attempts?runId=${runId}`, { token });
  const sent = attempts.body.data.filter((a: { status: string }) => a.status === 'SENT');
  assert.equal(sent.length, 1);
  assert.equal(sent[0].providerMessageId, 'SM429');
});

test('an SMS provider answering 400 fails the step at once with the provider error', async (t) => {
  const api = await fakeSmsApi(t, () => ({ status: 400, body: { code: 21211, message: 'invalid To number' } }));
  const { s, token, post } = await setUp(t, 'SMS', smsSettings(api.baseUrl), { text: 'hi' }, 'send_sms');
  const { runId, contactId } = await post({ phone: '+14155552671' });
  const run = await waitForRun(s, token, runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'FAILED');
  assert.match(run.steps[0].error, /invalid To number/);
  assert.equal(run.steps[1].status, 'PENDING');
  assert.equal(api.calls.length, 1, 'a permanent failure is not retried');
  assert.deepEqual((await s.request('GET', `/contacts/${contactId}`, { token })).body.tags, []);
});

test('a hostile template fails its step cleanly and the engine goes on with other runs', async (t) => {
  const s = await build(t, { engine: { pollMs: 50 }, env: { SVC_HTTP_ALLOW_PRIVATE: '1' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const hostile = await s.request('POST', '/templates', {
    token,
    body: { name: 'loop', channel: 'SMS', content: { text: '{% for i in (1..100000000) %}xxxxxxxxxx{% endfor %}' } },
  });
  assert.equal(hostile.status, 201, hostile.text);
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'w',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'send_sms', templateId: hostile.body.id }],
      webhook: { lookup: 'phone', createIfNotFound: true },
    },
  });
  const path = new URL(wf.body.webhook.url).pathname;
  const bad = await s.request('POST', path, { body: { phone: '+14155552671' } });
  const started = Date.now();
  const run = await waitForRun(s, token, bad.body.runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'FAILED');
  assert.match(run.steps[0].error, /limit|too large|exceeded/i);
  assert.ok(Date.now() - started < 10_000);
  const fine = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'ok',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['ok'] }],
      webhook: { lookup: 'phone', createIfNotFound: true },
    },
  });
  const ok = await s.request('POST', new URL(fine.body.webhook.url).pathname, { body: { phone: '+14155552671' } });
  assert.equal((await waitForRun(s, token, ok.body.runId, ['COMPLETED', 'FAILED'])).status, 'COMPLETED');
});

test('messages waiting for their turn go with the channel settings of their turn: switched to the outbox, they leave through it', async (t) => {
  const held: (() => void)[] = [];
  const calls: string[] = [];
  const api = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      calls.push(body);
      held.push(() => res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ sid: `SM${calls.length}` })));
    });
  });
  await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
  t.after(() => {
    api.closeAllConnections();
    return new Promise<void>((r) => api.close(() => r()));
  });
  const baseUrl = `http://127.0.0.1:${(api.address() as AddressInfo).port}`;
  // One message at a time to the provider: the others wait for their turn.
  const { s, token, post } = await setUp(t, 'SMS', smsSettings(baseUrl), { text: 'hi' }, 'send_sms', { SVC_OUTBOUND_PER_HOST_CONCURRENCY: '1' });
  const runs: number[] = [];
  for (const phone of ['+14155552671', '+14155552672', '+14155552673']) runs.push((await post({ phone })).runId);
  const started = Date.now();
  while (calls.length < 1 && Date.now() - started < 20_000) await new Promise((r) => setTimeout(r, 20));
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(calls.length, 1, 'one message at the provider, the others waiting for their turn');

  // The admin switches the channel to the outbox: the waiting messages go there, not to the old provider.
  assert.equal((await s.request('PUT', '/settings/channels', { token, body: { SMS: { provider: 'outbox' } } })).status, 200);
  for (const answer of held.splice(0)) answer();
  const done = await Promise.all(runs.map((id) => waitForRun(s, token, id, ['COMPLETED', 'FAILED'])));
  assert.deepEqual(
    done.map((r) => r.status),
    ['COMPLETED', 'COMPLETED', 'COMPLETED'],
  );
  assert.equal(calls.length, 1, 'nothing more reached the old provider');
  const providers = [];
  for (const id of runs)
    providers.push(
      (await s.request('GET', `/messages/delivery-attempts?runId=${id}`, { token })).body.data.map(
        (a: { provider: string; status: string }) => `${a.provider}:${a.status}`,
      ),
    );
  assert.deepEqual(providers.flat().sort(), ['outbox:SENT', 'outbox:SENT', 'twilio:SENT']);
});
