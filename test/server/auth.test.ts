/**
 * Session authentication through the real HTTP server: POST /auth/login, /auth/refresh,
 * /auth/logout, the login throttle, and how bearer JWTs are accepted or refused.
 * Contract: API.md sections 1 (conventions) and 2 (auth and roles).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { and, eq, isNotNull } from 'drizzle-orm';
import { SignJWT } from 'jose';
import { randomBytes } from 'node:crypto';
import { auditLogs, memberships, sessions, users } from '../../src/core/db/schema.js';
import { PASSWORD_HASH_COST, setPasswordHashCost } from '../../src/core/crypto.js';
import { MAX_CHECKS_PER_ADDRESS } from '../../src/core/services/auth.js';
import { createUser } from '../../src/core/services/users.js';
import { createWorkspace } from '../../src/core/services/workspaces.js';
import { build, type HttpResult, type TestServer, assertProblem } from '../helpers.js';

const REFRESH_COOKIE = 'svc_refresh';
const JWT_RE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;

// ---------------------------------------------------------------------------------------
// helpers

function systemCtx(s: TestServer) {
  return { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
}

/** The Set-Cookie header for the refresh cookie, or undefined. */
function refreshSetCookie(res: HttpResult): string | undefined {
  return res.headers.getSetCookie().find((c) => c.startsWith(`${REFRESH_COOKIE}=`));
}

/** The value of the refresh cookie a response sets (throws when it sets none). */
function refreshCookieValue(res: HttpResult): string {
  const header = refreshSetCookie(res);
  assert.ok(header, `expected a ${REFRESH_COOKIE} cookie, got ${JSON.stringify(res.headers.getSetCookie())}`);
  const value = decodeURIComponent(header.split(';')[0]!.slice(REFRESH_COOKIE.length + 1));
  assert.ok(value.length > 0, 'the refresh cookie is empty');
  return value;
}

function cookieAttributes(header: string): Map<string, string> {
  const attrs = new Map<string, string>();
  for (const part of header.split(';').slice(1)) {
    const [k, ...v] = part.trim().split('=');
    attrs.set(k!.toLowerCase(), v.join('='));
  }
  return attrs;
}

function loginRequest(s: TestServer, body: Record<string, unknown>): Promise<HttpResult> {
  return s.request('POST', '/auth/login', { body });
}

function loginOwner(s: TestServer, extra: Record<string, unknown> = {}): Promise<HttpResult> {
  return loginRequest(s, { email: s.owner.email, password: s.owner.password, ...extra });
}

function refreshWith(s: TestServer, cookieValue: string | undefined): Promise<HttpResult> {
  return s.request('POST', '/auth/refresh', cookieValue === undefined ? {} : { headers: { cookie: `${REFRESH_COOKIE}=${cookieValue}` } });
}

/** A protected read that any role may do. */
function whoCanRead(s: TestServer, token: string | undefined, headers: Record<string, string> = {}): Promise<HttpResult> {
  return s.request('GET', '/contacts', { token, headers });
}

function assertUnauthorized(res: HttpResult, code?: string): void {
  assertProblem(res, 401, code);
  assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer\b/);
}

function b64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

function decodeJwtPart(token: string, index: 0 | 1): any {
  return JSON.parse(Buffer.from(token.split('.')[index]!, 'base64url').toString('utf8'));
}

interface JwtOptions {
  secret?: string;
  alg?: string;
  issuer?: string;
  /** Seconds since the epoch. */
  exp?: number;
  iat?: number;
  claims?: Record<string, unknown>;
}

/** A live session (refresh family) of the owner, as a login would store it; returns its id. */
async function ownerSession(s: TestServer): Promise<string> {
  const familyId = randomBytes(16).toString('base64url');
  const expiresAt = new Date(Date.now() + 86_400_000).toISOString();
  await s.store.transaction(async (tx) => {
    await tx.insert(sessions).values({ familyId, userId: s.owner.id, workspaceId: s.workspaceId, tokenHash: randomBytes(32).toString('hex'), expiresAt });
  });
  return familyId;
}

/** Signs an access token the way the server would (naming a live session), with any field overridden. */
async function signJwt(s: TestServer, opts: JwtOptions = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const jwt = new SignJWT({ wid: s.workspaceId, role: 'OWNER', sid: await ownerSession(s), ...(opts.claims ?? {}) })
    .setProtectedHeader({ alg: opts.alg ?? 'HS256', typ: 'JWT' })
    .setSubject(String(s.owner.id))
    .setIssuer(opts.issuer ?? 'svc')
    .setIssuedAt(opts.iat ?? now)
    .setExpirationTime(opts.exp ?? now + 900);
  return jwt.sign(new TextEncoder().encode(opts.secret ?? s.config.secrets.jwtSecret));
}

