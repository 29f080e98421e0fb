/**
 * API keys through the real HTTP server: minting (POST /api-keys), listing, revoking,
 * authenticating with a key, plan and role rules, and the audit trail.
 * Contract: API.md sections 1 and 2, SPEC.md section 5.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { asc, count, eq, inArray, sql } from 'drizzle-orm';
import { allTables } from '../../src/core/db/dialect.js';
import { apiKeys, auditLogs, type Plan, type Role } from '../../src/core/db/schema.js';
import { setWorkspacePlan, createWorkspace } from '../../src/core/services/workspaces.js';
import { build, rowsOf, type HttpResult, type TestServer, assertProblem } from '../helpers.js';

const KEY_RE = /^svc_live_[0-9A-Za-z]{38}$/;
const ISO_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/;
const MINTABLE: Exclude<Role, 'OWNER'>[] = ['VIEWER', 'MEMBER', 'ADMIN'];

// ---------------------------------------------------------------------------------------
// helpers

function systemCtx(s: TestServer) {
  return { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
}

function ownerToken(s: TestServer): Promise<string> {
  return s.login(s.owner.email, s.owner.password);
}

function mint(s: TestServer, token: string, body: unknown): Promise<HttpResult> {
  return s.request('POST', '/api-keys', { token, body });
}

async function mintOk(s: TestServer, token: string, role: Role, name = `${role} key`): Promise<{ id: number; key: string; prefix: string }> {
  const res = await mint(s, token, { name, role });
  assert.equal(res.status, 201, `minting ${role}: ${res.text}`);
  return res.body;
}

/** GET /contacts: a read every role may do, so it tests authentication alone. */
function useKey(s: TestServer, key: string): Promise<HttpResult> {
  return s.request('GET', '/contacts', { token: key });
}

function listKeys(s: TestServer, token: string, query = ''): Promise<HttpResult> {
  return s.request('GET', `/api-keys${query}`, { token });
}

async function setPlan(s: TestServer, plan: Plan, workspaceId = s.workspaceId): Promise<void> {
  await setWorkspacePlan(systemCtx(s), workspaceId, plan);
}

async function keyCount(s: TestServer): Promise<number> {
  const [row] = await s.db.select({ n: count() }).from(apiKeys);
  return row?.n ?? 0;
}

function assertUnauthorized(res: HttpResult, code?: string): void {
  assertProblem(res, 401, code);
  assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer\b/);
}

/** Every text cell of every table, to prove a secret is not stored anywhere. */
async function allStoredText(s: TestServer): Promise<string[]> {
  const cells: string[] = [];
  for (const name of await allTables(s.store, s.db)) {
    for (const row of await rowsOf(s, sql`SELECT * FROM ${sql.identifier(name)}`)) {
      for (const v of Object.values(row)) if (v !== null && v !== undefined) cells.push(Buffer.isBuffer(v) ? v.toString('latin1') : String(v));
    }
  }
  return cells;
}

/** A syntactically valid key with a correct checksum that this server never minted. */
function flipChar(key: string, index: number): string {
  const c = key[index]!;
  const replacement = c === 'a' ? 'b' : 'a';
  return key.slice(0, index) + replacement + key.slice(index + 1);
}

// ---------------------------------------------------------------------------------------
// minting

test('POST /api-keys mints a key: 201 {id, name, role, key, prefix, createdAt}', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const res = await mint(s, token, { name: 'Zapier sync', role: 'MEMBER' });
  assert.equal(res.status, 201, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
  assert.deepEqual(Object.keys(res.body).sort(), ['createdAt', 'id', 'key', 'name', 'prefix', 'role']);
  const { id, name, role, key, prefix, createdAt } = res.body;
  assert.ok(Number.isSafeInteger(id) && id > 0, `id: ${id}`);
  assert.equal(name, 'Zapier sync');
  assert.equal(role, 'MEMBER');
  assert.match(key, KEY_RE);
  assert.equal(typeof prefix, 'string');
  assert.ok(prefix.startsWith('svc_live_') && key.startsWith(prefix) && prefix.length < key.length - 30, `prefix ${prefix} must identify, not reveal, the key`);
  assert.match(createdAt, ISO_RE);
  assert.ok(Math.abs(Date.parse(createdAt) - Date.now()) < 60_000);

  // Every key is new randomness.
  const other = await mintOk(s, token, 'MEMBER', 'Zapier sync');
  assert.notEqual(other.key, key);
  assert.notEqual(other.id, id);
});

