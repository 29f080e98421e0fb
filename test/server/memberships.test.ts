/**
 * Memberships and invitations through the real HTTP server: listing, inviting with
 * POST /memberships (the same answer for known and unknown emails), role changes, removal, the OWNER-only and last-owner rules, the role matrix,
 * workspace isolation, invitation creation and its email, and accepting an invitation.
 * Contract: API.md sections 1, 2 and 5.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { and, asc, eq } from 'drizzle-orm';
import { auditLogs, invitations, memberships, users } from '../../src/core/db/schema.js';
import { createUser } from '../../src/core/services/users.js';
import { build, assertProblem, type TestServer } from '../helpers.js';

const ISO_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const TOKEN_RE = /^[A-Za-z0-9_-]{43}$/;

function systemCtx(s: TestServer) {
  return { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
}

function ownerToken(s: TestServer): Promise<string> {
  return s.login(s.owner.email, s.owner.password);
}

let counter = 0;

/** A user with an account but no membership in the main workspace (member of a side workspace). */
async function outsider(s: TestServer): Promise<{ id: number; email: string; password: string }> {
  const other = await s.otherWorkspace();
  const email = `outsider${++counter}@acme.test`;
  const password = `outsider-pass-${counter}`;
  const u = await createUser(systemCtx(s), { email, password, workspaceId: other.workspaceId, role: 'MEMBER' });
  return { id: u.id, email, password };
}

async function membershipIdOf(s: TestServer, userId: number, workspaceId = s.workspaceId): Promise<number> {
  const [row] = await s.db
    .select({ id: memberships.id })
    .from(memberships)
    .where(and(eq(memberships.userId, userId), eq(memberships.workspaceId, workspaceId)));
  assert.ok(row, `membership of user ${userId}`);
  return row.id;
}

function auditActions(s: TestServer): Promise<{ action: string; metadata: Record<string, unknown> }[]> {
  return s.db.select({ action: auditLogs.action, metadata: auditLogs.metadata }).from(auditLogs).orderBy(asc(auditLogs.id));
}

async function invite(
  s: TestServer,
  token: string,
  email: string,
  role = 'MEMBER',
): Promise<{ id: number; email: string; role: string; expiresAt: string; token: string }> {
  const res = await s.request('POST', '/memberships/invitations', { token, body: { email, role } });
  assert.equal(res.status, 201, res.text);
  return res.body;
}

test('GET /memberships lists members with their user fields, newest first, paged', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const admin = await s.userWithRole('ADMIN');
  const viewer = await s.userWithRole('VIEWER');

  const res = await s.request('GET', '/memberships', { token: viewer.token });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.nextCursor, null);
  assert.deepEqual(
    res.body.data.map((m: any) => [m.userId, m.email, m.role]),
    [
      [viewer.id, viewer.email, 'VIEWER'],
      [admin.id, admin.email, 'ADMIN'],
      [s.owner.id, s.owner.email, 'OWNER'],
    ],
  );
  for (const m of res.body.data) {
    assert.deepEqual(Object.keys(m).sort(), ['createdAt', 'email', 'id', 'name', 'role', 'userId']);
    assert.match(m.createdAt, ISO_RE);
  }

  const page1 = await s.request('GET', '/memberships?limit=2', { token });
  assert.equal(page1.body.data.length, 2);
  assert.ok(page1.body.nextCursor);
  const page2 = await s.request('GET', `/memberships?limit=2&cursor=${page1.body.nextCursor}`, { token });
  assert.equal(page2.status, 200);
  assert.deepEqual(
    page2.body.data.map((m: any) => m.userId),
    [s.owner.id],
  );
  assert.equal(page2.body.nextCursor, null);
});