// ---------------------------------------------------------------------------------------
// login

test('login returns the token, user and workspace, and sets the refresh cookie', async (t) => {
  const s = await build(t);
  const res = await loginOwner(s);
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);

  const { token, ...rest } = res.body;
  assert.match(token, JWT_RE);
  assert.deepEqual(rest, {
    expiresIn: 900,
    user: { id: s.owner.id, email: s.owner.email, name: null, isSuperAdmin: true },
    workspace: { id: s.workspaceId, name: 'Acme', plan: 'PRO', role: 'OWNER' },
  });

  // One fixed algorithm, 15-minute lifetime, claims sub/wid/role.
  const header = decodeJwtPart(token, 0);
  const payload = decodeJwtPart(token, 1);
  assert.equal(header.alg, 'HS256');
  assert.equal(payload.sub, String(s.owner.id));
  assert.equal(payload.wid, s.workspaceId);
  assert.equal(payload.role, 'OWNER');
  assert.equal(payload.exp - payload.iat, 900);
  assert.ok(Math.abs(payload.exp - (Date.now() / 1000 + 900)) < 60, 'exp is about 15 minutes from now');

  // Refresh cookie: HttpOnly; SameSite=Strict; Path=/auth; not Secure on plain http.
  const setCookie = refreshSetCookie(res);
  assert.ok(setCookie, 'login sets the refresh cookie');
  const attrs = cookieAttributes(setCookie);
  assert.ok(attrs.has('httponly'), `HttpOnly missing: ${setCookie}`);
  assert.equal(attrs.get('samesite')?.toLowerCase(), 'strict', setCookie);
  assert.equal(attrs.get('path'), '/auth', setCookie);
  assert.ok(!attrs.has('secure'), `Secure set on plain http: ${setCookie}`);
  assert.ok(refreshCookieValue(res).length >= 32, 'the refresh token is long enough to be unguessable');
  assert.ok(!setCookie.includes(token), 'the refresh cookie is not the access token');

  // The token works.
  const read = await whoCanRead(s, token);
  assert.equal(read.status, 200, read.text);
});

test('the refresh cookie is Secure when the public URL is https', async (t) => {
  const s = await build(t, { env: { SVC_PUBLIC_URL: 'https://svc.example.test' } });
  const res = await loginOwner(s);
  assert.equal(res.status, 200, res.text);
  const attrs = cookieAttributes(refreshSetCookie(res) ?? '');
  assert.ok(attrs.has('secure'), `Secure missing: ${refreshSetCookie(res)}`);
  assert.ok(attrs.has('httponly'));
});

test('login matches the email case-insensitively', async (t) => {
  const s = await build(t);
  const res = await loginRequest(s, { email: '  OWNER@Acme.TEST ', password: s.owner.password });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.user.id, s.owner.id);
});

test('wrong password, unknown email and a password-less user all get the same 401 invalid_credentials without a cookie', async (t) => {
  const s = await build(t);
  // A user created without a password (e.g. by the CLI before `passwd`) cannot log in with any password.
  await createUser(systemCtx(s), { email: 'nopass@acme.test', workspaceId: s.workspaceId, role: 'MEMBER' });

  const cases = [
    { name: 'wrong password', body: { email: s.owner.email, password: 'not-the-password' } },
    { name: 'unknown email', body: { email: 'nobody@acme.test', password: s.owner.password } },
    { name: 'user without a password', body: { email: 'nopass@acme.test', password: 'whatever-password' } },
  ];
  const bodies: unknown[] = [];
  for (const c of cases) {
    const res = await loginRequest(s, c.body);
    assertUnauthorized(res, 'invalid_credentials');
    assert.equal(res.headers.getSetCookie().length, 0, `${c.name}: no cookie may be set`);
    assert.equal(res.body.token, undefined, c.name);
    bodies.push(res.body);
  }
  // Identical bodies: the response does not reveal whether the email exists.
  for (const b of bodies.slice(1)) assert.deepEqual(b, bodies[0]);
});