test('the raw key is never returned again and is stored only as a hash', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const minted = await mintOk(s, token, 'VIEWER', 'reporting');

  const list = await listKeys(s, token);
  assert.equal(list.status, 200, list.text);
  assert.equal(list.body.nextCursor, null);
  assert.equal(list.body.data.length, 1);
  const item = list.body.data[0];
  assert.deepEqual(Object.keys(item).sort(), ['createdAt', 'id', 'lastUsedAt', 'name', 'prefix', 'revokedAt', 'role']);
  assert.deepEqual(item, {
    id: minted.id,
    name: 'reporting',
    role: 'VIEWER',
    prefix: minted.prefix,
    createdAt: item.createdAt,
    lastUsedAt: null,
    revokedAt: null,
  });
  const secretPart = minted.key.slice(minted.prefix.length);
  assert.ok(!list.text.includes(minted.key), 'GET /api-keys returns the raw key');
  assert.ok(!list.text.includes(secretPart), 'GET /api-keys returns the secret part of the key');

  // The api_keys row holds no column equal to the key ...
  const rows = await s.db.select().from(apiKeys);
  assert.equal(rows.length, 1);
  for (const [column, value] of Object.entries(rows[0]!)) {
    assert.notEqual(value, minted.key, `api_keys.${column} holds the raw key`);
  }
  // ... and no table anywhere stores the key or its secret part.
  for (const cell of await allStoredText(s)) {
    assert.ok(!cell.includes(minted.key), 'the raw key is stored');
    assert.ok(!cell.includes(secretPart), 'the secret part of the key is stored');
  }
});

test('a minted key authenticates as a Bearer token', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  for (const role of MINTABLE) {
    const { key } = await mintOk(s, token, role);
    const res = await useKey(s, key);
    assert.equal(res.status, 200, `${role} key: ${res.text}`);
    assert.deepEqual(res.body, { data: [], nextCursor: null });
  }
  // The key's role applies: an ADMIN key may manage keys, a VIEWER key may not.
  const admin = await mintOk(s, token, 'ADMIN');
  assert.equal((await listKeys(s, admin.key)).status, 200);
});

test('OWNER keys cannot be minted: 422 role_not_mintable', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  for (const plan of ['PRO', 'STARTER'] as const) {
    await setPlan(s, plan);
    const res = await mint(s, token, { name: 'root', role: 'OWNER' });
    assertProblem(res, 422, 'role_not_mintable');
    assert.equal(res.body.key, undefined);
  }
  assert.equal(await keyCount(s), 0, 'nothing was stored');
});

test('on STARTER only VIEWER keys can be minted; MEMBER and ADMIN need an upgrade (403 plan_upgrade_required)', async (t) => {
  const s = await build(t, { plan: 'STARTER' });
  const token = await ownerToken(s);
  const cases: { role: Role; status: number; code?: string }[] = [
    { role: 'VIEWER', status: 201 },
    { role: 'MEMBER', status: 403, code: 'plan_upgrade_required' },
    { role: 'ADMIN', status: 403, code: 'plan_upgrade_required' },
  ];
  for (const c of cases) {
    const res = await mint(s, token, { name: `${c.role} on starter`, role: c.role });
    if (c.status === 201) {
      assert.equal(res.status, 201, `${c.role}: ${res.text}`);
      assert.equal((await useKey(s, res.body.key)).status, 200);
    } else {
      assertProblem(res, c.status, c.code);
      assert.equal(res.body.key, undefined);
    }
  }
  const list = await listKeys(s, token);
  assert.deepEqual(
    list.body.data.map((k: { role: Role }) => k.role),
    ['VIEWER'],
  );
});

