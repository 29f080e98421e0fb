/**
 * The endpoints the console needs (API.md section 8), through a real server: who am I,
 * switching workspaces, the refresh grace for tabs, pending invitations, inspecting and
 * accepting one, the webhook dry run, and node positions in automation graphs.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { count, eq, isNotNull } from 'drizzle-orm';
import type { SQLiteTable } from 'drizzle-orm/sqlite-core';
import { auditLogs, contacts, memberships, sessions, webhookEvents, workflowRuns, type Role } from '../../src/core/db/schema.js';
import { assertProblem, build, type HttpResult, type TestServer } from '../helpers.js';

const REFRESH_COOKIE = 'svc_refresh';

function refreshCookie(res: HttpResult): string | undefined {
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(';');
    const [name, value] = pair!.split('=');
    if (name === REFRESH_COOKIE) return value;
  }
  return undefined;
}

function cookieMaxAge(res: HttpResult): number {
  const c = res.headers.getSetCookie().find((h) => h.startsWith(`${REFRESH_COOKIE}=`))!;
  return Number(/Max-Age=(\d+)/i.exec(c)![1]);
}

async function loginFull(s: TestServer, email: string, password: string): Promise<HttpResult> {
  const res = await s.request('POST', '/auth/login', { body: { email, password } });
  assert.equal(res.status, 200, res.text);
  return res;
}

const refreshWith = (s: TestServer, cookie: string) => s.request('POST', '/auth/refresh', { headers: { cookie: `${REFRESH_COOKIE}=${cookie}` } });

async function rowCount(s: TestServer, table: SQLiteTable): Promise<number> {
  const [row] = await s.db.select({ n: count() }).from(table);
  return row?.n ?? 0;
}

/** Adds the owner to another workspace directly (no invitation), as the operator's CLI would. */
async function addOwnerTo(s: TestServer, workspaceId: number, role: Role): Promise<void> {
  await s.store.transaction(async (tx) => {
    await tx.insert(memberships).values({ workspaceId, userId: s.owner.id, role });
  });
}

test('GET /auth/me names the user, the workspace, the role and every membership; a key is named as a key', async (t) => {
  const s = await build(t);
  const other = await s.otherWorkspace();
  await addOwnerTo(s, other.workspaceId, 'VIEWER');
  const token = await s.login(s.owner.email, s.owner.password);
  const me = await s.request('GET', '/auth/me', { token });
  assert.equal(me.status, 200, me.text);
  assert.deepEqual(me.body.user, { id: s.owner.id, email: s.owner.email, name: me.body.user.name });
  assert.equal(me.body.apiKey, null);
  assert.equal(me.body.superAdmin, true);
  assert.deepEqual(me.body.workspace, { id: s.workspaceId, name: 'Acme', plan: 'PRO' });
  assert.equal(me.body.role, 'OWNER');
  assert.deepEqual(
    me.body.memberships.map((m: { workspaceId: number; role: string }) => [m.workspaceId, m.role]),
    [
      [s.workspaceId, 'OWNER'],
      [other.workspaceId, 'VIEWER'],
    ],
  );

  const viewer = await s.userWithRole('VIEWER');
  const vme = await s.request('GET', '/auth/me', { token: viewer.token });
  assert.equal(vme.body.role, 'VIEWER');
  assert.equal(vme.body.superAdmin, false);
  assert.equal(vme.body.memberships.length, 1);

  const key = await s.mintKey('MEMBER');
  const kme = await s.request('GET', '/auth/me', { token: key });
  assert.equal(kme.status, 200, kme.text);
  assert.equal(kme.body.user, null);
  assert.equal(kme.body.apiKey.name, 'member key');
  assert.equal(kme.body.role, 'MEMBER');
  assert.deepEqual(kme.body.memberships, [{ workspaceId: s.workspaceId, name: 'Acme', role: 'MEMBER' }]);
  assertProblem(await s.request('GET', '/auth/me'), 401);
});

