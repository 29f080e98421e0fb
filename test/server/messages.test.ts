/**
 * Messages through the real server: test emails (outbox by default, a real SMTP server on
 * 127.0.0.1 when configured), retries as separate attempt rows, permanent failures, the
 * delivery-attempt read endpoints, roles and workspace isolation.
 * Contract: API.md sections 1, 2 (role matrix) and 5 ("Messages").
 */
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { SMTPServer } from 'smtp-server';
import { eq } from 'drizzle-orm';
import { auditLogs, templates } from '../../src/core/db/schema.js';
import { closeSmtpTransports } from '../../src/engine/providers/smtp.js';
import { build, type HttpResult, type TestServer, assertProblem } from '../helpers.js';

const ATTEMPT_KEYS = ['attempt', 'channel', 'createdAt', 'id', 'provider', 'rendered', 'status', 'to', 'updatedAt'];
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const SMTP_USER = 'mailer';
const SMTP_PASS = 'smtp-pass-Wd93kLq2';
// The SMTP servers of these tests listen on 127.0.0.1, which the outbound policy refuses
// unless private destinations are allowed (test/engine/outbound.test.ts covers the refusal).
const FAST_RETRIES = { SVC_DELIVERY_RETRY_BASE_MS: '20', SVC_DELIVERY_MAX_ATTEMPTS: '3', SVC_HTTP_ALLOW_PRIVATE: '1' };

async function setup(t: TestContext, env: NodeJS.ProcessEnv = FAST_RETRIES): Promise<{ s: TestServer; token: string }> {
  const s = await build(t, { env });
  const token = await s.login(s.owner.email, s.owner.password);
  return { s, token };
}

interface ReceivedMail {
  from: string;
  to: string[];
  user: string | undefined;
  raw: string;
}

/**
 * A real SMTP server on 127.0.0.1 requiring our account. `rcptReply(n)` may refuse the
 * n-th recipient (1-based) with an SMTP code.
 */
async function smtpServer(t: TestContext, rcptReply: (n: number) => { code: number; message: string } | undefined = () => undefined) {
  const received: ReceivedMail[] = [];
  let rcpts = 0;
  const server = new SMTPServer({
    secure: false,
    disabledCommands: ['STARTTLS'],
    allowInsecureAuth: true,
    closeTimeout: 200,
    logger: false,
    onAuth(auth, _session, cb) {
      if (auth.username === SMTP_USER && auth.password === SMTP_PASS) cb(null, { user: auth.username });
      else cb(Object.assign(new Error('Authentication credentials invalid'), { responseCode: 535 }));
    },
    onRcptTo(_address, _session, cb) {
      const reply = rcptReply(++rcpts);
      if (reply) cb(Object.assign(new Error(reply.message), { responseCode: reply.code }));
      else cb();
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        received.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          user: session.user as string | undefined,
          raw: Buffer.concat(chunks).toString('utf8'),
        });
        cb();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.server.address() as AddressInfo).port;
  t.after(async () => {
    closeSmtpTransports();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { port, received, rcptCount: () => rcpts };
}

/** A port on 127.0.0.1 that nothing listens on. */
async function closedPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  return port;
}

async function useSmtp(s: TestServer, token: string, port: number, credentials: Record<string, string> = { user: SMTP_USER, pass: SMTP_PASS }): Promise<void> {
  const res = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port, from: 'news@acme.test' }, credentials } },
  });
  assert.equal(res.status, 200, res.text);
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/** All attempts of this workspace, oldest first, once `done` says the list is complete. */
async function attemptsUntil(s: TestServer, token: string, done: (list: any[]) => boolean): Promise<any[]> {
  return waitFor('delivery attempts', async () => {
    const res = await s.request('GET', '/messages/delivery-attempts', { token });
    assert.equal(res.status, 200, res.text);
    const list = [...res.body.data].reverse();
    return done(list) ? list : undefined;
  });
}

