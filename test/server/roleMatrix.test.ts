/**
 * The role matrix of API.md section 2, walked table-driven: every authenticated endpoint
 * with every kind of caller. Allowed callers must get a 2xx (a 404 or 422 there means the
 * case or the server is wrong, and fails the test like a 403 would); callers below the
 * required role get 403 `forbidden`; another workspace's key on an id of this workspace
 * gets 404; no credential gets 401. Every refused request must leave the database as it was.
 */
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { test } from 'node:test';
import { and, eq, inArray, max, notExists, sql } from 'drizzle-orm';
import { allTables } from '../../src/core/db/dialect.js';
import { apiKeys, deliveryAttempts, invitations, memberships, webhookEvents, type Role } from '../../src/core/db/schema.js';
import { createUser } from '../../src/core/services/users.js';
import { assertProblem, build, rowsOf, type HttpResult, type TestServer } from '../helpers.js';

type Min = Role | 'SUPER';

interface Prepared {
  path: string;
  body?: unknown;
  /** The path names an id of the main workspace (another workspace's key must get 404). */
  idAddressed: boolean;
}

interface Case {
  name: string;
  method: 'GET' | 'POST' | 'PATCH' | 'PUT' | 'DELETE';
  /** Minimum role per API.md (SUPER: super-admin users only). */
  min: Min;
  /**
   * The role the route itself requires, where the operation's stricter rule (granting,
   * changing or removing an OWNER) is checked after the id is looked up.
   */
  routeMin?: Role;
  /** Whether the request changes state when allowed. */
  write: boolean;
  /** Only signed-in users may call it (API keys get 403 forbidden whatever their role). */
  usersOnly?: boolean;
  prepare: (caller: Caller) => Promise<Prepared> | Prepared;
}

interface Caller {
  name: string;
  token: string | undefined;
  kind: 'user' | 'key' | 'otherKey' | 'none';
  role: Role | undefined;
  superAdmin: boolean;
  /** A user's password (to call POST /auth/password). */
  password?: string;
}

const RANK: Record<Role, number> = { VIEWER: 1, MEMBER: 2, ADMIN: 3, OWNER: 4 };

let seq = 0;
const uniq = (): string => `${Date.now().toString(36)}${++seq}`;

/**
 * A hash of every row of every table (minus key usage stamps, which any authenticated request
 * may touch), on either store: each table's rows as sorted JSON lines, so that no row order
 * (SQLite's rowid, PostgreSQL's heap) enters it.
 */
async function snapshot(s: TestServer): Promise<{ counts: Record<string, number>; hash: string; audit: number }> {
  const counts: Record<string, number> = {};
  const h = createHash('sha256');
  for (const table of await allTables(s.store, s.db)) {
    const rows = await rowsOf(s, sql`SELECT * FROM ${sql.identifier(table)}`);
    counts[table] = rows.length;
    const lines = rows.map((row) => {
      delete row.last_used_at;
      return JSON.stringify(row, (_k, v) => (Buffer.isBuffer(v) ? v.toString('hex') : typeof v === 'bigint' ? String(v) : v));
    });
    for (const line of lines.sort()) h.update(table + line);
  }
  return { counts, hash: h.digest('hex'), audit: counts.audit_logs ?? 0 };
}

/**
 * Waits until background deliveries (test emails, invitation emails) have settled: none is
 * in flight, and every invitation's email has been recorded (its delivery starts after the
 * answer, so its row may not exist yet when the answer arrives).
 */
async function settle(s: TestServer): Promise<void> {
  const started = Date.now();
  for (;;) {
    const pending = await s.db
      .select({ id: deliveryAttempts.id })
      .from(deliveryAttempts)
      .where(inArray(deliveryAttempts.status, ['QUEUED', 'SENDING']))
      .limit(1);
    const unsent = await s.db
      .select({ id: invitations.id })
      .from(invitations)
      .where(notExists(s.db.select({ id: deliveryAttempts.id }).from(deliveryAttempts).where(eq(deliveryAttempts.to, invitations.email))))
      .limit(1);
    if (pending.length === 0 && unsent.length === 0) return;
    if (Date.now() - started > 5_000) assert.fail('deliveries did not settle');
    await new Promise((r) => setTimeout(r, 20));
  }
}

