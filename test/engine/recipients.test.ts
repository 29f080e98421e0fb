/**
 * A send step's recipient, rendered per run from what a webhook's sender posted (or the
 * contact's own email or phone), goes to the provider as one normalised address or not at
 * all: a list, a value with header lines, a number that is no number or an empty value
 * fails the step at once, with a FAILED attempt saying why and no provider reached.
 * Through the real parts: the server, its engine, an SMTP server and an SMS API on 127.0.0.1.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { deliverOnce } from '../../src/engine/deliver.js';
import { configureOutbound, outboundPolicyFrom, STRICT_OUTBOUND_POLICY } from '../../src/engine/outbound.js';
import { build, type TestServer, waitForRun, webhookWorkflow } from '../helpers.js';
import { smtpSink } from '../smtpSink.js';

const ENV = { SVC_DELIVERY_RETRY_BASE_MS: '20', SVC_DELIVERY_MAX_ATTEMPTS: '4', SVC_HTTP_ALLOW_PRIVATE: '1', SVC_HTTP_TIMEOUT_MS: '5000' };

interface Attempt {
  status: string;
  provider: string;
  to: string;
  error?: string;
  attempt: number;
}

async function server(t: TestContext): Promise<{ s: TestServer; token: string }> {
  const s = await build(t, { engine: { pollMs: 50 }, env: ENV });
  return { s, token: await s.login(s.owner.email, s.owner.password) };
}

async function template(s: TestServer, token: string, channel: string, content: Record<string, unknown>): Promise<number> {
  const res = await s.request('POST', '/templates', { token, body: { name: `t-${channel}`, channel, content } });
  assert.equal(res.status, 201, res.text);
  return res.body.id as number;
}

async function channels(s: TestServer, token: string, body: Record<string, unknown>): Promise<void> {
  const res = await s.request('PUT', '/settings/channels', { token, body });
  assert.equal(res.status, 200, res.text);
}

/** An HTTP stand-in for the SMS (or WhatsApp) API that accepts every message and keeps each request. */
async function fakeApi(t: TestContext): Promise<{ url: string; calls: { path: string; body: string }[] }> {
  const calls: { path: string; body: string }[] = [];
  const api = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      calls.push({ path: req.url ?? '', body });
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ sid: `SM${calls.length}`, messages: [{ id: `wamid.${calls.length}` }] }));
    });
  });
  await new Promise<void>((r) => api.listen(0, '127.0.0.1', r));
  t.after(() => {
    api.closeAllConnections();
    return new Promise<void>((r) => api.close(() => r()));
  });
  return { url: `http://127.0.0.1:${(api.address() as AddressInfo).port}`, calls };
}

/** Posts a body to the workflow's webhook and waits for its run to finish. */
async function runOf(s: TestServer, token: string, path: string, body: Record<string, unknown>) {
  const res = await s.request('POST', path, { body });
  assert.equal(res.status, 202, res.text);
  const run = await waitForRun(s, token, res.body.runId as number, ['COMPLETED', 'FAILED']);
  const attempts = await s.request('GET', `/messages/delivery-attempts?runId=${run.runId}`, { token });
  assert.equal(attempts.status, 200, attempts.text);
  return { run, attempts: attempts.body.data as Attempt[] };
}

/** The run failed at its send step, no later step ran, and its one attempt is FAILED with the step's error. */
function assertRefused(result: Awaited<ReturnType<typeof runOf>>, provider: string, error: RegExp): void {
  const { run, attempts } = result;
  assert.equal(run.status, 'FAILED', JSON.stringify(run));
  assert.equal(run.steps[0].status, 'FAILED');
  assert.match(run.steps[0].error, error);
  assert.equal(run.steps[1].status, 'PENDING', 'the steps after a refused send do not run');
  assert.equal(attempts.length, 1, `one attempt, never retried: ${JSON.stringify(attempts)}`);
  assert.equal(attempts[0]!.status, 'FAILED');
  assert.equal(attempts[0]!.provider, provider);
  assert.equal(attempts[0]!.error, run.steps[0].error);
}

const TAIL = { type: 'add_tags', tags: ['sent'] };

