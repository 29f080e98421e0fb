/**
 * Delivery providers and deliverOnce against local stand-ins on 127.0.0.1: an HTTP server
 * speaking the Twilio Messages API and one speaking the WhatsApp Cloud API. Covers the
 * request each provider makes, transient and permanent failures, retries as separate
 * attempt rows, the SENDING row written before the network call, and the retry delay.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { deliveryAttempts } from '../../src/core/db/schema.js';
import { updateChannels } from '../../src/core/services/channels.js';
import { findAttemptsForStep } from '../../src/core/services/deliveries.js';
import { deliverOnce, deliverWithRetries, retryDelayMs } from '../../src/engine/deliver.js';
import { configureOutbound, OutboundError, outboundPolicyFrom, STRICT_OUTBOUND_POLICY } from '../../src/engine/outbound.js';
import { providerFor } from '../../src/engine/providers/index.js';
import { classifySmtpError } from '../../src/engine/providers/smtp.js';
import { build, type TestServer } from '../helpers.js';

const TWILIO_TOKEN = 'twilio-token-Rt5sX8qZ';
const WA_TOKEN = 'wa-token-Mn4bV7cX';
// The stand-ins listen on 127.0.0.1, which the outbound policy refuses unless allowed.
// A generous HTTP timeout: the stand-ins answer at once, and a pause of the loaded machine must
// not turn an answer into a timed-out attempt. The test of the timeout sets a short one itself.
const FAST = { SVC_DELIVERY_RETRY_BASE_MS: '10', SVC_DELIVERY_MAX_ATTEMPTS: '4', SVC_HTTP_TIMEOUT_MS: '5000', SVC_HTTP_ALLOW_PRIVATE: '1' };

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** 'hang': no answer; `cut`: this status and part of a body, then the connection is broken. */
type Reply = { status: number; body?: unknown } | 'hang' | { cut: number };

