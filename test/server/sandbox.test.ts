import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { sql } from 'drizzle-orm';
import { generateApiKey, hashApiKey } from '../../src/core/services/apiKeys.js';
import { apiKeys } from '../../src/core/db/schema.js';
import { setWorkspacePlan } from '../../src/core/services/workspaces.js';
import { loadConfig } from '../../src/core/config.js';
import { assertProblem, build, rowsOf, type HttpResult, type TestServer } from '../helpers.js';
import { postToMintedUrl, viaHost } from '../hostRequest.js';

const SANDBOX_URL = 'http://sandbox.test:8443';

function notFound(res: HttpResult, what: string): void {
  assert.equal(res.status, 404, `${what}: expected 404, got ${res.status}: ${res.text.slice(0, 300)}`);
  assertProblem(res, 404);
}
const system = (s: TestServer) => ({ db: s.db, store: s.store, config: s.config, actor: { type: 'SYSTEM' as const, id: null, label: 'test' }, ip: null });

/** A server with a sandbox for its workspace, a live and a test ADMIN key, and the owner's session. */
async function setUp(t: TestContext) {
  const s = await build(t, { env: { SVC_SANDBOX_URL: SANDBOX_URL } });
  const owner = await s.login(s.owner.email, s.owner.password);
  const created = await s.request('POST', '/sandbox', { token: owner });
  assert.equal(created.status, 201, created.text);
  const sandboxId = created.body.id as number;
  return { s, owner, sandboxId, live: await s.mintKey('ADMIN'), test: await s.mintKey('ADMIN', sandboxId), sandbox: created.body };
}

test('POST /sandbox creates the twin once, on the live plan, and answers its id and base address', async (t) => {
  const s = await build(t, { env: { SVC_SANDBOX_URL: SANDBOX_URL } });
  const owner = await s.login(s.owner.email, s.owner.password);
  assertProblem(await s.request('GET', '/sandbox', { token: owner }), 404, 'sandbox_not_found');
  const created = await s.request('POST', '/sandbox', { token: owner });
  assert.equal(created.status, 201, created.text);
  assert.deepEqual(Object.keys(created.body).sort(), ['baseUrl', 'created', 'createdAt', 'id', 'liveWorkspaceId', 'name', 'plan', 'reset']);
  assert.equal(created.body.liveWorkspaceId, s.workspaceId);
  assert.equal(created.body.baseUrl, SANDBOX_URL);
  assert.equal(created.body.plan, 'PRO');
  assert.equal(created.body.name, 'Acme (sandbox)');
  assert.equal(created.body.created, true);
  const again = await s.request('POST', '/sandbox', { token: owner, body: {} });
  assert.equal(again.status, 200, again.text);
  assert.equal(again.body.id, created.body.id);
  assert.equal(again.body.created, false);
  const got = await s.request('GET', '/sandbox', { token: owner });
  assert.equal(got.status, 200);
  assert.equal(got.body.id, created.body.id);

  // The API document names both addresses and the sandbox routes.
  const doc = await s.request('GET', '/openapi.json');
  assert.equal(doc.status, 200);
  assert.deepEqual(
    doc.body.servers.map((x: { url: string }) => x.url),
    [s.config.publicUrl, SANDBOX_URL],
  );
  assert.ok(doc.body.paths['/sandbox'].post && doc.body.paths['/sandbox'].get && doc.body.paths['/sandbox/requests'].get);

  // Bad input: the setting, the body, roles.
  assert.throws(() => loadConfig({ dataDir: s.dataDir }, { SVC_SANDBOX_URL: 'ftp://sandbox.test' }), /sandboxUrl must be an http\(s\) URL/);
  assert.throws(() => loadConfig({ dataDir: s.dataDir }, { SVC_SANDBOX_URL: 'not a url' }), /sandboxUrl must be an http\(s\) URL/);
  assert.equal(loadConfig({ dataDir: s.dataDir }, { SVC_SANDBOX_URL: 'https://Sandbox.Example.com/' }).sandboxUrl, 'https://sandbox.example.com');
  assert.equal(loadConfig({ dataDir: s.dataDir }, {}).sandboxUrl, loadConfig({ dataDir: s.dataDir }, {}).publicUrl);
  assertProblem(await s.request('POST', '/sandbox', { token: owner, body: { reset: 'yes' } }), 422);
  assertProblem(await s.request('POST', '/sandbox', { token: owner, body: { rest: true } }), 422);
  const member = await s.userWithRole('MEMBER');
  assertProblem(await s.request('POST', '/sandbox', { token: member.token }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/sandbox', { token: await s.mintKey('MEMBER') }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/sandbox'), 401);
  assert.equal((await s.request('GET', '/sandbox', { token: await s.mintKey('VIEWER') })).status, 200);

  // The sandbox follows its live twin's plan, and has no plan (nor checkout) of its own.
  await setWorkspacePlan(system(s), s.workspaceId, 'GROWTH');
  assert.equal((await s.request('GET', '/sandbox', { token: owner })).body.plan, 'GROWTH');
  await assert.rejects(setWorkspacePlan(system(s), created.body.id, 'PRO'), /sandbox/);
  const inSandbox = await s.request('POST', '/auth/switch', { token: owner, body: { workspaceId: created.body.id } });
  assertProblem(await s.request('POST', '/billing/checkout', { token: inSandbox.body.token, body: { plan: 'PRO' } }), 422, 'not_in_sandbox');
});