test('POST /auth/switch moves a user to another of their workspaces; the old session ends and the new one ends no later', async (t) => {
  const s = await build(t);
  const other = await s.otherWorkspace('GROWTH');
  await addOwnerTo(s, other.workspaceId, 'MEMBER');
  const stranger = await s.otherWorkspace();
  const first = await loginFull(s, s.owner.email, s.owner.password);
  const oldToken = first.body.token as string;

  const switched = await s.request('POST', '/auth/switch', { token: oldToken, body: { workspaceId: other.workspaceId } });
  assert.equal(switched.status, 200, switched.text);
  assert.deepEqual(switched.body.workspace, { id: other.workspaceId, name: switched.body.workspace.name, plan: 'GROWTH', role: 'MEMBER' });
  assert.ok(cookieMaxAge(switched) <= cookieMaxAge(first), 'a switch never lengthens the session');
  const me = await s.request('GET', '/auth/me', { token: switched.body.token });
  assert.equal(me.body.workspace.id, other.workspaceId);
  assert.equal(me.body.role, 'MEMBER');
  // The new workspace's data, not the old one's.
  const contact = await s.request('POST', '/contacts', { token: switched.body.token, body: { email: 'switched@acme.test' } });
  assert.equal(contact.status, 201);
  const [stored] = await s.db.select({ workspaceId: contacts.workspaceId }).from(contacts).where(eq(contacts.id, contact.body.id));
  assert.equal(stored?.workspaceId, other.workspaceId);

  // The replaced session is over: its access token and its refresh cookie no longer work.
  assertProblem(await s.request('GET', '/auth/me', { token: oldToken }), 401, 'session_ended');
  assertProblem(await refreshWith(s, refreshCookie(first)!), 401);
  // The new cookie refreshes into the new workspace.
  const refreshed = await refreshWith(s, refreshCookie(switched)!);
  assert.equal(refreshed.status, 200, refreshed.text);
  assert.equal((await s.request('GET', '/auth/me', { token: refreshed.body.token })).body.workspace.id, other.workspaceId);

  assertProblem(await s.request('POST', '/auth/switch', { token: refreshed.body.token, body: { workspaceId: stranger.workspaceId } }), 403, 'not_a_member');
  assertProblem(await s.request('POST', '/auth/switch', { token: refreshed.body.token, body: { workspaceId: 999_999 } }), 403, 'not_a_member');
  assertProblem(await s.request('POST', '/auth/switch', { token: refreshed.body.token, body: { workspaceId: '1' } }), 422);
  assertProblem(await s.request('POST', '/auth/switch', { token: refreshed.body.token, body: {} }), 422);
  assertProblem(await s.request('POST', '/auth/switch', { token: await s.mintKey('ADMIN'), body: { workspaceId: other.workspaceId } }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/auth/switch', { body: { workspaceId: other.workspaceId } }), 401);
  const audit = await s.db.select({ w: auditLogs.workspaceId }).from(auditLogs).where(eq(auditLogs.action, 'auth.switched'));
  assert.deepEqual(audit, [{ w: other.workspaceId }]);
});

test('a refresh token presented again within 10 s of its rotation is answered with its successor; later reuse still ends the family', async (t) => {
  const s = await build(t);
  const first = await loginFull(s, s.owner.email, s.owner.password);
  const original = refreshCookie(first)!;
  // Two tabs refresh with the same cookie at once.
  const [a, b] = await Promise.all([refreshWith(s, original), refreshWith(s, original)]);
  assert.equal(a.status, 200, a.text);
  assert.equal(b.status, 200, b.text);
  for (const res of [a, b]) assert.equal((await s.request('GET', '/auth/me', { token: res.body.token })).status, 200);
  // Both got the same successor (API.md 8), not one each: a token caught within the grace
  // opens no line of tokens of its own. It rotates once, its successor the same to both tabs.
  assert.equal(refreshCookie(a), refreshCookie(b));
  const a2 = await refreshWith(s, refreshCookie(a)!);
  assert.equal(a2.status, 200, a2.text);
  const b2 = await refreshWith(s, refreshCookie(b)!);
  assert.equal(b2.status, 200, b2.text);
  assert.equal(refreshCookie(a2), refreshCookie(b2));
  assert.notEqual(refreshCookie(a2), refreshCookie(a));
  // Again and again the same token: the newest of the line (its successor has rotated since).
  for (let i = 0; i < 3; i++) assert.equal(refreshCookie(await refreshWith(s, original)), refreshCookie(a2), 'again and again the same token');
  const family = await s.db.select({ id: sessions.id }).from(sessions).where(eq(sessions.userId, s.owner.id));
  assert.equal(family.length, 3, 'the original, its successor and theirs');
  // The newest still works: the original, within the grace, was never answered with a rotated
  // token whose next use would be reuse.
  const newest = await refreshWith(s, original);
  assert.equal((await refreshWith(s, refreshCookie(newest)!)).status, 200);

  // The same token long after its rotation is theft: the whole family ends.
  const elevenSecondsAgo = new Date(Date.now() - 11_000).toISOString();
  await s.store.transaction(async (tx) => {
    await tx.update(sessions).set({ rotatedAt: elevenSecondsAgo }).where(isNotNull(sessions.rotatedAt));
  });
  assertProblem(await refreshWith(s, original), 401, 'invalid_refresh_token');
  assertProblem(await refreshWith(s, refreshCookie(a2)!), 401, 'invalid_refresh_token');
  assertProblem(await s.request('GET', '/auth/me', { token: a2.body.token }), 401, 'session_ended');
  const reuse = await s.db.select({ id: auditLogs.id }).from(auditLogs).where(eq(auditLogs.action, 'auth.refresh_reuse_detected'));
  assert.equal(reuse.length, 1);
});

test('pending invitations are listed without tokens and can be withdrawn; inspect tells the accept page what to ask', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const existing = await s.userWithRole('VIEWER', (await s.otherWorkspace()).workspaceId);
  const inv = async (email: string, role = 'MEMBER') => {
    const res = await s.request('POST', '/memberships/invitations', { token, body: { email, role } });
    assert.equal(res.status, 201, res.text);
    return res.body as { id: number; token: string };
  };
  const a = await inv('new.person@example.com');
  const b = await inv(existing.email, 'VIEWER');
  const c = await inv('withdrawn@example.com');

  const listed = await s.request('GET', '/memberships/invitations', { token });
  assert.equal(listed.status, 200, listed.text);
  assert.deepEqual(
    listed.body.data.map((i: { id: number }) => i.id),
    [c.id, b.id, a.id],
  );
  assert.ok(!listed.text.includes(a.token) && !listed.text.includes('token'), 'no token in the list');
  const paged = await s.request('GET', '/memberships/invitations?limit=2', { token });
  assert.equal(paged.body.data.length, 2);
  const rest = await s.request('GET', `/memberships/invitations?limit=2&cursor=${encodeURIComponent(paged.body.nextCursor)}`, { token });
  assert.deepEqual(
    rest.body.data.map((i: { id: number }) => i.id),
    [a.id],
  );
  assert.equal(rest.body.nextCursor, null);

  const inspected = await s.request('POST', '/invitations/inspect', { body: { token: a.token } });
  assert.equal(inspected.status, 200, inspected.text);
  assert.deepEqual(
    { ...inspected.body, expiresAt: undefined },
    { workspaceName: 'Acme', email: 'new.person@example.com', role: 'MEMBER', accountExists: false, expiresAt: undefined },
  );
  assert.equal((await s.request('POST', '/invitations/inspect', { body: { token: b.token } })).body.accountExists, true);
  assertProblem(await s.request('POST', '/invitations/inspect', { body: { token: 'A'.repeat(43) } }), 404, 'invitation_not_found');
  assertProblem(await s.request('POST', '/invitations/inspect', { body: {} }), 422);
  assertProblem(await s.request('POST', '/invitations/inspect', { body: { token: a.token, extra: 1 } }), 422);

  // Withdrawn: its token stops working; withdrawing twice, or another workspace's, is 404.
  assert.equal((await s.request('DELETE', `/memberships/invitations/${c.id}`, { token })).status, 204);
  assertProblem(await s.request('POST', '/invitations/inspect', { body: { token: c.token } }), 404, 'invitation_not_found');
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: c.token, password: 'a-long-password' } }), 404, 'invitation_not_found');
  assertProblem(await s.request('DELETE', `/memberships/invitations/${c.id}`, { token }), 404, 'invitation_not_found');
  const stranger = await s.otherWorkspace();
  assertProblem(await s.request('DELETE', `/memberships/invitations/${a.id}`, { token: stranger.token }), 404, 'invitation_not_found');
  assert.deepEqual((await s.request('GET', '/memberships/invitations', { token: stranger.token })).body.data, []);

  // Accepted ones leave the list and cannot be withdrawn.
  const accepted = await s.request('POST', '/invitations/accept', { body: { token: a.token, name: 'New Person', password: 'a-long-password' } });
  assert.equal(accepted.status, 200, accepted.text);
  assertProblem(await s.request('POST', '/invitations/inspect', { body: { token: a.token } }), 410, 'invitation_used');
  assertProblem(await s.request('DELETE', `/memberships/invitations/${a.id}`, { token }), 409, 'invitation_used');
  assert.deepEqual(
    (await s.request('GET', '/memberships/invitations', { token })).body.data.map((i: { id: number }) => i.id),
    [b.id],
  );
  const actions = await s.db.select({ action: auditLogs.action }).from(auditLogs).where(eq(auditLogs.action, 'invitation.revoked'));
  assert.equal(actions.length, 1);
});

