import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import pg from 'pg';
import { createTestDatabase, skipOutsideCIWithoutPostgres } from '../pg.js';
import { REPO, runCli, show, startServe, tempDir } from './helpers.js';

/** The PostgreSQL migration tags this source tree knows, in order. */
const PG_MIGRATIONS: string[] = (
  JSON.parse(readFileSync(join(REPO, 'migrations', 'pg', 'meta', '_journal.json'), 'utf8')) as { entries: { idx: number; tag: string }[] }
).entries
  .sort((a, b) => a.idx - b.idx)
  .map((e) => e.tag);

async function initialisedFolder(t: Parameters<typeof tempDir>[0]): Promise<string> {
  const dataDir = join(tempDir(t), 'data');
  const init = await runCli(dataDir, ['init', '--yes', '--json']);
  assert.equal(init.code, 0, show(init));
  return dataDir;
}

async function appliedTags(url: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<{ tag: string }>('SELECT tag FROM svc_migrations ORDER BY id')).rows.map((r) => r.tag);
  } finally {
    await client.end();
  }
}

describe('svc migrate on PostgreSQL', { concurrency: true, skip: skipOutsideCIWithoutPostgres() }, () => {
  test('reports, applies once, then is idempotent; the flag and SVC_DATABASE_URL both select it', async (t) => {
    const dataDir = await initialisedFolder(t);
    const url = await createTestDatabase(t);
    assert.ok(PG_MIGRATIONS.length > 0);

    const before = await runCli(dataDir, ['--database-url', url, 'migrate', '--status', '--json']);
    assert.equal(before.code, 0, show(before));
    assert.deepEqual(before.json(), { applied: [], pending: PG_MIGRATIONS });

    const first = await runCli(dataDir, ['migrate', '--json'], { env: { SVC_DATABASE_URL: url } });
    assert.equal(first.code, 0, show(first));
    assert.deepEqual(first.json(), { applied: PG_MIGRATIONS, pending: [] });
    assert.deepEqual(await appliedTags(url), PG_MIGRATIONS);

    const second = await runCli(dataDir, ['--database-url', url, 'migrate']);
    assert.equal(second.code, 0, show(second));
    assert.match(second.stdout, /up to date/i);

    const status = await runCli(dataDir, ['--database-url', url, 'migrate', '--status']);
    assert.equal(status.code, 0, show(status));
    assert.match(status.stdout, /pending: \(none\)/);
  });

  test('three nodes migrating one empty database at once apply each migration exactly once', async (t) => {
    const dataDir = await initialisedFolder(t);
    const url = await createTestDatabase(t);
    const runs = await Promise.all([1, 2, 3].map(() => runCli(dataDir, ['--database-url', url, 'migrate', '--json'])));
    for (const r of runs) assert.equal(r.code, 0, show(r));
    const applied = runs.flatMap((r) => (r.json() as { applied: string[] }).applied);
    assert.deepEqual([...applied].sort(), [...PG_MIGRATIONS].sort(), 'every migration applied by exactly one of the three');
    assert.deepEqual(await appliedTags(url), PG_MIGRATIONS);
  });

  test('svc init and svc serve on PostgreSQL: a webhook becomes a COMPLETED run, the admin commands see it; svc backup and restore refuse', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const url = await createTestDatabase(t);
    const env = { SVC_DATABASE_URL: url };
    const init = await runCli(dataDir, ['init', '--yes', '--email', 'pg-owner@example.com', '--json'], { env });
    assert.equal(init.code, 0, show(init));
    assert.deepEqual(await appliedTags(url), PG_MIGRATIONS, 'init migrated the empty database');
    const { password } = init.json() as { password: string };
    const server = await startServe(t, dataDir, ['--port', '0'], { env });
    const login = await fetch(`${server.url}/auth/login`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'pg-owner@example.com', password }),
    });
    assert.equal(login.status, 200);
    const token = ((await login.json()) as { token: string }).token;
    const call = async (method: string, path: string, body?: unknown) => {
      const res = await fetch(server.url + path, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      return { status: res.status, body: (await res.json()) as Record<string, any> };
    };
    const wf = await call('POST', '/workflows', {
      name: 'hook',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['from-pg'] }],
      webhook: { lookup: 'email', path: 'email', createIfNotFound: true },
    });
    assert.equal(wf.status, 201, JSON.stringify(wf.body));
    const hook = await fetch(wf.body.webhook.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ email: 'pg@example.com' }),
    });
    assert.equal(hook.status, 202);
    const { runId } = (await hook.json()) as { runId: number };
    let run = await call('GET', `/runs/${runId}`);
    for (let i = 0; i < 200 && run.body.status !== 'COMPLETED'; i++) {
      await new Promise((r) => setTimeout(r, 50));
      run = await call('GET', `/runs/${runId}`);
    }
    assert.equal(run.body.status, 'COMPLETED', JSON.stringify(run.body));
    const contact = await call('GET', '/contacts?email=pg@example.com');
    assert.deepEqual(contact.body.data[0].tags, ['from-pg']);

    // The admin commands read the same database; svc backup says what to use instead.
    const list = await runCli(dataDir, ['workspace', 'list', '--json'], { env });
    assert.equal(list.code, 0, show(list));
    assert.equal((list.json() as { data?: unknown[] } | unknown[]) && JSON.stringify(list.json()).includes('Default'), true, show(list));
    const backup = await runCli(dataDir, ['backup', '--to', join(tempDir(t), 'b.svcbackup')], { env });
    assert.notEqual(backup.code, 0, show(backup));
    assert.match(backup.stderr, /pg_dump/);
    const doctor = await runCli(dataDir, ['doctor', '--json'], { env });
    assert.equal(doctor.code, 0, show(doctor));
    const checks = Object.fromEntries((doctor.json() as { checks: { name: string; status: string; detail: string }[] }).checks.map((c) => [c.name, c]));
    assert.equal(checks.database?.status, 'OK', show(doctor));
    assert.equal(checks.migrations?.status, 'OK', show(doctor));
    assert.match(checks.backups?.detail ?? '', /pg_dump/);
    const restore = await runCli(dataDir, ['restore', join(tempDir(t), 'b.svcbackup')], { env });
    assert.notEqual(restore.code, 0, show(restore));
    assert.match(restore.stderr, /pg_restore/);
    await server.stop();
  });

  test('a URL that is not PostgreSQL, or names no database, is refused; a password is never printed', async (t) => {
    const dataDir = await initialisedFolder(t);
    for (const [url, message] of [
      ['mysql://root:hunter2@127.0.0.1/svc', /postgres:\/\/ URL/],
      ['postgres://root:hunter2@127.0.0.1', /name a host and a database/],
      ['not a url', /postgres:\/\/user@host/],
    ] as const) {
      const r = await runCli(dataDir, ['--database-url', url, 'migrate', '--json']);
      assert.notEqual(r.code, 0, show(r));
      assert.match(r.stderr, message);
      assert.doesNotMatch(r.stdout + r.stderr, /hunter2/);
    }
  });

  test('an unreachable server fails with the address, without the password', async (t) => {
    const dataDir = await initialisedFolder(t);
    const r = await runCli(dataDir, ['--database-url', 'postgres://svc:hunter2@127.0.0.1:1/svc', 'migrate']);
    assert.notEqual(r.code, 0, show(r));
    assert.match(r.stderr, /127\.0\.0\.1:1|ECONNREFUSED/);
    assert.doesNotMatch(r.stdout + r.stderr, /hunter2/);
  });
});
