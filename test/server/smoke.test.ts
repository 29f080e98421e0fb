import assert from 'node:assert/strict';
import { test } from 'node:test';
import { build } from '../helpers.js';

test('healthz answers ok with a request id', async (t) => {
  const s = await build(t);
  const res = await s.request('GET', '/healthz', { headers: { 'x-request-id': 'abc-123' } });
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { status: 'ok' });
  assert.equal(res.headers.get('x-request-id'), 'abc-123');
});