test('keys minted in a sandbox are svc_test_ keys, and a key works only on its own side', async (t) => {
  const { s, owner, sandboxId, live, test } = await setUp(t);
  assert.match(live, /^svc_live_/);
  assert.match(test, /^svc_test_/);
  // Through the API: a session switched into the sandbox mints svc_test_ keys.
  const switched = await s.request('POST', '/auth/switch', { token: owner, body: { workspaceId: sandboxId } });
  assert.equal(switched.status, 200, switched.text);
  assert.equal(switched.body.workspace.id, sandboxId);
  assert.equal(switched.body.workspace.role, 'OWNER');
  const minted = await s.request('POST', '/api-keys', { token: switched.body.token, body: { name: 'ci', role: 'MEMBER' } });
  assert.equal(minted.status, 201, minted.text);
  assert.match(minted.body.key, /^svc_test_/);
  assert.match(minted.body.prefix, /^svc_test_/);
  const me = await s.request('GET', '/auth/me', { token: minted.body.key });
  assert.equal(me.body.workspace.id, sandboxId);

  // A key whose prefix names the other side is refused even when its hash is stored (as if a
  // live key had been planted on the sandbox, or a test key on the live workspace).
  for (const [prefix, workspaceId] of [
    ['svc_test_', s.workspaceId],
    ['svc_live_', sandboxId],
  ] as const) {
    const key = generateApiKey(prefix);
    await s.store.transaction(async (tx) => {
      await tx.insert(apiKeys).values({ workspaceId, name: 'planted', role: 'ADMIN', prefix: key.slice(0, 13), keyHash: hashApiKey(key) });
    });
    assertProblem(await s.request('GET', '/contacts', { token: key }), 401, 'invalid_api_key');
  }
});