/** A local HTTP server answering with `reply(n)` for the n-th request (1-based). */
async function apiServer(t: TestContext, reply: (n: number, req: Seen) => Reply | Promise<Reply>) {
  const seen: Seen[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const entry = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') };
      seen.push(entry);
      const r = await reply(seen.length, entry);
      if (r === 'hang') return;
      if ('cut' in r) {
        res.writeHead(r.cut, { 'content-type': 'application/json', 'content-length': '200' });
        res.write('{"sid":"SM');
        setTimeout(() => res.socket?.destroy(), 20);
        return;
      }
      res.writeHead(r.status, { 'content-type': 'application/json' });
      res.end(r.body === undefined ? '' : JSON.stringify(r.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

async function setup(t: TestContext, opts: { store?: 'sqlite' } = {}): Promise<{ s: TestServer; token: string }> {
  const s = await build(t, { env: FAST, ...opts });
  // deliverOnce passes no policy of its own: sends use this thread's configured one.
  configureOutbound(outboundPolicyFrom(s.config));
  t.after(() => configureOutbound(STRICT_OUTBOUND_POLICY));
  const token = await s.login(s.owner.email, s.owner.password);
  return { s, token };
}

async function useTwilio(s: TestServer, token: string, baseUrl: string, from = '+15005550006'): Promise<void> {
  const res = await s.request('PUT', '/settings/channels', {
    token,
    body: { SMS: { provider: 'twilio', settings: { baseUrl, accountSid: 'AC0123', from }, credentials: { authToken: TWILIO_TOKEN } } },
  });
  assert.equal(res.status, 200, res.text);
}

async function useWhatsApp(s: TestServer, token: string, baseUrl: string): Promise<void> {
  const res = await s.request('PUT', '/settings/channels', {
    token,
    body: { WHATSAPP: { provider: 'whatsapp', settings: { baseUrl: `${baseUrl}/v20.0`, phoneNumberId: '1098765' }, credentials: { accessToken: WA_TOKEN } } },
  });
  assert.equal(res.status, 200, res.text);
}

const sms = (s: TestServer, extra: Record<string, unknown> = {}) => ({
  workspaceId: s.workspaceId,
  channel: 'SMS' as const,
  to: '+15551234567',
  rendered: { text: 'Your code is 42' },
  ...extra,
});

function rows(s: TestServer) {
  return s.db.select().from(deliveryAttempts);
}

test('twilio: form-encoded POST with Basic auth; 503 twice is transient and the third try succeeds', async (t) => {
  const { s, token } = await setup(t);
  const api = await apiServer(t, (n) =>
    n <= 2 ? { status: 503, body: { message: 'Service Unavailable' } } : { status: 201, body: { sid: 'SM0001', status: 'queued' } },
  );
  await useTwilio(s, token, api.url);

  const first = await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...sms(s), runId: 7, stepIndex: 2, templateId: 3, attempt: 1 });
  assert.equal(first.status, 'FAILED');
  assert.equal(first.transient, true);
  assert.match(first.error ?? '', /twilio: HTTP 503/);

  const done = await deliverWithRetries({ db: s.db, store: s.store, config: s.config }, { ...sms(s), runId: 8, stepIndex: 0 });
  assert.equal(done.status, 'SENT');
  const attempts = await findAttemptsForStep(s.db, 8, 0);
  assert.deepEqual(
    attempts.map((a) => [a.attempt, a.status, a.providerMessageId ?? null]),
    [
      [1, 'FAILED', null],
      [2, 'SENT', 'SM0001'],
    ],
  );
  assert.equal(attempts[1]!.id, done.attemptId);

  assert.equal(api.seen.length, 3);
  const req = api.seen[2]!;
  assert.equal(req.method, 'POST');
  assert.equal(req.url, '/2010-04-01/Accounts/AC0123/Messages.json');
  assert.equal(req.headers.authorization, `Basic ${Buffer.from(`AC0123:${TWILIO_TOKEN}`).toString('base64')}`);
  assert.equal(req.headers['content-type'], 'application/x-www-form-urlencoded');
  assert.deepEqual(Object.fromEntries(new URLSearchParams(req.body)), { To: '+15551234567', From: '+15005550006', Body: 'Your code is 42' });

  // The attempt rows carry no credential.
  assert.ok(!JSON.stringify(await rows(s)).includes(TWILIO_TOKEN));
});

test('retries through deliverWithRetries: separate rows numbered 1..n, a 503 then 503 then 201', async (t) => {
  const { s, token } = await setup(t);
  const api = await apiServer(t, (n) => (n <= 2 ? { status: 503 } : { status: 201, body: { sid: 'SM0002' } }));
  await useTwilio(s, token, api.url);
  const recorded: [number, string][] = [];
  const outcome = await deliverWithRetries(
    { db: s.db, store: s.store, config: s.config, onRecorded: (id, status) => recorded.push([id, status]) },
    { ...sms(s), runId: 1, stepIndex: 4 },
  );
  assert.equal(outcome.status, 'SENT');
  const attempts = await findAttemptsForStep(s.db, 1, 4);
  assert.deepEqual(
    attempts.map((a) => [a.attempt, a.status]),
    [
      [1, 'FAILED'],
      [2, 'FAILED'],
      [3, 'SENT'],
    ],
  );
  for (const a of attempts.slice(0, 2)) assert.match(a.error ?? '', /HTTP 503/);
  assert.deepEqual(
    recorded,
    attempts.map((a) => [a.id, 'QUEUED']),
    'each try recorded as QUEUED first (SENDING at its turn)',
  );

  // The API view through the server shows the same history.
  const list = await s.request('GET', '/messages/delivery-attempts?runId=1', { token });
  assert.deepEqual(
    list.body.data.map((a: { attempt: number; stepIndex: number }) => [a.attempt, a.stepIndex]),
    [
      [3, 4],
      [2, 4],
      [1, 4],
    ],
  );
});

test('twilio: a 400 is permanent and carries the provider message; 429 and timeouts are transient', async (t) => {
  const { s, token } = await setup(t);
  const bad = await apiServer(t, () => ({
    status: 400,
    body: { code: 21211, message: "The 'To' number +1555 is not a valid phone number.", more_info: 'https://www.twilio.com/docs/errors/21211', status: 400 },
  }));
  await useTwilio(s, token, bad.url);
  const outcome = await deliverWithRetries({ db: s.db, store: s.store, config: s.config }, { ...sms(s), runId: 2, stepIndex: 0 });
  assert.equal(outcome.status, 'FAILED');
  assert.equal(outcome.transient, false);
  assert.equal(outcome.error, "twilio: HTTP 400: The 'To' number +1555 is not a valid phone number. (code 21211)");
  assert.equal(bad.seen.length, 1, 'not retried');
  const [row] = await findAttemptsForStep(s.db, 2, 0);
  assert.equal(row!.status, 'FAILED');
  assert.equal(row!.error, outcome.error);

  const limited = await apiServer(t, () => ({ status: 429, body: { code: 20429, message: 'Too Many Requests' } }));
  await useTwilio(s, token, limited.url);
  const r429 = await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...sms(s), attempt: 1 });
  assert.deepEqual([r429.status, r429.transient], ['FAILED', true]);
  assert.match(r429.error ?? '', /429: Too Many Requests/);

  const auth = await apiServer(t, () => ({ status: 401, body: { code: 20003, message: 'Authenticate' } }));
  await useTwilio(s, token, auth.url);
  assert.equal((await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...sms(s), attempt: 1 })).transient, false, '401 is permanent');

  const slow = await apiServer(t, () => 'hang');
  await useTwilio(s, token, slow.url);
  const started = Date.now();
  const timedOut = await deliverOnce({ db: s.db, store: s.store, config: { ...s.config, httpTimeoutMs: 300 } }, { ...sms(s), attempt: 1 });
  assert.deepEqual([timedOut.status, timedOut.transient], ['FAILED', true]);
  assert.match(timedOut.error ?? '', /timed out/);
  assert.ok(Date.now() - started < 5_000, 'bounded by httpTimeoutMs');
});

