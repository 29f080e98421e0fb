/**
 * GET /readyz and GET /healthz (issue 10, item 6): ready only once migrations ran, the
 * engine's pool is up and the database takes a write; 503 problems while starting and
 * while shutting down; both report the version and the schema version.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import Database from 'better-sqlite3';
import { test } from 'node:test';
import { VERSION } from '../../src/core/version.js';
import { sql } from 'drizzle-orm';
import { execute } from '../../src/core/db/dialect.js';
import { assertProblem, build, carriedSchemaVersionOf, rowsOf } from '../helpers.js';

test('healthz reports the version and the schema version', async (t) => {
  const s = await build(t);
  const res = await s.request('GET', '/healthz');
  assert.equal(res.status, 200);
  assert.deepEqual(res.body, { status: 'ok', version: VERSION, schemaVersion: carriedSchemaVersionOf(s) });
});

test('readyz: 200 with the checks once the engine is up; engine "off" on a node without one', async (t) => {
  const withEngine = await build(t, { engine: { pollMs: 50 } });
  const res = await withEngine.request('GET', '/readyz');
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(res.body, {
    status: 'ready',
    version: VERSION,
    schemaVersion: carriedSchemaVersionOf(withEngine),
    checks: { migrations: 'applied', engine: 'up', storage: 'ok', redis: 'off' },
  });
  assert.equal(res.headers.get('cache-control'), null);

  const apiOnly = await build(t);
  const res2 = await apiOnly.request('GET', '/readyz');
  assert.equal(res2.status, 200, res2.text);
  assert.equal(res2.body.checks.engine, 'off');
  // Public: no token needed, and a token does not change the answer.
  assert.equal((await apiOnly.request('GET', '/readyz', { token: 'not-a-token' })).status, 200);
});

test('readyz: a flood of probes is not a flood of writes: a write check that succeeded answers for a second', async (t) => {
  const s = await build(t, { store: 'sqlite' });
  // Another connection sees whether anything was committed since it last looked.
  const observer = new Database(s.config.dbFile, { readonly: true });
  t.after(() => observer.close());
  const version = () => observer.pragma('data_version', { simple: true }) as number;
  assert.equal((await s.request('GET', '/readyz')).status, 200);
  const afterFirst = version();
  const started = performance.now();
  let probes = 0;
  while (performance.now() - started < 500) {
    const res = await s.request('GET', '/readyz');
    assert.equal(res.status, 200, res.text);
    assert.equal(res.body.checks.storage, 'ok');
    probes++;
  }
  assert.ok(probes >= 5, `${probes} probes`);
  assert.equal(version(), afterFirst, `${probes} probes within the second wrote nothing`);
  // After it, the next probe writes again (a disk that filled meanwhile is found).
  await new Promise((r) => setTimeout(r, 1_100));
  assert.equal((await s.request('GET', '/readyz')).status, 200);
  assert.notEqual(version(), afterFirst, 'the write check ran again');
});

test('readyz: 503 starting while a migration this binary carries is not applied', async (t) => {
  const s = await build(t);
  const [removed] = await rowsOf<{ id: number; tag: string; applied_at: string }>(
    s,
    sql`SELECT id, tag, applied_at FROM svc_migrations ORDER BY id DESC LIMIT 1`,
  );
  assert.ok(removed);
  await s.store.transaction((tx) => execute(s.store, tx, sql`DELETE FROM svc_migrations WHERE id = ${removed.id}`));
  const res = await s.request('GET', '/readyz');
  assertProblem(res, 503, 'starting');
  assert.equal(res.body.checks.migrations, 'pending');
  assert.ok(Number(res.headers.get('retry-after')) > 0);
  assert.equal(res.headers.get('cache-control'), 'no-store');
  // The tag again (PostgreSQL's id is an identity column: a new one does as well).
  await s.store.transaction((tx) => execute(s.store, tx, sql`INSERT INTO svc_migrations (tag, applied_at) VALUES (${removed.tag}, ${removed.applied_at})`));
  assert.equal((await s.request('GET', '/readyz')).status, 200);
});

test('readyz: 503 while the engine is down', async (t) => {
  const s = await build(t, { engine: { pollMs: 50 } });
  assert.equal((await s.request('GET', '/readyz')).status, 200);
  await s.app.engine!.stop();
  const res = await s.request('GET', '/readyz');
  assertProblem(res, 503, 'starting');
  assert.equal(res.body.checks.engine, 'down');
});

/** Sends raw bytes on one connection and resolves with everything the server sent back. */
function rawExchange(url: string, first: string, afterOpen: () => Promise<void>, rest: string): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    let received = '';
    const socket = connect({ host: hostname, port: Number(port) }, () => {
      socket.write(first);
      // The request is under way (its headers half sent) when closing starts.
      setTimeout(() => {
        afterOpen().then(() => setTimeout(() => socket.write(rest), 100), reject);
      }, 100);
    });
    socket.setEncoding('utf8');
    socket.on('data', (d: string) => (received += d));
    socket.on('end', () => resolve(received));
    socket.on('close', () => resolve(received));
    socket.on('error', reject);
  });
}

test('readyz: 503 shutting_down, as a problem with Connection: close, once closing has started', async (t) => {
  const s = await build(t, { engine: { pollMs: 50 } });
  let closing: Promise<void> | undefined;
  const answer = await rawExchange(
    s.url,
    'GET /readyz HTTP/1.1\r\nHost: localhost\r\n',
    async () => {
      closing = s.app.close();
    },
    'Accept: */*\r\n\r\n',
  );
  await closing;
  const [head, body] = answer.split('\r\n\r\n');
  assert.match(head!, /^HTTP\/1\.1 503 /, answer);
  assert.match(head!, /\r\ncontent-type: application\/problem\+json/i);
  assert.match(head!, /\r\nconnection: close/i);
  assert.match(head!, /\r\nretry-after: \d+/i);
  const problem = JSON.parse(body!);
  assert.equal(problem.code, 'shutting_down');
  assert.equal(problem.status, 503);
});