test('accepting creates and signs in a new account like a login; an existing account accepts with its own password and is signed in', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const fresh = (await s.request('POST', '/memberships/invitations', { token, body: { email: 'fresh@example.com', role: 'MEMBER' } })).body;
  const res = await s.request('POST', '/invitations/accept', { body: { token: fresh.token, name: 'Fresh', password: 'fresh-password-1' } });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.signedIn, true);
  assert.equal(res.body.accountCreated, true);
  assert.equal(res.body.workspace.role, 'MEMBER');
  assert.equal(typeof res.body.expiresIn, 'number');
  const me = await s.request('GET', '/auth/me', { token: res.body.token });
  assert.equal(me.body.user.email, 'fresh@example.com');
  assert.equal(me.body.role, 'MEMBER');
  const cookie = refreshCookie(res);
  assert.ok(cookie, 'the refresh cookie is set');
  assert.match(res.headers.getSetCookie().join(';'), /HttpOnly/i);
  assert.equal((await refreshWith(s, cookie!)).status, 200);

  // Someone who already has an account: the invitation token is not their password (the
  // inviting admin holds it too), so their own password accepts it, and signs them in.
  const other = await s.otherWorkspace();
  const known = await s.userWithRole('VIEWER', other.workspaceId);
  const inv = (await s.request('POST', '/memberships/invitations', { token, body: { email: known.email, role: 'VIEWER' } })).body;
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: inv.token } }), 422, 'password_required');
  const joined = await s.request('POST', '/invitations/accept', { body: { token: inv.token, password: known.password } });
  assert.equal(joined.status, 200, joined.text);
  assert.deepEqual([joined.body.signedIn, joined.body.accountCreated, joined.body.workspace.id], [true, false, s.workspaceId]);
  assert.equal((await s.request('GET', '/auth/me', { token: joined.body.token })).body.role, 'VIEWER');
  assert.ok(refreshCookie(joined), 'the refresh cookie is set');
  assert.ok(await s.login(known.email, known.password, s.workspaceId));
});

