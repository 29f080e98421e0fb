import assert from 'node:assert/strict';
import { test } from 'node:test';
import { asc } from 'drizzle-orm';
import { auditLogs, automations } from '../../src/core/db/schema.js';
import { assertProblem, build, waitForRun } from '../helpers.js';

const trigger = { id: 't', type: 'trigger', data: { source: 'MANUAL' } };

function branching(tagTrue = 'big', tagFalse = 'small') {
  return {
    nodes: [
      trigger,
      { id: 'c', type: 'condition', data: { condition: 'trigger.total > 100' } },
      { id: 'yes', type: 'add_tags', data: { tags: [tagTrue] } },
      { id: 'no', type: 'add_tags', data: { tags: [tagFalse] } },
      { id: 'after', type: 'update_contact', data: { set: { 'attributes.lastTotal': '{{ trigger.total }}' } } },
    ],
    edges: [
      { from: 't', to: 'c' },
      { from: 'c', to: 'yes', branch: true },
      { from: 'c', to: 'no', branch: false },
      { from: 'yes', to: 'after' },
    ],
  };
}

test('automations: create, read, list, update, delete', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const created = await s.request('POST', '/automations', { token, body: { name: 'Branchy', graph: branching() } });
  assert.equal(created.status, 201, created.text);
  assert.equal(created.body.status, 'DRAFT');
  assert.deepEqual(Object.keys(created.body).sort(), ['createdAt', 'graph', 'id', 'name', 'status', 'updatedAt']);
  assert.deepEqual(created.body.graph, branching());
  const got = await s.request('GET', `/automations/${created.body.id}`, { token });
  assert.deepEqual(got.body, created.body);
  const list = await s.request('GET', '/automations', { token });
  assert.deepEqual(
    list.body.data.map((a: { id: number }) => a.id),
    [created.body.id],
  );
  const patched = await s.request('PATCH', `/automations/${created.body.id}`, { token, body: { name: 'Renamed', status: 'ACTIVE' } });
  assert.equal(patched.status, 200, patched.text);
  assert.equal(patched.body.name, 'Renamed');
  assert.equal(patched.body.status, 'ACTIVE');
  assert.equal((await s.request('DELETE', `/automations/${created.body.id}`, { token })).status, 204);
  assertProblem(await s.request('GET', `/automations/${created.body.id}`, { token }), 404, 'automation_not_found');
  const audit = (await s.db.select({ action: auditLogs.action }).from(auditLogs).orderBy(asc(auditLogs.id))).filter((a) => a.action.startsWith('automation.'));
  assert.deepEqual(
    audit.map((a) => a.action),
    ['automation.created', 'automation.updated', 'automation.activated', 'automation.deleted'],
  );
});

test('http_request nodes: header values whole for MEMBER and above, masked for VIEWER (user or key)', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const call = { id: 'call', type: 'http_request', data: { method: 'GET', url: 'https://api.example.com/x', headers: { 'X-Api-Key': 'key_live_Zx81' } } };
  const graph = { nodes: [trigger, call], edges: [{ from: 't', to: 'call' }] };
  const created = await s.request('POST', '/automations', { token, body: { name: 'Calls', graph } });
  assert.equal(created.status, 201, created.text);
  const viewer = await s.userWithRole('VIEWER');
  for (const vt of [viewer.token, await s.mintKey('VIEWER')]) {
    const one = await s.request('GET', `/automations/${created.body.id}`, { token: vt });
    assert.equal(one.status, 200, one.text);
    assert.deepEqual(one.body.graph.nodes[1], { ...call, data: { ...call.data, url: 'https://api.example.com/••••', headers: { 'X-Api-Key': '••••' } } });
    const list = await s.request('GET', '/automations', { token: vt });
    assert.equal(list.status, 200, list.text);
    for (const r of [one, list]) assert.ok(!r.text.includes('key_live_'), 'a VIEWER never sees the header values');
  }
  const member = await s.userWithRole('MEMBER');
  for (const mt of [member.token, await s.mintKey('MEMBER'), token]) {
    assert.deepEqual((await s.request('GET', `/automations/${created.body.id}`, { token: mt })).body.graph, graph);
    assert.ok((await s.request('GET', '/automations', { token: mt })).text.includes('key_live_'));
  }
});