test('after a downgrade to STARTER, MEMBER and ADMIN keys stop authenticating until the plan is raised', async (t) => {
  const s = await build(t, { plan: 'GROWTH' });
  const token = await ownerToken(s);
  const keys = Object.fromEntries(await Promise.all(MINTABLE.map(async (role) => [role, (await mintOk(s, token, role)).key] as const))) as Record<
    (typeof MINTABLE)[number],
    string
  >;
  const expectAll = async (label: string, expected: Record<(typeof MINTABLE)[number], number>) => {
    for (const role of MINTABLE) {
      const res = await useKey(s, keys[role]);
      assert.equal(res.status, expected[role], `${label}, ${role} key: ${res.text}`);
      if (res.status === 401) assertUnauthorized(res);
    }
  };

  await expectAll('on GROWTH', { VIEWER: 200, MEMBER: 200, ADMIN: 200 });
  await setPlan(s, 'STARTER');
  await expectAll('after the downgrade', { VIEWER: 200, MEMBER: 401, ADMIN: 401 });
  // Still listed (not deleted), just not usable.
  assert.equal((await listKeys(s, token)).body.data.length, 3);
  await setPlan(s, 'GROWTH');
  await expectAll('after the upgrade back to GROWTH', { VIEWER: 200, MEMBER: 200, ADMIN: 200 });
  await setPlan(s, 'STARTER');
  await setPlan(s, 'PRO');
  await expectAll('after an upgrade to PRO', { VIEWER: 200, MEMBER: 200, ADMIN: 200 });
});

// ---------------------------------------------------------------------------------------
// who may manage keys

test('VIEWER and MEMBER callers get 403 forbidden on GET, POST and DELETE /api-keys', async (t) => {
  const s = await build(t);
  const target = await s.mintKey('VIEWER');
  const targetId = (await s.db.select({ id: apiKeys.id }).from(apiKeys))[0]!.id;
  const viewerUser = await s.userWithRole('VIEWER');
  const memberUser = await s.userWithRole('MEMBER');
  const callers = [
    { name: 'VIEWER key', token: await s.mintKey('VIEWER') },
    { name: 'MEMBER key', token: await s.mintKey('MEMBER') },
    { name: 'VIEWER user', token: viewerUser.token },
    { name: 'MEMBER user', token: memberUser.token },
  ];
  const operations = [
    { method: 'GET', path: '/api-keys' },
    { method: 'POST', path: '/api-keys', body: { name: 'sneaky', role: 'VIEWER' } },
    { method: 'DELETE', path: `/api-keys/${targetId}` },
  ];
  const keysBefore = await keyCount(s);
  for (const caller of callers) {
    for (const op of operations) {
      const res = await s.request(op.method, op.path, { token: caller.token, ...(op.body ? { body: op.body } : {}) });
      assert.equal(res.status, 403, `${caller.name} ${op.method} ${op.path}: ${res.status} ${res.text}`);
      assertProblem(res, 403, 'forbidden');
    }
  }
  assert.equal(await keyCount(s), keysBefore, 'no key was minted');
  assert.equal((await useKey(s, target)).status, 200, 'the target key was not revoked');
});

test('ADMIN callers manage keys and can mint up to ADMIN, but never OWNER', async (t) => {
  const s = await build(t);
  const adminUser = await s.userWithRole('ADMIN');
  const callers = [
    { name: 'ADMIN user', token: adminUser.token },
    { name: 'ADMIN key', token: await s.mintKey('ADMIN') },
  ];
  for (const caller of callers) {
    const listed = await listKeys(s, caller.token);
    assert.equal(listed.status, 200, `${caller.name}: ${listed.text}`);
    for (const role of MINTABLE) {
      const res = await mint(s, caller.token, { name: `${caller.name} made ${role}`, role });
      assert.equal(res.status, 201, `${caller.name} minting ${role}: ${res.text}`);
      assert.equal(res.body.role, role);
      assert.equal((await useKey(s, res.body.key)).status, 200);
    }
    assertProblem(await mint(s, caller.token, { name: 'owner', role: 'OWNER' }), 422, 'role_not_mintable');
    const victim = await mintOk(s, caller.token, 'VIEWER', `${caller.name} victim`);
    const del = await s.request('DELETE', `/api-keys/${victim.id}`, { token: caller.token });
    assert.equal(del.status, 204, `${caller.name} DELETE: ${del.text}`);
  }
});