test('malformed login bodies are refused with 400, 415 or 422', async (t) => {
  const s = await build(t);
  const good = { email: s.owner.email, password: s.owner.password };
  const cases: { name: string; status: number; code: string; body?: unknown; raw?: string; contentType?: string; path?: string }[] = [
    { name: 'missing email', body: { password: good.password }, status: 422, code: 'validation_failed', path: '/email' },
    { name: 'missing password', body: { email: good.email }, status: 422, code: 'validation_failed', path: '/password' },
    { name: 'empty object', body: {}, status: 422, code: 'validation_failed' },
    { name: 'email is a number', body: { ...good, email: 42 }, status: 422, code: 'validation_failed', path: '/email' },
    { name: 'password is an array', body: { ...good, password: ['x'] }, status: 422, code: 'validation_failed', path: '/password' },
    { name: 'password is null', body: { ...good, password: null }, status: 422, code: 'validation_failed', path: '/password' },
    { name: 'workspaceId is a string', body: { ...good, workspaceId: '1' }, status: 422, code: 'validation_failed', path: '/workspaceId' },
    { name: 'workspaceId is zero', body: { ...good, workspaceId: 0 }, status: 422, code: 'validation_failed', path: '/workspaceId' },
    { name: 'unknown field', body: { ...good, remember: true }, status: 422, code: 'validation_failed', path: '/remember' },
    { name: 'body is an array', body: [good], status: 422, code: 'validation_failed' },
    { name: 'invalid JSON', raw: '{"email": "owner@acme.test",', contentType: 'application/json', status: 400, code: 'invalid_json' },
    { name: 'empty JSON body', raw: '', contentType: 'application/json', status: 400, code: 'invalid_json' },
    { name: 'text/plain', raw: JSON.stringify(good), contentType: 'text/plain', status: 415, code: 'unsupported_media_type' },
    {
      name: 'form-encoded',
      raw: `email=${good.email}&password=${good.password}`,
      contentType: 'application/x-www-form-urlencoded',
      status: 415,
      code: 'unsupported_media_type',
    },
  ];
  for (const c of cases) {
    const res =
      c.raw !== undefined
        ? await s.request('POST', '/auth/login', { raw: c.raw, headers: { 'content-type': c.contentType! } })
        : await s.request('POST', '/auth/login', { body: c.body });
    assert.equal(res.status, c.status, `${c.name}: ${res.text}`);
    assertProblem(res, c.status, c.code);
    assert.equal(res.headers.getSetCookie().length, 0, `${c.name}: no cookie`);
    if (c.status === 422) {
      assert.ok(Array.isArray(res.body.errors) && res.body.errors.length > 0, `${c.name}: errors[] expected`);
      if (c.path)
        assert.ok(
          res.body.errors.some((e: any) => e.path === c.path),
          `${c.name}: no error at ${c.path}: ${res.text}`,
        );
    }
    assert.ok(!res.text.includes(good.password), `${c.name}: the password is echoed`);
  }
});

// ---------------------------------------------------------------------------------------
// throttling

test('repeated failed logins for one email are throttled with 429 and Retry-After (configured limit)', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '3' } });
  assert.equal(s.config.loginRateLimit, 3);
  for (let i = 1; i <= 3; i++) {
    const res = await loginRequest(s, { email: s.owner.email, password: `wrong-password-${i}` });
    assertUnauthorized(res, 'invalid_credentials');
  }
  const limited = await loginRequest(s, { email: s.owner.email, password: 'wrong-password-4' });
  assertProblem(limited, 429);
  const retryAfter = Number(limited.headers.get('retry-after'));
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 15 * 60, `Retry-After: ${limited.headers.get('retry-after')}`);
  assert.equal(limited.headers.getSetCookie().length, 0);

  // While throttled, even the right password is refused: otherwise guessing could continue.
  const right = await loginOwner(s);
  assertProblem(right, 429);
  assert.equal(right.body.token, undefined);
  // Differently-cased spellings of the same address share the counter.
  const cased = await loginRequest(s, { email: 'Owner@ACME.test', password: s.owner.password });
  assertProblem(cased, 429);
});

test('failures spread over many emails from one source address are throttled too (five times the per-email limit)', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '3' } });
  for (let i = 1; i <= 15; i++) {
    assertUnauthorized(await loginRequest(s, { email: `spray${i}@acme.test`, password: 'sprayed-password' }), 'invalid_credentials');
  }
  const limited = await loginRequest(s, { email: 'spray16@acme.test', password: 'sprayed-password' });
  assertProblem(limited, 429);
  assert.ok(Number(limited.headers.get('retry-after')) >= 1, `Retry-After: ${limited.headers.get('retry-after')}`);
});

