/**
 * Invitation emails through a real SMTP server (issue 8 item 1): the email that is sent
 * carries the token and a link to the console's accept page; the copy kept on the delivery
 * attempt has it redacted, so no reader of delivery attempts (a VIEWER key, say) can accept
 * an invitation meant for someone else. The invitee accepts with the token read from the
 * email the SMTP server received.
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { auditLogs, deliveryAttempts } from '../../src/core/db/schema.js';
import { createUser } from '../../src/core/services/users.js';
import { assertProblem, build, type TestServer } from '../helpers.js';
import { smtpSink, type SinkMail } from '../smtpSink.js';

const PUBLIC_URL = 'https://svc.example.test';

/** The text of a received message with quoted-printable soft breaks and escapes undone. */
function bodyText(raw: string): string {
  return raw.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
}

async function waitForMail(received: SinkMail[], to: string): Promise<string> {
  for (let i = 0; i < 500; i++) {
    const found = received.find((m) => m.to.includes(to));
    if (found) return bodyText(found.raw);
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`no email to ${to} reached the SMTP server`);
}

async function setUp(t: TestContext): Promise<{ s: TestServer; token: string; received: SinkMail[] }> {
  const { port, received } = await smtpSink(t);
  // The SMTP server is on loopback: allow it explicitly, as an operator would.
  const s = await build(t, { env: { SVC_PUBLIC_URL: PUBLIC_URL, SVC_HTTP_ALLOWED_HOSTS: `127.0.0.1:${port}` } });
  const token = await s.login(s.owner.email, s.owner.password);
  const put = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port, secure: false, from: 'team@example.test' } } },
  });
  assert.equal(put.status, 200, put.text);
  return { s, token, received };
}

function tokenIn(text: string): string {
  const m = /\/invite#([A-Za-z0-9_-]{43})\b/.exec(text);
  assert.ok(m, `the email links to the accept page with the token: ${text.slice(0, 2000)}`);
  return m[1]!;
}

test('invitation emails: sent with the token and an accept link; stored and listed redacted; a VIEWER key finds no token', async (t) => {
  const { s, token, received } = await setUp(t);
  const outsider = await s.otherWorkspace();
  await createUser(
    { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM', id: null, label: 'test' }, ip: null },
    {
      email: 'has-account@example.test',
      password: 'has-account-password',
      workspaceId: outsider.workspaceId,
      role: 'MEMBER',
    },
  );

  // Two doors: POST /memberships/invitations (token shown once to the ADMIN) and POST /memberships (no token).
  const invited = await s.request('POST', '/memberships/invitations', { token, body: { email: 'new-admin@example.test', role: 'ADMIN' } });
  assert.equal(invited.status, 201, invited.text);
  const added = await s.request('POST', '/memberships', { token, body: { email: 'has-account@example.test', role: 'MEMBER' } });
  assert.equal(added.status, 202, added.text);
  assert.equal(added.body.token, undefined);

  const newMail = await waitForMail(received, 'new-admin@example.test');
  const knownMail = await waitForMail(received, 'has-account@example.test');
  const newToken = tokenIn(newMail);
  const knownToken = tokenIn(knownMail);
  assert.equal(newToken, invited.body.token, 'the emailed token is the one shown to the ADMIN');
  assert.ok(newMail.includes(`${PUBLIC_URL}/invite#${newToken}`), 'the link is {publicUrl}/invite#<token>');
  assert.ok(newMail.includes(`"token": "${newToken}"`), 'and the token itself, for API clients');
  assert.match(newMail, /Subject: You're invited to Acme/);

  // Every delivery-attempt endpoint, as a VIEWER key: the emails are there, their tokens are not.
  const viewerKey = await s.mintKey('VIEWER');
  const secrets = [newToken, knownToken];
  const bodies: string[] = [];
  const lists = ['/messages/delivery-attempts', '/messages/delivery-attempts?status=SENT', '/messages/delivery-attempts?limit=1'];
  let ids: number[] = [];
  for (const path of lists) {
    const res = await s.request('GET', path, { token: viewerKey });
    assert.equal(res.status, 200, res.text);
    bodies.push(res.text);
    if (path === lists[0]) ids = res.body.data.map((a: { id: number }) => a.id);
  }
  assert.equal(ids.length, 2, 'both invitation emails are listed');
  for (const id of ids) {
    const res = await s.request('GET', `/messages/delivery-attempts/${id}`, { token: viewerKey });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.status, 'SENT');
    assert.equal(res.body.provider, 'smtp');
    assert.match(res.body.rendered.text, new RegExp(`${PUBLIC_URL.replace(/\./g, '\\.')}/invite#\\[redacted\\]`));
    bodies.push(res.text);
  }
  for (const body of bodies)
    for (const secret of secrets) assert.ok(!body.includes(secret), `a delivery-attempt response holds a token: ${body.slice(0, 300)}`);
  // Nor is it anywhere in the database.
  const dump = JSON.stringify(await s.db.select().from(deliveryAttempts)) + JSON.stringify(await s.db.select().from(auditLogs));
  for (const secret of secrets) assert.ok(!dump.includes(secret), 'a token is stored in clear');

  // A redacted copy is no token.
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: '[redacted]', password: 'a-long-password' } }), 404, 'invitation_not_found');

  // The invitees accept with the tokens from the emails they received.
  const created = await s.request('POST', '/invitations/accept', { body: { token: newToken, name: 'New Admin', password: 'new-admin-password' } });
  assert.equal(created.status, 200, created.text);
  assert.equal(created.body.workspace.role, 'ADMIN');
  const login = await s.request('POST', '/auth/login', { body: { email: 'new-admin@example.test', password: 'new-admin-password' } });
  assert.equal(login.status, 200, login.text);
  assert.equal(login.body.workspace.id, s.workspaceId);

  const joined = await s.request('POST', '/invitations/accept', { body: { token: knownToken, password: 'has-account-password' } });
  assert.equal(joined.status, 200, joined.text);
  assert.equal(joined.body.workspace.role, 'MEMBER');
  const member = await s.request('POST', '/auth/login', {
    body: { email: 'has-account@example.test', password: 'has-account-password', workspaceId: s.workspaceId },
  });
  assert.equal(member.status, 200, member.text);
  assert.equal(member.body.workspace.role, 'MEMBER');
});