test('graph validation failures, one by one, name the offending node or edge', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const base = branching();
  const cases: [string, unknown, string][] = [
    ['duplicate node id', { ...base, nodes: [...base.nodes, { id: 'c', type: 'add_tags', data: { tags: ['x'] } }] }, '/graph/nodes/5/id'],
    ['edge to a missing node', { ...base, edges: [...base.edges, { from: 'no', to: 'ghost' }] }, '/graph/edges/4/to'],
    ['edge from a missing node', { ...base, edges: [...base.edges, { from: 'ghost', to: 'after' }] }, '/graph/edges/4/from'],
    ['no trigger', { nodes: base.nodes.slice(1), edges: base.edges.slice(1) }, '/graph/nodes'],
    ['two triggers', { ...base, nodes: [...base.nodes, { id: 't2', type: 'trigger', data: { source: 'MANUAL' } }] }, '/graph/nodes'],
    [
      'trigger with another source',
      { ...base, nodes: [{ id: 't', type: 'trigger', data: { source: 'WEBHOOK' } }, ...base.nodes.slice(1)] },
      '/graph/nodes/0/data',
    ],
    ['a cycle, named by the edge that closes it', { ...base, edges: [...base.edges, { from: 'after', to: 'c' }] }, '/graph/edges/4'],
    ['unknown node type', { ...base, nodes: [...base.nodes.slice(0, 4), { id: 'after', type: 'teleport', data: {} }] }, '/graph/nodes/4/type'],
    [
      'step data from the catalog',
      { ...base, nodes: [...base.nodes.slice(0, 2), { id: 'yes', type: 'add_tags', data: { tags: 'x' } }, ...base.nodes.slice(3)] },
      '/graph/nodes/2/data/tags',
    ],
    [
      'send_email without templateId',
      { ...base, nodes: [...base.nodes.slice(0, 4), { id: 'after', type: 'send_email', data: {} }] },
      '/graph/nodes/4/data/templateId',
    ],
    [
      'http_request to a literal loopback address',
      { ...base, nodes: [...base.nodes.slice(0, 4), { id: 'after', type: 'http_request', data: { method: 'GET', url: 'http://127.0.0.1:9/x' } }] },
      '/graph/nodes/4/data/url',
    ],
    ['branch from a non-condition', { ...base, edges: [...base.edges.slice(0, 3), { from: 'yes', to: 'after', branch: true }] }, '/graph/edges/3/branch'],
    ['condition edge without a branch', { ...base, edges: [base.edges[0], { from: 'c', to: 'yes' }, base.edges[2], base.edges[3]] }, '/graph/edges/1/branch'],
    ['two true branches', { ...base, edges: [...base.edges, { from: 'c', to: 'after', branch: true }] }, '/graph/edges/4/branch'],
    ['two ways out of a step', { ...base, edges: [...base.edges, { from: 'yes', to: 'no' }] }, '/graph/edges/4'],
    ['edge into the trigger', { ...base, edges: [...base.edges, { from: 'no', to: 't' }] }, '/graph/edges/4/to'],
    [
      'condition with a syntax error',
      { ...base, nodes: [base.nodes[0], { id: 'c', type: 'condition', data: { condition: '' } }, ...base.nodes.slice(2)] },
      '/graph/nodes/1/data/condition',
    ],
  ];
  for (const [name, graph, path] of cases) {
    const res = await s.request('POST', '/automations', { token, body: { name, graph } });
    assertProblem(res, 422);
    assert.ok(
      res.body.errors?.some((e: { path: string }) => e.path === path),
      `${name}: expected an error at ${path}, got ${JSON.stringify(res.body.errors)}`,
    );
  }
  for (const body of [
    { name: 'x' },
    { name: 'x', graph: { nodes: [] } },
    { name: 'x', graph: base, extra: 1 },
    { name: 'x', graph: { ...base, nodes: [{ id: 't', type: 'trigger' }] } },
  ]) {
    assertProblem(await s.request('POST', '/automations', { token, body }), 422);
  }
  assert.equal((await s.db.select().from(automations)).length, 0);
});

test('a manual run follows the condition branch it evaluates', async (t) => {
  const s = await build(t, { engine: { pollMs: 50 } });
  const token = await s.login(s.owner.email, s.owner.password);
  const a = await s.request('POST', '/automations', { token, body: { name: 'Branchy', status: 'ACTIVE', graph: branching() } });
  const big = await s.request('POST', '/contacts', { token, body: { email: 'big@example.com' } });
  const small = await s.request('POST', '/contacts', { token, body: { email: 'small@example.com' } });

  const r1 = await s.request('POST', `/automations/${a.body.id}/runs`, { token, body: { contactId: big.body.id, trigger: { total: 500 } } });
  assert.equal(r1.status, 202, r1.text);
  assert.deepEqual(Object.keys(r1.body).sort(), ['contactId', 'runId']);
  const r2 = await s.request('POST', `/automations/${a.body.id}/runs`, { token, body: { contactId: small.body.id, trigger: { total: 20 } } });
  const run1 = await waitForRun(s, token, r1.body.runId, ['COMPLETED', 'FAILED']);
  const run2 = await waitForRun(s, token, r2.body.runId, ['COMPLETED', 'FAILED']);
  assert.equal(run1.status, 'COMPLETED', JSON.stringify(run1));
  assert.equal(run1.automationId, a.body.id);
  assert.equal(run1.workflowId, null);
  const byType = (run: { steps: { type: string; status: string }[] }) => run.steps.map((st) => `${st.type}:${st.status}`);
  assert.deepEqual(byType(run1), ['condition:COMPLETED', 'add_tags:COMPLETED', 'add_tags:SKIPPED', 'update_contact:COMPLETED']);
  assert.deepEqual(byType(run2), ['condition:COMPLETED', 'add_tags:SKIPPED', 'add_tags:COMPLETED', 'update_contact:SKIPPED']);
  const bigContact = await s.request('GET', `/contacts/${big.body.id}`, { token });
  assert.deepEqual(bigContact.body.tags, ['big']);
  assert.equal(bigContact.body.attributes.lastTotal, '500');
  const smallContact = await s.request('GET', `/contacts/${small.body.id}`, { token });
  assert.deepEqual(smallContact.body.tags, ['small']);
  assert.equal(smallContact.body.attributes.lastTotal, undefined);
});

