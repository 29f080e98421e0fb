import { randomBytes } from 'node:crypto';
import type { TestContext } from 'node:test';
import pg from 'pg';
import { skipOutsideCI, UNDER_CI } from './ci.js';

/**
 * The PostgreSQL server the tests may use (`SVC_TEST_DATABASE_URL`, as .ci/run sets it), or
 * undefined when it is not set outside CI. Under CI=true it must be set.
 */
export function testDatabaseServer(): string | undefined {
  const url = process.env.SVC_TEST_DATABASE_URL;
  if (!url && UNDER_CI) throw new Error('under CI=true SVC_TEST_DATABASE_URL must be set: the suite runs on PostgreSQL too');
  return url || undefined;
}

/** Why a PostgreSQL test is skipped here (throws under CI, where it must run), or false. */
export function skipOutsideCIWithoutPostgres(): string | false {
  return testDatabaseServer() ? false : skipOutsideCI('SVC_TEST_DATABASE_URL is not set');
}

function withDatabase(server: string, name: string): string {
  const url = new URL(server);
  url.pathname = `/${name}`;
  return url.toString();
}

async function admin<T>(server: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: server });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/**
 * A new, empty database on the test server for this test (or file), dropped when it ends:
 * every test file gets its own, so files running side by side never share rows. Returns
 * its URL.
 */
export async function createTestDatabase(t: Pick<TestContext, 'after'>): Promise<string> {
  const { url, drop } = await createDatabase();
  t.after(drop);
  return url;
}

/** A new, empty database on the test server; the caller drops it (after closing what uses it). */
export async function createDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const server = testDatabaseServer();
  if (!server) throw new Error('SVC_TEST_DATABASE_URL is not set');
  const name = `svc_test_${process.pid}_${randomBytes(4).toString('hex')}`;
  await admin(server, (c) => c.query(`CREATE DATABASE ${name}`));
  return { url: withDatabase(server, name), drop: () => admin(server, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined) };
}