test('email: a list or a value with a Bcc line after CRLF fails the step without reaching SMTP; a valid address goes to that one recipient, normalised', async (t) => {
  const sink = await smtpSink(t);
  const { s, token } = await server(t);
  await channels(s, token, { EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port: sink.port, secure: false, from: 'shop@example.com' } } });
  const id = await template(s, token, 'EMAIL', { subject: 'Hello', text: 'Body' });
  const path = await webhookWorkflow(s, token, 'mail', [{ type: 'send_email', templateId: id, to: '{{ trigger.to }}' }, TAIL]);

  const list = await runOf(s, token, path, { email: 'sender1@example.com', to: 'a1@b.co, a2@b.co, a3@b.co' });
  assertRefused(list, 'smtp', /^the recipient "a1@b\.co, a2@b\.co, a3@b\.co" is not one email address$/);
  assert.equal(list.attempts[0]!.to, 'a1@b.co, a2@b.co, a3@b.co');

  const injected = await runOf(s, token, path, { email: 'sender2@example.com', to: '<a5@b.co>\r\nBcc: a6@b.co' });
  assertRefused(injected, 'smtp', /is not one email address/);
  assert.ok(injected.run.steps[0].error.includes(String.raw`"<a5@b.co>\r\nBcc: a6@b.co"`), injected.run.steps[0].error);
  assert.ok(!/[\r\n]/.test(injected.attempts[0]!.to), 'no line break is kept in the recorded recipient');

  const empty = await runOf(s, token, path, { email: 'sender3@example.com', to: '  ' });
  assertRefused(empty, 'smtp', /^the recipient \("to"\) rendered empty: no email address to send to$/);
  const missing = await runOf(s, token, path, { email: 'sender4@example.com' });
  assertRefused(missing, 'smtp', /rendered empty/);

  // None of the refused ones reached the SMTP server: the only message it gets is the valid one.
  const valid = await runOf(s, token, path, { email: 'sender5@example.com', to: '  Ann@Example.COM ' });
  assert.equal(valid.run.status, 'COMPLETED', JSON.stringify(valid.run));
  assert.deepEqual(
    valid.attempts.map((a) => [a.status, a.to]),
    [['SENT', 'ann@example.com']],
  );
  assert.equal(sink.received.length, 1, JSON.stringify(sink.received.map((m) => m.to)));
  assert.deepEqual(sink.received[0]!.to, ['ann@example.com']);
  assert.match(sink.received[0]!.raw, /^To: ann@example\.com\r$/m);
  assert.doesNotMatch(sink.received[0]!.raw, /^(Bcc|Cc):/im);
});

test('email: without `to`, the contact’s own address is used', async (t) => {
  const sink = await smtpSink(t);
  const { s, token } = await server(t);
  await channels(s, token, { EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port: sink.port, secure: false, from: 'shop@example.com' } } });
  const id = await template(s, token, 'EMAIL', { subject: 'Hello', text: 'Body' });
  const path = await webhookWorkflow(s, token, 'mail', [{ type: 'send_email', templateId: id }, TAIL]);
  const done = await runOf(s, token, path, { email: 'Buyer@Example.com' });
  assert.equal(done.run.status, 'COMPLETED', JSON.stringify(done.run));
  assert.deepEqual(
    done.attempts.map((a) => [a.status, a.to]),
    [['SENT', 'buyer@example.com']],
  );
  assert.deepEqual(
    sink.received.map((m) => m.to),
    [['buyer@example.com']],
  );
});

test('SMS: formatted numbers go to the provider in E.164; "not a phone", an empty value and a contact without a phone fail with no request made', async (t) => {
  const api = await fakeApi(t);
  const { s, token } = await server(t);
  await channels(s, token, {
    SMS: { provider: 'twilio', settings: { baseUrl: api.url, accountSid: 'AC123', from: '+15005550006' }, credentials: { authToken: 'sms-secret-1' } },
  });
  const id = await template(s, token, 'SMS', { text: 'Code 42' });
  const path = await webhookWorkflow(s, token, 'sms', [{ type: 'send_sms', templateId: id, to: '{{ trigger.to }}' }, TAIL]);
  const noTo = await webhookWorkflow(s, token, 'sms-contact', [{ type: 'send_sms', templateId: id }, TAIL]);

  const refused = [
    await runOf(s, token, path, { email: 'r1@example.com', to: 'not a phone' }),
    await runOf(s, token, path, { email: 'r2@example.com', to: '' }),
    await runOf(s, token, path, { email: 'r3@example.com', to: '+16135550100, +16135550101' }),
  ];
  assertRefused(refused[0]!, 'twilio', /^the recipient "not a phone" is not a valid phone number$/);
  assertRefused(refused[1]!, 'twilio', /rendered empty: no phone number to send to/);
  assertRefused(refused[2]!, 'twilio', /is not a valid phone number/);
  // The contact (looked up by email) has no phone, and the step names none.
  assertRefused(await runOf(s, token, noTo, { email: 'r4@example.com' }), 'twilio', /^no phone number to send to$/);
  assert.equal(api.calls.length, 0, 'no request reached the SMS API');

  const formatted = await runOf(s, token, path, { email: 'ok1@example.com', to: '+1 (613) 555-0100' });
  const national = await runOf(s, token, path, { email: 'ok2@example.com', to: '613-555-0101' });
  for (const [result, e164] of [
    [formatted, '+16135550100'],
    [national, '+16135550101'],
  ] as const) {
    assert.equal(result.run.status, 'COMPLETED', JSON.stringify(result.run));
    assert.deepEqual(
      result.attempts.map((a) => [a.status, a.to]),
      [['SENT', e164]],
    );
  }
  assert.deepEqual(
    api.calls.map((c) => new URLSearchParams(c.body).get('To')),
    ['+16135550100', '+16135550101'],
  );
});