test('the default login throttle allows 10 failures in the window, then answers 429', async (t) => {
  const s = await build(t);
  assert.equal(s.config.loginRateLimit, 10);
  for (let i = 1; i <= 10; i++) {
    const res = await loginRequest(s, { email: 'ghost@acme.test', password: `guess-${i}-password` });
    assertUnauthorized(res, 'invalid_credentials');
  }
  const limited = await loginRequest(s, { email: 'ghost@acme.test', password: 'guess-11-password' });
  assertProblem(limited, 429);
  assert.ok(Number(limited.headers.get('retry-after')) >= 1, `Retry-After: ${limited.headers.get('retry-after')}`);
});

test('a burst of concurrent failed logins from one address is throttled as it goes: checks are counted before more start', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '3' } });
  // The product's scrypt cost (tens of milliseconds a check), not the suite's cheap one: an
  // unknown email is checked against a dummy hash made at that cost.
  setPasswordHashCost(PASSWORD_HASH_COST);
  t.after(() => setPasswordHashCost(1024));
  // Failures are counted as each check ends: without a bound on checks under way, all 200
  // would pass the throttle's check before the first failure was counted.
  const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => loginRequest(s, { email: 'burst@acme.test', password: `burst-guess-${i}` })));
  const checked = answers.filter((r) => r.status === 401);
  const refused = answers.filter((r) => r.status === 429);
  assert.equal(checked.length + refused.length, 200, JSON.stringify(answers.map((r) => r.status)));
  // At most the limit counted, plus MAX_CHECKS_PER_ADDRESS already under way when it was reached.
  assert.ok(checked.length <= 3 + MAX_CHECKS_PER_ADDRESS, `${checked.length} passwords were checked`);
  for (const r of refused) {
    assertProblem(r, 429, 'too_many_login_attempts');
    assert.ok(Number(r.headers.get('retry-after')) >= 1, `Retry-After: ${r.headers.get('retry-after')}`);
  }
});

test('concurrent logins that are right all succeed, from one address: they wait for a place, none is refused', async (t) => {
  const s = await build(t);
  // Hashes at the product's cost, so that checks overlap as they do in use.
  setPasswordHashCost(PASSWORD_HASH_COST);
  t.after(() => setPasswordHashCost(1024));
  const people = await Promise.all(Array.from({ length: 3 }, () => s.userWithRole('MEMBER')));
  const tries = Array.from({ length: 4 * MAX_CHECKS_PER_ADDRESS }, (_, i) => people[i % people.length]!);
  const answers = await Promise.all(tries.map((p) => loginRequest(s, { email: p.email, password: p.password })));
  assert.deepEqual(
    answers.map((r) => r.status),
    tries.map(() => 200),
  );
});

// ---------------------------------------------------------------------------------------
// refresh and logout

test('refresh rotates the refresh token and returns a working access token', async (t) => {
  const s = await build(t);
  const login = await loginOwner(s);
  const first = refreshCookieValue(login);

  const res = await refreshWith(s, first);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(Object.keys(res.body).sort(), ['expiresIn', 'token']);
  assert.equal(res.body.expiresIn, 900);
  assert.match(res.body.token, JWT_RE);
  assert.notEqual(res.body.token, login.body.token);

  const second = refreshCookieValue(res);
  assert.notEqual(second, first, 'the refresh token rotates');
  const attrs = cookieAttributes(refreshSetCookie(res)!);
  assert.ok(attrs.has('httponly'));
  assert.equal(attrs.get('samesite')?.toLowerCase(), 'strict');
  assert.equal(attrs.get('path'), '/auth');

  const read = await whoCanRead(s, res.body.token);
  assert.equal(read.status, 200, read.text);

  // The rotated token keeps rotating.
  const third = await refreshWith(s, second);
  assert.equal(third.status, 200, third.text);
  assert.notEqual(refreshCookieValue(third), second);
});

test('refresh without a cookie or with an unknown token is 401', async (t) => {
  const s = await build(t);
  for (const value of [undefined, 'not-a-real-refresh-token', '']) {
    const res = await refreshWith(s, value);
    assertProblem(res, 401);
    assert.equal(res.body.token, undefined);
    const set = refreshSetCookie(res);
    assert.ok(set === undefined || set.startsWith(`${REFRESH_COOKIE}=;`), `no new refresh token may be issued: ${set}`);
  }
});