test('twilio: a 201 whose body is cut off is SENT, not sent again; a 503 so cut off is still transient', async (t) => {
  const { s, token } = await setup(t);
  const api = await apiServer(t, () => ({ cut: 201 }));
  await useTwilio(s, token, api.url);
  const done = await deliverWithRetries({ db: s.db, store: s.store, config: s.config }, { ...sms(s), runId: 11, stepIndex: 0 });
  assert.equal(done.status, 'SENT', JSON.stringify(done));
  assert.equal(api.seen.length, 1, 'the provider took the message once');
  const attempts = await findAttemptsForStep(s.db, 11, 0);
  assert.deepEqual(
    attempts.map((a) => [a.attempt, a.status, a.providerMessageId ?? null]),
    [[1, 'SENT', null]],
  );

  const failing = await apiServer(t, () => ({ cut: 503 }));
  await useTwilio(s, token, failing.url);
  const once = await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...sms(s), attempt: 1 });
  assert.deepEqual([once.status, once.transient], ['FAILED', true]);
  assert.match(once.error ?? '', /twilio: HTTP 503/);
});

test('twilio: an unreachable API is transient; a Messaging Service id is sent as MessagingServiceSid', async (t) => {
  const { s, token } = await setup(t);
  const api = await apiServer(t, () => ({ status: 201, body: { sid: 'SM0003' } }));
  // Nothing listens on port 1.
  await useTwilio(s, token, 'http://127.0.0.1:1');
  const refused = await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...sms(s), attempt: 1 });
  assert.deepEqual([refused.status, refused.transient], ['FAILED', true]);
  assert.match(refused.error ?? '', /could not be reached/);

  const service = `MG${'a'.repeat(32)}`;
  await useTwilio(s, token, api.url, service);
  const ok = await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...sms(s), attempt: 1 });
  assert.equal(ok.status, 'SENT');
  assert.deepEqual(Object.fromEntries(new URLSearchParams(api.seen[0]!.body)), { To: '+15551234567', MessagingServiceSid: service, Body: 'Your code is 42' });
});

test('the SENDING row is committed before the provider is called', async (t) => {
  // SQLite: the hook below is synchronous and counts on the reading connection directly.
  const { s, token } = await setup(t, { store: 'sqlite' });
  let during: { status: string; attempt: number }[] = [];
  const api = await apiServer(t, async () => {
    during = await s.db.select({ status: deliveryAttempts.status, attempt: deliveryAttempts.attempt }).from(deliveryAttempts);
    return { status: 201, body: { sid: 'SM0004' } };
  });
  await useTwilio(s, token, api.url);
  const order: string[] = [];
  const outcome = await deliverOnce(
    {
      db: s.db,
      store: s.store,
      config: s.config,
      // A synchronous hook: the committed rows are counted on the reading connection directly.
      beforeNetwork: () => order.push(`beforeNetwork:${(s.db.$client.prepare('SELECT count(*) AS n FROM delivery_attempts').get() as { n: number }).n}`),
      onRecorded: (_id, status) => order.push(`recorded:${status}`),
    },
    { ...sms(s), attempt: 1 },
  );
  assert.equal(outcome.status, 'SENT');
  assert.deepEqual(during, [{ status: 'SENDING', attempt: 1 }]);
  assert.deepEqual(order, ['recorded:QUEUED', 'beforeNetwork:1']);
  const [sent] = await rows(s);
  assert.equal(sent!.status, 'SENT');
  assert.equal(sent!.providerMessageId, 'SM0004');
});