// ---------------------------------------------------------------------------------------
// presenting keys

test('malformed and unknown API keys are 401', async (t) => {
  const s = await build(t);
  const real = await s.mintKey('VIEWER');
  assert.match(real, KEY_RE);
  const last = real.length - 1;
  const cases: { name: string; key: string }[] = [
    { name: 'wrong checksum', key: flipChar(real, last) },
    { name: 'one random character changed (checksum no longer matches)', key: flipChar(real, 12) },
    { name: 'truncated by one', key: real.slice(0, -1) },
    { name: 'truncated to the prefix', key: real.slice(0, 13) },
    { name: 'one character too many', key: `${real}a` },
    { name: 'prefix only', key: 'svc_live_' },
    { name: 'svc_live_ with garbage', key: 'svc_live_!!!not*a*key!!!' },
    { name: 'svc_live_ with 38 garbage base62 characters', key: `svc_live_${'A'.repeat(38)}` },
    { name: 'sandbox prefix on a live key', key: real.replace('svc_live_', 'svc_test_') },
    { name: 'unknown brand', key: real.replace('svc_live_', 'svc_prod_') },
    { name: 'upper-cased', key: real.toUpperCase() },
  ];
  for (const c of cases) {
    const res = await useKey(s, c.key);
    assert.equal(res.status, 401, `${c.name}: ${res.status} ${res.text}`);
    assertUnauthorized(res);
  }
  assert.equal((await useKey(s, real)).status, 200, 'the real key still works');
});

// ---------------------------------------------------------------------------------------
// revoking

test('DELETE /api-keys/:id answers 204 and the key is refused at once with 401 api_key_revoked', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const doomed = await mintOk(s, token, 'MEMBER', 'doomed');
  const kept = await mintOk(s, token, 'MEMBER', 'kept');
  assert.equal((await useKey(s, doomed.key)).status, 200);

  const del = await s.request('DELETE', `/api-keys/${doomed.id}`, { token });
  assert.equal(del.status, 204, del.text);
  assert.equal(del.text, '');

  const refused = await useKey(s, doomed.key);
  assertUnauthorized(refused, 'api_key_revoked');
  // Revocation applies to every use of the key, including managing keys with it.
  assertUnauthorized(await s.request('POST', '/contacts', { token: doomed.key, body: { email: 'x@acme.test' } }), 'api_key_revoked');
  assert.equal((await useKey(s, kept.key)).status, 200, 'other keys are unaffected');

  const list = await listKeys(s, token);
  const row = list.body.data.find((k: { id: number }) => k.id === doomed.id);
  assert.ok(row, 'a revoked key stays listed');
  assert.match(row.revokedAt, ISO_RE);
  assert.equal(list.body.data.find((k: { id: number }) => k.id === kept.id).revokedAt, null);
});

test("DELETE of another workspace's key id is 404 and that key keeps working", async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const other = await createWorkspace(systemCtx(s), { name: 'Other', plan: 'PRO' });
  const mine = await mintOk(s, token, 'VIEWER', 'mine');
  const theirs = await s.mintKey('ADMIN', other.id);
  const theirsId = (await s.db.select({ id: apiKeys.id }).from(apiKeys).where(eq(apiKeys.workspaceId, other.id)))[0]!.id;

  const res = await s.request('DELETE', `/api-keys/${theirsId}`, { token });
  assertProblem(res, 404);
  const unknown = await s.request('DELETE', '/api-keys/987654', { token });
  assertProblem(unknown, 404);
  // The same answer as for an id that does not exist: existence does not leak.
  assert.equal(res.body.code, unknown.body.code);

  assert.equal((await useKey(s, theirs)).status, 200, "the other workspace's key still works");
  assert.equal((await s.db.select({ revokedAt: apiKeys.revokedAt }).from(apiKeys).where(eq(apiKeys.id, theirsId)))[0]?.revokedAt, null);

  // Lists are per workspace too.
  const myList = await listKeys(s, token);
  assert.deepEqual(
    myList.body.data.map((k: { id: number }) => k.id),
    [mine.id],
  );
  const theirList = await listKeys(s, theirs);
  assert.deepEqual(
    theirList.body.data.map((k: { id: number }) => k.id),
    [theirsId],
  );
  // And the other workspace's ADMIN key cannot revoke ours either.
  assertProblem(await s.request('DELETE', `/api-keys/${mine.id}`, { token: theirs }), 404);
  assert.equal((await useKey(s, mine.key)).status, 200);
});