test("an admin who holds an invitation's token cannot make or take the invitee's account: squatting an email wins no other workspace", async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  // An ADMIN of this workspace invites an email that has no account and accepts it themself,
  // with a password of their own: the account is theirs.
  const squatted = (await s.request('POST', '/memberships/invitations', { token, body: { email: 'newhire@victim.example', role: 'VIEWER' } })).body;
  const taken = await s.request('POST', '/invitations/accept', { body: { token: squatted.token, password: 'attacker-password' } });
  assert.equal(taken.body.accountCreated, true, taken.text);
  // Another workspace then invites the real person, who accepts with the password they think
  // is theirs: refused, and the admin's account gains no membership there.
  const victim = await s.otherWorkspace();
  const real = (await s.request('POST', '/memberships/invitations', { token: victim.token, body: { email: 'newhire@victim.example', role: 'ADMIN' } })).body;
  assertProblem(
    await s.request('POST', '/invitations/accept', { body: { token: real.token, name: 'Real', password: 'real-person-password' } }),
    401,
    'invalid_credentials',
  );
  assertProblem(
    await s.request('POST', '/auth/login', { body: { email: 'newhire@victim.example', password: 'attacker-password', workspaceId: victim.workspaceId } }),
    403,
    'not_a_member',
  );
  // Nor can an admin add someone who has an account to their workspace unasked.
  const known = await s.userWithRole('MEMBER', victim.workspaceId);
  const unasked = (await s.request('POST', '/memberships/invitations', { token, body: { email: known.email, role: 'VIEWER' } })).body;
  assertProblem(await s.request('POST', '/invitations/accept', { body: { token: unasked.token, password: 'a-guess-of-theirs' } }), 401, 'invalid_credentials');
  assertProblem(
    await s.request('POST', '/auth/login', { body: { email: known.email, password: known.password, workspaceId: s.workspaceId } }),
    403,
    'not_a_member',
  );
});