test('live credentials never see sandbox data and test credentials never see live data', async (t) => {
  const { s, owner, sandboxId, live, test } = await setUp(t);
  const sandboxSession = (await s.request('POST', '/auth/switch', { token: await s.login(s.owner.email, s.owner.password), body: { workspaceId: sandboxId } }))
    .body.token as string;

  /** One of each resource kind on one side; answers their ids. */
  async function seed(token: string, tag: string) {
    const ok = (res: HttpResult, status = 201) => {
      assert.equal(res.status, status, res.text);
      return res.body;
    };
    const contact = ok(await s.request('POST', '/contacts', { token, body: { email: `${tag}@example.com` } }));
    ok(await s.request('POST', `/contacts/${contact.id}/tags`, { token, body: { tags: [`tag-${tag}`] } }), 200);
    const template = ok(await s.request('POST', '/templates', { token, body: { name: tag, channel: 'EMAIL', content: { subject: 'Hi', text: 'Hello' } } }));
    const workflow = ok(
      await s.request('POST', '/workflows', {
        token,
        body: {
          name: tag,
          triggerSource: 'WEBHOOK',
          status: 'ACTIVE',
          steps: [{ type: 'add_tags', tags: ['hooked'] }],
          webhook: { lookup: 'email', createIfNotFound: true },
        },
      }),
    );
    const automation = ok(
      await s.request('POST', '/automations', {
        token,
        body: { name: tag, graph: { nodes: [{ id: 't', type: 'trigger', data: { source: 'MANUAL' } }], edges: [] } },
      }),
    );
    const hook = ok(await postToMintedUrl(s, workflow.webhook.url, { email: `${tag}-hook@example.com` }), 202);
    const attempt = ok(await s.request('POST', '/messages/test-email', { token, body: { to: `${tag}@example.com`, subject: 'S', text: 'T' } }), 202);
    const key = ok(await s.request('POST', '/api-keys', { token, body: { name: tag, role: 'VIEWER' } }));
    const events = ok(await s.request('GET', `/workflows/${workflow.id}/webhook-events`, { token }), 200);
    return {
      contact,
      template,
      workflow,
      automation,
      runId: hook.runId as number,
      attemptId: attempt.deliveryAttemptId as number,
      key,
      eventId: events.data[0].id as number,
    };
  }
  const liveIds = await seed(owner, 'live');
  const testIds = await seed(test, 'test');

  // Webhook URLs are minted under each side's base address.
  assert.ok(liveIds.workflow.webhook.url.startsWith(`${s.config.publicUrl}/v1/webhooks/in/`), liveIds.workflow.webhook.url);
  assert.ok(testIds.workflow.webhook.url.startsWith(`${SANDBOX_URL}/v1/webhooks/in/`), testIds.workflow.webhook.url);

  const reads = (ids: typeof liveIds) => [
    `/contacts/${ids.contact.id}`,
    `/templates/${ids.template.id}`,
    `/workflows/${ids.workflow.id}`,
    `/workflows/${ids.workflow.id}/runs`,
    `/workflows/${ids.workflow.id}/webhook-events`,
    `/automations/${ids.automation.id}`,
    `/runs/${ids.runId}`,
    `/messages/delivery-attempts/${ids.attemptId}`,
  ];
  const writes = (ids: typeof liveIds) =>
    [
      ['PATCH', `/contacts/${ids.contact.id}`, { firstName: 'X' }],
      ['PATCH', `/templates/${ids.template.id}`, { name: 'X' }],
      ['PATCH', `/workflows/${ids.workflow.id}`, { name: 'X' }],
      ['PATCH', `/automations/${ids.automation.id}`, { name: 'X' }],
      ['POST', `/contacts/${ids.contact.id}/tags`, { tags: ['x'] }],
      ['POST', `/webhook-events/${ids.eventId}/replay`, undefined],
      ['DELETE', `/api-keys/${ids.key.id}`, undefined],
      ['DELETE', `/contacts/${ids.contact.id}`, undefined],
    ] as const;

  const sides = [
    { name: 'live key', tokens: [live, owner], own: liveIds, other: testIds },
    { name: 'test key', tokens: [test, sandboxSession], own: testIds, other: liveIds },
  ];
  for (const side of sides) {
    for (const token of side.tokens) {
      for (const path of reads(side.own)) assert.equal((await s.request('GET', path, { token })).status, 200, `${side.name} GET ${path} (own side)`);
      for (const path of reads(side.other)) notFound(await s.request('GET', path, { token }), `${side.name} GET ${path} (other side)`);
      for (const [method, path, body] of writes(side.other)) {
        notFound(await s.request(method, path, { token, ...(body ? { body } : {}) }), `${side.name} ${method} ${path} (other side)`);
      }
      // Lists never mix.
      const lists: [string, (b: any) => unknown[], unknown[]][] = [
        ['/contacts', (b) => b.data.map((c: any) => c.email), [side.other.contact.email]],
        ['/templates', (b) => b.data.map((x: any) => x.id), [side.other.template.id]],
        ['/workflows', (b) => b.data.map((x: any) => x.id), [side.other.workflow.id]],
        ['/automations', (b) => b.data.map((x: any) => x.id), [side.other.automation.id]],
        ['/runs', (b) => b.data.map((x: any) => x.runId), [side.other.runId]],
        ['/messages/delivery-attempts', (b) => b.data.map((x: any) => x.id), [side.other.attemptId]],
        ['/api-keys', (b) => b.data.map((x: any) => x.id), [side.other.key.id]],
        ['/tags', (b) => b.data.map((x: any) => x.name), [side === sides[0] ? 'tag-test' : 'tag-live']],
      ];
      for (const [path, pick, foreign] of lists) {
        const res = await s.request('GET', path, { token });
        assert.equal(res.status, 200, `${side.name} GET ${path}: ${res.text}`);
        const seen = pick(res.body);
        assert.ok(seen.length > 0, `${side.name} GET ${path} lists its own side`);
        for (const f of foreign) assert.ok(!seen.includes(f), `${side.name} GET ${path} shows ${String(f)} of the other side`);
      }
    }
  }
  // Same-side reads still work after all those refusals (nothing was changed by them).
  assert.equal((await s.request('GET', `/contacts/${liveIds.contact.id}`, { token: live })).body.firstName, null);
  assert.equal((await s.request('GET', `/contacts/${testIds.contact.id}`, { token: test })).body.firstName, null);
});