test('DELETE /api-keys/:id with an id that is not a positive integer is 404', async (t) => {
  const s = await build(t);
  const admin = await s.mintKey('ADMIN');
  for (const id of ['abc', '0', '-1', '1.5', '99999999999999999999', '%20', 'null', 'true', '1;2', '987654']) {
    const res = await s.request('DELETE', `/api-keys/${id}`, { token: admin });
    assert.equal(res.status, 404, `id ${JSON.stringify(id)}: ${res.status} ${res.text}`);
    assertProblem(res, 404);
  }
  assert.equal((await useKey(s, admin)).status, 200);
});

test('DELETE /api-keys/:id does not accept other spellings of an id (hex, exponent, sign, padding)', async (t) => {
  const s = await build(t);
  const admin = await s.mintKey('ADMIN');
  const victim = await s.mintKey('VIEWER');
  const id = (await s.db.select({ id: apiKeys.id }).from(apiKeys).where(eq(apiKeys.role, 'VIEWER')))[0]!.id;
  const spellings = [`0x${id.toString(16)}`, `0b${id.toString(2)}`, `${id}e0`, `${id}.0`, `+${id}`, `%20${id}`, `${id}%20`];
  const accepted: string[] = [];
  for (const spelling of spellings) {
    const res = await s.request('DELETE', `/api-keys/${spelling}`, { token: admin });
    if (res.status !== 404) accepted.push(`${spelling} → ${res.status}`);
  }
  assert.deepEqual(accepted, [], `ids are positive integers; these spellings were taken as id ${id}`);
  assert.equal((await useKey(s, victim)).status, 200, 'the key was revoked through an alias of its id');
});

test('lastUsedAt is set once the key has been used', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const minted = await mintOk(s, token, 'VIEWER', 'used');
  const unused = await mintOk(s, token, 'VIEWER', 'unused');
  const lastUsed = async (id: number) =>
    ((await listKeys(s, token)).body.data as { id: number; lastUsedAt: string | null }[]).find((k) => k.id === id)!.lastUsedAt;

  assert.equal(await lastUsed(minted.id), null);
  const before = Date.now();
  assert.equal((await useKey(s, minted.key)).status, 200);
  const at = await lastUsed(minted.id);
  assert.ok(at, 'lastUsedAt is set after use');
  assert.match(at, ISO_RE);
  assert.ok(Date.parse(at) >= before - 1000 && Date.parse(at) <= Date.now() + 1000, `lastUsedAt ${at} is the time of use`);
  assert.equal(await lastUsed(unused.id), null, 'an unused key stays unused');
});

// ---------------------------------------------------------------------------------------
// validation