async function insertTemplate(s: TestServer, channel: 'EMAIL' | 'SMS', content: Record<string, unknown>, workspaceId = s.workspaceId): Promise<number> {
  const [row] = await s.store.transaction((tx) =>
    tx
      .insert(templates)
      .values({ workspaceId, name: `${channel} template`, channel, content })
      .returning({ id: templates.id }),
  );
  return row!.id;
}

function assertAttemptShape(a: any): void {
  for (const key of ATTEMPT_KEYS) assert.ok(key in a, `attempt has ${key}: ${JSON.stringify(a)}`);
  for (const key of Object.keys(a))
    assert.ok([...ATTEMPT_KEYS, 'error', 'providerMessageId', 'runId', 'stepIndex', 'templateId'].includes(key), `unexpected ${key}`);
  for (const key of ['error', 'providerMessageId', 'runId', 'stepIndex', 'templateId']) assert.notEqual(a[key], null, `${key} is left out rather than null`);
  assert.ok(Number.isInteger(a.id) && a.id > 0);
  assert.ok(Number.isInteger(a.attempt) && a.attempt >= 1);
  assert.match(a.createdAt, ISO_UTC);
  assert.match(a.updatedAt, ISO_UTC);
}

test('with no configuration a test email goes to the outbox: SENT, rendered content on the attempt', async (t) => {
  const { s, token } = await setup(t);
  const res = await s.request('POST', '/messages/test-email', {
    token,
    body: {
      to: ' Ada@Example.COM ',
      subject: 'Hello {{ trigger.name }}',
      html: '<p>Code {{ trigger.code }}</p>',
      text: 'Code {{ trigger.code }} for {{ workspace.name }}',
      data: { name: 'Ada', code: 42 },
    },
  });
  assert.equal(res.status, 202, res.text);
  assert.deepEqual(Object.keys(res.body).sort(), ['deliveryAttemptId', 'status']);
  assert.equal(res.body.status, 'SENT');

  const got = await s.request('GET', `/messages/delivery-attempts/${res.body.deliveryAttemptId}`, { token });
  assert.equal(got.status, 200, got.text);
  assertAttemptShape(got.body);
  assert.equal(got.body.channel, 'EMAIL');
  assert.equal(got.body.provider, 'outbox');
  assert.equal(got.body.status, 'SENT');
  assert.equal(got.body.attempt, 1);
  assert.equal(got.body.to, 'ada@example.com');
  assert.match(got.body.providerMessageId, /^outbox-/);
  assert.deepEqual(got.body.rendered, { subject: 'Hello Ada', html: '<p>Code 42</p>', text: 'Code 42 for Acme' });
  assert.ok(!('error' in got.body) && !('runId' in got.body) && !('templateId' in got.body));

  const audit = await s.db
    .select({ targetType: auditLogs.targetType, targetId: auditLogs.targetId })
    .from(auditLogs)
    .where(eq(auditLogs.action, 'message.test_email_sent'));
  assert.deepEqual(audit, [{ targetType: 'delivery_attempt', targetId: String(res.body.deliveryAttemptId) }]);
});

test('an EMAIL template is rendered and sent through a real SMTP server with the stored account', async (t) => {
  const { s, token } = await setup(t);
  const mail = await smtpServer(t);
  await useSmtp(s, token, mail.port);
  const templateId = await insertTemplate(s, 'EMAIL', {
    subject: 'Welcome {{ trigger.name }}',
    html: '<p>Hi <b>{{ trigger.name }}</b></p>',
    text: 'Hi {{ trigger.name }}, your code is {{ trigger.code }}',
  });

  const res = await s.request('POST', '/messages/test-email', { token, body: { to: 'ada@example.com', templateId, data: { name: 'Ada', code: 'X7' } } });
  assert.equal(res.status, 202, res.text);
  assert.ok(['QUEUED', 'SENDING', 'SENT'].includes(res.body.status), res.text);
  assert.ok(!res.text.includes(SMTP_PASS));

  const [attempt] = await attemptsUntil(s, token, (l) => l[0]?.status === 'SENT');
  assert.equal(attempt.id, res.body.deliveryAttemptId);
  assertAttemptShape(attempt);
  assert.equal(attempt.provider, 'smtp');
  assert.equal(attempt.templateId, templateId);
  assert.equal(typeof attempt.providerMessageId, 'string');
  assert.deepEqual(attempt.rendered, { subject: 'Welcome Ada', html: '<p>Hi <b>Ada</b></p>', text: 'Hi Ada, your code is X7' });

  assert.equal(mail.received.length, 1);
  const [message] = mail.received;
  assert.equal(message!.user, SMTP_USER, 'authenticated with the stored account');
  assert.equal(message!.from, 'news@acme.test');
  assert.deepEqual(message!.to, ['ada@example.com']);
  assert.match(message!.raw, /^Subject: Welcome Ada\r?$/m);
  assert.match(message!.raw, /Hi Ada, your code is X7/);
  assert.match(message!.raw, /<p>Hi <b>Ada<\/b><\/p>/);
});