test('reusing a rotated refresh token after the grace revokes the whole session family', async (t) => {
  const s = await build(t);
  const login = await loginOwner(s);
  const first = refreshCookieValue(login);
  const rotated = await refreshWith(s, first);
  assert.equal(rotated.status, 200, rotated.text);
  const newest = refreshCookieValue(rotated);
  // Past the 10 s grace that lets another tab of the same browser refresh at the same moment.
  const elevenSecondsAgo = new Date(Date.now() - 11_000).toISOString();
  await s.store.transaction(async (tx) => {
    await tx.update(sessions).set({ rotatedAt: elevenSecondsAgo }).where(isNotNull(sessions.rotatedAt));
  });

  // Someone replays the old token: refused ...
  const replay = await refreshWith(s, first);
  assertProblem(replay, 401);
  assert.equal(replay.body.token, undefined);
  // ... and the legitimate newest token of that family is dead too.
  const afterReuse = await refreshWith(s, newest);
  assertProblem(afterReuse, 401);
  // Replaying again stays refused.
  assertProblem(await refreshWith(s, first), 401);

  // Another login (another family) is unaffected.
  const other = await loginOwner(s);
  const otherRefresh = await refreshWith(s, refreshCookieValue(other));
  assert.equal(otherRefresh.status, 200, otherRefresh.text);
});

test('logout ends the session: the refresh token stops working and the cookie is cleared', async (t) => {
  const s = await build(t);
  const login = await loginOwner(s);
  const first = refreshCookieValue(login);
  // Rotate once so logout has to end the family, not just the token it was given.
  const rotated = await refreshWith(s, first);
  const current = refreshCookieValue(rotated);

  const out = await s.request('POST', '/auth/logout', { headers: { cookie: `${REFRESH_COOKIE}=${current}` } });
  assert.equal(out.status, 204, out.text);
  assert.equal(out.text, '');
  const cleared = refreshSetCookie(out);
  assert.ok(cleared, 'logout clears the refresh cookie');
  const attrs = cookieAttributes(cleared);
  assert.equal(attrs.get('path'), '/auth');
  assert.ok(
    attrs.get('max-age') === '0' || (attrs.has('expires') && Date.parse(attrs.get('expires')!) < Date.now()),
    `the cleared cookie must expire: ${cleared}`,
  );

  assertProblem(await refreshWith(s, current), 401);
  assertProblem(await refreshWith(s, first), 401);

  // Logging out without a session is harmless.
  const again = await s.request('POST', '/auth/logout');
  assert.equal(again.status, 204);
});

test('an API client without the cookie logs out with its access token: the session, its refresh token and the token end', async (t) => {
  const s = await build(t);
  const login = await loginOwner(s);
  const token = login.body.token as string;
  const out = await s.request('POST', '/auth/logout', { token });
  assert.equal(out.status, 204, out.text);
  assertProblem(await whoCanRead(s, token), 401);
  assertProblem(await refreshWith(s, refreshCookieValue(login)), 401);
  const audit = await s.store.db.select().from(auditLogs).where(eq(auditLogs.action, 'auth.logout'));
  assert.equal(audit.length, 1);
  assert.equal(audit[0]!.actorLabel, s.owner.email);
  // Another login (another session) goes on.
  const other = await loginOwner(s);
  assert.equal((await whoCanRead(s, other.body.token)).status, 200);

  // A bad access token is 401, as on any route; an API key has no session to end.
  assertProblem(await s.request('POST', '/auth/logout', { token: 'not.a.jwt' }), 401);
  const key = await s.request('POST', '/api-keys', { token: other.body.token, body: { name: 'k', role: 'VIEWER' } });
  assert.equal(key.status, 201, key.text);
  const byKey = await s.request('POST', '/auth/logout', { token: key.body.key });
  assertProblem(byKey, 422);
  assert.equal(byKey.body.code, 'not_a_session');
  assert.equal((await s.request('GET', '/contacts', { token: key.body.key })).status, 200);
});

test('the refresh cookie is refused when the browser says the request comes from another site or origin', async (t) => {
  const s = await build(t);
  const login = await loginOwner(s);
  const cookie = `${REFRESH_COOKIE}=${refreshCookieValue(login)}`;
  for (const site of ['cross-site', 'same-site']) {
    for (const path of ['/auth/refresh', '/auth/logout']) {
      const res = await s.request('POST', path, { headers: { cookie, 'sec-fetch-site': site } });
      assertProblem(res, 403);
      assert.equal(res.body.code, 'cross_origin_request');
    }
  }
  // The session is untouched: the console's own pages (same-origin) and clients without the header go on.
  const own = await s.request('POST', '/auth/refresh', { headers: { cookie, 'sec-fetch-site': 'same-origin' } });
  assert.equal(own.status, 200, own.text);
  const next = await refreshWith(s, refreshCookieValue(own));
  assert.equal(next.status, 200, next.text);
});

// ---------------------------------------------------------------------------------------
// bearer JWTs

test('a JWT signed like the server signs it is accepted (control for the forged-token cases)', async (t) => {
  const s = await build(t);
  const res = await whoCanRead(s, await signJwt(s));
  assert.equal(res.status, 200, res.text);
});