type Expect = { kind: 'allowed' } | { kind: 'status'; status: number; code?: string };

function expected(c: Case, caller: Caller, idAddressed: boolean): Expect {
  if (caller.kind === 'none') return { kind: 'status', status: 401 };
  if (c.min === 'SUPER') return caller.kind === 'user' && caller.superAdmin ? { kind: 'allowed' } : { kind: 'status', status: 403, code: 'forbidden' };
  if (c.usersOnly && caller.kind !== 'user') return { kind: 'status', status: 403, code: 'forbidden' };
  const enough = RANK[caller.role!] >= RANK[c.min];
  if (caller.kind === 'otherKey') {
    // An id of this workspace does not exist for another workspace: 404 once the route's own gate is passed.
    if (idAddressed && RANK[caller.role!] >= RANK[c.routeMin ?? c.min]) return { kind: 'status', status: 404 };
    if (!enough) return { kind: 'status', status: 403, code: 'forbidden' };
    return idAddressed ? { kind: 'status', status: 404 } : { kind: 'allowed' };
  }
  return enough ? { kind: 'allowed' } : { kind: 'status', status: 403, code: 'forbidden' };
}

function describe(res: HttpResult): string {
  return `${res.status} ${res.text.slice(0, 300)}`;
}

test('role matrix: every authenticated endpoint with every caller (API.md section 2)', async (t) => {
  const s = await build(t);
  const main = s.workspaceId;
  const sysCtx = { db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null };
  const superToken = await s.login(s.owner.email, s.owner.password);
  const other = await s.otherWorkspace();
  const spare = await s.otherWorkspace();

  const asCaller = async (role: Role, name: string): Promise<Caller> => {
    const u = await s.userWithRole(role);
    return { name, token: u.token, kind: 'user', role, superAdmin: false, password: u.password };
  };
  const callers: Caller[] = [
    await asCaller('VIEWER', 'VIEWER user'),
    await asCaller('MEMBER', 'MEMBER user'),
    await asCaller('ADMIN', 'ADMIN user'),
    await asCaller('OWNER', 'OWNER user'),
    { name: 'super-admin OWNER', token: superToken, kind: 'user', role: 'OWNER', superAdmin: true, password: s.owner.password },
    { name: 'VIEWER key', token: await s.mintKey('VIEWER'), kind: 'key', role: 'VIEWER', superAdmin: false },
    { name: 'MEMBER key', token: await s.mintKey('MEMBER'), kind: 'key', role: 'MEMBER', superAdmin: false },
    { name: 'ADMIN key', token: await s.mintKey('ADMIN'), kind: 'key', role: 'ADMIN', superAdmin: false },
    { name: 'ADMIN key of another workspace', token: await s.mintKey('ADMIN', other.workspaceId), kind: 'otherKey', role: 'ADMIN', superAdmin: false },
    { name: 'no credential', token: undefined, kind: 'none', role: undefined, superAdmin: false },
  ];

  // --- fixtures, made with the super-admin OWNER ---
  async function ok(method: string, path: string, body?: unknown): Promise<any> {
    const res = await s.request(method, path, { token: superToken, ...(body !== undefined ? { body } : {}) });
    assert.ok(res.status >= 200 && res.status < 300, `fixture ${method} ${path}: ${describe(res)}`);
    return res.body;
  }
  const newContact = async (tags?: string[]): Promise<number> =>
    (await ok('POST', '/contacts', { email: `c-${uniq()}@acme.test`, ...(tags ? { tags } : {}) })).id as number;
  const newTemplate = async (): Promise<number> =>
    (await ok('POST', '/templates', { name: `t-${uniq()}`, channel: 'EMAIL', content: { subject: 'Hi {{ contact.firstName }}', text: 'Hello' } })).id as number;
  const newWorkflow = async (): Promise<number> =>
    (await ok('POST', '/workflows', { name: `w-${uniq()}`, steps: [{ type: 'add_tags', tags: ['x'] }] })).id as number;
  const newKeyId = async (): Promise<number> => {
    await s.mintKey('VIEWER');
    const [row] = await s.db.select({ id: max(apiKeys.id) }).from(apiKeys);
    assert.ok(row?.id);
    return row.id;
  };
  const newUser = async (role: Role, workspaceId: number): Promise<{ email: string; membershipId: number }> => {
    const email = `m-${uniq()}@acme.test`;
    const u = await createUser(sysCtx, { email, password: 'matrix-password-1', workspaceId, role });
    const [m] = await s.db
      .select({ id: memberships.id })
      .from(memberships)
      .where(and(eq(memberships.userId, u.id), eq(memberships.workspaceId, workspaceId)));
    assert.ok(m);
    return { email, membershipId: m.id };
  };

  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
      { id: 'a', type: 'add_tags', data: { tags: ['auto'] } },
    ],
    edges: [{ from: 't', to: 'a' }],
  };
  const newAutomation = async (status = 'DRAFT'): Promise<number> => (await ok('POST', '/automations', { name: `a-${uniq()}`, status, graph })).id as number;
  const contactId = await newContact(['vip']);
  const automationId = await newAutomation('ACTIVE');
  const templateId = await newTemplate();
  const workflowId = await newWorkflow();
  const hook = await ok('POST', '/workflows', { name: 'hooked', triggerSource: 'WEBHOOK', webhook: { lookup: 'email', createIfNotFound: true }, steps: [] });
  const activated = await ok('PATCH', `/workflows/${hook.id}`, { status: 'ACTIVE' });
  const inbound = await s.request('POST', new URL(activated.webhook.url as string).pathname, { body: { email: `in-${uniq()}@acme.test` } });
  assert.equal(inbound.status, 202, describe(inbound));
  const runId = inbound.body.runId as number;
  const eventId = (await s.db.select({ id: max(webhookEvents.id) }).from(webhookEvents))[0]?.id;
  assert.ok(eventId);
  const mail = await ok('POST', '/messages/test-email', { to: 'probe@example.com', subject: 'Probe', text: 'probe' });
  const attemptId = mail.deliveryAttemptId as number;

  const fixed =
    (path: string, idAddressed = false, body?: unknown) =>
    (): Prepared => ({ path, idAddressed, ...(body !== undefined ? { body } : {}) });

  const cases: Case[] = [
    // auth: a user changes their own password (kept the same here, so later cases still log in)
    {
      name: 'change own password',
      method: 'POST',
      min: 'VIEWER',
      usersOnly: true,
      write: true,
      prepare: (caller) => ({
        path: '/auth/password',
        idAddressed: false,
        body: { currentPassword: caller.password ?? 'not-a-user-password', newPassword: caller.password ?? 'not-a-user-password' },
      }),
    },
    { name: 'who am I', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/auth/me') },
    // contacts and tags
    { name: 'list contacts', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/contacts') },
    { name: 'get contact', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/contacts/${contactId}`, true) },
    {
      name: 'create contact',
      method: 'POST',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: '/contacts', idAddressed: false, body: { email: `n-${uniq()}@acme.test` } }),
    },
    {
      name: 'update contact',
      method: 'PATCH',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: `/contacts/${contactId}`, idAddressed: true, body: { firstName: `F${uniq()}` } }),
    },
    {
      name: 'add tags',
      method: 'POST',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: `/contacts/${contactId}/tags`, idAddressed: true, body: { tags: [`tag-${uniq()}`] } }),
    },
    {
      name: 'remove tag',
      method: 'DELETE',
      min: 'MEMBER',
      write: true,
      prepare: async () => ({ path: `/contacts/${await newContact(['gone'])}/tags/gone`, idAddressed: true }),
    },
    {
      name: 'delete contact',
      method: 'DELETE',
      min: 'MEMBER',
      write: true,
      prepare: async () => ({ path: `/contacts/${await newContact()}`, idAddressed: true }),
    },
    { name: 'list tags', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/tags') },
    // automations
    { name: 'list automations', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/automations') },
    { name: 'get automation', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/automations/${automationId}`, true) },
    {
      name: 'create automation',
      method: 'POST',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: '/automations', idAddressed: false, body: { name: `a-${uniq()}`, graph } }),
    },
    {
      name: 'update automation',
      method: 'PATCH',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: `/automations/${automationId}`, idAddressed: true, body: { name: `a-${uniq()}` } }),
    },
    {
      name: 'delete automation',
      method: 'DELETE',
      min: 'MEMBER',
      write: true,
      prepare: async () => ({ path: `/automations/${await newAutomation()}`, idAddressed: true }),
    },
    {
      name: 'run automation',
      method: 'POST',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: `/automations/${automationId}/runs`, idAddressed: true, body: { contactId } }),
    },
    // templates
    { name: 'list templates', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/templates') },
    { name: 'get template', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/templates/${templateId}`, true) },
    {
      name: 'create template',
      method: 'POST',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: '/templates', idAddressed: false, body: { name: `t-${uniq()}`, channel: 'SMS', content: { text: 'hi' } } }),
    },
    {
      name: 'update template',
      method: 'PATCH',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: `/templates/${templateId}`, idAddressed: true, body: { name: `t-${uniq()}` } }),
    },
    {
      name: 'delete template',
      method: 'DELETE',
      min: 'MEMBER',
      write: true,
      prepare: async () => ({ path: `/templates/${await newTemplate()}`, idAddressed: true }),
    },
    { name: 'preview template', method: 'POST', min: 'VIEWER', write: false, prepare: fixed(`/templates/${templateId}/preview`, true, { trigger: { a: 1 } }) },
    // workflows, runs, webhook events
    { name: 'list workflows', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/workflows') },
    { name: 'get workflow', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/workflows/${workflowId}`, true) },
    {
      name: 'create workflow',
      method: 'POST',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: '/workflows', idAddressed: false, body: { name: `w-${uniq()}` } }),
    },
    {
      name: 'update workflow',
      method: 'PATCH',
      min: 'MEMBER',
      write: true,
      prepare: () => ({ path: `/workflows/${workflowId}`, idAddressed: true, body: { name: `w-${uniq()}` } }),
    },
    {
      name: 'activate workflow',
      method: 'PATCH',
      min: 'MEMBER',
      write: true,
      prepare: async () => ({ path: `/workflows/${await newWorkflow()}`, idAddressed: true, body: { status: 'ACTIVE' } }),
    },
    { name: 'list runs', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/workflows/${hook.id}/runs`, true) },
    { name: 'get run', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/runs/${runId}`, true) },
    {
      name: 'dry-run a webhook body',
      method: 'POST',
      min: 'MEMBER',
      write: false,
      prepare: fixed(`/workflows/${hook.id}/webhook/test`, true, { body: { email: 'dry@acme.test' } }),
    },
    { name: 'list webhook events', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/workflows/${hook.id}/webhook-events`, true) },
    { name: 'replay webhook event', method: 'POST', min: 'MEMBER', write: true, prepare: fixed(`/webhook-events/${eventId}/replay`, true) },
    // messages
    {
      name: 'send test email',
      method: 'POST',
      min: 'MEMBER',
      write: true,
      prepare: fixed('/messages/test-email', false, { to: 'someone@example.com', subject: 'Test', text: 'Hello' }),
    },
    { name: 'list delivery attempts', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/messages/delivery-attempts') },
    { name: 'get delivery attempt', method: 'GET', min: 'VIEWER', write: false, prepare: fixed(`/messages/delivery-attempts/${attemptId}`, true) },
    // settings
    { name: 'get channel settings', method: 'GET', min: 'ADMIN', write: false, prepare: fixed('/settings/channels') },
    { name: 'put channel settings', method: 'PUT', min: 'ADMIN', write: true, prepare: fixed('/settings/channels', false, {}) },
    // api keys
    { name: 'list api keys', method: 'GET', min: 'ADMIN', write: false, prepare: fixed('/api-keys') },
    {
      name: 'mint api key',
      method: 'POST',
      min: 'ADMIN',
      write: true,
      prepare: () => ({ path: '/api-keys', idAddressed: false, body: { name: `k-${uniq()}`, role: 'VIEWER' } }),
    },
    {
      name: 'revoke api key',
      method: 'DELETE',
      min: 'ADMIN',
      write: true,
      prepare: async () => ({ path: `/api-keys/${await newKeyId()}`, idAddressed: true }),
    },
    // memberships and invitations
    { name: 'list memberships', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/memberships') },
    { name: 'list pending invitations', method: 'GET', min: 'ADMIN', write: false, prepare: fixed('/memberships/invitations') },
    {
      name: 'withdraw an invitation',
      method: 'DELETE',
      min: 'ADMIN',
      write: true,
      prepare: async () => ({
        path: `/memberships/invitations/${(await ok('POST', '/memberships/invitations', { email: `w-${uniq()}@example.com`, role: 'VIEWER' })).id}`,
        idAddressed: true,
      }),
    },
    {
      name: 'add membership',
      method: 'POST',
      min: 'ADMIN',
      write: true,
      prepare: async () => ({ path: '/memberships', idAddressed: false, body: { email: (await newUser('VIEWER', spare.workspaceId)).email, role: 'VIEWER' } }),
    },
    {
      name: 'add membership as OWNER (grant OWNER)',
      method: 'POST',
      min: 'OWNER',
      write: true,
      prepare: async () => ({ path: '/memberships', idAddressed: false, body: { email: (await newUser('VIEWER', spare.workspaceId)).email, role: 'OWNER' } }),
    },
    {
      name: 'change membership role',
      method: 'PATCH',
      min: 'ADMIN',
      write: true,
      prepare: async () => ({ path: `/memberships/${(await newUser('VIEWER', main)).membershipId}`, idAddressed: true, body: { role: 'MEMBER' } }),
    },
    {
      name: 'grant OWNER',
      routeMin: 'ADMIN',
      method: 'PATCH',
      min: 'OWNER',
      write: true,
      prepare: async () => ({ path: `/memberships/${(await newUser('VIEWER', main)).membershipId}`, idAddressed: true, body: { role: 'OWNER' } }),
    },
    {
      name: 'demote an OWNER',
      routeMin: 'ADMIN',
      method: 'PATCH',
      min: 'OWNER',
      write: true,
      prepare: async () => ({ path: `/memberships/${(await newUser('OWNER', main)).membershipId}`, idAddressed: true, body: { role: 'VIEWER' } }),
    },
    {
      name: 'remove membership',
      method: 'DELETE',
      min: 'ADMIN',
      write: true,
      prepare: async () => ({ path: `/memberships/${(await newUser('VIEWER', main)).membershipId}`, idAddressed: true }),
    },
    {
      name: 'remove an OWNER',
      routeMin: 'ADMIN',
      method: 'DELETE',
      min: 'OWNER',
      write: true,
      prepare: async () => ({ path: `/memberships/${(await newUser('OWNER', main)).membershipId}`, idAddressed: true }),
    },
    {
      name: 'create invitation',
      method: 'POST',
      min: 'ADMIN',
      write: true,
      prepare: () => ({ path: '/memberships/invitations', idAddressed: false, body: { email: `i-${uniq()}@example.com`, role: 'VIEWER' } }),
    },
    {
      name: 'create OWNER invitation',
      method: 'POST',
      min: 'OWNER',
      write: true,
      prepare: () => ({ path: '/memberships/invitations', idAddressed: false, body: { email: `o-${uniq()}@example.com`, role: 'OWNER' } }),
    },
    // billing
    { name: 'get plan', method: 'GET', min: 'VIEWER', write: false, prepare: fixed('/billing/plan') },
    { name: 'billing checkout', method: 'POST', min: 'OWNER', write: true, prepare: fixed('/billing/checkout', false, { plan: 'GROWTH' }) },
    // audit
    { name: 'list audit logs', method: 'GET', min: 'ADMIN', write: false, prepare: fixed('/audit-logs') },
    // admin
    { name: 'admin workspaces', method: 'GET', min: 'SUPER', write: false, prepare: fixed('/admin/workspaces') },
    { name: 'admin workspace', method: 'GET', min: 'SUPER', write: false, prepare: fixed(`/admin/workspaces/${main}`) },
    { name: 'admin users', method: 'GET', min: 'SUPER', write: false, prepare: fixed('/admin/users') },
    { name: 'admin stats', method: 'GET', min: 'SUPER', write: false, prepare: fixed('/admin/stats') },
  ];

  const failures: string[] = [];
  let checked = 0;
  for (const c of cases) {
    for (const caller of callers) {
      const p = await c.prepare(caller);
      const exp = expected(c, caller, p.idAddressed);
      await settle(s);
      const before = exp.kind === 'status' ? await snapshot(s) : undefined;
      const res = await s.request(c.method, p.path, { token: caller.token, ...(p.body !== undefined ? { body: p.body } : {}) });
      checked++;
      const label = `${c.method} ${p.path} [${c.name}] as ${caller.name}`;
      try {
        if (exp.kind === 'allowed') {
          assert.ok(res.status >= 200 && res.status < 300, `${label}: expected a 2xx, got ${describe(res)}`);
        } else {
          assertProblem(res, exp.status, exp.code);
          if (exp.status === 401) assert.match(res.headers.get('www-authenticate') ?? '', /^Bearer/i, `${label}: WWW-Authenticate`);
          await settle(s);
          const after = await snapshot(s);
          assert.deepEqual(after.counts, before!.counts, `${label}: row counts changed`);
          assert.equal(after.audit, before!.audit, `${label}: audit log grew`);
          assert.equal(after.hash, before!.hash, `${label}: database content changed`);
        }
      } catch (err) {
        failures.push(`${label}: ${(err as Error).message.split('\n')[0]}`);
      }
    }
  }
  t.diagnostic(`checked ${checked} (endpoint, caller) pairs: ${cases.length} endpoints × ${callers.length} callers`);
  assert.deepEqual(failures, [], `${failures.length} role-matrix violations:\n${failures.join('\n')}`);
});

test('audit log is refused for plan reasons on Starter, for role reasons first', async (t) => {
  const s = await build(t);
  const starter = await s.otherWorkspace('STARTER');
  const viewer = await s.userWithRole('VIEWER', starter.workspaceId);
  const viewerKey = await s.mintKey('VIEWER', starter.workspaceId);
  const before = await snapshot(s);
  assertProblem(await s.request('GET', '/audit-logs', { token: starter.token }), 403, 'plan_upgrade_required');
  assertProblem(await s.request('GET', '/audit-logs', { token: viewer.token }), 403, 'forbidden');
  assertProblem(await s.request('GET', '/audit-logs', { token: viewerKey }), 403, 'forbidden');
  const after = await snapshot(s);
  assert.equal(after.audit, before.audit, 'refusals are not state changes');
  assert.equal(after.hash, before.hash);
  // A Pro ADMIN is allowed.
  const admin = await s.userWithRole('ADMIN');
  const ok = await s.request('GET', '/audit-logs', { token: admin.token });
  assert.equal(ok.status, 200, ok.text);
});