/** The stored invitation emails to an address (the outbox records them), waiting for them to be written. */
async function invitationEmails(s: TestServer, token: string, to: string, count = 1): Promise<any[]> {
  for (let i = 0; i < 200; i++) {
    const list = await s.request('GET', '/messages/delivery-attempts', { token });
    assert.equal(list.status, 200, list.text);
    const found = list.body.data.filter((a: any) => a.to === to);
    if (found.length >= count) return found;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.fail(`no invitation email to ${to}`);
}

test('POST /memberships invites: the same 202 for an email with an account and one without; nobody is added before accepting', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const u = await outsider(s);
  const membersBefore = (await s.request('GET', '/memberships', { token })).body.data.length;

  const known = await s.request('POST', '/memberships', { token, body: { email: `  ${u.email.toUpperCase()} `, role: 'MEMBER' } });
  const unknown = await s.request('POST', '/memberships', { token, body: { email: 'nobody@acme.test', role: 'MEMBER' } });
  for (const [res, email] of [
    [known, u.email],
    [unknown, 'nobody@acme.test'],
  ] as const) {
    assert.equal(res.status, 202, res.text);
    assert.deepEqual(Object.keys(res.body).sort(), ['email', 'expiresAt', 'id', 'role'], 'the invitation, without its token');
    assert.equal(res.body.email, email);
    assert.equal(res.body.role, 'MEMBER');
    assert.match(res.body.expiresAt, ISO_RE);
    assert.deepEqual([...res.headers.keys()].sort(), [...known.headers.keys()].sort(), 'the same headers');
  }
  // Nothing in the two answers tells them apart but the email and the id.
  const strip = (b: any) => ({ ...b, id: 0, email: '', expiresAt: '' });
  assert.deepEqual(strip(known.body), strip(unknown.body));
  assert.equal(known.headers.get('content-type'), unknown.headers.get('content-type'));

  // Nobody was added: the user with an account must accept too.
  assert.equal((await s.request('GET', '/memberships', { token })).body.data.length, membersBefore);
  assertProblem(await s.request('POST', '/auth/login', { body: { email: u.email, password: u.password, workspaceId: s.workspaceId } }), 403, 'not_a_member');

  // Both got the same invitation email, whose stored copy holds no token.
  const [knownMail] = await invitationEmails(s, token, u.email);
  const [unknownMail] = await invitationEmails(s, token, 'nobody@acme.test');
  assert.equal(knownMail.rendered.subject, unknownMail.rendered.subject);
  assert.match(knownMail.rendered.text, /\/invite#\[redacted\]/);
  assert.equal(knownMail.rendered.text.replace(/expires at \S+/, ''), unknownMail.rendered.text.replace(/expires at \S+/, ''));

  const created = (await auditActions(s)).filter((a) => a.action === 'invitation.created');
  assert.equal(created.length, 2);
  const added = (
    await s.db
      .select({ metadata: auditLogs.metadata })
      .from(auditLogs)
      .where(and(eq(auditLogs.action, 'membership.created'), eq(auditLogs.workspaceId, s.workspaceId)))
  ).filter((a) => a.metadata.userId === u.id);
  assert.equal(added.length, 0, 'no membership of the user was created in this workspace');

  // Someone in the workspace already: 409; bad input: 422, nothing sent.
  assertProblem(await s.request('POST', '/memberships', { token, body: { email: s.owner.email, role: 'VIEWER' } }), 409, 'membership_exists');
  assertProblem(await s.request('POST', '/memberships', { token, body: { email: 'not-an-email', role: 'VIEWER' } }), 422);
  assert.equal((await auditActions(s)).filter((a) => a.action === 'invitation.created').length, 2);
});

test('PATCH /memberships/:id changes the role, DELETE removes the member', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const m = await s.userWithRole('MEMBER');
  const id = await membershipIdOf(s, m.id);

  const res = await s.request('PATCH', `/memberships/${id}`, { token, body: { role: 'ADMIN' } });
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(
    { id: res.body.id, userId: res.body.userId, email: res.body.email, role: res.body.role },
    { id, userId: m.id, email: m.email, role: 'ADMIN' },
  );
  // The role applies to the existing token at once.
  assert.equal((await s.request('GET', '/api-keys', { token: m.token })).status, 200);

  const del = await s.request('DELETE', `/memberships/${id}`, { token });
  assert.equal(del.status, 204);
  assert.equal(del.text, '');
  assertProblem(await s.request('GET', '/memberships', { token: m.token }), 401);
  assertProblem(await s.request('DELETE', `/memberships/${id}`, { token }), 404, 'membership_not_found');
  assertProblem(await s.request('PATCH', `/memberships/${id}`, { token, body: { role: 'VIEWER' } }), 404, 'membership_not_found');

  const actions = (await auditActions(s)).map((a) => a.action);
  assert.ok(actions.includes('membership.role_changed'));
  assert.ok(actions.includes('membership.removed'));
});