test('whatsapp: text and template messages with a Bearer token; messages[0].id is the provider id', async (t) => {
  const { s, token } = await setup(t);
  const api = await apiServer(t, (n) => ({
    status: 200,
    body: { messaging_product: 'whatsapp', contacts: [{ wa_id: '15551234567' }], messages: [{ id: `wamid.${n}` }] },
  }));
  await useWhatsApp(s, token, api.url);
  const base = { workspaceId: s.workspaceId, channel: 'WHATSAPP' as const, to: '+15551234567', attempt: 1 };

  const text = await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...base, rendered: { text: 'Hello Ada' } });
  assert.deepEqual(text, { attemptId: text.attemptId, status: 'SENT', transient: false });
  const tpl = await deliverOnce(
    { db: s.db, store: s.store, config: s.config },
    { ...base, rendered: { templateName: 'order_update', language: 'en_US', parameters: ['Ada', 'A-17'] } },
  );
  assert.equal(tpl.status, 'SENT');

  const [first, second] = api.seen;
  assert.equal(first!.url, '/v20.0/1098765/messages');
  assert.equal(first!.headers.authorization, `Bearer ${WA_TOKEN}`);
  assert.equal(first!.headers['content-type'], 'application/json');
  assert.deepEqual(JSON.parse(first!.body), {
    messaging_product: 'whatsapp',
    recipient_type: 'individual',
    to: '15551234567',
    type: 'text',
    text: { body: 'Hello Ada' },
  });
  assert.deepEqual(JSON.parse(second!.body), {
    messaging_product: 'whatsapp',
    recipient_type: 'individual',
    to: '15551234567',
    type: 'template',
    template: {
      name: 'order_update',
      language: { code: 'en_US' },
      components: [
        {
          type: 'body',
          parameters: [
            { type: 'text', text: 'Ada' },
            { type: 'text', text: 'A-17' },
          ],
        },
      ],
    },
  });
  assert.deepEqual(
    (await rows(s)).map((r) => r.providerMessageId),
    ['wamid.1', 'wamid.2'],
  );
  assert.ok(!JSON.stringify(await rows(s)).includes(WA_TOKEN));
});

test('whatsapp: 503 twice then success; a 400 is permanent with the Graph error; rate-limit codes are transient', async (t) => {
  const { s, token } = await setup(t);
  const flaky = await apiServer(t, (n) =>
    n <= 2
      ? { status: 503, body: { error: { message: 'Service temporarily unavailable', code: 2 } } }
      : { status: 200, body: { messages: [{ id: 'wamid.ok' }] } },
  );
  await useWhatsApp(s, token, flaky.url);
  const input = { workspaceId: s.workspaceId, channel: 'WHATSAPP' as const, to: '+15551234567', rendered: { text: 'hi' }, runId: 5, stepIndex: 1 };
  const outcome = await deliverWithRetries({ db: s.db, store: s.store, config: s.config }, input);
  assert.equal(outcome.status, 'SENT');
  assert.deepEqual(
    (await findAttemptsForStep(s.db, 5, 1)).map((a) => [a.attempt, a.status, a.providerMessageId ?? a.error]),
    [
      [1, 'FAILED', 'whatsapp: HTTP 503: Service temporarily unavailable (code 2)'],
      [2, 'FAILED', 'whatsapp: HTTP 503: Service temporarily unavailable (code 2)'],
      [3, 'SENT', 'wamid.ok'],
    ],
  );

  const bad = await apiServer(t, () => ({
    status: 400,
    body: { error: { message: '(#100) Invalid parameter', type: 'OAuthException', code: 100, fbtrace_id: 'X' } },
  }));
  await useWhatsApp(s, token, bad.url);
  const refused = await deliverWithRetries({ db: s.db, store: s.store, config: s.config }, { ...input, runId: 6 });
  assert.deepEqual([refused.status, refused.transient, refused.error], ['FAILED', false, 'whatsapp: HTTP 400: (#100) Invalid parameter (code 100)']);
  assert.equal(bad.seen.length, 1);

  const throttled = await apiServer(t, () => ({ status: 400, body: { error: { message: 'Rate limit hit', code: 131056 } } }));
  await useWhatsApp(s, token, throttled.url);
  assert.equal((await deliverOnce({ db: s.db, store: s.store, config: s.config }, { ...input, attempt: 1 })).transient, true);
});

