/**
 * On PostgreSQL a batch of runs' commits, and of accepted webhooks, sends its writes together
 * at its end, one statement per kind of write (engine/heldWrites.ts, core/db/intake.ts). The
 * result must be the same as writing each run's part in turn: these runs write the same rows
 * twice in one commit, and clash with each other, in bursts that fill a batch. They run on
 * both stores: the rules are the same, only the way the writes are sent differs.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildAsOwner, waitForRun, webhookWorkflow } from '../helpers.js';

test('writes of one row in one commit keep their order (tags added and removed, a contact updated twice)', async (t) => {
  const { s, token } = await buildAsOwner(t, { engine: true, env: { SVC_WEBHOOK_RATE_LIMIT: '1000' } });
  const N = 30;
  for (let i = 0; i < N; i++) {
    const res = await s.request('POST', '/contacts', { token, body: { email: `c${i}@example.com`, tags: ['keep'] } });
    assert.equal(res.status, 201, res.text);
  }
  const path = await webhookWorkflow(s, token, 'twice', [
    { type: 'add_tags', tags: ['gone'] },
    { type: 'remove_tags', tags: ['gone'] },
    { type: 'remove_tags', tags: ['keep'] },
    { type: 'add_tags', tags: ['keep'] },
    { type: 'update_contact', set: { 'attributes.n': '1', firstName: 'First' } },
    { type: 'update_contact', set: { 'attributes.n': '2' } },
  ]);
  const answers = await Promise.all(Array.from({ length: N }, (_, i) => s.request('POST', path, { body: { email: `c${i}@example.com` } })));
  for (const a of answers) assert.equal(a.status, 202, a.text);
  for (const a of answers) await waitForRun(s, token, a.body.runId, ['COMPLETED'], 30_000);

  for (const a of answers) {
    const contact = await s.request('GET', `/contacts/${a.body.contactId}`, { token });
    assert.equal(contact.status, 200, contact.text);
    assert.deepEqual(contact.body.tags, ['keep'], contact.text);
    assert.equal(contact.body.attributes.n, '2', contact.text);
    assert.equal(contact.body.firstName, 'First', contact.text);
  }
  const tags = await s.request('GET', '/tags?limit=50', { token });
  assert.equal(tags.status, 200, tags.text);
  const counts = Object.fromEntries((tags.body.data as { name: string; count: number }[]).map((r) => [r.name, r.count]));
  assert.deepEqual(counts, { keep: N }, 'a tag added and removed in one commit is not counted');
});

test('two runs taking one email at once: one completes, the other fails alone, and the runs beside them complete', async (t) => {
  const { s, token } = await buildAsOwner(t, { engine: true, env: { SVC_WEBHOOK_RATE_LIMIT: '1000' } });
  const path = await webhookWorkflow(s, token, 'rename', [{ type: 'update_contact', set: { email: '{{ trigger.newEmail }}' } }]);
  const bodies = [
    { email: 'a1@example.com', newEmail: 'shared@example.com' },
    { email: 'a2@example.com', newEmail: 'shared@example.com' },
    ...Array.from({ length: 20 }, (_, i) => ({ email: `o${i}@example.com`, newEmail: `renamed${i}@example.com` })),
  ];
  for (const b of bodies) {
    const res = await s.request('POST', '/contacts', { token, body: { email: b.email } });
    assert.equal(res.status, 201, res.text);
  }
  const answers = await Promise.all(bodies.map((body) => s.request('POST', path, { body })));
  for (const a of answers) assert.equal(a.status, 202, a.text);
  const runs = [];
  for (const a of answers) runs.push(await waitForRun(s, token, a.body.runId, ['COMPLETED', 'FAILED'], 30_000));

  const [first, second, ...others] = runs;
  assert.deepEqual([first.status, second.status].sort(), ['COMPLETED', 'FAILED'], `${JSON.stringify(first)} ${JSON.stringify(second)}`);
  const failed = first.status === 'FAILED' ? first : second;
  assert.match(JSON.stringify(failed), /another contact already has this email|could not be saved/);
  for (const run of others) assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  const shared = await s.request('GET', `/contacts?email=${encodeURIComponent('shared@example.com')}`, { token });
  assert.equal(shared.status, 200, shared.text);
  assert.equal(shared.body.data.length, 1);
  const winner = first.status === 'COMPLETED' ? answers[0]! : answers[1]!;
  assert.equal(shared.body.data[0].id, winner.body.contactId);
  for (let i = 0; i < 20; i++) {
    const res = await s.request('GET', `/contacts/${answers[i + 2]!.body.contactId}`, { token });
    assert.equal(res.body.email, `renamed${i}@example.com`, res.text);
  }
});

test('a contact deleted while webhooks for it are being accepted: every request is answered, no run is lost, none points at a missing contact', async (t) => {
  const { s, token } = await buildAsOwner(t, { env: { SVC_WEBHOOK_RATE_LIMIT: '1000' } });
  const path = await webhookWorkflow(s, token, 'busy', [{ type: 'add_tags', tags: ['seen'] }]);
  for (let round = 0; round < 5; round++) {
    const created = await s.request('POST', '/contacts', { token, body: { email: 'busy@example.com' } });
    assert.equal(created.status, 201, created.text);
    const posts = Array.from({ length: 40 }, () => s.request('POST', path, { body: { email: 'busy@example.com' } }));
    const deleted = s.request('DELETE', `/contacts/${created.body.id}`, { token });
    const answers = await Promise.all(posts);
    assert.equal((await deleted).status, 204);
    for (const a of answers) assert.equal(a.status, 202, a.text);
    for (const a of answers) {
      const run = await s.request('GET', `/runs/${a.body.runId}`, { token });
      assert.equal(run.status, 200, run.text);
      // Accepted before the delete: the run keeps no contact. After it: a new contact was made.
      if (a.body.contactId !== created.body.id) {
        const contact = await s.request('GET', `/contacts/${a.body.contactId}`, { token });
        assert.equal(contact.status, 200, contact.text);
      }
    }
    // Whatever is left of the address is one contact, for the next round.
    const left = await s.request('GET', '/contacts?email=busy%40example.com', { token });
    for (const c of left.body.data as { id: number }[]) assert.equal((await s.request('DELETE', `/contacts/${c.id}`, { token })).status, 204);
  }
});

test('contacts and runs made in bursts, by the API and by webhooks, are counted exactly in /billing/plan', async (t) => {
  const { s, token } = await buildAsOwner(t, { env: { SVC_WEBHOOK_RATE_LIMIT: '1000' } });
  const path = await webhookWorkflow(s, token, 'count', [{ type: 'add_tags', tags: ['counted'] }]);
  const before = await s.request('GET', '/billing/plan', { token });
  assert.equal(before.status, 200, before.text);
  // 40 contacts by the API and 60 by webhooks (20 of them twice: 80 runs), all at once; then
  // 10 deleted.
  const made = await Promise.all([
    ...Array.from({ length: 40 }, (_, i) => s.request('POST', '/contacts', { token, body: { email: `api${i}@example.com` } })),
    ...Array.from({ length: 80 }, (_, i) => s.request('POST', path, { body: { email: `hook${i % 60}@example.com` } })),
  ]);
  for (const res of made.slice(0, 40)) assert.equal(res.status, 201, res.text);
  for (const res of made.slice(40)) assert.equal(res.status, 202, res.text);
  for (const res of made.slice(0, 10)) assert.equal((await s.request('DELETE', `/contacts/${res.body.id}`, { token })).status, 204);
  const after = await s.request('GET', '/billing/plan', { token });
  assert.equal(after.status, 200, after.text);
  assert.equal(after.body.usage.contacts - before.body.usage.contacts, 40 + 60 - 10, after.text);
  assert.equal(after.body.usage.runsThisMonth - before.body.usage.runsThisMonth, 80, after.text);
});

test('an email with a NUL, which PostgreSQL refuses, is a 422 for its own request and never fails the requests beside it', async (t) => {
  const { s, token } = await buildAsOwner(t, { env: { SVC_WEBHOOK_RATE_LIMIT: '1000' } });
  const path = await webhookWorkflow(s, token, 'nul', [{ type: 'add_tags', tags: ['ok'] }]);
  for (let round = 0; round < 3; round++) {
    const answers = await Promise.all([
      ...Array.from({ length: 10 }, (_, i) => s.request('POST', path, { body: { email: `fine${i}@example.com` } })),
      s.request('POST', path, { body: { email: 'bad\u0000one@example.com' } }),
    ]);
    for (const a of answers.slice(0, 10)) assert.equal(a.status, 202, a.text);
    const bad = answers[10]!;
    assert.equal(bad.status, 422, `a NUL in the email: ${bad.text}`);
  }
});
