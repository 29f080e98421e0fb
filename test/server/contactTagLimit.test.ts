/**
 * A contact has at most 1,000 tags (MAX_TAGS_PER_CONTACT), on every path that adds them:
 * POST /contacts/:id/tags (422 too_many_tags, nothing added), an import row (reported, the
 * others go on), and an add_tags step (the run fails, nothing added). And an import row that
 * is refused changes nothing of its contact, also when an earlier row of the file created it.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertProblem, buildAsOwner, waitForRun, webhookWorkflow, type TestServer } from '../helpers.js';

const names = (from: number, n: number) => Array.from({ length: n }, (_, i) => `t${from + i}`);

async function contactWithTags(s: TestServer, token: string, email: string, count: number): Promise<number> {
  const made = await s.request('POST', '/contacts', { token, body: { email } });
  assert.equal(made.status, 201, made.text);
  for (let from = 0; from < count; from += 100) {
    const res = await s.request('POST', `/contacts/${made.body.id}/tags`, { token, body: { tags: names(from, Math.min(100, count - from)) } });
    assert.equal(res.status, 200, res.text);
  }
  return made.body.id;
}

const importRows = (s: TestServer, token: string, rows: unknown[]) =>
  s.request('POST', '/contacts/import', {
    token,
    raw: `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`,
    headers: { 'content-type': 'application/x-ndjson' },
  });

test('POST /contacts/:id/tags past 1,000 tags: 422 too_many_tags and nothing added; tags it has already are fine', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const id = await contactWithTags(s, token, 'full@example.com', 1000);
  const over = await s.request('POST', `/contacts/${id}/tags`, { token, body: { tags: ['t5', 'one-more'] } });
  assertProblem(over, 422, 'too_many_tags');
  assert.equal(over.body.errors[0].path, '/tags');
  const contact = await s.request('GET', `/contacts/${id}`, { token });
  assert.equal(contact.body.tags.length, 1000);
  assert.ok(!contact.body.tags.includes('one-more'));
  assert.equal((await s.request('POST', `/contacts/${id}/tags`, { token, body: { tags: ['T7', 't999'] } })).status, 200);
  const tags = await s.request('GET', '/tags?limit=200', { token });
  assert.ok(!tags.body.data.some((r: { name: string }) => r.name === 'one-more'), 'the counters count nothing for the refused call');
});

test('import: a row that would take its contact past 1,000 tags is reported, the rows beside it go on', async (t) => {
  const { s, token } = await buildAsOwner(t);
  await contactWithTags(s, token, 'nearly@example.com', 999);
  const res = await importRows(s, token, [
    { email: 'nearly@example.com', tags: ['new-a', 'new-b'], firstName: 'Refused' },
    { email: 'nearly@example.com', tags: ['new-c'], firstName: 'Taken' },
    { email: 'many@example.com', tags: names(0, 1001) },
    { email: 'fine@example.com', tags: ['ok'] },
  ]);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual([res.body.created, res.body.updated, res.body.errorCount], [1, 1, 2]);
  assert.deepEqual(
    res.body.errors.map((e: { line: number; field: string }) => [e.line, e.field]),
    [
      [1, 'tags'],
      [3, 'tags'],
    ],
  );
  const nearly = (await s.request('GET', '/contacts?email=nearly%40example.com', { token })).body.data[0];
  assert.equal(nearly.tags.length, 1000);
  assert.ok(nearly.tags.includes('new-c') && !nearly.tags.includes('new-a'));
  assert.equal(nearly.firstName, 'Taken');
  assert.deepEqual((await s.request('GET', '/contacts?email=many%40example.com', { token })).body.data, []);
});

test('import: a refused row changes nothing of a contact an earlier row of the same file created or changed', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // Each row's attributes fit (64 KiB); merged, the second's would not.
  const half = 'x'.repeat(40 * 1024);
  const res = await importRows(s, token, [
    { email: 'a@example.com', firstName: 'First', attributes: { plan: 'pro', one: half } },
    { email: 'a@example.com', firstName: 'Refused', phone: '+16135550100', attributes: { two: half } },
    { email: 'a@example.com', lastName: 'Kept' },
  ]);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual([res.body.created, res.body.updated, res.body.errorCount], [1, 1, 1]);
  assert.equal(res.body.errors[0].field, 'attributes');
  const contact = (await s.request('GET', '/contacts?email=a%40example.com', { token })).body.data[0];
  assert.deepEqual([contact.firstName, contact.lastName, contact.phone, Object.keys(contact.attributes).sort()], ['First', 'Kept', null, ['one', 'plan']]);
});

test('an add_tags step that would take its contact past 1,000 tags fails the run and adds nothing', async (t) => {
  const { s, token } = await buildAsOwner(t, { engine: true });
  await contactWithTags(s, token, 'engine@example.com', 999);
  const path = await webhookWorkflow(s, token, 'tagging', [{ type: 'add_tags', tags: ['late-a', 'late-b'] }]);
  const accepted = await s.request('POST', path, { body: { email: 'engine@example.com' } });
  assert.equal(accepted.status, 202, accepted.text);
  const run = await waitForRun(s, token, accepted.body.runId, ['FAILED', 'COMPLETED']);
  assert.equal(run.status, 'FAILED', JSON.stringify(run));
  assert.match(run.steps[0].error, /at most 1000 tags/);
  const contact = (await s.request('GET', '/contacts?email=engine%40example.com', { token })).body.data[0];
  assert.equal(contact.tags.length, 999);
});
