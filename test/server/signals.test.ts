/**
 * Signals between the nodes of a cluster (issue 12, step b): a node that accepts a webhook
 * wakes the engines of the others through Redis pub/sub, so an idle node takes the run up at
 * once instead of at its next poll of the database.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { build, joinNode, waitForRun, webhookWorkflow } from '../helpers.js';
import { skipOutsideCIWithoutRedis, testRedisPrefix, testRedisServer } from '../redis.js';

test('a webhook accepted by an ingest-only node is run at once by another node whose engine polls once a minute', {
  skip: skipOutsideCIWithoutRedis(),
}, async (t) => {
  const env = { SVC_REDIS_URL: testRedisServer()!, SVC_REDIS_PREFIX: testRedisPrefix() };
  const ingest = await build(t, { env });
  // Its engine's own poll would find the run a minute later: only the signal can wake it sooner.
  const runner = await joinNode(ingest, { env, engine: { pollMs: 60_000 } });
  assert.equal(ingest.app.engine, undefined);
  assert.ok(runner.app.engine);

  const token = await ingest.login(ingest.owner.email, ingest.owner.password);
  const path = await webhookWorkflow(ingest, token, 'woken', [{ type: 'add_tags', tags: ['woken'] }]);

  // The runner listens before the webhook is sent (its subscription is made once Redis answers).
  const redis = new Redis(env.SVC_REDIS_URL);
  t.after(() => redis.disconnect());
  const channel = `${env.SVC_REDIS_PREFIX}wake`;
  for (let i = 0; ; i++) {
    const [, listeners] = (await redis.pubsub('NUMSUB', channel)) as [string, number];
    if (Number(listeners) >= 1) break;
    assert.ok(i < 100, 'the runner never subscribed');
    await new Promise((r) => setTimeout(r, 50));
  }
  // The runner's engine has made its first claim on start: wait until that is behind it.
  await new Promise((r) => setTimeout(r, 300));

  const started = Date.now();
  const accepted = await ingest.request('POST', path, { body: { email: 'woken@example.com' } });
  assert.equal(accepted.status, 202, accepted.text);
  const run = await waitForRun(runner, token, accepted.body.runId, ['COMPLETED'], 10_000);
  const ms = Date.now() - started;
  t.diagnostic(`accepted on the ingest node, COMPLETED by the woken node ${ms} ms later`);
  assert.equal(run.status, 'COMPLETED');
  assert.ok(ms < 10_000, `${ms} ms`);
});