test('WhatsApp: a recipient that is no phone number is refused, not sent with an empty "to"; a formatted one goes as digits of its E.164 form', async (t) => {
  const api = await fakeApi(t);
  const { s, token } = await server(t);
  await channels(s, token, {
    WHATSAPP: { provider: 'whatsapp', settings: { baseUrl: `${api.url}/v20.0`, phoneNumberId: '1098765' }, credentials: { accessToken: 'wa-secret-token-1' } },
  });
  const id = await template(s, token, 'WHATSAPP', { text: 'Hi' });
  const path = await webhookWorkflow(s, token, 'wa', [{ type: 'send_whatsapp', templateId: id, to: '{{ trigger.to }}' }, TAIL]);
  assertRefused(await runOf(s, token, path, { email: 'w1@example.com', to: 'hello' }), 'whatsapp', /^the recipient "hello" is not a valid phone number$/);
  assert.equal(api.calls.length, 0);
  const ok = await runOf(s, token, path, { email: 'w2@example.com', to: '(613) 555-0100' });
  assert.equal(ok.run.status, 'COMPLETED', JSON.stringify(ok.run));
  assert.equal(ok.attempts[0]!.to, '+16135550100');
  assert.deepEqual(
    api.calls.map((c) => JSON.parse(c.body).to),
    ['16135550100'],
  );
});

test('the outbox refuses what a provider would: an invalid recipient is a FAILED attempt, not a SENT one', async (t) => {
  const { s, token } = await server(t);
  const id = await template(s, token, 'EMAIL', { subject: 'Hello', text: 'Body' });
  const path = await webhookWorkflow(s, token, 'mail', [{ type: 'send_email', templateId: id, to: '{{ trigger.to }}' }, TAIL]);
  assertRefused(await runOf(s, token, path, { email: 'o1@example.com', to: 'a1@b.co,a2@b.co' }), 'outbox', /is not one email address/);
  const ok = await runOf(s, token, path, { email: 'o2@example.com', to: 'A1@B.co' });
  assert.deepEqual(
    ok.attempts.map((a) => [a.provider, a.status, a.to]),
    [['outbox', 'SENT', 'a1@b.co']],
  );
});

test('the providers themselves never hand on a list or a formatted number: each is a permanent failure before any connection', async (t) => {
  const sink = await smtpSink(t);
  const api = await fakeApi(t);
  const s = await build(t, { env: ENV });
  // deliverOnce passes no policy of its own: sends use this thread's configured one.
  configureOutbound(outboundPolicyFrom(s.config));
  t.after(() => configureOutbound(STRICT_OUTBOUND_POLICY));
  const token = await s.login(s.owner.email, s.owner.password);
  await channels(s, token, {
    EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port: sink.port, secure: false, from: 'shop@example.com' } },
    SMS: { provider: 'twilio', settings: { baseUrl: api.url, accountSid: 'AC123', from: '+15005550006' }, credentials: { authToken: 'sms-secret-1' } },
    WHATSAPP: { provider: 'whatsapp', settings: { baseUrl: api.url, phoneNumberId: '1098765' }, credentials: { accessToken: 'wa-secret-token-1' } },
  });
  const deps = { db: s.db, store: s.store, config: s.config };
  const once = (channel: 'EMAIL' | 'SMS' | 'WHATSAPP', to: string) =>
    deliverOnce(deps, { workspaceId: s.workspaceId, channel, to, rendered: { subject: 'S', text: 'T' }, attempt: 1 });
  for (const [channel, to, error] of [
    ['EMAIL', 'a1@b.co, a2@b.co', 'smtp: the recipient is not one email address (EENVELOPE)'],
    ['EMAIL', '<a5@b.co>\r\nBcc: a6@b.co', 'smtp: the recipient is not one email address (EENVELOPE)'],
    ['SMS', '613-555-0101', 'twilio: the recipient is not a phone number in E.164 form'],
    ['WHATSAPP', 'hello', 'whatsapp: the recipient is not a phone number in E.164 form'],
  ] as const) {
    const outcome = await once(channel, to);
    assert.deepEqual([outcome.status, outcome.transient, outcome.error], ['FAILED', false, error], `${channel} ${JSON.stringify(to)}`);
  }
  assert.equal(sink.received.length, 0);
  assert.equal(api.calls.length, 0);
  assert.equal((await once('EMAIL', 'ann@example.com')).status, 'SENT');
  assert.deepEqual(
    sink.received.map((m) => m.to),
    [['ann@example.com']],
  );
});