test('the sandbox address takes only sandbox credentials; users reach the sandbox with their live role', async (t) => {
  const { s, owner, sandboxId, live, test } = await setUp(t);
  const sandboxHost = new URL(SANDBOX_URL).host;
  const liveHost = new URL(s.url).host;

  assert.equal((await viaHost(s, sandboxHost, 'GET', '/contacts', { token: test })).status, 200);
  assertProblem(await viaHost(s, sandboxHost, 'GET', '/contacts', { token: live }), 401, 'live_credentials_on_sandbox');
  assertProblem(await viaHost(s, sandboxHost, 'GET', '/contacts', { token: owner }), 401, 'live_credentials_on_sandbox');
  assertProblem(
    await viaHost(s, `${sandboxHost.toUpperCase()}`, 'POST', '/contacts', { token: live, body: { email: 'a@b.co' } }),
    401,
    'live_credentials_on_sandbox',
  );
  // The sandbox's name without its port (a proxy that drops it) or with a final dot is still its address.
  for (const host of ['sandbox.test', 'sandbox.test.:8443', 'SANDBOX.TEST.']) {
    assertProblem(await viaHost(s, host, 'GET', '/contacts', { token: live }), 401, 'live_credentials_on_sandbox');
    assert.equal((await viaHost(s, host, 'GET', '/contacts', { token: test })).status, 200, host);
  }
  assert.equal((await viaHost(s, liveHost, 'GET', '/contacts', { token: live })).status, 200);
  // svc_test_ keys may also be sent to the main address: they still act only on the sandbox.
  assert.equal((await viaHost(s, liveHost, 'GET', '/sandbox', { token: test })).body.id, sandboxId);

  // Webhook URLs answer on their own side's address only.
  const hook = async (token: string) => {
    const wf = await s.request('POST', '/workflows', {
      token,
      body: { name: 'hook', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps: [], webhook: { lookup: 'email', createIfNotFound: true } },
    });
    assert.equal(wf.status, 201, wf.text);
    return new URL(wf.body.webhook.url).pathname;
  };
  const sandboxHook = await hook(test);
  const liveHook = await hook(live);
  assert.equal((await viaHost(s, sandboxHost, 'POST', sandboxHook, { body: { email: 'a@example.com' } })).status, 202);
  assertProblem(await viaHost(s, liveHost, 'POST', sandboxHook, { body: { email: 'a@example.com' } }), 404, 'webhook_not_found');
  assertProblem(await viaHost(s, sandboxHost, 'POST', liveHook, { body: { email: 'a@example.com' } }), 404, 'webhook_not_found');
  assert.equal((await viaHost(s, liveHost, 'POST', liveHook, { body: { email: 'a@example.com' } })).status, 202);

  // A MEMBER of the live workspace is a MEMBER of its sandbox (login or switch), not more.
  const member = await s.userWithRole('MEMBER');
  const login = await s.request('POST', '/auth/login', { body: { email: member.email, password: member.password, workspaceId: sandboxId } });
  assert.equal(login.status, 200, login.text);
  assert.equal(login.body.workspace.role, 'MEMBER');
  const inSandbox = login.body.token as string;
  assert.equal((await viaHost(s, sandboxHost, 'POST', '/contacts', { token: inSandbox, body: { email: 'm@example.com' } })).status, 201);
  assertProblem(await viaHost(s, sandboxHost, 'POST', '/api-keys', { token: inSandbox, body: { name: 'k', role: 'VIEWER' } }), 403, 'forbidden');
  assertProblem(await viaHost(s, sandboxHost, 'POST', '/sandbox', { token: inSandbox }), 403, 'forbidden');
  assert.equal((await s.request('GET', '/contacts?email=m@example.com', { token: member.token })).body.data.length, 0, 'the contact went to the sandbox');

  // A sandbox has no members of its own: inviting someone there is refused, whatever the
  // email (an account made so could never be used), and nothing is written.
  for (const [path, email] of [
    ['/memberships/invitations', 'new-to-svc@example.com'],
    ['/memberships', 'new-to-svc@example.com'],
    ['/memberships/invitations', member.email],
  ] as const) {
    assertProblem(await viaHost(s, sandboxHost, 'POST', path, { token: test, body: { email, role: 'VIEWER' } }), 422, 'not_in_sandbox');
  }
  assert.equal(Number((await rowsOf<{ n: number }>(s, sql`SELECT count(*) AS n FROM invitations WHERE workspace_id = ${sandboxId}`))[0]!.n), 0);

  // Someone outside the live workspace cannot reach its sandbox.
  const other = await s.otherWorkspace();
  assertProblem(await s.request('POST', '/auth/switch', { token: other.token, body: { workspaceId: sandboxId } }), 403, 'not_a_member');
  const outsider = await s.request('POST', '/auth/login', { body: { email: member.email, password: member.password, workspaceId: other.workspaceId } });
  assert.equal(outsider.status, 403);
  // A removed member loses the sandbox at once, like the live workspace.
  const memberships = await s.request('GET', '/memberships', { token: owner });
  const mine = memberships.body.data.find((m: any) => m.userId === member.id || m.user?.id === member.id);
  assert.ok(mine, memberships.text);
  assert.equal((await s.request('DELETE', `/memberships/${mine.id}`, { token: owner })).status, 204);
  assertProblem(await s.request('GET', '/contacts', { token: inSandbox }), 401);
  // Its sandbox session is ended too, not only refused for now: added back, it stays ended.
  const open = await rowsOf<{ n: number }>(
    s,
    sql`SELECT count(*) AS n FROM sessions WHERE user_id = ${member.id} AND workspace_id = ${sandboxId} AND revoked_at IS NULL`,
  );
  assert.equal(Number(open[0]!.n), 0, 'the sandbox session was ended with the membership');
});