test('only an OWNER grants OWNER, changes or removes an OWNER; nobody grants above their own role', async (t) => {
  const s = await build(t);
  const ownerTok = await ownerToken(s);
  const admin = await s.userWithRole('ADMIN');
  const member = await s.userWithRole('MEMBER');
  const memberId = await membershipIdOf(s, member.id);
  const ownerId = await membershipIdOf(s, s.owner.id);
  const u = await outsider(s);

  // ADMIN cannot grant OWNER in any way.
  assertProblem(await s.request('PATCH', `/memberships/${memberId}`, { token: admin.token, body: { role: 'OWNER' } }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/memberships', { token: admin.token, body: { email: u.email, role: 'OWNER' } }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/memberships/invitations', { token: admin.token, body: { email: 'x@acme.test', role: 'OWNER' } }), 403, 'forbidden');
  // ADMIN cannot touch an OWNER.
  assertProblem(await s.request('PATCH', `/memberships/${ownerId}`, { token: admin.token, body: { role: 'VIEWER' } }), 403, 'forbidden');
  assertProblem(await s.request('DELETE', `/memberships/${ownerId}`, { token: admin.token }), 403, 'forbidden');
  // An ADMIN API key is no OWNER either.
  const adminKey = await s.mintKey('ADMIN');
  assertProblem(await s.request('PATCH', `/memberships/${memberId}`, { token: adminKey, body: { role: 'OWNER' } }), 403, 'forbidden');

  // ADMIN may grant up to ADMIN.
  const up = await s.request('PATCH', `/memberships/${memberId}`, { token: admin.token, body: { role: 'ADMIN' } });
  assert.equal(up.status, 200, up.text);
  const added = await s.request('POST', '/memberships', { token: admin.token, body: { email: u.email, role: 'ADMIN' } });
  assert.equal(added.status, 202, added.text);

  // OWNER grants OWNER, and a second OWNER can then be demoted and removed by an OWNER.
  const promoted = await s.request('PATCH', `/memberships/${memberId}`, { token: ownerTok, body: { role: 'OWNER' } });
  assert.equal(promoted.status, 200, promoted.text);
  assertProblem(await s.request('DELETE', `/memberships/${memberId}`, { token: admin.token }), 403, 'forbidden');
  const demoted = await s.request('PATCH', `/memberships/${memberId}`, { token: ownerTok, body: { role: 'MEMBER' } });
  assert.equal(demoted.status, 200, demoted.text);
  assert.equal(demoted.body.role, 'MEMBER');
  await s.request('PATCH', `/memberships/${memberId}`, { token: ownerTok, body: { role: 'OWNER' } });
  assert.equal((await s.request('DELETE', `/memberships/${memberId}`, { token: ownerTok })).status, 204);
});

