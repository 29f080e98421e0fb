/**
 * An engine thread reads each run with its workspace, contact and tags in one statement, the
 * runs a task starts together in one (engine/sql.ts: RunContext). What a run renders must
 * still be its own contact as it is when the run starts: not another run's, not an older read.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildAsOwner, waitForRun, webhookWorkflow } from '../helpers.js';

/** Writes what the run saw of its contact and workspace into the contact's `seen` attribute. */
const SEEN_STEP = {
  type: 'update_contact',
  set: { 'attributes.seen': '{{ contact.tags | join: "," }}|{{ contact.firstName }}|{{ contact.attributes.n }}|{{ workspace.name }}|{{ contact.email }}' },
};

test('runs started together each see their own contact, tags and workspace, runs of one contact alike', async (t) => {
  const { s, token } = await buildAsOwner(t, { engine: true, env: { SVC_WEBHOOK_RATE_LIMIT: '1000' } });
  const me = await s.request('GET', '/auth/me', { token });
  assert.equal(me.status, 200, me.text);
  const workspaceName = me.body.workspace.name as string;
  assert.ok(workspaceName.length > 0);
  const path = await webhookWorkflow(s, token, 'seen', [SEEN_STEP]);
  // Tags given out of order and in mixed case: a run sees them in tag order (case-folded).
  const contacts = [
    { email: 'ann@example.com', firstName: 'Ann', tags: ['zeta', 'Alpha'], attributes: { n: 1 } },
    { email: 'bob@example.com', firstName: 'Bob', tags: [], attributes: { n: 2 } },
    { email: 'cy@example.com', firstName: 'Cy', tags: ['b', 'A', 'c'], attributes: { n: 3 } },
    { email: 'di@example.com', firstName: 'Di', tags: ['solo'], attributes: { n: 4 } },
  ];
  for (const c of contacts) assert.equal((await s.request('POST', '/contacts', { token, body: c })).status, 201);
  // Four runs of each contact at once, interleaved: most of them in one task of a thread.
  const bodies = [0, 1, 2, 3].flatMap(() => contacts.map((c) => ({ email: c.email })));
  const answers = await Promise.all(bodies.map((body) => s.request('POST', path, { body })));
  for (const a of answers) assert.equal(a.status, 202, a.text);
  for (const a of answers) assert.equal((await waitForRun(s, token, a.body.runId, ['COMPLETED', 'FAILED'])).status, 'COMPLETED');

  const expected: Record<string, string> = {
    'ann@example.com': 'Alpha,zeta|Ann|1',
    'bob@example.com': '|Bob|2',
    'cy@example.com': 'A,b,c|Cy|3',
    'di@example.com': 'solo|Di|4',
  };
  for (const c of contacts) {
    const res = await s.request('GET', `/contacts?email=${encodeURIComponent(c.email)}`, { token });
    assert.equal(res.status, 200, res.text);
    const [seenTags, first, n, ws, email] = String(res.body.data[0].attributes.seen).split('|');
    assert.equal(`${seenTags}|${first}|${n}`, expected[c.email], c.email);
    assert.equal(email, c.email);
    assert.equal(ws, workspaceName);
  }
});

test('a run started after its contact changed sees the change, not an earlier run read', async (t) => {
  const { s, token } = await buildAsOwner(t, { engine: true });
  const path = await webhookWorkflow(s, token, 'seen', [SEEN_STEP]);
  const created = await s.request('POST', '/contacts', { token, body: { email: 'eve@example.com', firstName: 'Eve', tags: ['one'], attributes: { n: 1 } } });
  assert.equal(created.status, 201, created.text);
  const seen = async () => {
    const res = await s.request('POST', path, { body: { email: 'eve@example.com' } });
    assert.equal(res.status, 202, res.text);
    assert.equal((await waitForRun(s, token, res.body.runId, ['COMPLETED', 'FAILED'])).status, 'COMPLETED');
    const contact = await s.request('GET', `/contacts/${created.body.id}`, { token });
    return String(contact.body.attributes.seen).split('|').slice(0, 3).join('|');
  };
  assert.equal(await seen(), 'one|Eve|1');

  const changed = await s.request('PATCH', `/contacts/${created.body.id}`, {
    token,
    body: { firstName: 'Evelyn', attributes: { n: 2, seen: 'reset' } },
  });
  assert.equal(changed.status, 200, changed.text);
  const tagged = await s.request('POST', `/contacts/${created.body.id}/tags`, { token, body: { tags: ['two'] } });
  assert.ok(tagged.status < 300, tagged.text);
  assert.equal(await seen(), 'one,two|Evelyn|2');

  // Deleted between the webhook and the run: the run has no contact, and says so.
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'by id',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'wait', seconds: 1 }, SEEN_STEP],
      webhook: { lookup: 'contactId', path: 'id' },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const accepted = await s.request('POST', new URL(wf.body.webhook.url).pathname, { body: { id: created.body.id } });
  assert.equal(accepted.status, 202, accepted.text);
  await waitForRun(s, token, accepted.body.runId, ['WAITING']);
  assert.equal((await s.request('DELETE', `/contacts/${created.body.id}`, { token })).status, 204);
  const run = await waitForRun(s, token, accepted.body.runId, ['COMPLETED', 'FAILED'], 20_000);
  assert.equal(run.status, 'FAILED', JSON.stringify(run));
  assert.match(run.steps[1].error, /no contact/);
});