test('forged, tampered, expired and wrong-algorithm JWTs are 401 with WWW-Authenticate: Bearer', async (t) => {
  const s = await build(t);
  const now = Math.floor(Date.now() / 1000);
  const valid = await signJwt(s);
  const [h, p, sig] = valid.split('.') as [string, string, string];
  const claims = decodeJwtPart(valid, 1);

  const cases: { name: string; token: () => Promise<string> | string; code?: string }[] = [
    { name: 'alg none, no signature', token: () => `${b64url({ alg: 'none', typ: 'JWT' })}.${p}.` },
    { name: 'alg none, with the original signature', token: () => `${b64url({ alg: 'none', typ: 'JWT' })}.${p}.${sig}` },
    { name: 'signed with another secret', token: () => signJwt(s, { secret: 'another-secret-another-secret-another-secret' }) },
    { name: 'HS512 with the real secret', token: () => signJwt(s, { alg: 'HS512' }) },
    { name: 'HS384 with the real secret', token: () => signJwt(s, { alg: 'HS384' }) },
    { name: 'payload tampered after signing', token: () => `${h}.${b64url({ ...claims, role: 'OWNER', wid: claims.wid + 1 })}.${sig}` },
    { name: 'signature stripped', token: () => `${h}.${p}.` },
    { name: 'expired', token: () => signJwt(s, { iat: now - 3600, exp: now - 60 }) },
    { name: 'wrong issuer', token: () => signJwt(s, { issuer: 'someone-else' }) },
    { name: 'not a JWT at all', token: () => 'definitely-not-a-jwt' },
    { name: 'two segments', token: () => `${h}.${p}` },
  ];
  for (const c of cases) {
    const token = await c.token();
    const res = await whoCanRead(s, token);
    assert.equal(res.status, 401, `${c.name}: ${res.status} ${res.text}`);
    assertUnauthorized(res, c.code);
  }
});

test('missing or malformed Authorization headers are 401 with WWW-Authenticate: Bearer', async (t) => {
  const s = await build(t);
  const token = await signJwt(s);
  const cases: { name: string; authorization?: string }[] = [
    { name: 'no header' },
    { name: 'empty header', authorization: '' },
    { name: 'Basic scheme', authorization: `Basic ${Buffer.from(`${s.owner.email}:${s.owner.password}`).toString('base64')}` },
    { name: 'scheme without credentials', authorization: 'Bearer' },
    { name: 'scheme with only spaces', authorization: 'Bearer    ' },
    { name: 'token without scheme', authorization: token },
    { name: 'two tokens', authorization: `Bearer ${token} ${token}` },
    { name: 'misspelt scheme', authorization: `Bearr ${token}` },
  ];
  for (const c of cases) {
    const res = await s.request('GET', '/contacts', c.authorization === undefined ? {} : { headers: { authorization: c.authorization } });
    assert.equal(res.status, 401, `${c.name}: ${res.status} ${res.text}`);
    assertUnauthorized(res);
  }
});

test('a user removed from the workspace is refused at once, and cannot refresh', async (t) => {
  const s = await build(t);
  const login = await loginOwner(s);
  const token = login.body.token as string;
  assert.equal((await whoCanRead(s, token)).status, 200);

  await s.store.transaction(async (tx) => {
    await tx.delete(memberships).where(and(eq(memberships.userId, s.owner.id), eq(memberships.workspaceId, s.workspaceId)));
  });

  const res = await whoCanRead(s, token);
  assertUnauthorized(res);
  const refreshed = await refreshWith(s, refreshCookieValue(login));
  assertProblem(refreshed, 401);
  assert.equal(refreshed.body.token, undefined);
});

