/**
 * What a node checks before it serves (issue 12): several nodes on one PostgreSQL database
 * only with a Redis they share, and never a node whose encryption key cannot decrypt the
 * stored data (on either store).
 */
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { createTestDatabase, skipOutsideCIWithoutPostgres } from '../pg.js';
import { skipOutsideCIWithoutRedis, testRedisPrefix, testRedisServer } from '../redis.js';
import { runCli, show, startServe, tempDir } from './helpers.js';

const SECRETS = { SVC_JWT_SECRET: 'j'.repeat(40), SVC_ENCRYPTION_KEY: 'e'.repeat(40) };

describe('several nodes on one PostgreSQL database', { skip: skipOutsideCIWithoutPostgres() || skipOutsideCIWithoutRedis() }, () => {
  test('need a Redis they share: a second node without it is refused, nodes with it join each other, a node without it cannot join them', async (t) => {
    const url = await createTestDatabase(t);
    const folder = (name: string) => join(tempDir(t), name);
    const plain = { SVC_DATABASE_URL: url, ...SECRETS };
    const clustered = { ...plain, SVC_REDIS_URL: testRedisServer()!, SVC_REDIS_PREFIX: testRedisPrefix() };
    const initDir = folder('init');
    const init = await runCli(initDir, ['init', '--yes', '--json'], { env: plain });
    assert.equal(init.code, 0, show(init));

    // One node without Redis serves alone...
    const alone = await startServe(t, folder('a'), ['--port', '0'], { env: plain });
    const second = await runCli(folder('b'), ['serve', '--port', '0'], { env: plain });
    assert.equal(second.code, 1, show(second));
    assert.match(second.stderr, /another svc node is serving this database.*SVC_REDIS_URL/);
    // ...and a node with Redis cannot join it either.
    const withRedis = await runCli(folder('c'), ['serve', '--port', '0'], { env: clustered });
    assert.equal(withRedis.code, 1, show(withRedis));
    assert.match(withRedis.stderr, /a node without Redis is serving this database/);
    assert.equal((await fetch(`${alone.url}/readyz`)).status, 200, 'the serving node was left alone');
    await alone.stop();

    // Nodes that share a Redis run together; one without it is then refused.
    const [a, b] = [
      await startServe(t, folder('a'), ['--port', '0'], { env: clustered }),
      await startServe(t, folder('b'), ['--port', '0'], { env: clustered }),
    ];
    for (const node of [a, b]) assert.equal((await fetch(`${node.url}/readyz`)).status, 200);
    // The node locks are the cluster's heartbeat: svc doctor lists the nodes serving it.
    const nodesSeen = async () => {
      const doctor = await runCli(initDir, ['doctor', '--json'], { env: plain });
      const database = (doctor.json() as { checks: { name: string; detail: string }[] }).checks.find((c) => c.name === 'database');
      return database?.detail ?? show(doctor);
    };
    assert.match(await nodesSeen(), /2 nodes serving it: \S+:\d+ \(since/);
    const outsider = await runCli(folder('d'), ['serve', '--port', '0'], { env: plain });
    assert.equal(outsider.code, 1, show(outsider));
    assert.match(outsider.stderr, /another svc node is serving this database/);

    // A node killed outright releases its place with its connection: the next one starts.
    a.child.kill('SIGKILL');
    for (let i = 0; !/1 node serving it/.test(await nodesSeen()); i++) assert.ok(i < 50, 'the killed node is gone from the list');
    await b.stop();
    assert.match(await nodesSeen(), /no svc serve node is serving it/);
    const after = await startServe(t, folder('e'), ['--port', '0'], { env: plain });
    assert.equal((await fetch(`${after.url}/readyz`)).status, 200);
    await after.stop();
  });

  test('a clustered node whose port is taken exits at once, leaving its place in the cluster', async (t) => {
    const url = await createTestDatabase(t);
    const env = { SVC_DATABASE_URL: url, ...SECRETS, SVC_REDIS_URL: testRedisServer()!, SVC_REDIS_PREFIX: testRedisPrefix() };
    const dir = join(tempDir(t), 'a');
    assert.equal((await runCli(dir, ['init', '--yes', '--json'], { env })).code, 0);
    const holder = createServer();
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    t.after(() => holder.close());
    const taken = (holder.address() as AddressInfo).port;

    const started = Date.now();
    // Before the fix it stayed up, unreachable, held by its Redis clients and heartbeat.
    const r = await runCli(dir, ['serve', '--port', String(taken)], { env });
    assert.equal(r.code, 1, show(r));
    assert.ok(Date.now() - started < 30_000, `exited after ${Date.now() - started} ms`);
    assert.match(r.stderr, new RegExp(`error: 127\\.0\\.0\\.1:${taken} is already in use`), show(r));
    const doctor = await runCli(dir, ['doctor', '--json'], { env });
    const database = (doctor.json() as { checks: { name: string; detail: string }[] }).checks.find((c) => c.name === 'database');
    assert.match(database?.detail ?? show(doctor), /no svc serve node is serving it/);
  });
});

test('a node whose encryption key cannot decrypt the stored data is refused, naming what it tried', async (t) => {
  const dataDir = join(tempDir(t), 'data');
  const init = await runCli(dataDir, ['init', '--yes', '--email', 'keys@example.com', '--json'], { env: SECRETS });
  assert.equal(init.code, 0, show(init));
  const { password } = init.json() as { password: string };
  const server = await startServe(t, dataDir, ['--port', '0'], { env: SECRETS });
  const login = await fetch(`${server.url}/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'keys@example.com', password }),
  });
  const { token } = (await login.json()) as { token: string };
  const wf = await fetch(`${server.url}/workflows`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      name: 'signed',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['x'] }],
      webhook: { lookup: 'email', path: 'email', signingSecret: 'whsec-a-secret-of-this-workflow' },
    }),
  });
  const created = await wf.text();
  assert.equal(wf.status, 201, created);
  const { id } = JSON.parse(created) as { id: number };
  await server.stop();

  const other = await runCli(dataDir, ['serve', '--port', '0'], { env: { ...SECRETS, SVC_ENCRYPTION_KEY: 'x'.repeat(40) } });
  assert.equal(other.code, 1, show(other));
  assert.match(other.stderr, new RegExp(`cannot decrypt the webhook signing secret of workflow ${id}.*SVC_ENCRYPTION_KEY`));
  assert.doesNotMatch(other.stderr, /whsec-a-secret|x{40}|e{40}/, 'no secret is printed');
  // svc doctor says the same, as a FAIL with what to do.
  const doctor = await runCli(dataDir, ['doctor', '--json'], { env: { ...SECRETS, SVC_ENCRYPTION_KEY: 'x'.repeat(40) } });
  assert.equal(doctor.code, 1, show(doctor));
  const secrets = (doctor.json() as { checks: { name: string; status: string; detail: string; fix?: string }[] }).checks.find((c) => c.name === 'secrets');
  assert.equal(secrets?.status, 'FAIL', show(doctor));
  assert.match(secrets!.detail, new RegExp(`workflow ${id}`));
  assert.match(secrets!.fix ?? '', /SVC_ENCRYPTION_KEY/);
  // With the right key it serves again, and svc doctor finds nothing wrong with the secrets.
  const again = await startServe(t, dataDir, ['--port', '0'], { env: SECRETS });
  await again.stop();
  const fine = await runCli(dataDir, ['doctor', '--json'], { env: SECRETS });
  assert.equal((fine.json() as { checks: { name: string; status: string }[] }).checks.find((c) => c.name === 'secrets')?.status, 'OK', show(fine));
});