test('without an allowing policy a provider aimed at 127.0.0.1 fails permanently and nothing is sent', async (t) => {
  const s = await build(t, { env: { SVC_HTTP_TIMEOUT_MS: '300' } });
  configureOutbound(outboundPolicyFrom(s.config));
  t.after(() => configureOutbound(STRICT_OUTBOUND_POLICY));
  const token = await s.login(s.owner.email, s.owner.password);
  const api = await apiServer(t, () => ({ status: 201, body: { sid: 'SM-never' } }));
  // PUT refuses such a destination now; this one was saved while the policy allowed it
  // (SVC_HTTP_ALLOW_PRIVATE on then, off since): the send is still refused.
  assert.equal(
    (
      await s.request('PUT', '/settings/channels', {
        token,
        body: {
          SMS: { provider: 'twilio', settings: { baseUrl: api.url, accountSid: 'AC0123', from: '+15005550006' }, credentials: { authToken: TWILIO_TOKEN } },
        },
      })
    ).status,
    422,
  );
  await updateChannels(
    { ...s.ctx(), config: { ...s.config, httpAllowPrivate: true } },
    { SMS: { provider: 'twilio', settings: { baseUrl: api.url, accountSid: 'AC0123', from: '+15005550006' }, credentials: { authToken: TWILIO_TOKEN } } },
  );
  const outcome = await deliverWithRetries({ db: s.db, store: s.store, config: s.config }, { ...sms(s), runId: 9, stepIndex: 0 });
  assert.deepEqual([outcome.status, outcome.transient], ['FAILED', false]);
  assert.match(outcome.error ?? '', /^twilio: destination refused by the outbound policy: 127\.0\.0\.1 is a private, loopback or reserved address$/);
  assert.equal(api.seen.length, 0);
  assert.deepEqual(
    (await findAttemptsForStep(s.db, 9, 0)).map((a) => [a.attempt, a.status]),
    [[1, 'FAILED']],
    'a refusal is not retried',
  );
});

test('outbox: SENT at once with the rendered content, no network', async (t) => {
  const { s } = await setup(t);
  const recorded: string[] = [];
  const outcome = await deliverOnce(
    { db: s.db, store: s.store, config: s.config, beforeNetwork: () => recorded.push('network'), onRecorded: (_id, status) => recorded.push(status) },
    { ...sms(s), attempt: 1, runId: 3, stepIndex: 0 },
  );
  assert.deepEqual(outcome, { attemptId: outcome.attemptId, status: 'SENT', transient: false });
  assert.deepEqual(recorded, ['SENT']);
  const [row] = await findAttemptsForStep(s.db, 3, 0);
  assert.equal(row!.provider, 'outbox');
  assert.deepEqual(row!.rendered, { text: 'Your code is 42' });
  assert.match(row!.providerMessageId ?? '', /^outbox-/);
  assert.equal(providerFor('outbox').name, 'outbox');
});

test('unreadable stored credentials fail the message permanently, with a row that says why', async (t) => {
  const { s, token } = await setup(t);
  await useTwilio(s, token, 'http://127.0.0.1:1');
  const rotated = { ...s.config, secrets: { ...s.config.secrets, encryptionKey: 'another-key-entirely-0123456789abcdef' } };
  const outcome = await deliverOnce({ db: s.db, store: s.store, config: rotated }, { ...sms(s), attempt: 1 });
  assert.deepEqual([outcome.status, outcome.transient], ['FAILED', false]);
  assert.match(outcome.error ?? '', /cannot be decrypted/);
  assert.equal((await rows(s))[0]!.provider, 'twilio');
});

test('retryDelayMs doubles from the base with ±20% jitter and stays under an hour', () => {
  const config = { deliveryRetryBaseMs: 1000 };
  for (let i = 0; i < 200; i++) {
    const d1 = retryDelayMs(config, 1);
    const d3 = retryDelayMs(config, 3);
    assert.ok(d1 >= 800 && d1 <= 1200, `attempt 1: ${d1}`);
    assert.ok(d3 >= 3200 && d3 <= 4800, `attempt 3: ${d3}`);
    const capped = retryDelayMs(config, 40);
    assert.ok(capped <= 3_600_000 && capped >= 0.8 * 3_600_000, `capped: ${capped}`);
  }
  const spread = new Set(Array.from({ length: 50 }, () => retryDelayMs(config, 2)));
  assert.ok(spread.size > 10, 'jittered');
});