test('manual runs: only ACTIVE automations, only this workspace, MEMBER and above', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const a = await s.request('POST', '/automations', { token, body: { name: 'Draft', graph: branching() } });
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'c@example.com' } });
  assertProblem(await s.request('POST', `/automations/${a.body.id}/runs`, { token, body: { contactId: contact.body.id } }), 422, 'automation_not_active');
  await s.request('PATCH', `/automations/${a.body.id}`, { token, body: { status: 'ACTIVE' } });
  assertProblem(await s.request('POST', `/automations/${a.body.id}/runs`, { token, body: { contactId: 999999 } }), 404, 'contact_not_found');
  assertProblem(await s.request('POST', `/automations/${a.body.id}/runs`, { token, body: {} }), 422);
  const viewer = await s.userWithRole('VIEWER');
  assertProblem(await s.request('POST', `/automations/${a.body.id}/runs`, { token: viewer.token, body: { contactId: contact.body.id } }), 403, 'forbidden');
  assertProblem(await s.request('POST', '/automations', { token: viewer.token, body: { name: 'x', graph: branching() } }), 403, 'forbidden');
  assert.equal((await s.request('GET', `/automations/${a.body.id}`, { token: viewer.token })).status, 200);
  const other = await s.otherWorkspace();
  assertProblem(await s.request('GET', `/automations/${a.body.id}`, { token: other.token }), 404, 'automation_not_found');
  assertProblem(await s.request('POST', `/automations/${a.body.id}/runs`, { token: other.token, body: { contactId: contact.body.id } }), 404);
  assertProblem(await s.request('DELETE', `/automations/${a.body.id}`, { token: other.token }), 404);
  assertProblem(await s.request('GET', '/automations'), 401);
});

test('activation checks send nodes as a workflow: a missing template, another channel or another workspace is 422; a draft may name any', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const template = async (tok: string, channel: 'EMAIL' | 'SMS') => {
    const content = channel === 'EMAIL' ? { subject: 'Hi', text: 'Hello' } : { text: 'Hello' };
    const res = await s.request('POST', '/templates', { token: tok, body: { name: `t-${channel}`, channel, content } });
    assert.equal(res.status, 201, res.text);
    return res.body.id as number;
  };
  const email = await template(token, 'EMAIL');
  const sms = await template(token, 'SMS');
  const other = await s.otherWorkspace();
  const theirs = await template(other.token, 'SMS');
  const sending = (templateId: number) => ({
    nodes: [trigger, { id: 'send', type: 'send_sms', data: { templateId } }],
    edges: [{ from: 't', to: 'send' }],
  });

  for (const [templateId, message] of [
    [email, /a EMAIL template; send_sms needs a SMS template/],
    [theirs, /names no template of this workspace/],
    [999999, /names no template of this workspace/],
  ] as const) {
    // Created ACTIVE: refused at its field.
    const created = await s.request('POST', '/automations', { token, body: { name: 'Active', status: 'ACTIVE', graph: sending(templateId) } });
    assertProblem(created, 422, 'validation_failed');
    assert.deepEqual(
      created.body.errors.map((e: { path: string }) => e.path),
      ['/graph/nodes/1/data/templateId'],
      created.text,
    );
    assert.match(created.body.errors[0].message, message);
    // A draft saves; its activation is refused, and so is its run.
    const draft = await s.request('POST', '/automations', { token, body: { name: 'Draft', graph: sending(templateId) } });
    assert.equal(draft.status, 201, draft.text);
    assertProblem(await s.request('PATCH', `/automations/${draft.body.id}`, { token, body: { status: 'ACTIVE' } }), 422, 'validation_failed');
    assert.equal((await s.request('GET', `/automations/${draft.body.id}`, { token })).body.status, 'DRAFT');
  }
  // An ACTIVE automation whose graph changes is checked again; the right template passes.
  const good = await s.request('POST', '/automations', { token, body: { name: 'Good', status: 'ACTIVE', graph: sending(sms) } });
  assert.equal(good.status, 201, good.text);
  assertProblem(await s.request('PATCH', `/automations/${good.body.id}`, { token, body: { graph: sending(email) } }), 422, 'validation_failed');
  assert.equal((await s.request('PATCH', `/automations/${good.body.id}`, { token, body: { name: 'Renamed' } })).status, 200);
  assert.equal((await s.request('PATCH', `/automations/${good.body.id}`, { token, body: { status: 'PAUSED' } })).status, 200);
  assert.equal((await s.request('PATCH', `/automations/${good.body.id}`, { token, body: { graph: sending(email) } })).status, 200, 'a paused one may change');
  assertProblem(await s.request('PATCH', `/automations/${good.body.id}`, { token, body: { status: 'ACTIVE' } }), 422, 'validation_failed');
});