test("a provider error that quotes the message keeps none of it: a token split by quoted-printable's soft line breaks would pass a search for it", async (t) => {
  // An SMTP server that refuses the message, quoting its raw bytes back in its reply: the
  // body is quoted-printable, whose soft line breaks (=CRLF) may cut the token in two.
  const { port, received } = await smtpSink(t, (mail) => {
    const raw = mail.raw;
    const at = raw.indexOf('invite#');
    const quoted = at === -1 ? 'no link' : raw.slice(at, at + 120).replace(/\r?\n/g, ' ');
    return Object.assign(new Error(`rejected content: ${quoted} / ${bodyText(mail.raw)}`), { responseCode: 554 });
  });
  const s = await build(t, { env: { SVC_PUBLIC_URL: PUBLIC_URL, SVC_HTTP_ALLOWED_HOSTS: `127.0.0.1:${port}`, SVC_DELIVERY_MAX_ATTEMPTS: '1' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const put = await s.request('PUT', '/settings/channels', {
    token,
    body: { EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port, secure: false, from: 'team@example.test' } } },
  });
  assert.equal(put.status, 200, put.text);
  const invited = await s.request('POST', '/memberships/invitations', { token, body: { email: 'someone@example.test', role: 'VIEWER' } });
  assert.equal(invited.status, 201, invited.text);

  let attempt: any;
  for (let i = 0; i < 500 && attempt?.status !== 'FAILED'; i++) {
    const list = await s.request('GET', '/messages/delivery-attempts', { token: await s.mintKey('VIEWER') });
    attempt = list.body.data[0];
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(attempt?.status, 'FAILED', JSON.stringify(attempt));
  assert.equal(received.length, 1, 'the server did receive the message');
  const stored = JSON.stringify(attempt);
  const { token: secret } = invited.body as { token: string };
  for (let i = 0; i + 8 <= secret.length; i++)
    assert.ok(!stored.includes(secret.slice(i, i + 8)), `the stored error holds part of the token: ${attempt.error}`);
  assert.equal(attempt.error, "smtp: the server answered 554 (the provider's reply is not kept: the message carried a secret)");
});