test('a user in several workspaces chooses one at login and cannot choose one they are not in', async (t) => {
  const s = await build(t);
  const ctx = systemCtx(s);
  const second = await createWorkspace(ctx, { name: 'Beta', plan: 'STARTER' });
  const stranger = await createWorkspace(ctx, { name: 'Gamma', plan: 'PRO' });
  // No password: adds a membership for the existing owner without re-hashing.
  await createUser(ctx, { email: s.owner.email, workspaceId: second.id, role: 'VIEWER' });

  // Without workspaceId: the first workspace joined.
  const first = await loginOwner(s);
  assert.equal(first.status, 200, first.text);
  assert.deepEqual(first.body.workspace, { id: s.workspaceId, name: 'Acme', plan: 'PRO', role: 'OWNER' });

  const chosen = await loginOwner(s, { workspaceId: second.id });
  assert.equal(chosen.status, 200, chosen.text);
  assert.deepEqual(chosen.body.workspace, { id: second.id, name: 'Beta', plan: 'STARTER', role: 'VIEWER' });
  assert.equal(decodeJwtPart(chosen.body.token, 1).wid, second.id);
  // The token acts in the chosen workspace with the role held there.
  assert.equal((await whoCanRead(s, chosen.body.token)).status, 200);
  const settings = await s.request('GET', '/api-keys', { token: chosen.body.token });
  assertProblem(settings, 403, 'forbidden');
  // A refresh stays in the chosen workspace.
  const refreshed = await refreshWith(s, refreshCookieValue(chosen));
  assert.equal(refreshed.status, 200, refreshed.text);
  assert.equal(decodeJwtPart(refreshed.body.token, 1).wid, second.id);

  // A workspace they do not belong to, and one that does not exist, are refused alike.
  const refused: HttpResult[] = [];
  for (const workspaceId of [stranger.id, 9999]) {
    const res = await loginOwner(s, { workspaceId });
    assert.ok(res.status === 401 || res.status === 403, `workspace ${workspaceId}: ${res.status} ${res.text}`);
    assertProblem(res, res.status);
    assert.equal(res.body.token, undefined);
    assert.equal(res.headers.getSetCookie().length, 0, 'no session may start');
    refused.push(res);
  }
  assert.equal(refused[0]!.status, refused[1]!.status);
  assert.equal(refused[0]!.body.code, refused[1]!.body.code);
});

// ---------------------------------------------------------------------------------------
// cross-cutting

test('every response carries X-Request-Id, echoed when the client sends a sane one', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '1' } });
  const good = { email: s.owner.email, password: s.owner.password };
  const login = await loginRequest(s, good);
  const cookie = `${REFRESH_COOKIE}=${refreshCookieValue(login)}`;
  const json = { 'content-type': 'application/json' };
  const cases: { name: string; method: string; path: string; status: number; opts?: Parameters<TestServer['request']>[2] }[] = [
    { name: 'login 200', method: 'POST', path: '/auth/login', status: 200, opts: { body: good } },
    { name: 'refresh 200', method: 'POST', path: '/auth/refresh', status: 200, opts: { headers: { cookie } } },
    { name: 'refresh 401', method: 'POST', path: '/auth/refresh', status: 401 },
    { name: 'logout 204', method: 'POST', path: '/auth/logout', status: 204 },
    { name: 'missing credentials 401', method: 'GET', path: '/contacts', status: 401 },
    { name: 'authenticated 200', method: 'GET', path: '/contacts', status: 200, opts: { token: login.body.token } },
    { name: 'invalid JSON 400', method: 'POST', path: '/auth/login', status: 400, opts: { raw: '{', headers: json } },
    { name: 'text/plain 415', method: 'POST', path: '/auth/login', status: 415, opts: { raw: 'x', headers: { 'content-type': 'text/plain' } } },
    { name: 'validation 422', method: 'POST', path: '/auth/login', status: 422, opts: { body: { email: 'x@acme.test' } } },
    { name: 'unknown route 404', method: 'GET', path: '/no/such/route', status: 404 },
    { name: 'wrong password 401', method: 'POST', path: '/auth/login', status: 401, opts: { body: { ...good, password: 'wrong-password' } } },
    { name: 'throttled 429', method: 'POST', path: '/auth/login', status: 429, opts: { body: { ...good, password: 'wrong-password' } } },
  ];
  let n = 0;
  for (const c of cases) {
    const id = `req-${++n}-abc`;
    const opts = c.opts ?? {};
    const res = await s.request(c.method, c.path, { ...opts, headers: { ...(opts.headers ?? {}), 'x-request-id': id } });
    assert.equal(res.status, c.status, `${c.name}: ${res.text}`);
    assert.equal(res.headers.get('x-request-id'), id, `${c.name}: the request id is not echoed`);
  }
  // Without a client id, the server makes one up, for successes and errors alike.
  for (const [method, path, status] of [
    ['GET', '/healthz', 200],
    ['GET', '/contacts', 401],
    ['GET', '/nowhere', 404],
    ['POST', '/auth/refresh', 401],
  ] as const) {
    const res = await s.request(method, path);
    assert.equal(res.status, status);
    assert.ok((res.headers.get('x-request-id') ?? '').length > 0, `${method} ${path}: no X-Request-Id`);
  }
  // Two requests without an id get different ids.
  const a = await s.request('GET', '/healthz');
  const b = await s.request('GET', '/healthz');
  assert.notEqual(a.headers.get('x-request-id'), b.headers.get('x-request-id'));
  // An id outside the accepted shape (here far too long) is replaced, not echoed.
  const odd = await s.request('GET', '/healthz', { headers: { 'x-request-id': 'x'.repeat(500) } });
  assert.ok(odd.headers.get('x-request-id') && odd.headers.get('x-request-id') !== 'x'.repeat(500));
});

