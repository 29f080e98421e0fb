/**
 * Replay of a stored webhook event (API.md section 3): a new run from the stored bytes,
 * resolved against the workflow as it is now. Checked through the real server: the answer
 * names the contact and the run, and both are what they claim to be.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { build } from '../helpers.js';

test('replaying a refused event after turning on create-if-not-found creates the contact (a service nested in a transaction)', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'w', triggerSource: 'WEBHOOK', status: 'ACTIVE', webhook: { lookup: 'email', path: 'user.email' } },
  });
  assert.equal(wf.status, 201, wf.text);
  const path = new URL(wf.body.webhook.url).pathname;
  const sent = { user: { email: 'New@Example.com' }, plan: 'pro' };
  const refused = await s.request('POST', path, { body: sent });
  assert.equal(refused.status, 404, refused.text);
  assert.equal(refused.body.code, 'contact_not_found');
  const none = await s.request('GET', '/contacts?email=new@example.com', { token });
  assert.deepEqual(none.body.data, [], 'the refused POST created no contact');

  const patched = await s.request('PATCH', `/workflows/${wf.body.id}`, { token, body: { webhook: { createIfNotFound: true } } });
  assert.equal(patched.status, 200, patched.text);
  const events = await s.request('GET', `/workflows/${wf.body.id}/webhook-events`, { token });
  assert.equal(events.body.data.length, 1);
  // Replay takes no body: one may be left out or be {}, but a field in it is refused, not ignored.
  const extra = await s.request('POST', `/webhook-events/${events.body.data[0].id}/replay`, { token, body: { contactId: 1 } });
  assert.equal(extra.status, 422, extra.text);
  assert.deepEqual(
    extra.body.errors.map((e: { path: string }) => e.path),
    ['/contactId'],
  );
  const replay = await s.request('POST', `/webhook-events/${events.body.data[0].id}/replay`, { token });
  assert.equal(replay.status, 202, replay.text);
  const { runId, contactId } = replay.body as { runId: number; contactId: number };
  assert.ok(Number.isInteger(runId) && runId > 0, `runId ${runId}`);
  assert.ok(Number.isInteger(contactId) && contactId > 0, `contactId ${contactId}`);

  // The contact named is the one created from the stored body (email lower-cased).
  const contact = await s.request('GET', `/contacts/${contactId}`, { token });
  assert.equal(contact.status, 200, contact.text);
  assert.equal(contact.body.email, 'new@example.com');
  const found = await s.request('GET', '/contacts?email=new@example.com', { token });
  assert.deepEqual(
    found.body.data.map((c: { id: number }) => c.id),
    [contactId],
    'exactly one contact has the email',
  );

  // The run named belongs to this workflow and contact and carries the stored body as its trigger.
  const run = await s.request('GET', `/runs/${runId}`, { token });
  assert.equal(run.status, 200, run.text);
  assert.equal(run.body.runId, runId);
  assert.equal(run.body.workflowId, wf.body.id);
  assert.equal(run.body.contactId, contactId);
  assert.deepEqual(run.body.trigger, sent);
  const runs = await s.request('GET', `/workflows/${wf.body.id}/runs`, { token });
  assert.deepEqual(
    runs.body.data.map((r: { runId: number }) => r.runId),
    [runId],
    'the replay started one run, and the refused POST none',
  );
});