test('SMTP 451 is transient: each retry is its own attempt row until one is SENT', async (t) => {
  const { s, token } = await setup(t);
  const mail = await smtpServer(t, (n) => (n <= 2 ? { code: 451, message: 'Try again later, greylisted' } : undefined));
  await useSmtp(s, token, mail.port);

  const res = await s.request('POST', '/messages/test-email', { token, body: { to: 'ada@example.com', subject: 'Retry me', text: 'body' } });
  assert.equal(res.status, 202, res.text);
  assert.equal(res.body.status, 'QUEUED', 'answered before the message has its turn');

  const list = await attemptsUntil(s, token, (l) => l.length === 3 && l[2].status === 'SENT');
  assert.deepEqual(
    list.map((a) => [a.attempt, a.status]),
    [
      [1, 'FAILED'],
      [2, 'FAILED'],
      [3, 'SENT'],
    ],
  );
  assert.equal(list[0].id, res.body.deliveryAttemptId, 'the 202 names the first try');
  for (const failed of list.slice(0, 2)) assert.match(failed.error, /451.*greylisted/);
  assert.ok(!('error' in list[2]));
  assert.equal(mail.received.length, 1, 'delivered once');
});

test('SMTP 5xx is permanent: one FAILED attempt with the server reply, no retry', async (t) => {
  const { s, token } = await setup(t);
  const mail = await smtpServer(t, () => ({ code: 550, message: 'No such user here' }));
  await useSmtp(s, token, mail.port);

  const res = await s.request('POST', '/messages/test-email', { token, body: { to: 'nobody@example.com', subject: 'x', text: 'y' } });
  assert.equal(res.status, 202, res.text);
  const [attempt] = await attemptsUntil(s, token, (l) => l[0]?.status === 'FAILED');
  assert.match(attempt.error, /550.*No such user here/);
  await sleep(200);
  const list = await s.request('GET', '/messages/delivery-attempts', { token });
  assert.equal(list.body.data.length, 1, 'not retried');
  assert.equal(mail.rcptCount(), 1);
});

test('retries stop after deliveryMaxAttempts; a refused login is permanent and never echoes the password', async (t) => {
  const { s, token } = await setup(t);
  const busy = await smtpServer(t, () => ({ code: 421, message: 'Service not available' }));
  await useSmtp(s, token, busy.port);
  await s.request('POST', '/messages/test-email', { token, body: { to: 'ada@example.com', subject: 'x', text: 'y' } });
  const tries = await attemptsUntil(s, token, (l) => l.length === 3 && l.every((a) => a.status === 'FAILED'));
  assert.deepEqual(
    tries.map((a) => a.attempt),
    [1, 2, 3],
  );
  await sleep(200);
  assert.equal((await s.request('GET', '/messages/delivery-attempts', { token })).body.data.length, 3, 'no fourth try');

  const other = await smtpServer(t);
  await useSmtp(s, token, other.port, { user: SMTP_USER, pass: 'wrong-password-9' });
  const res = await s.request('POST', '/messages/test-email', { token, body: { to: 'ada@example.com', subject: 'x', text: 'y' } });
  const attempt = await waitFor('the failed login', async () => {
    const a = await s.request('GET', `/messages/delivery-attempts/${res.body.deliveryAttemptId}`, { token });
    return a.body.status === 'FAILED' ? a : undefined;
  });
  assert.match(attempt.body.error, /535|authentication/i);
  assert.ok(!attempt.text.includes('wrong-password-9'));
  await sleep(200);
  assert.equal((await s.request('GET', '/messages/delivery-attempts', { token })).body.data.length, 4, 'not retried');
});

