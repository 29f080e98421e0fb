/**
 * Limits counted across the nodes of a cluster (issue 12, step b): the per-address webhook
 * limit in Redis, two real servers sharing it; Redis away degrades to counting per node
 * (never a refusal, never a lost webhook), and /readyz says whether Redis answers.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Redis } from 'ioredis';
import { ConfigError, loadConfig, writeInitialConfig } from '../../src/core/config.js';
import { assertProblem, build, tempDir, webhookWorkflow, type TestServer } from '../helpers.js';
import { skipOutsideCIWithoutRedis, testRedisPrefix, testRedisServer } from '../redis.js';

const LIMIT = 5;

async function hook(s: TestServer): Promise<string> {
  return webhookWorkflow(s, await s.login(s.owner.email, s.owner.password), 'limited', [{ type: 'add_tags', tags: ['x'] }]);
}

const post = (s: TestServer, path: string, i: number) => s.request('POST', path, { body: { email: `n${i}@example.com` } });

test('two nodes sharing Redis count one per-address webhook limit: the request over it is 429 on either node', {
  skip: skipOutsideCIWithoutRedis(),
}, async (t) => {
  const env = { SVC_REDIS_URL: testRedisServer()!, SVC_REDIS_PREFIX: testRedisPrefix(), SVC_WEBHOOK_RATE_LIMIT: String(LIMIT) };
  const a = await build(t, { env });
  const b = await build(t, { env });
  const [pathA, pathB] = [await hook(a), await hook(b)];
  // LIMIT requests spread over both nodes are all accepted...
  for (let i = 0; i < LIMIT; i++) {
    const res = i % 2 ? await post(b, pathB, i) : await post(a, pathA, i);
    assert.equal(res.status, 202, res.text);
  }
  // ...and the next one is refused on both, with the limit's headers.
  for (const [s, path] of [
    [a, pathA],
    [b, pathB],
  ] as const) {
    const over = await post(s, path, 99);
    assertProblem(over, 429, 'rate_limited');
    assert.ok(Number(over.headers.get('retry-after')) > 0);
    assert.equal(over.headers.get('x-ratelimit-limit'), String(LIMIT));
  }
  const ready = await a.request('GET', '/readyz');
  assert.equal(ready.status, 200, ready.text);
  assert.equal(ready.body.checks.redis, 'up');
});

test('a prefix of its own keeps another cluster on the same Redis out of the count', { skip: skipOutsideCIWithoutRedis() }, async (t) => {
  const server = testRedisServer()!;
  const one = await build(t, { env: { SVC_REDIS_URL: server, SVC_REDIS_PREFIX: testRedisPrefix(), SVC_WEBHOOK_RATE_LIMIT: String(LIMIT) } });
  const other = await build(t, { env: { SVC_REDIS_URL: server, SVC_REDIS_PREFIX: testRedisPrefix(), SVC_WEBHOOK_RATE_LIMIT: String(LIMIT) } });
  const [p1, p2] = [await hook(one), await hook(other)];
  for (let i = 0; i < LIMIT; i++) assert.equal((await post(one, p1, i)).status, 202);
  assertProblem(await post(one, p1, 99), 429, 'rate_limited');
  assert.equal((await post(other, p2, 1)).status, 202, 'the other prefix counts on its own');
  // The keys carry the prefix and expire with the window.
  const redis = new Redis(server);
  t.after(() => redis.disconnect());
  const keys = await redis.keys(`${one.config.redisPrefix}*`);
  assert.ok(keys.length > 0 && keys.every((k) => k.startsWith(`${one.config.redisPrefix}webhook-limit:`)), JSON.stringify(keys));
  for (const key of keys) assert.ok((await redis.pttl(key)) > 0, `${key} expires`);
});

test('Redis away: webhooks are still accepted, the limit is counted per node, and /readyz says redis down while ready', async (t) => {
  // Nothing listens on port 1: the connection is refused at once, again and again.
  const s = await build(t, { env: { SVC_REDIS_URL: 'redis://127.0.0.1:1', SVC_WEBHOOK_RATE_LIMIT: String(LIMIT) } });
  const path = await hook(s);
  for (let i = 0; i < LIMIT; i++) {
    const res = await post(s, path, i);
    assert.equal(res.status, 202, res.text);
  }
  assertProblem(await post(s, path, 99), 429, 'rate_limited');
  const ready = await s.request('GET', '/readyz');
  assert.equal(ready.status, 200, ready.text);
  assert.equal(ready.body.checks.redis, 'down');
});

test('two nodes sharing Redis count failed logins and previews together; Redis away falls back to each node counting', {
  skip: skipOutsideCIWithoutRedis(),
}, async (t) => {
  const env = { SVC_REDIS_URL: testRedisServer()!, SVC_REDIS_PREFIX: testRedisPrefix(), SVC_LOGIN_RATE_LIMIT: '3', SVC_RENDER_RATE_LIMIT: '3' };
  // Two servers of one cluster: the owner is the same email and user 1 on both, as on one database.
  const a = await build(t, { env });
  const b = await build(t, { env });
  const [ta, tb] = [await a.login(a.owner.email, a.owner.password), await b.login(b.owner.email, b.owner.password)];
  const login = (s: TestServer, password: string) => s.request('POST', '/auth/login', { body: { email: s.owner.email, password } });
  assert.equal((await login(a, 'wrong-password-1')).status, 401);
  assert.equal((await login(b, 'wrong-password-2')).status, 401);
  assert.equal((await login(a, 'wrong-password-3')).status, 401);
  // Three failures across the nodes: the right password is refused on both until the window passes.
  for (const s of [a, b]) {
    const held = await login(s, s.owner.password);
    assertProblem(held, 429, 'too_many_login_attempts');
    const retry = Number(held.headers.get('retry-after'));
    assert.ok(retry > 14 * 60 && retry <= 15 * 60, `Retry-After ${retry}`);
  }

  // Previews: one caller's count is shared too (the third on B is the limit's last).
  const preview = async (s: TestServer, token: string) => {
    const template = await s.request('POST', '/templates', { token, body: { name: 'n', channel: 'SMS', content: { text: 'Hi' } } });
    assert.equal(template.status, 201, template.text);
    return s.request('POST', `/templates/${template.body.id}/preview`, { token, body: {} });
  };
  assert.equal((await preview(a, ta)).status, 200);
  assert.equal((await preview(b, tb)).status, 200);
  assert.equal((await preview(a, ta)).status, 200);
  assertProblem(await preview(b, tb), 429, 'rate_limited');
  assertProblem(await preview(a, ta), 429, 'rate_limited');

  // The keys in Redis name neither the email nor the address.
  const redis = new Redis(testRedisServer()!);
  t.after(() => redis.disconnect());
  const keys = await redis.keys(`${env.SVC_REDIS_PREFIX}*`);
  assert.ok(
    keys.some((k) => k.startsWith(`${env.SVC_REDIS_PREFIX}login-failures:`)),
    JSON.stringify(keys),
  );
  assert.ok(
    keys.some((k) => k.startsWith(`${env.SVC_REDIS_PREFIX}caller-limit:`)),
    JSON.stringify(keys),
  );
  assert.ok(
    keys.every((k) => !k.includes('@') && !k.includes('127.0.0.1')),
    JSON.stringify(keys),
  );
  for (const key of keys) assert.ok((await redis.pttl(key)) > 0, `${key} expires`);
});

test('Redis away: failed logins and previews are still limited, each node counting its own', async (t) => {
  const s = await build(t, { env: { SVC_REDIS_URL: 'redis://127.0.0.1:1', SVC_LOGIN_RATE_LIMIT: '2', SVC_RENDER_RATE_LIMIT: '2' } });
  const ownerToken = await s.login(s.owner.email, s.owner.password);
  const login = (password: string) => s.request('POST', '/auth/login', { body: { email: s.owner.email, password } });
  assert.equal((await login('wrong-password-1')).status, 401);
  assert.equal((await login('wrong-password-2')).status, 401);
  assertProblem(await login(s.owner.password), 429, 'too_many_login_attempts');
  const other = await s.userWithRole('VIEWER');
  const template = await s.request('POST', '/templates', { token: ownerToken, body: { name: 'n', channel: 'SMS', content: { text: 'Hi' } } });
  assert.equal(template.status, 201, template.text);
  const preview = () => s.request('POST', `/templates/${template.body.id}/preview`, { token: other.token, body: {} });
  assert.equal((await preview()).status, 200);
  assert.equal((await preview()).status, 200);
  assertProblem(await preview(), 429, 'rate_limited');
});

test('redisUrl must be redis:// or rediss:// with a host; the password is never printed; the prefix is bounded', (t) => {
  const dataDir = tempDir(t);
  writeInitialConfig(dataDir);
  for (const [value, message] of [
    ['http://user:hunter2@cache:6379', /redis:\/\/ or rediss:\/\//],
    ['redis://', /redis:\/\/host/],
    ['not a url', /redis:\/\/host:port/],
  ] as const) {
    assert.throws(
      () => loadConfig({ dataDir }, { SVC_REDIS_URL: value }),
      (err: unknown) => err instanceof ConfigError && message.test(err.message) && !err.message.includes('hunter2'),
      value,
    );
  }
  assert.throws(() => loadConfig({ dataDir }, { SVC_REDIS_PREFIX: 'has space' }), ConfigError);
  const config = loadConfig({ dataDir }, { SVC_REDIS_URL: 'rediss://:pw@cache.internal:6380' });
  assert.equal(config.redisUrl, 'rediss://:pw@cache.internal:6380');
  assert.equal(config.redisPrefix, 'svc:');
});