test('invalid mint bodies are refused (422, or 400/415 for bodies that are not JSON)', async (t) => {
  const s = await build(t);
  const admin = await s.mintKey('ADMIN');
  const cases: { name: string; status: number; code: string; body?: unknown; raw?: string; contentType?: string; path?: string }[] = [
    { name: 'missing name', body: { role: 'VIEWER' }, status: 422, code: 'validation_failed', path: '/name' },
    { name: 'missing role', body: { name: 'k' }, status: 422, code: 'validation_failed', path: '/role' },
    { name: 'unknown role', body: { name: 'k', role: 'SUPERUSER' }, status: 422, code: 'validation_failed', path: '/role' },
    { name: 'lower-case role', body: { name: 'k', role: 'viewer' }, status: 422, code: 'validation_failed', path: '/role' },
    {
      name: 'unknown field',
      body: { name: 'k', role: 'VIEWER', expiresAt: '2030-01-01T00:00:00Z' },
      status: 422,
      code: 'validation_failed',
      path: '/expiresAt',
    },
    { name: 'name too long', body: { name: 'n'.repeat(101), role: 'VIEWER' }, status: 422, code: 'validation_failed', path: '/name' },
    { name: 'empty name', body: { name: '', role: 'VIEWER' }, status: 422, code: 'validation_failed', path: '/name' },
    { name: 'blank name', body: { name: '   ', role: 'VIEWER' }, status: 422, code: 'validation_failed', path: '/name' },
    { name: 'name is a number', body: { name: 7, role: 'VIEWER' }, status: 422, code: 'validation_failed', path: '/name' },
    { name: 'role is null', body: { name: 'k', role: null }, status: 422, code: 'validation_failed', path: '/role' },
    { name: 'body is an array', body: [{ name: 'k', role: 'VIEWER' }], status: 422, code: 'validation_failed' },
    { name: 'invalid JSON', raw: '{"name": "k", "role": ', contentType: 'application/json', status: 400, code: 'invalid_json' },
    { name: 'text/plain', raw: '{"name":"k","role":"VIEWER"}', contentType: 'text/plain', status: 415, code: 'unsupported_media_type' },
  ];
  for (const c of cases) {
    const res =
      c.raw !== undefined
        ? await s.request('POST', '/api-keys', { token: admin, raw: c.raw, headers: { 'content-type': c.contentType! } })
        : await mint(s, admin, c.body);
    assert.equal(res.status, c.status, `${c.name}: ${res.status} ${res.text}`);
    assertProblem(res, c.status, c.code);
    if (c.status === 422) {
      assert.ok(Array.isArray(res.body.errors) && res.body.errors.length > 0, `${c.name}: errors[] expected: ${res.text}`);
      if (c.path)
        assert.ok(
          res.body.errors.some((e: { path: string }) => e.path === c.path),
          `${c.name}: no error at ${c.path}: ${res.text}`,
        );
    }
  }
  // A 100-character name is the longest allowed.
  const longest = await mint(s, admin, { name: 'n'.repeat(100), role: 'VIEWER' });
  assert.equal(longest.status, 201, longest.text);
  // Only the ADMIN key that did the calling exists besides it: nothing invalid was stored.
  assert.equal(await keyCount(s), 2);
});

// ---------------------------------------------------------------------------------------
// audit

test('minting and revoking are audited, and the audit trail never holds the raw key', async (t) => {
  const s = await build(t);
  const token = await ownerToken(s);
  const minted = await mintOk(s, token, 'MEMBER', 'audited');
  const del = await s.request('DELETE', `/api-keys/${minted.id}`, { token });
  assert.equal(del.status, 204);

  const rows = await s.db
    .select()
    .from(auditLogs)
    .where(inArray(auditLogs.action, ['api_key.created', 'api_key.revoked']))
    .orderBy(asc(auditLogs.id));
  assert.deepEqual(
    rows.map((r) => r.action),
    ['api_key.created', 'api_key.revoked'],
  );
  for (const r of rows) {
    const metadata = JSON.stringify(r.metadata);
    assert.equal(r.workspaceId, s.workspaceId, r.action);
    assert.equal(r.actorType, 'USER', r.action);
    assert.equal(r.actorId, s.owner.id, r.action);
    assert.equal(r.targetType, 'api_key', r.action);
    assert.equal(r.targetId, String(minted.id), r.action);
    assert.ok(!metadata.includes(minted.key), `${r.action} metadata holds the raw key: ${metadata}`);
    assert.ok(!metadata.includes(minted.key.slice(minted.prefix.length)), `${r.action} metadata holds the secret part: ${metadata}`);
  }
  // Nothing else in the trail holds the key either.
  const everything = await s.db.select().from(auditLogs);
  assert.ok(!JSON.stringify(everything).includes(minted.key));
});