test('the last OWNER can be neither demoted nor removed', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const ownerId = await membershipIdOf(s, s.owner.id);

  assertProblem(await s.request('PATCH', `/memberships/${ownerId}`, { token, body: { role: 'ADMIN' } }), 409, 'last_owner');
  assertProblem(await s.request('DELETE', `/memberships/${ownerId}`, { token }), 409, 'last_owner');
  // Setting the same role is a no-op, not a demotion.
  assert.equal((await s.request('PATCH', `/memberships/${ownerId}`, { token, body: { role: 'OWNER' } })).status, 200);

  // With a second OWNER the first may step down; then the second is the last one.
  const second = await s.userWithRole('OWNER');
  const secondId = await membershipIdOf(s, second.id);
  const down = await s.request('PATCH', `/memberships/${ownerId}`, { token, body: { role: 'ADMIN' } });
  assert.equal(down.status, 200, down.text);
  assertProblem(await s.request('DELETE', `/memberships/${secondId}`, { token: second.token }), 409, 'last_owner');
  assertProblem(await s.request('PATCH', `/memberships/${secondId}`, { token: second.token, body: { role: 'MEMBER' } }), 409, 'last_owner');
  const owners = await s.db
    .select({ id: memberships.id })
    .from(memberships)
    .where(and(eq(memberships.workspaceId, s.workspaceId), eq(memberships.role, 'OWNER')));
  assert.equal(owners.length, 1);
});

test('role matrix: VIEWER and MEMBER read but may not write; no credential is 401', async (t) => {
  const s = await build(t);
  const ownerId = await membershipIdOf(s, s.owner.id);
  for (const role of ['VIEWER', 'MEMBER'] as const) {
    const u = await s.userWithRole(role);
    assert.equal((await s.request('GET', '/memberships', { token: u.token })).status, 200);
    assertProblem(await s.request('POST', '/memberships', { token: u.token, body: { email: s.owner.email, role: 'VIEWER' } }), 403, 'forbidden');
    assertProblem(await s.request('PATCH', `/memberships/${ownerId}`, { token: u.token, body: { role: 'VIEWER' } }), 403, 'forbidden');
    assertProblem(await s.request('DELETE', `/memberships/${ownerId}`, { token: u.token }), 403, 'forbidden');
    assertProblem(await s.request('POST', '/memberships/invitations', { token: u.token, body: { email: 'x@acme.test', role: 'VIEWER' } }), 403, 'forbidden');
  }
  const viewerKey = await s.mintKey('VIEWER');
  assert.equal((await s.request('GET', '/memberships', { token: viewerKey })).status, 200);

  const none = await s.request('GET', '/memberships');
  assertProblem(none, 401);
  assert.equal(none.headers.get('www-authenticate'), 'Bearer');
  assertProblem(await s.request('POST', '/memberships', { body: { email: 'a@acme.test', role: 'VIEWER' } }), 401);
  assertProblem(await s.request('PATCH', `/memberships/${ownerId}`, { body: { role: 'VIEWER' } }), 401);
  assertProblem(await s.request('DELETE', `/memberships/${ownerId}`), 401);
  assertProblem(await s.request('POST', '/memberships/invitations', { body: { email: 'a@acme.test', role: 'VIEWER' } }), 401);
});

test("another workspace's membership id is 404, and its members are not listed", async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const other = await s.otherWorkspace();
  const [otherRow] = await s.db.select({ id: memberships.id }).from(memberships).where(eq(memberships.workspaceId, other.workspaceId));
  assert.ok(otherRow);

  assertProblem(await s.request('PATCH', `/memberships/${otherRow.id}`, { token, body: { role: 'VIEWER' } }), 404, 'membership_not_found');
  assertProblem(await s.request('DELETE', `/memberships/${otherRow.id}`, { token }), 404, 'membership_not_found');
  const list = await s.request('GET', '/memberships', { token });
  assert.ok(!list.body.data.some((m: any) => m.id === otherRow.id));
  const [still] = await s.db.select({ role: memberships.role }).from(memberships).where(eq(memberships.id, otherRow.id));
  assert.equal(still?.role, 'OWNER');
});

