import assert from 'node:assert/strict';
import { test } from 'node:test';
import { build } from '../helpers.js';

test('healthz answers ok with a request id', async (t) => {
  const s = await build(t);
  const res = await s.request('GET', '/healthz', { headers: { 'x-request-id': 'abc-123' } });
  assert.equal(res.status, 200);
  // It also names the version and the schema version (test/server/readyz.test.ts checks them).
  assert.deepEqual(Object.keys(res.body).sort(), ['schemaVersion', 'status', 'version']);
  assert.equal(res.body.status, 'ok');
  assert.equal(res.headers.get('x-request-id'), 'abc-123');
});
