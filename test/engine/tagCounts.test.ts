/**
 * The engine's tag steps keep GET /tags exact under concurrency. On PostgreSQL the engine's
 * commits count tags themselves, per batch, just before COMMIT (migration 0003), instead of
 * row by row in a trigger that made one tag's count a row every batch waited on.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildAsOwner, waitForRun, webhookWorkflow } from '../helpers.js';

test('runs adding and removing tags at once leave every tag count equal to the contacts that carry it', async (t) => {
  const { s, token } = await buildAsOwner(t, { engine: true, env: { SVC_WEBHOOK_RATE_LIMIT: '1000' } });
  const N = 60;
  // Half the contacts start with 'old', a third already have 'vip'.
  for (let i = 0; i < N; i++) {
    const tags = [...(i % 2 === 0 ? ['old'] : []), ...(i % 3 === 0 ? ['VIP'] : [])];
    const res = await s.request('POST', '/contacts', { token, body: { email: `c${i}@example.com`, tags } });
    assert.equal(res.status, 201, res.text);
  }
  const path = await webhookWorkflow(s, token, 'retag', [
    { type: 'add_tags', tags: ['vip', 'Campaign-7'] },
    { type: 'remove_tags', tags: ['old'] },
  ]);
  // Every existing contact twice (two runs of one contact at once), and ten new ones.
  const emails = [...Array.from({ length: N }, (_, i) => `c${i}@example.com`), ...Array.from({ length: N }, (_, i) => `c${i}@example.com`)];
  for (let i = 0; i < 10; i++) emails.push(`new${i}@example.com`);
  const answers = await Promise.all(emails.map((email) => s.request('POST', path, { body: { email } })));
  for (const a of answers) assert.equal(a.status, 202, a.text);
  for (const a of answers) await waitForRun(s, token, a.body.runId, ['COMPLETED'], 30_000);

  const counts = new Map<string, number>();
  const tags = await s.request('GET', '/tags?limit=200', { token });
  assert.equal(tags.status, 200, tags.text);
  for (const row of tags.body.data as { name: string; count: number }[]) counts.set(row.name.toLowerCase(), row.count);
  const carrying = async (tag: string) => {
    const res = await s.request('GET', `/contacts?tag=${tag}&limit=200`, { token });
    assert.equal(res.status, 200, res.text);
    return res.body.data.length as number;
  };
  assert.equal(await carrying('vip'), N + 10);
  assert.equal(counts.get('vip'), N + 10, 'vip: every contact, counted once');
  assert.equal(counts.get('campaign-7'), N + 10);
  assert.equal(await carrying('old'), 0);
  assert.equal(counts.has('old'), false, 'a tag no contact carries is not listed');
});