test('the webhook dry run says what a real POST would do and writes nothing', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const create = async (webhook: object) =>
    (
      await s.request('POST', '/workflows', {
        token,
        body: { name: `w${Math.random()}`, triggerSource: 'WEBHOOK', webhook, steps: [{ type: 'add_tags', tags: ['x'] }] },
      })
    ).body;
  const strict = await create({ lookup: 'email', path: 'data.customer.email', createIfNotFound: false, signingSecret: 'a-signing-secret-1234' });
  await s.request('PATCH', `/workflows/${strict.id}`, { token, body: { status: 'ACTIVE' } });
  const lenient = await create({ lookup: 'phone', createIfNotFound: true, defaults: { firstName: 'Webhook', tags: ['inbound'] } });
  await s.request('PATCH', `/workflows/${lenient.id}`, { token, body: { status: 'ACTIVE' } });
  const paused = await create({ lookup: 'email' });
  const byId = await create({ lookup: 'contactId', createIfNotFound: false });
  await s.request('PATCH', `/workflows/${byId.id}`, { token, body: { status: 'ACTIVE' } });
  const known = (await s.request('POST', '/contacts', { token, body: { email: 'known@acme.test', firstName: 'Kim' } })).body;
  const stranger = await s.otherWorkspace();
  const viewer = await s.userWithRole('VIEWER');
  const before = await Promise.all([contacts, workflowRuns, webhookEvents, auditLogs].map((tb) => rowCount(s, tb)));

  const dry = (id: number, body: unknown, as = token) => s.request('POST', `/workflows/${id}/webhook/test`, { token: as, body: { body } });

  const hit = await dry(strict.id, { data: { customer: { email: ' Known@Acme.test ' } } });
  assert.equal(hit.status, 200, hit.text);
  assert.equal(hit.body.wouldAccept, true);
  assert.equal(hit.body.status, 202);
  assert.equal(hit.body.code, null);
  assert.equal(hit.body.signatureRequired, true);
  assert.equal(hit.body.signatureHeader, 'x-service-signature');
  assert.deepEqual(hit.body.lookup, { kind: 'email', path: 'data.customer.email', value: 'known@acme.test' });
  assert.equal(hit.body.contact.outcome, 'existing');
  assert.equal(hit.body.contact.id, known.id);
  assert.equal(hit.body.contact.firstName, 'Kim');

  const miss = await dry(strict.id, { data: { customer: { email: 'nobody@acme.test' } } });
  assert.equal(miss.body.wouldAccept, false);
  assert.equal(miss.body.status, 404);
  assert.equal(miss.body.code, 'contact_not_found');
  assert.equal(miss.body.contact.outcome, 'missing');

  const created = await dry(lenient.id, { phone: '+1 415 555 0100' });
  assert.equal(created.body.wouldAccept, true, created.text);
  assert.equal(created.body.signatureRequired, false);
  assert.deepEqual(created.body.lookup, { kind: 'phone', path: 'phone', value: '+14155550100' });
  assert.deepEqual(created.body.contact, { outcome: 'created', id: null, email: null, phone: '+14155550100', firstName: 'Webhook', lastName: null });

  // An id no contact can have is a miss; the dry run shows it as sent, not as the 0 it is looked up as.
  for (const contactId of ['99999999999999999999', 2 ** 60, 0]) {
    const far = await dry(byId.id, { contactId });
    assert.equal(far.body.status, 404, far.text);
    assert.equal(far.body.code, 'contact_not_found');
    assert.deepEqual(far.body.lookup, { kind: 'contactId', path: 'contactId', value: contactId });
  }

  const cases: [number, unknown, number, string][] = [
    [strict.id, [1, 2], 422, 'body_not_object'],
    [strict.id, 'text', 422, 'body_not_object'],
    [strict.id, null, 422, 'body_not_object'],
    [strict.id, { data: {} }, 422, 'lookup_value_missing'],
    [strict.id, { data: { customer: { email: 'not-an-email' } } }, 422, 'lookup_value_invalid'],
    [lenient.id, { phone: 'call me' }, 422, 'lookup_value_invalid'],
    [strict.id, JSON.parse(`${'{"a":'.repeat(70)}1${'}'.repeat(70)}`), 422, 'body_too_deep'],
    // U+0000 is judged where a real POST judges it: at the lookup (not as the API's refusal of the dry run's own body).
    [strict.id, { data: { customer: { email: 'a\u0000@acme.test' } } }, 422, 'lookup_value_invalid'],
    [strict.id, { data: { customer: { email: 'a\ud800@acme.test' } } }, 422, 'lookup_value_invalid'],
    [paused.id, { email: 'known@acme.test' }, 404, 'webhook_not_found'],
  ];
  for (const [id, body, status, code] of cases) {
    const res = await dry(id, body);
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.wouldAccept, false, `${code}: ${res.text}`);
    assert.equal(res.body.status, status, `${code}: ${res.text}`);
    assert.equal(res.body.code, code, res.text);
  }
  assert.equal((await dry(paused.id, { email: 'known@acme.test' })).body.active, false);
  // U+0000 where nothing reads it: accepted, as a real POST accepts it.
  const junk = await dry(lenient.id, { phone: '+1 415 555 0100', junk: 'x\u0000y' });
  assert.equal(junk.status, 200, junk.text);
  assert.equal(junk.body.wouldAccept, true, junk.text);

  // Bad requests to the endpoint itself.
  assertProblem(await s.request('POST', `/workflows/${strict.id}/webhook/test`, { token, body: {} }), 422);
  assertProblem(await s.request('POST', `/workflows/${strict.id}/webhook/test`, { token, body: { body: {}, extra: 1 } }), 422);
  assertProblem(await s.request('POST', '/workflows/999999/webhook/test', { token, body: { body: {} } }), 404, 'workflow_not_found');
  assertProblem(await dry(strict.id, { data: {} }, stranger.token), 404, 'workflow_not_found');
  assertProblem(await dry(strict.id, {}, viewer.token), 403, 'forbidden');

  const after = await Promise.all([contacts, workflowRuns, webhookEvents, auditLogs].map((tb) => rowCount(s, tb)));
  assert.deepEqual(after, before, 'nothing was written');
});

