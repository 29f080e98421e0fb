import assert from 'node:assert/strict';
import { test } from 'node:test';
import { build } from '../helpers.js';
test('replaying a refused event after turning on create-if-not-found creates the contact (a service nested in a transaction)', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const wf = await s.request('POST', '/workflows', { token, body: { name: 'w', triggerSource: 'WEBHOOK', status: 'ACTIVE', webhook: { lookup: 'email', path: 'user.email' } } });
  const path = new URL(wf.body.webhook.url).pathname;
  const refused = await s.request('POST', path, { body: { user: { email: 'new@example.com' } } });
  assert.equal(refused.status, 404);
  await s.request('PATCH', `/workflows/${wf.body.id}`, { token, body: { webhook: { createIfNotFound: true } } });
  const events = await s.request('GET', `/workflows/${wf.body.id}/webhook-events`, { token });
  const replay = await s.request('POST', `/webhook-events/${events.body.data[0].id}/replay`, { token });
  assert.equal(replay.status, 202, replay.text);
});