test('no response body ever contains a password, a password hash, a refresh token or a token hash', async (t) => {
  const s = await build(t, { env: { SVC_LOGIN_RATE_LIMIT: '3' } });
  const responses: HttpResult[] = [];
  const send = async (method: string, path: string, opts?: Parameters<TestServer['request']>[2]) => {
    const res = await s.request(method, path, opts);
    responses.push(res);
    return res;
  };
  const wrongPassword = 'Wrong-Password-Sentinel-42';
  const refreshTokens: string[] = [];

  const login = await send('POST', '/auth/login', { body: { email: s.owner.email, password: s.owner.password } });
  assert.equal(login.status, 200);
  refreshTokens.push(refreshCookieValue(login));
  const rotated = await send('POST', '/auth/refresh', { headers: { cookie: `${REFRESH_COOKIE}=${refreshTokens[0]}` } });
  assert.equal(rotated.status, 200);
  refreshTokens.push(refreshCookieValue(rotated));
  await send('POST', '/auth/refresh', { headers: { cookie: `${REFRESH_COOKIE}=${refreshTokens[0]}` } }); // reuse → 401
  await send('POST', '/auth/logout', { headers: { cookie: `${REFRESH_COOKIE}=${refreshTokens[1]}` } });
  // Logout ended that session and its access token; sign in again for the reads below.
  const again = await send('POST', '/auth/login', { body: { email: s.owner.email, password: s.owner.password } });
  assert.equal(again.status, 200);
  refreshTokens.push(refreshCookieValue(again));
  const token = again.body.token as string;
  await send('POST', '/auth/login', { body: { email: s.owner.email, password: wrongPassword } });
  await send('POST', '/auth/login', { body: { email: 'nobody@acme.test', password: wrongPassword } });
  await send('POST', '/auth/login', { body: { email: s.owner.email, password: 12345 } });
  await send('POST', '/auth/login', { body: { email: s.owner.email, password: s.owner.password, extra: s.owner.password } });
  await send('POST', '/auth/login', { body: { email: s.owner.email, password: 'x'.repeat(2000) } });
  await send('POST', '/auth/login', { raw: `{"email":"${s.owner.email}","password":"${s.owner.password}"`, headers: { 'content-type': 'application/json' } });
  await send('POST', '/auth/login', { raw: `password=${s.owner.password}`, headers: { 'content-type': 'text/plain' } });
  await send('POST', '/auth/login', { body: { email: s.owner.email, password: wrongPassword } });
  await send('POST', '/auth/login', { body: { email: s.owner.email, password: wrongPassword } });
  await send('POST', '/auth/login', { body: { email: s.owner.email, password: wrongPassword } }); // throttled
  await send('GET', '/contacts', { token });
  await send('GET', '/api-keys', { token });
  await send('GET', '/contacts', { token: `${token}x` });

  const statuses = new Set(responses.map((r) => r.status));
  for (const st of [200, 204, 400, 401, 415, 422, 429]) assert.ok(statuses.has(st), `the scenario should produce a ${st}`);

  const sessionHashes = (await s.db.select({ tokenHash: sessions.tokenHash }).from(sessions)).map((r) => r.tokenHash);
  const passwordHashes = (await s.db.select({ passwordHash: users.passwordHash }).from(users).where(isNotNull(users.passwordHash))).map((r) => r.passwordHash!);
  assert.ok(sessionHashes.length >= 2 && passwordHashes.length >= 1);
  const secrets = [
    ['the owner password', s.owner.password],
    ['a submitted wrong password', wrongPassword],
    ['the JWT secret', s.config.secrets.jwtSecret],
    ...refreshTokens.map((v) => ['a refresh token', v]),
    ...sessionHashes.map((v) => ['a refresh-token hash', v]),
    ...passwordHashes.flatMap((v) => [
      ['a password hash', v],
      ['a password salt or key', v.split('$').at(-1)!],
      ['a password salt or key', v.split('$').at(-2)!],
    ]),
  ] as [string, string][];
  for (const res of responses) {
    for (const [what, secret] of secrets) {
      assert.ok(!res.text.includes(secret), `${what} appears in a ${res.status} response: ${res.text.slice(0, 300)}`);
    }
  }
});