test('a reset deletes the sandbox data, keeps its id and keys, and leaves the live workspace alone', async (t) => {
  const { s, owner, sandboxId, test } = await setUp(t);
  const contact = await s.request('POST', '/contacts', { token: test, body: { email: 'sb@example.com', tags: ['vip'] } });
  assert.equal(contact.status, 201, contact.text);
  const workflow = await s.request('POST', '/workflows', {
    token: test,
    body: { name: 'sb', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps: [], webhook: { lookup: 'email', createIfNotFound: true } },
  });
  assert.equal(workflow.status, 201, workflow.text);
  assert.equal((await postToMintedUrl(s, workflow.body.webhook.url, { email: 'hook@example.com' })).status, 202);
  assert.equal(
    (
      await s.request('PUT', '/settings/channels', {
        token: test,
        body: { SMS: { provider: 'twilio', settings: { accountSid: 'AC1', from: '+15005550006' }, credentials: { authToken: 'tok-123456' } } },
      })
    ).status,
    200,
  );
  const liveContact = await s.request('POST', '/contacts', { token: owner, body: { email: 'live@example.com' } });

  const reset = await s.request('POST', '/sandbox', { token: test, body: { reset: true } });
  assert.equal(reset.status, 200, reset.text);
  assert.equal(reset.body.id, sandboxId);
  assert.equal(reset.body.reset, true);
  for (const path of ['/contacts', '/workflows', '/runs', '/tags', '/messages/delivery-attempts']) {
    const res = await s.request('GET', path, { token: test });
    assert.equal(res.status, 200, `${path} ${res.text}`);
    assert.deepEqual(res.body.data, [], `${path} is empty after the reset`);
  }
  assert.equal((await s.request('GET', '/settings/channels', { token: test })).body.SMS.provider, 'outbox');
  assertProblem(await postToMintedUrl(s, workflow.body.webhook.url, { email: 'hook@example.com' }), 404, 'webhook_not_found');
  // The same email can be used again (the unique index and counters were cleared too).
  assert.equal((await s.request('POST', '/contacts', { token: test, body: { email: 'sb@example.com' } })).status, 201);
  assert.equal((await s.request('GET', '/billing/plan', { token: test })).body.usage.contacts, 1);
  assert.equal((await s.request('GET', `/contacts/${liveContact.body.id}`, { token: owner })).status, 200);
  const audit = await s.request('GET', '/audit-logs?action=sandbox.reset', { token: owner });
  assert.equal(audit.status, 200, audit.text);
  assert.equal(audit.body.data.length, 1);
});