test('bad bodies are 422', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const ownerId = await membershipIdOf(s, s.owner.id);
  const bad: [string, string, unknown][] = [
    ['POST', '/memberships', {}],
    ['POST', '/memberships', { email: 'a@acme.test' }],
    ['POST', '/memberships', { email: 'a@acme.test', role: 'KING' }],
    ['POST', '/memberships', { email: 'a@acme.test', role: 'VIEWER', extra: 1 }],
    ['POST', '/memberships', { email: 42, role: 'VIEWER' }],
    ['PATCH', `/memberships/${ownerId}`, { role: 'owner' }],
    ['PATCH', `/memberships/${ownerId}`, { role: 'OWNER', email: 'x@acme.test' }],
    ['POST', '/memberships/invitations', { email: 'a@acme.test', role: 'GOD' }],
    ['POST', '/memberships/invitations', { email: 'nope', role: 'VIEWER' }],
    ['POST', '/invitations/accept', {}],
    ['POST', '/invitations/accept', { token: 'x', surprise: true }],
    ['POST', '/invitations/accept', { token: 5 }],
  ];
  for (const [method, path, body] of bad) {
    const res = await s.request(method, path, { token, body });
    assertProblem(res, 422);
  }
});

test('POST /memberships/invitations: token shown once, only its hash stored, email sent through the EMAIL channel', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const before = Date.now();
  const inv = await invite(s, token, 'New.Person@Example.test', 'ADMIN');
  assert.deepEqual(Object.keys(inv).sort(), ['email', 'expiresAt', 'id', 'role', 'token']);
  assert.equal(inv.email, 'new.person@example.test');
  assert.equal(inv.role, 'ADMIN');
  assert.match(inv.token, TOKEN_RE);
  assert.match(inv.expiresAt, ISO_RE);
  const days = (Date.parse(inv.expiresAt) - before) / 86_400_000;
  assert.ok(Math.abs(days - s.config.invitationDays) < 0.01, `expires in ${days} days`);

  const rows = await s.db.select().from(invitations);
  assert.equal(rows.length, 1);
  assert.equal(rows[0]!.tokenHash, createHash('sha256').update(inv.token).digest('hex'));
  assert.ok(!JSON.stringify(rows).includes(inv.token), 'the raw token is not stored');
  assert.ok(!JSON.stringify(await s.db.select().from(auditLogs)).includes(inv.token), 'nor audited');
  assert.ok((await auditActions(s)).some((a) => a.action === 'invitation.created'));

  // The email: a delivery attempt through the outbox, with the token and workspace name.
  let attempt: any;
  // Sent in the background: up to 15 s on a loaded machine, usually at once.
  for (const until = Date.now() + 15_000; !attempt && Date.now() < until; ) {
    const list = await s.request('GET', '/messages/delivery-attempts', { token });
    assert.equal(list.status, 200, list.text);
    attempt = list.body.data.find((a: any) => a.to === 'new.person@example.test');
    if (!attempt) await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(attempt, 'an invitation email was recorded');
  assert.equal(attempt.channel, 'EMAIL');
  assert.equal(attempt.provider, 'outbox');
  assert.equal(attempt.status, 'SENT');
  // The stored copy has the token replaced: it is sent, never kept (test/server/invitations.test.ts reads the sent one).
  assert.ok(!JSON.stringify(attempt).includes(inv.token), 'the stored email does not carry the token');
  assert.match(String(attempt.rendered.text), /https?:\/\/[^\s]+\/invite#\[redacted\]/, 'it links to the accept page, token redacted');
  assert.ok(JSON.stringify(attempt.rendered).includes('Acme'), 'and the workspace name');

  // Inviting someone who is already a member is a conflict.
  assertProblem(await s.request('POST', '/memberships/invitations', { token, body: { email: s.owner.email, role: 'VIEWER' } }), 409, 'membership_exists');
});

test('accepting an invitation creates the user, who can log in with the role; single use', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const inv = await invite(s, token, 'invitee@example.test', 'ADMIN');

  // A new account needs a password of at least 8 characters.
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: inv.token } }), 422);
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: inv.token, password: 'short' } }), 422);

  const res = await s.request('POST', '/invitations/accept', { body: { token: inv.token, name: 'In Vitee', password: 'a-long-password' } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.user.email, 'invitee@example.test');
  assert.equal(res.body.user.name, 'In Vitee');
  assert.equal(res.body.user.isSuperAdmin, false);
  assert.deepEqual(res.body.workspace, { id: s.workspaceId, name: 'Acme', plan: 'PRO', role: 'ADMIN' });

  const login = await s.request('POST', '/auth/login', { body: { email: 'invitee@example.test', password: 'a-long-password', workspaceId: s.workspaceId } });
  assert.equal(login.status, 200, login.text);
  assert.equal(login.body.workspace.role, 'ADMIN');
  assert.equal((await s.request('GET', '/api-keys', { token: login.body.token })).status, 200);

  // Single use: the second accept is 410 invitation_used.
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: inv.token, password: 'a-long-password' } }), 410, 'invitation_used');

  const actions = await auditActions(s);
  const accepted = actions.find((a) => a.action === 'invitation.accepted');
  assert.ok(accepted);
  assert.ok(!JSON.stringify(actions).includes(inv.token));
});

