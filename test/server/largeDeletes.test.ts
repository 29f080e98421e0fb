/**
 * Deleting a contact or an automation that has many runs: the runs are unlinked (a contact's)
 * or deleted (an automation's) in steps of CASCADE_STEP, each its own transaction, so other
 * writes (a webhook's commit) take turns between them instead of waiting behind one long
 * statement; the outcome is what the foreign key's cascade would have made, and nothing of
 * another contact, automation or workspace is touched.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { and, count, eq, isNull } from 'drizzle-orm';
import { workflowRuns } from '../../src/core/db/schema.js';
import { CASCADE_STEP } from '../../src/core/services/cascade.js';
import { build, type TestServer, webhookWorkflowOf } from '../helpers.js';

/** Inserts `n` finished runs of one workflow or automation, for one contact, in one transaction. */
async function seedRuns(
  s: TestServer,
  workspaceId: number,
  n: number,
  of: { workflowId?: number; automationId?: number; contactId: number | null },
): Promise<void> {
  const row = {
    workspaceId,
    workflowId: of.workflowId ?? null,
    automationId: of.automationId ?? null,
    contactId: of.contactId,
    status: 'COMPLETED' as const,
    definition: [],
    trigger: {},
    finishedAt: '2026-01-01T00:00:00.000Z',
  };
  await s.store.transaction(async (db) => {
    for (let i = 0; i < n; i += 500) await db.insert(workflowRuns).values(Array.from({ length: Math.min(500, n - i) }, () => row));
  });
}

async function runsWhere(s: TestServer, where: ReturnType<typeof eq>): Promise<number> {
  const [row] = await s.db.select({ n: count() }).from(workflowRuns).where(where);
  return row?.n ?? 0;
}

const signupWorkflow = (s: TestServer, token: string) => webhookWorkflowOf(s, token, 'signup', [{ type: 'add_tags', tags: ['lead'] }]);

async function contact(s: TestServer, token: string, email: string): Promise<number> {
  const res = await s.request('POST', '/contacts', { token, body: { email } });
  assert.equal(res.status, 201, res.text);
  return res.body.id;
}

