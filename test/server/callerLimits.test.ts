/**
 * Per-caller rate limits of the costly routes (issue 8, items 5 and 8): template previews
 * and test emails render Liquid; automation runs and webhook-event replays start runs.
 * Each user or API key has its own count; past it, 429 `rate_limited` with Retry-After.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { count } from 'drizzle-orm';
import { workflowRuns } from '../../src/core/db/schema.js';
import { assertProblem, build, type HttpResult } from '../helpers.js';

function assertLimited(res: HttpResult): void {
  assertProblem(res, 429, 'rate_limited');
  const retryAfter = Number(res.headers.get('retry-after'));
  assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `Retry-After ${res.headers.get('retry-after')}`);
}

test('previews and test emails: at most SVC_RENDER_RATE_LIMIT a minute per caller, each caller counted alone', async (t) => {
  const s = await build(t, { env: { SVC_RENDER_RATE_LIMIT: '3' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const template = await s.request('POST', '/templates', { token, body: { name: 'n', channel: 'SMS', content: { text: 'Hi {{ contact.firstName }}' } } });
  assert.equal(template.status, 201, template.text);
  const preview = (tok: string) => s.request('POST', `/templates/${template.body.id}/preview`, { token: tok, body: {} });

  for (let i = 0; i < 2; i++) assert.equal((await preview(token)).status, 200);
  // A test email counts against the same limit as a preview.
  const email = await s.request('POST', '/messages/test-email', { token, body: { to: 'a@example.com', subject: 's', text: 't' } });
  assert.equal(email.status, 202, email.text);
  assertLimited(await preview(token));
  assertLimited(await s.request('POST', '/messages/test-email', { token, body: { to: 'a@example.com', subject: 's', text: 't' } }));

  // Another user, and an API key of the same owner's workspace, have their own counts.
  const viewer = await s.userWithRole('VIEWER');
  assert.equal((await preview(viewer.token)).status, 200);
  const key = await s.request('POST', '/api-keys', { token, body: { name: 'k', role: 'VIEWER' } });
  assert.equal(key.status, 201, key.text);
  assert.equal((await preview(key.body.key)).status, 200);
  // Other routes are not limited by it.
  assert.equal((await s.request('GET', `/templates/${template.body.id}`, { token })).status, 200);
});

test('automation runs and replays: at most SVC_RUN_START_RATE_LIMIT a minute per caller', async (t) => {
  const s = await build(t, { env: { SVC_RUN_START_RATE_LIMIT: '2' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' } },
      { id: 'a', type: 'add_tags', data: { tags: ['x'] } },
    ],
    edges: [{ from: 't', to: 'a' }],
  };
  const automation = await s.request('POST', '/automations', { token, body: { name: 'A', status: 'ACTIVE', graph } });
  assert.equal(automation.status, 201, automation.text);
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'c@example.com' } });
  const start = (tok: string) => s.request('POST', `/automations/${automation.body.id}/runs`, { token: tok, body: { contactId: contact.body.id } });

  assert.equal((await start(token)).status, 202);
  // A replay counts against the same limit.
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'w', triggerSource: 'WEBHOOK', status: 'ACTIVE', webhook: { lookup: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  assert.equal((await s.request('POST', new URL(wf.body.webhook.url).pathname, { body: { email: 'w@example.com' } })).status, 202);
  const events = await s.request('GET', `/workflows/${wf.body.id}/webhook-events`, { token });
  const replay = () => s.request('POST', `/webhook-events/${events.body.data[0].id}/replay`, { token });
  assert.equal((await replay()).status, 202);
  assertLimited(await replay());
  assertLimited(await start(token));
  const [runs] = await s.db.select({ n: count() }).from(workflowRuns);
  assert.equal(runs?.n, 3, 'one manual run, one webhook run, one replay: the refused calls started nothing');

  const member = await s.userWithRole('MEMBER');
  assert.equal((await start(member.token)).status, 202);
});