test("accepting as an existing user takes that account's password and signs it in; without it, or with another, nothing joins; a member already is 409", async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const u = await outsider(s);
  const inv = await invite(s, token, u.email, 'VIEWER');
  // The token proves access to the mailbox at most, and the inviting admin holds it too.
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: inv.token } }), 422, 'password_required');
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: inv.token, password: 'not-their-password' } }), 401, 'invalid_credentials');
  const notYet = await s.request('POST', '/auth/login', { body: { email: u.email, password: u.password, workspaceId: s.workspaceId } });
  assertProblem(notYet, 403, 'not_a_member');
  const res = await s.request('POST', '/invitations/accept', { body: { token: inv.token, password: u.password } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.user.id, u.id);
  assert.deepEqual([res.body.workspace.role, res.body.accountCreated, res.body.signedIn], ['VIEWER', false, true]);
  assert.match(res.headers.get('set-cookie') ?? '', /svc_refresh=/);
  assert.equal((await s.request('GET', '/auth/me', { token: res.body.token })).body.workspace.id, s.workspaceId);
  // An account with no password yet has none to prove: told so, not counted as a wrong one.
  const other = await s.otherWorkspace();
  await createUser(systemCtx(s), { email: 'no-password@acme.test', workspaceId: other.workspaceId, role: 'MEMBER' });
  const unset = await invite(s, token, 'no-password@acme.test', 'VIEWER');
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: unset.token, password: 'anything-at-all' } }), 422, 'password_not_set');

  // Invited twice before accepting: the second accept finds a member already.
  const u2 = await outsider(s);
  const a = await invite(s, token, u2.email, 'VIEWER');
  const b = await invite(s, token, u2.email, 'MEMBER');
  assert.equal((await s.request('POST', '/invitations/accept', { body: { token: a.token, password: u2.password } })).status, 200);
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: b.token, password: u2.password } }), 409, 'membership_exists');
});

test('expired and unknown tokens are refused', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const inv = await invite(s, token, 'late@example.test');
  await s.store.transaction(async (tx) => {
    await tx
      .update(invitations)
      .set({ expiresAt: new Date(Date.now() - 1000).toISOString() })
      .where(eq(invitations.id, inv.id));
  });
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: inv.token, password: 'a-long-password' } }), 410, 'invitation_expired');
  assert.equal((await s.db.select({ id: users.id }).from(users).where(eq(users.email, 'late@example.test'))).length, 0);

  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: 'A'.repeat(43), password: 'a-long-password' } }), 404, 'invitation_not_found');
});