test('an unreachable SMTP server is a transient failure', async (t) => {
  const { s, token } = await setup(t, { ...FAST_RETRIES, SVC_DELIVERY_MAX_ATTEMPTS: '2' });
  await useSmtp(s, token, await closedPort());
  await s.request('POST', '/messages/test-email', { token, body: { to: 'ada@example.com', subject: 'x', text: 'y' } });
  const list = await attemptsUntil(s, token, (l) => l.length === 2 && l.every((a) => a.status === 'FAILED'));
  assert.deepEqual(
    list.map((a) => a.attempt),
    [1, 2],
    'retried: the failure was transient',
  );
  assert.match(list[0].error, /^smtp: /);
});

test('test-email validation: 422 for bad input, 404 for an unknown template', async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const theirs = await insertTemplate(s, 'EMAIL', { subject: 'x', text: 'y' }, other.workspaceId);
  const sms = await insertTemplate(s, 'SMS', { text: 'hello' });
  const cases: { name: string; body: unknown; status: number; code: string; path?: string }[] = [
    { name: 'to missing', body: { subject: 'x', text: 'y' }, status: 422, code: 'validation_failed', path: '/to' },
    { name: 'to not an address', body: { to: 'not-an-email', subject: 'x', text: 'y' }, status: 422, code: 'validation_failed', path: '/to' },
    { name: 'no content', body: { to: 'a@example.com' }, status: 422, code: 'validation_failed', path: '/subject' },
    { name: 'subject without body', body: { to: 'a@example.com', subject: 'x' }, status: 422, code: 'validation_failed', path: '/html' },
    { name: 'template and inline', body: { to: 'a@example.com', templateId: sms, subject: 'x' }, status: 422, code: 'validation_failed', path: '/templateId' },
    { name: 'SMS template', body: { to: 'a@example.com', templateId: sms }, status: 422, code: 'template_channel_mismatch', path: '/templateId' },
    { name: "another workspace's template", body: { to: 'a@example.com', templateId: theirs }, status: 404, code: 'template_not_found' },
    { name: 'unknown template', body: { to: 'a@example.com', templateId: 999999 }, status: 404, code: 'template_not_found' },
    {
      name: 'Liquid syntax error',
      body: { to: 'a@example.com', subject: 'Hi {{ trigger.name', text: 'y' },
      status: 422,
      code: 'template_render_error',
      path: '/subject',
    },
    {
      name: 'unknown filter',
      body: { to: 'a@example.com', subject: 'x', text: '{{ trigger.name | shout }}' },
      status: 422,
      code: 'template_render_error',
      path: '/text',
    },
    { name: 'unknown field', body: { to: 'a@example.com', subject: 'x', text: 'y', cc: 'b@example.com' }, status: 422, code: 'validation_failed', path: '/cc' },
    { name: 'data not an object', body: { to: 'a@example.com', subject: 'x', text: 'y', data: 'z' }, status: 422, code: 'validation_failed', path: '/data' },
  ];
  for (const c of cases) {
    const res: HttpResult = await s.request('POST', '/messages/test-email', { token, body: c.body });
    try {
      assertProblem(res, c.status, c.code);
      if (c.path)
        assert.ok(
          res.body.errors?.some((e: { path: string }) => e.path === c.path),
          `errors[] names ${c.path}: ${res.text}`,
        );
    } catch (err) {
      throw new Error(`${c.name}: ${(err as Error).message}`);
    }
  }
  assert.equal((await s.request('GET', '/messages/delivery-attempts', { token })).body.data.length, 0, 'nothing was sent');
});