test('automation nodes keep their editor position; the engine ignores it; a bad position is refused', async (t) => {
  const s = await build(t, { engine: true });
  const token = await s.login(s.owner.email, s.owner.password);
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' }, position: { x: 0, y: 0 } },
      { id: 'tag', type: 'add_tags', data: { tags: ['placed'] }, position: { x: 120.5, y: -40 } },
    ],
    edges: [{ from: 't', to: 'tag' }],
  };
  const created = await s.request('POST', '/automations', { token, body: { name: 'placed', status: 'ACTIVE', graph } });
  assert.equal(created.status, 201, created.text);
  assert.deepEqual(created.body.graph.nodes[1].position, { x: 120.5, y: -40 });
  assert.deepEqual((await s.request('GET', `/automations/${created.body.id}`, { token })).body.graph, graph);

  const contact = (await s.request('POST', '/contacts', { token, body: { email: 'placed@acme.test' } })).body;
  const run = await s.request('POST', `/automations/${created.body.id}/runs`, { token, body: { contactId: contact.id } });
  assert.equal(run.status, 202, run.text);
  const deadline = Date.now() + 15_000;
  let status = '';
  while (Date.now() < deadline) {
    status = (await s.request('GET', `/runs/${run.body.runId}`, { token })).body.status;
    if (status === 'COMPLETED' || status === 'FAILED') break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(status, 'COMPLETED');
  assert.deepEqual((await s.request('GET', `/contacts/${contact.id}`, { token })).body.tags, ['placed']);

  for (const position of [{ x: 1 }, { x: 1, y: 2, z: 3 }, { x: '1', y: 2 }, { x: 1e9, y: 0 }, null]) {
    const bad = { ...graph, nodes: [graph.nodes[0], { ...graph.nodes[1], position }] };
    assertProblem(await s.request('POST', '/automations', { token, body: { name: 'bad', graph: bad } }), 422);
  }
});
