/**
 * Sessions end (issue 8 item 9) and login throttling (item 11), through the real server
 * and the real CLI: an absolute session lifetime that refreshing never extends, a password
 * change (POST /auth/password or `svc user passwd`) that ends the user's other sessions,
 * a removed membership that ends the user's sessions in that workspace, and a login
 * throttle per (email, address) plus a slower per-email limit, bounded in memory.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { and, eq, isNull } from 'drizzle-orm';
import { ConfigError, loadConfig } from '../../src/core/config.js';
import { auditLogs, memberships, sessions } from '../../src/core/db/schema.js';
import { LoginThrottle } from '../../src/core/services/auth.js';
import { createUser } from '../../src/core/services/users.js';
import { createWorkspace } from '../../src/core/services/workspaces.js';
import { RateLimitError } from '../../src/core/errors.js';
import { runCli } from '../cli/helpers.js';
import { assertProblem, build, type HttpResult, type TestServer } from '../helpers.js';

const COOKIE = 'svc_refresh';

function systemCtx(s: TestServer) {
  return { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
}

function cookieOf(res: HttpResult): { value: string; maxAge: number } {
  const header = res.headers.getSetCookie().find((c) => c.startsWith(`${COOKIE}=`));
  assert.ok(header, `no refresh cookie in ${res.status} ${res.text}`);
  const value = decodeURIComponent(header.split(';')[0]!.slice(COOKIE.length + 1));
  const maxAge = Number(/max-age=(\d+)/i.exec(header)?.[1]);
  return { value, maxAge };
}

async function login(s: TestServer, email: string, password: string, workspaceId?: number) {
  const res = await s.request('POST', '/auth/login', { body: { email, password, ...(workspaceId ? { workspaceId } : {}) } });
  assert.equal(res.status, 200, res.text);
  return { token: res.body.token as string, cookie: cookieOf(res).value, res };
}

function refresh(s: TestServer, cookie: string): Promise<HttpResult> {
  return s.request('POST', '/auth/refresh', { headers: { cookie: `${COOKIE}=${cookie}` } });
}

function read(s: TestServer, token: string): Promise<HttpResult> {
  return s.request('GET', '/contacts', { token });
}

function familyOf(_s: TestServer, token: string): string {
  return JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')).sid as string;
}

// ---------------------------------------------------------------------------------------
// absolute lifetime

test('a session has an absolute end fixed at login (sessionMaxDays); refreshing never moves it', async (t) => {
  const s = await build(t, { env: { SVC_SESSION_MAX_DAYS: '2' } });
  assert.equal(s.config.sessionMaxDays, 2);
  const before = Date.now();
  const first = await login(s, s.owner.email, s.owner.password);
  const family = familyOf(s, first.token);
  const [row] = await s.db.select().from(sessions).where(eq(sessions.familyId, family));
  assert.ok(row);
  const end = Date.parse(row.expiresAt);
  assert.ok(Math.abs(end - (before + 2 * 86_400_000)) < 60_000, `session ends ${row.expiresAt}`);
  const firstAge = cookieOf(first.res).maxAge;
  assert.ok(firstAge <= 2 * 86_400 && firstAge > 2 * 86_400 - 60, `cookie Max-Age ${firstAge}`);

  // Each rotation inherits the end; the cookie never outlives it.
  let cookie = first.cookie;
  for (let i = 0; i < 3; i++) {
    await new Promise((r) => setTimeout(r, 1100));
    const res = await refresh(s, cookie);
    assert.equal(res.status, 200, res.text);
    assert.equal(familyOf(s, res.body.token), family, 'a refreshed access token names the same session');
    const next = cookieOf(res);
    assert.ok(next.maxAge < firstAge, `Max-Age ${next.maxAge} must count down from ${firstAge}`);
    cookie = next.value;
  }
  const ends = await s.db.select({ expiresAt: sessions.expiresAt }).from(sessions).where(eq(sessions.familyId, family));
  assert.equal(ends.length, 4);
  assert.deepEqual(new Set(ends.map((e) => e.expiresAt)), new Set([row.expiresAt]), 'every token of the family ends when the login does');

  // When the end comes (moved into the past here), refresh and the access token both stop.
  const last = await refresh(s, cookie);
  assert.equal(last.status, 200, last.text);
  const token = last.body.token as string;
  cookie = cookieOf(last).value;
  assert.equal((await read(s, token)).status, 200);
  await s.store.transaction(async (tx) => {
    await tx
      .update(sessions)
      .set({ expiresAt: new Date(Date.now() - 1000).toISOString() })
      .where(eq(sessions.familyId, family));
  });
  assertProblem(await refresh(s, cookie), 401, 'invalid_refresh_token');
  assertProblem(await read(s, token), 401, 'session_ended');
});

test('sessionMaxDays defaults to 30 and refuses values outside 1..365', async (t) => {
  const s = await build(t);
  assert.equal(s.config.sessionMaxDays, 30);
  for (const bad of ['0', '366', 'forever', '1.5']) {
    assert.throws(
      () => loadConfig({ dataDir: s.dataDir }, { SVC_SESSION_MAX_DAYS: bad }),
      (err: unknown) => err instanceof ConfigError && /sessionMaxDays/.test(String(err)),
    );
  }
});

// ---------------------------------------------------------------------------------------
// POST /auth/password

test('POST /auth/password: 204, the new password works, every other session of the user ends, this one stays', async (t) => {
  const s = await build(t);
  const u = await s.userWithRole('MEMBER');
  const here = await login(s, u.email, u.password);
  const elsewhere = await login(s, u.email, u.password);
  const owner = await login(s, s.owner.email, s.owner.password);

  const res = await s.request('POST', '/auth/password', { token: here.token, body: { currentPassword: u.password, newPassword: 'a-brand-new-password' } });
  assert.equal(res.status, 204, res.text);
  assert.equal(res.text, '');

  // The other session is over: its access token and its refresh token.
  assertProblem(await read(s, elsewhere.token), 401, 'session_ended');
  assertProblem(await refresh(s, elsewhere.cookie), 401);
  assertProblem(await read(s, u.token), 401, 'session_ended'); // the helper's own login, too
  // This one goes on, and refreshes.
  assert.equal((await read(s, here.token)).status, 200);
  const refreshed = await refresh(s, here.cookie);
  assert.equal(refreshed.status, 200, refreshed.text);
  assert.equal((await read(s, refreshed.body.token)).status, 200);
  // Another user's session is untouched.
  assert.equal((await read(s, owner.token)).status, 200);

  assertProblem(await s.request('POST', '/auth/login', { body: { email: u.email, password: u.password } }), 401, 'invalid_credentials');
  await login(s, u.email, 'a-brand-new-password');

  const audit = await s.db.select().from(auditLogs).where(eq(auditLogs.action, 'user.password_changed'));
  assert.equal(audit.length, 1);
  assert.equal(audit[0]!.actorType, 'USER');
  assert.equal(audit[0]!.targetId, String(u.id));
  assert.equal(audit[0]!.workspaceId, s.workspaceId);
  assert.ok(!JSON.stringify(audit[0]).includes('a-brand-new-password'));
});

test('POST /auth/password refuses a wrong current password (401), a weak new one (422), bad bodies, API keys and anonymous callers', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '3' } });
  const u = await s.userWithRole('VIEWER');
  const other = await login(s, u.email, u.password);
  const send = (body: unknown, token: string | undefined = u.token) => s.request('POST', '/auth/password', { token, body });

  const weak = await send({ currentPassword: u.password, newPassword: 'short' });
  assertProblem(weak, 422, 'invalid_password');
  assert.deepEqual(
    weak.body.errors.map((e: { path: string }) => e.path),
    ['/newPassword'],
  );
  // Spaces count in a passphrase, but a password of nothing else is refused.
  const blank = await send({ currentPassword: u.password, newPassword: ' '.repeat(12) });
  assertProblem(blank, 422, 'invalid_password');
  assert.match(blank.body.errors[0].message, /only spaces/);
  assertProblem(await send({ currentPassword: u.password }), 422);
  assertProblem(await send({ newPassword: 'a-brand-new-password' }), 422);
  assertProblem(await send({ currentPassword: u.password, newPassword: 'a-brand-new-password', extra: 1 }), 422);
  assertProblem(await send({ currentPassword: 42, newPassword: 'a-brand-new-password' }), 422);
  assertProblem(
    await s.request('POST', '/auth/password', { token: u.token, raw: '{"currentPassword":', headers: { 'content-type': 'application/json' } }),
    400,
  );
  assertProblem(await s.request('POST', '/auth/password', { body: { currentPassword: u.password, newPassword: 'a-brand-new-password' } }), 401);
  assertProblem(await send({ currentPassword: u.password, newPassword: 'a-brand-new-password' }, await s.mintKey('ADMIN')), 403, 'forbidden');

  const wrong = await send({ currentPassword: 'not-the-password', newPassword: 'a-brand-new-password' });
  assertProblem(wrong, 401, 'invalid_credentials');
  // Nothing changed: the old password still logs in, the other session still works.
  await login(s, u.email, u.password);
  assert.equal((await read(s, other.token)).status, 200);
  // Guessing the current password with a stolen access token is throttled like logins
  // (the successful login above cleared this address's count for the email).
  for (let i = 2; i <= 4; i++) assertProblem(await send({ currentPassword: `guess-${i}-password`, newPassword: 'a-brand-new-password' }), 401);
  const limited = await send({ currentPassword: 'guess-5-password', newPassword: 'a-brand-new-password' });
  assertProblem(limited, 429);
  assert.ok(Number(limited.headers.get('retry-after')) >= 1);
  assert.equal((await s.db.select().from(auditLogs).where(eq(auditLogs.action, 'user.password_changed'))).length, 0);
});

test('svc user passwd ends every session of the user, on a running server', async (t) => {
  const s = await build(t);
  const u = await s.userWithRole('ADMIN');
  const a = await login(s, u.email, u.password);
  const b = await login(s, u.email, u.password);
  const owner = await login(s, s.owner.email, s.owner.password);
  const r = await runCli(s.dataDir, ['user', 'passwd', u.email, '--password-stdin', '--json'], {
    stdin: 'changed-by-the-operator\n',
    ...(s.config.databaseUrl ? { env: { SVC_DATABASE_URL: s.config.databaseUrl } } : {}),
  });
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(r.json(), { id: u.id, email: u.email });
  for (const session of [a, b, { token: u.token, cookie: undefined }]) {
    assertProblem(await read(s, session.token), 401, 'session_ended');
    if (session.cookie) assertProblem(await refresh(s, session.cookie), 401);
  }
  assert.equal((await read(s, owner.token)).status, 200, "another user's session stays");
  await login(s, u.email, 'changed-by-the-operator');
  const audit = await s.db.select().from(auditLogs).where(eq(auditLogs.action, 'user.password_changed'));
  assert.equal(audit.length, 1);
  assert.equal(audit[0]!.actorType, 'CLI');
  // In the log of the user's workspace, which its admins read (GET /audit-logs).
  assert.equal(audit[0]!.workspaceId, s.workspaceId);
  const feed = await s.request('GET', '/audit-logs?action=user.password_changed', { token: owner.token });
  assert.equal(feed.status, 200, feed.text);
  assert.deepEqual(
    feed.body.data.map((e: { action: string; actor: { type: string }; target: { id: number } }) => [e.action, e.actor.type, e.target.id]),
    [['user.password_changed', 'CLI', u.id]],
  );
});

// ---------------------------------------------------------------------------------------
// removing a membership

test("removing a membership ends the user's sessions in that workspace; being added again does not revive them", async (t) => {
  const s = await build(t);
  const ownerToken = await s.login(s.owner.email, s.owner.password);
  const u = await s.userWithRole('MEMBER');
  const second = await createWorkspace(systemCtx(s), { name: 'Second', plan: 'PRO' });
  await createUser(systemCtx(s), { email: u.email, workspaceId: second.id, role: 'VIEWER' });
  const inMain = await login(s, u.email, u.password, s.workspaceId);
  const inSecond = await login(s, u.email, u.password, second.id);

  const [membership] = await s.db
    .select({ id: memberships.id })
    .from(memberships)
    .where(and(eq(memberships.userId, u.id), eq(memberships.workspaceId, s.workspaceId)));
  const membershipId = membership!.id;
  const removed = await s.request('DELETE', `/memberships/${membershipId}`, { token: ownerToken });
  assert.equal(removed.status, 204, removed.text);

  const live = await s.db
    .select({ workspaceId: sessions.workspaceId })
    .from(sessions)
    .where(and(eq(sessions.userId, u.id), isNull(sessions.revokedAt)));
  assert.deepEqual([...new Set(live.map((r) => r.workspaceId))], [second.id], 'only the sessions in the other workspace are live');

  // Added back (by the operator), the old session of that workspace stays ended.
  await createUser(systemCtx(s), { email: u.email, workspaceId: s.workspaceId, role: 'MEMBER' });
  assertProblem(await read(s, inMain.token), 401, 'session_ended');
  assertProblem(await refresh(s, inMain.cookie), 401);
  assert.equal((await read(s, inSecond.token)).status, 200);
  assert.equal((await refresh(s, inSecond.cookie)).status, 200);
});

// ---------------------------------------------------------------------------------------
// login throttling

function loginFrom(s: TestServer, address: string, email: string, password: string) {
  return s.app.inject({ method: 'POST', url: '/auth/login', payload: { email, password }, remoteAddress: address });
}

test('login throttle: per (email, address) first, then a slower per-email limit across addresses', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '3' } });
  const email = s.owner.email;
  for (let i = 0; i < 3; i++) assert.equal((await loginFrom(s, '203.0.113.1', email, `wrong-${i}-password`)).statusCode, 401);
  const first = await loginFrom(s, '203.0.113.1', email, s.owner.password);
  assert.equal(first.statusCode, 429, first.body);
  assert.ok(Number(first.headers['retry-after']) >= 1);

  // Another address is not held back by the first one's failures, and can log in.
  assert.equal((await loginFrom(s, '203.0.113.2', email, s.owner.password)).statusCode, 200);
  for (let i = 0; i < 3; i++) assert.equal((await loginFrom(s, '203.0.113.2', email, `wrong-b${i}-password`)).statusCode, 401);
  assert.equal((await loginFrom(s, '203.0.113.2', email, 'wrong-b4-password')).statusCode, 429);

  // Six failures for the email (twice the per-address limit) hold it on every address.
  const third = await loginFrom(s, '203.0.113.3', email, s.owner.password);
  assert.equal(third.statusCode, 429, third.body);
  const retry = Number(third.headers['retry-after']);
  assert.ok(retry > 15 * 60 && retry <= 60 * 60, `the per-email window is an hour; Retry-After ${retry}`);

  // The first address may still try other emails.
  assert.equal((await loginFrom(s, '203.0.113.1', 'someone-else@acme.test', 'whatever-password')).statusCode, 401);
});

test('login throttle: a bounded map that evicts the least recently failed keys and forgets expired ones', async () => {
  const windowMs = 60_000;
  const throttle = new LoginThrottle(2, windowMs, { maxEntries: 9 });
  const t0 = 1_000_000;
  // A target is guessed at from one address...
  await throttle.fail('victim@acme.test', '198.51.100.7', t0);
  await throttle.fail('victim@acme.test', '198.51.100.7', t0 + 1);
  await assert.rejects(throttle.check('victim@acme.test', '198.51.100.7', t0 + 2), RateLimitError);
  // ...while a flood of made-up emails from many addresses passes through the map.
  for (let i = 0; i < 100; i++) await throttle.fail(`made-up-${i}@acme.test`, `192.0.2.${i % 250}`, t0 + 10 + i);
  assert.ok(throttle.size <= 9, `the map holds ${throttle.size} keys`);
  // The newest entries are kept (the flood's last email is still counted)...
  await throttle.fail('made-up-99@acme.test', '192.0.2.99', t0 + 200);
  await assert.rejects(throttle.check('made-up-99@acme.test', '192.0.2.99', t0 + 201), RateLimitError);
  // ...and nothing is wiped wholesale: the map never emptied.
  assert.ok(throttle.size > 0);

  // Expiry: once the window has passed, a key is allowed again and dropped when read.
  const fresh = new LoginThrottle(2, windowMs);
  await fresh.fail('a@acme.test', '198.51.100.1', t0);
  await fresh.fail('a@acme.test', '198.51.100.1', t0 + 1);
  await assert.rejects(fresh.check('a@acme.test', '198.51.100.1', t0 + 2), RateLimitError);
  assert.equal(fresh.size, 3);
  // The per-address pair window has passed; the per-email window (4x) has not, but it needs 4 failures.
  await fresh.check('a@acme.test', '198.51.100.1', t0 + windowMs + 2);
  assert.equal(fresh.size, 1, 'the pair and address keys were dropped, the email key remains');
  await fresh.check('a@acme.test', '198.51.100.1', t0 + 4 * windowMs + 2);
  assert.equal(fresh.size, 0);
});
