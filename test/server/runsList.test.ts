/**
 * GET /runs (API.md section 8): every run of the caller's workspace, newest first, paged,
 * with the filters status, workflowId, automationId and contactId; VIEWER and above; another
 * workspace's runs never appear, whatever the filter names. Each step of an automation's
 * run carries its graph node's id.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertProblem, build, type TestServer, webhookWorkflowOf } from '../helpers.js';

const webhookWorkflow = (s: TestServer, token: string) => webhookWorkflowOf(s, token, 'signup', [{ type: 'add_tags', tags: ['lead'] }]);

async function walk(s: TestServer, token: string, query: string, limit: number): Promise<any[]> {
  const runs: any[] = [];
  let cursor: string | null = null;
  do {
    const res = await s.request('GET', `/runs?limit=${limit}${query}${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(res.status, 200, res.text);
    runs.push(...res.body.data);
    cursor = res.body.nextCursor;
  } while (cursor);
  return runs;
}

test('GET /runs: the workspace runs newest first, each filter, paging, nodeId on automation steps, and nothing of another workspace', async (t) => {
  const s = await build(t, { env: { SVC_WEBHOOK_RATE_LIMIT: '100000' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const wf = await webhookWorkflow(s, token);
  const started: { runId: number; contactId: number }[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await s.request('POST', wf.path, { body: { email: `p${i % 2}@example.com` } });
    assert.equal(res.status, 202, res.text);
    started.push(res.body);
  }
  const auto = await s.request('POST', '/automations', {
    token,
    body: {
      name: 'Tagger',
      status: 'ACTIVE',
      graph: {
        nodes: [
          { id: 'start', type: 'trigger', data: { source: 'MANUAL' } },
          { id: 'tag-it', type: 'add_tags', data: { tags: ['auto'] } },
        ],
        edges: [{ from: 'start', to: 'tag-it' }],
      },
    },
  });
  assert.equal(auto.status, 201, auto.text);
  const autoRun = await s.request('POST', `/automations/${auto.body.id}/runs`, { token, body: { contactId: started[0]!.contactId } });
  assert.equal(autoRun.status, 202, autoRun.text);

  // Another workspace with its own workflow and runs.
  const other = await s.otherWorkspace();
  const theirs = await webhookWorkflow(s, other.token);
  const theirRun = await s.request('POST', theirs.path, { body: { email: 'p0@example.com' } });
  assert.equal(theirRun.status, 202);

  const viewer = await s.userWithRole('VIEWER');
  const all = await walk(s, viewer.token, '', 2);
  const expected = [autoRun.body.runId, ...started.map((r) => r.runId).reverse()];
  assert.deepEqual(
    all.map((r) => r.runId),
    expected,
    'newest first, every run once across pages',
  );
  assert.ok(!all.some((r) => r.runId === theirRun.body.runId));

  const automationRun = all[0];
  assert.equal(automationRun.automationId, auto.body.id);
  assert.equal(automationRun.workflowId, null);
  assert.deepEqual(
    automationRun.steps.map((st: any) => [st.nodeId, st.type]),
    [['tag-it', 'add_tags']],
  );
  const workflowRun = all[1];
  assert.equal(workflowRun.workflowId, wf.id);
  assert.equal('nodeId' in workflowRun.steps[0], false, 'a workflow step has no node');
  // The same view as GET /runs/:runId.
  assert.deepEqual((await s.request('GET', `/runs/${automationRun.runId}`, { token })).body, automationRun);

  const ids = async (query: string) => (await walk(s, token, query, 50)).map((r) => r.runId);
  assert.deepEqual(await ids(`&workflowId=${wf.id}`), started.map((r) => r.runId).reverse());
  assert.deepEqual(await ids(`&automationId=${auto.body.id}`), [autoRun.body.runId]);
  const p0 = started[0]!.contactId;
  assert.deepEqual(await ids(`&contactId=${p0}`), [autoRun.body.runId, started[4]!.runId, started[2]!.runId, started[0]!.runId]);
  assert.deepEqual(await ids(`&contactId=${p0}&workflowId=${wf.id}`), [started[4]!.runId, started[2]!.runId, started[0]!.runId]);
  assert.deepEqual(await ids('&status=QUEUED'), expected);
  assert.deepEqual(await ids('&status=COMPLETED'), []);
  // Ids of another workspace match nothing here (never an error that would tell they exist).
  assert.deepEqual(await ids(`&workflowId=${theirs.id}`), []);
  assert.deepEqual(await ids(`&contactId=${theirRun.body.contactId}`), []);
  assert.deepEqual(await ids('&workflowId=999999'), []);
  // Beside a status and a filter of this workspace too, answered before any run is read
  // (their runs would otherwise be walked and refused one by one, in a time that told how many).
  for (const query of [
    `&workflowId=${theirs.id}&status=QUEUED`,
    `&contactId=${theirRun.body.contactId}&status=QUEUED`,
    `&workflowId=${wf.id}&contactId=${theirRun.body.contactId}`,
  ]) {
    assert.deepEqual((await s.request('GET', `/runs?limit=50${query}`, { token })).body, { data: [], nextCursor: null }, query);
  }
  // A bad cursor is refused whatever the filters name.
  assertProblem(await s.request('GET', `/runs?workflowId=${theirs.id}&cursor=zzz`, { token }), 400, 'invalid_cursor');
  // And the other workspace sees only its run.
  assert.deepEqual(
    (await walk(s, other.token, '', 50)).map((r) => r.runId),
    [theirRun.body.runId],
  );
});

test('GET /runs: bad filters and cursors are 400, no credentials 401', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  for (const query of [
    'status=DONE',
    'workflowId=abc',
    'workflowId=0',
    'contactId=-1',
    'automationId=1.5',
    'limit=0',
    'limit=201',
    'cursor=%21%21',
    'colour=red',
  ]) {
    const res = await s.request('GET', `/runs?${query}`, { token });
    assert.ok(res.status === 400 || res.status === 422, `${query}: ${res.status}`);
    assertProblem(res, res.status);
  }
  assertProblem(await s.request('GET', '/runs'), 401);
  const key = await s.mintKey('VIEWER');
  assert.deepEqual((await s.request('GET', '/runs', { token: key })).body, { data: [], nextCursor: null });
});