test('deleting a contact with many runs unlinks them all in steps, keeps the runs, and touches no other contact or workspace', async (t) => {
  const s = await build(t, { env: { SVC_ENGINE: 'false' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const wf = await signupWorkflow(s, token);
  const doomed = await contact(s, token, 'doomed@example.com');
  const kept = await contact(s, token, 'kept@example.com');
  const many = CASCADE_STEP * 2 + 17;
  await seedRuns(s, s.workspaceId, many, { workflowId: wf.id, contactId: doomed });
  await seedRuns(s, s.workspaceId, 5, { workflowId: wf.id, contactId: kept });
  const other = await s.otherWorkspace();
  const theirWf = await signupWorkflow(s, other.token);
  const theirs = await contact(s, other.token, 'doomed@example.com');
  await seedRuns(s, other.workspaceId, 3, { workflowId: theirWf.id, contactId: theirs });

  // Another workspace cannot delete it (404), and nothing is unlinked by trying.
  assert.equal((await s.request('DELETE', `/contacts/${doomed}`, { token: other.token })).status, 404);
  assert.equal(await runsWhere(s, eq(workflowRuns.contactId, doomed)), many);

  const res = await s.request('DELETE', `/contacts/${doomed}`, { token });
  assert.equal(res.status, 204, res.text);
  assert.equal((await s.request('GET', `/contacts/${doomed}`, { token })).status, 404);
  assert.equal(await runsWhere(s, eq(workflowRuns.contactId, doomed)), 0);
  assert.equal(await runsWhere(s, and(eq(workflowRuns.workspaceId, s.workspaceId), isNull(workflowRuns.contactId))!), many, 'every run kept, unlinked');
  assert.equal(await runsWhere(s, eq(workflowRuns.contactId, kept)), 5);
  assert.equal(await runsWhere(s, eq(workflowRuns.contactId, theirs)), 3);
  assert.equal(await runsWhere(s, eq(workflowRuns.workspaceId, other.workspaceId)), 3);
  // A second DELETE is 404, like any contact that is gone.
  assert.equal((await s.request('DELETE', `/contacts/${doomed}`, { token })).status, 404);
});

test('deleting an automation with many runs deletes them in steps, and no other automation’s or workflow’s runs', async (t) => {
  const s = await build(t, { env: { SVC_ENGINE: 'false' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const graph = {
    nodes: [
      { id: 'start', type: 'trigger', data: { source: 'MANUAL' } },
      { id: 'tag-it', type: 'add_tags', data: { tags: ['auto'] } },
    ],
    edges: [{ from: 'start', to: 'tag-it' }],
  };
  const make = async (name: string) => {
    const res = await s.request('POST', '/automations', { token, body: { name, status: 'ACTIVE', graph } });
    assert.equal(res.status, 201, res.text);
    return res.body.id as number;
  };
  const doomed = await make('Doomed');
  const kept = await make('Kept');
  const wf = await signupWorkflow(s, token);
  const person = await contact(s, token, 'p@example.com');
  const many = CASCADE_STEP * 3 + 1;
  await seedRuns(s, s.workspaceId, many, { automationId: doomed, contactId: person });
  await seedRuns(s, s.workspaceId, 4, { automationId: kept, contactId: person });
  await seedRuns(s, s.workspaceId, 6, { workflowId: wf.id, contactId: person });
  // A run the API started, through the engine's own path.
  const started = await s.request('POST', `/automations/${doomed}/runs`, { token, body: { contactId: person } });
  assert.equal(started.status, 202, started.text);

  const other = await s.otherWorkspace();
  assert.equal((await s.request('DELETE', `/automations/${doomed}`, { token: other.token })).status, 404);
  assert.equal(await runsWhere(s, eq(workflowRuns.automationId, doomed)), many + 1);

  const res = await s.request('DELETE', `/automations/${doomed}`, { token });
  assert.equal(res.status, 204, res.text);
  assert.equal((await s.request('GET', `/automations/${doomed}`, { token })).status, 404);
  assert.equal(await runsWhere(s, eq(workflowRuns.automationId, doomed)), 0);
  assert.equal(await runsWhere(s, eq(workflowRuns.automationId, kept)), 4);
  assert.equal(await runsWhere(s, eq(workflowRuns.workflowId, wf.id)), 6);
  assert.equal((await s.request('GET', `/runs/${started.body.runId}`, { token })).status, 404);
});

test('while a contact with many runs is being deleted, a webhook is accepted between its steps, not after the whole deletion', async (t) => {
  const s = await build(t, { env: { SVC_ENGINE: 'false', SVC_WEBHOOK_RATE_LIMIT: '100000' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const wf = await signupWorkflow(s, token);
  const doomed = await contact(s, token, 'doomed@example.com');
  const many = CASCADE_STEP * 100;
  await seedRuns(s, s.workspaceId, many, { workflowId: wf.id, contactId: doomed });

  let settled = false;
  const deletion = s.request('DELETE', `/contacts/${doomed}`, { token }).finally(() => (settled = true));
  // The first step committed: fewer runs are linked than were.
  while ((await runsWhere(s, eq(workflowRuns.contactId, doomed))) === many) await new Promise((r) => setTimeout(r, 2));
  const accepted = await s.request('POST', wf.path, { body: { email: 'new@example.com' } });
  assert.equal(accepted.status, 202, accepted.text);
  const before = !settled;
  const res = await deletion;
  assert.equal(res.status, 204, res.text);
  assert.ok(before, 'the webhook was answered while the deletion was still under way');
  assert.equal(await runsWhere(s, eq(workflowRuns.contactId, doomed)), 0);
  assert.equal(await runsWhere(s, eq(workflowRuns.id, accepted.body.runId)), 1);
});
