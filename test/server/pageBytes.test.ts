/**
 * List pages are capped by bytes as well as by count (issue 8, item 7): a page of
 * webhook events with one-MiB bodies stops early with a nextCursor instead of building
 * 200 of them in memory, and following the cursors still yields every event once.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MAX_PAGE_BYTES } from '../../src/core/pagination.js';
import { build } from '../helpers.js';

test('webhook events with big bodies: pages stop at the byte cap, the cursors still reach every event once', async (t) => {
  const s = await build(t, { env: { SVC_WEBHOOK_RATE_LIMIT: '1000000', SVC_WEBHOOK_BODY_LIMIT: String(2 * 1024 * 1024) } });
  const token = await s.login(s.owner.email, s.owner.password);
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'w', triggerSource: 'WEBHOOK', status: 'ACTIVE', webhook: { lookup: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  const path = new URL(wf.body.webhook.url).pathname;
  const posted = 8;
  for (let i = 0; i < posted; i++) {
    const res = await s.request('POST', path, { body: { email: `big${i}@example.com`, pad: String(i).repeat(900 * 1024) } });
    assert.equal(res.status, 202, res.text);
  }
  // A few small ones too: they share pages with the big ones where the budget allows.
  for (let i = 0; i < 5; i++) assert.equal((await s.request('POST', path, { body: { email: `small${i}@example.com` } })).status, 202);

  const seen: number[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const res = await s.request('GET', `/workflows/${wf.body.id}/webhook-events?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(res.status, 200, res.text.slice(0, 300));
    assert.ok(res.text.length <= MAX_PAGE_BYTES * 1.5, `a page of ${res.text.length} bytes`);
    assert.ok(res.body.data.length >= 1, 'every page has at least one event');
    seen.push(...res.body.data.map((e: { id: number }) => e.id));
    cursor = res.body.nextCursor;
    pages++;
    assert.ok(pages <= 20, 'the cursors end');
  } while (cursor);
  assert.equal(new Set(seen).size, posted + 5, 'every event once');
  assert.equal(seen.length, posted + 5);
  assert.ok(pages >= 4, `${pages} pages for ${posted} events of 900 KiB`);
  assert.deepEqual(
    [...seen].sort((a, b) => b - a),
    seen,
    'newest first across pages',
  );
  // Small rows still come as one page.
  const small = await s.request('GET', `/workflows/${wf.body.id}/webhook-events?limit=5`, { token });
  assert.equal(small.body.data.length, 5);
  assert.ok(small.body.nextCursor);
});