test('roles: MEMBER sends test emails, VIEWER reads delivery attempts', async (t) => {
  const { s } = await setup(t);
  const viewer = await s.userWithRole('VIEWER');
  const member = await s.userWithRole('MEMBER');
  const body = { to: 'ada@example.com', subject: 'x', text: 'y' };

  assertProblem(await s.request('POST', '/messages/test-email', { token: viewer.token, body }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/messages/test-email', { token: await s.mintKey('VIEWER'), body }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/messages/test-email', { body }), 401);
  const sent = await s.request('POST', '/messages/test-email', { token: member.token, body });
  assert.equal(sent.status, 202, sent.text);
  assert.equal((await s.request('POST', '/messages/test-email', { token: await s.mintKey('MEMBER'), body })).status, 202);

  for (const tok of [viewer.token, await s.mintKey('VIEWER')]) {
    const one = await s.request('GET', `/messages/delivery-attempts/${sent.body.deliveryAttemptId}`, { token: tok });
    assert.equal(one.status, 200, one.text);
    const list = await s.request('GET', '/messages/delivery-attempts', { token: tok });
    assert.equal(list.status, 200, list.text);
    assert.equal(list.body.data.length, 2);
  }
  assertProblem(await s.request('GET', '/messages/delivery-attempts'), 401);
  assertProblem(await s.request('GET', `/messages/delivery-attempts/${sent.body.deliveryAttemptId}`), 401);
});

test("another workspace's delivery attempt is 404 and not listed", async (t) => {
  const { s, token } = await setup(t);
  const other = await s.otherWorkspace();
  const mine = await s.request('POST', '/messages/test-email', { token, body: { to: 'ada@example.com', subject: 'secret subject', text: 'y' } });
  assert.equal(mine.status, 202);

  assertProblem(
    await s.request('GET', `/messages/delivery-attempts/${mine.body.deliveryAttemptId}`, { token: other.token }),
    404,
    'delivery_attempt_not_found',
  );
  const list = await s.request('GET', '/messages/delivery-attempts', { token: other.token });
  assert.deepEqual(list.body, { data: [], nextCursor: null });
  assertProblem(await s.request('GET', '/messages/delivery-attempts/999999', { token }), 404, 'delivery_attempt_not_found');
  assertProblem(await s.request('GET', '/messages/delivery-attempts/abc', { token }), 404);
});

test('listing filters by status and runId and pages newest first', async (t) => {
  const { s, token } = await setup(t);
  const ids: number[] = [];
  for (let i = 0; i < 3; i++) {
    const res = await s.request('POST', '/messages/test-email', { token, body: { to: `u${i}@example.com`, subject: `n${i}`, text: 'y' } });
    ids.push(res.body.deliveryAttemptId);
  }
  const page1 = await s.request('GET', '/messages/delivery-attempts?limit=2', { token });
  assert.deepEqual(
    page1.body.data.map((a: { id: number }) => a.id),
    [ids[2], ids[1]],
  );
  assert.equal(typeof page1.body.nextCursor, 'string');
  const page2 = await s.request('GET', `/messages/delivery-attempts?limit=2&cursor=${page1.body.nextCursor}`, { token });
  assert.deepEqual(
    page2.body.data.map((a: { id: number }) => a.id),
    [ids[0]],
  );
  assert.equal(page2.body.nextCursor, null);

  assert.equal((await s.request('GET', '/messages/delivery-attempts?status=SENT', { token })).body.data.length, 3);
  assert.equal((await s.request('GET', '/messages/delivery-attempts?status=FAILED', { token })).body.data.length, 0);
  assert.equal((await s.request('GET', '/messages/delivery-attempts?runId=1', { token })).body.data.length, 0, 'test emails belong to no run');
  assertProblem(await s.request('GET', '/messages/delivery-attempts?status=LOST', { token }), 400, 'invalid_query');
  assertProblem(await s.request('GET', '/messages/delivery-attempts?runId=0x1', { token }), 400, 'invalid_query');
  assertProblem(await s.request('GET', '/messages/delivery-attempts?limit=500', { token }), 400, 'invalid_query');
  assertProblem(await s.request('GET', '/messages/delivery-attempts?cursor=bogus!', { token }), 400, 'invalid_cursor');
});