test('SMTP errors: 4xx replies and network trouble are transient, 5xx and refused logins are not', () => {
  const cases: [unknown, boolean][] = [
    [{ responseCode: 421, response: '421 Service not available' }, true],
    [{ responseCode: 450, response: '450 Mailbox busy' }, true],
    [{ responseCode: 451, response: '451 Try later' }, true],
    [{ responseCode: 452, response: '452 Insufficient storage' }, true],
    [{ responseCode: 550, response: '550 No such user' }, false],
    [{ responseCode: 554, response: '554 Rejected' }, false],
    [{ code: 'EAUTH', responseCode: 535, response: '535 Authentication failed' }, false],
    [{ code: 'ETIMEDOUT', message: 'Greeting never received' }, true],
    [{ code: 'ECONNECTION', message: 'Connection closed' }, true],
    [{ code: 'ESOCKET', message: 'connect ECONNREFUSED 127.0.0.1:25' }, true],
    [{ code: 'EDNS', message: 'getaddrinfo ENOTFOUND' }, true],
    [{ code: 'ETLS', message: 'self-signed certificate' }, false],
    [{ code: 'EENVELOPE', message: 'No recipients defined' }, false],
  ];
  for (const [err, transient] of cases) {
    const r = classifySmtpError(err);
    assert.equal(r.transient, transient, JSON.stringify(err));
    assert.match(r.error, /^smtp: /);
    // Only 421 and 451 ask to slow down.
    const code = (err as { responseCode?: number }).responseCode;
    assert.equal(r.retryAfterMs !== undefined, code === 421 || code === 451, JSON.stringify(err));
  }
  // A certificate the client refuses, and a destination the outbound policy refuses, are permanent.
  assert.equal(classifySmtpError({ code: 'ESOCKET', originalCode: 'DEPTH_ZERO_SELF_SIGNED_CERT', message: 'self-signed certificate' }).transient, false);
  assert.deepEqual(classifySmtpError(new OutboundError('blocked_address', '10.0.0.1 is a private, loopback or reserved address')), {
    ok: false,
    transient: false,
    error: 'smtp: destination refused by the outbound policy: 10.0.0.1 is a private, loopback or reserved address',
  });
  // Messages without a reply code may quote what the server sent: a fixed text is stored instead.
  const protocol = classifySmtpError({ code: 'EPROTOCOL', message: 'Invalid greeting. response=SSH-2.0-OpenSSH internal banner' });
  assert.equal(protocol.error, 'smtp: the server broke the SMTP protocol (EPROTOCOL)');
});

test('a system email still waiting for its turn when the server stops does not start: its attempt is FAILED saying it was not sent', async (t) => {
  const s = await build(t, { env: { ...FAST, SVC_OUTBOUND_PER_HOST_CONCURRENCY: '1' } });
  configureOutbound(outboundPolicyFrom(s.config));
  t.after(() => configureOutbound(STRICT_OUTBOUND_POLICY));
  const token = await s.login(s.owner.email, s.owner.password);
  let release!: () => void;
  const held = new Promise<void>((r) => (release = r));
  const api = await apiServer(t, async () => {
    await held;
    return { status: 201, body: { sid: 'SM0001' } };
  });
  await useTwilio(s, token, api.url);
  const stopping = new AbortController();
  const deps = { db: s.db, store: s.store, config: s.config };
  const first = deliverWithRetries(deps, sms(s), { signal: stopping.signal });
  const second = deliverWithRetries(deps, sms(s, { to: '+15551234568' }), { signal: stopping.signal });
  while (api.seen.length < 1) await new Promise((r) => setTimeout(r, 10));
  stopping.abort();
  release();
  // Either may have had the turn first (on PostgreSQL each row's write is a round trip).
  const outcomes = await Promise.all([first, second]);
  assert.deepEqual(outcomes.map((o) => o.status).sort(), ['FAILED', 'SENT'], 'the message under way finishes; the waiting one does not start');
  assert.match(outcomes.find((o) => o.status === 'FAILED')!.error ?? '', /before this message had its turn: it was not sent/);
  assert.equal(api.seen.length, 1, 'the waiting message never reached the provider');
});
