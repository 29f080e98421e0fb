import { randomBytes } from 'node:crypto';
import type { TestContext } from 'node:test';
import pg from 'pg';
import { migratePg } from '../src/core/db/pgMigrate.js';
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

/** This process's migrated, empty database, the template of createMigratedDatabase's copies. */
let template: Promise<string> | undefined;
/** The copies are made one at a time: PostgreSQL refuses to copy a template another session is reading. */
let copying: Promise<unknown> = Promise.resolve();

/**
 * A new database with every migration applied and no rows, which the caller drops: a copy
 * (CREATE DATABASE ... TEMPLATE) of one this process migrated once with svc's own migrator:
 * the PostgreSQL pass builds hundreds of servers, and a copy is quicker than running every
 * migration again for each. The tests of migrating itself use createDatabase.
 */
export async function createMigratedDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const server = testDatabaseServer();
  if (!server) throw new Error('SVC_TEST_DATABASE_URL is not set');
  template ??= makeTemplate(server);
  const source = await template;
  const name = `svc_test_${process.pid}_${randomBytes(4).toString('hex')}`;
  const created = copying.then(() => admin(server, (c) => c.query(`CREATE DATABASE ${name} TEMPLATE ${source}`)));
  copying = created.catch(() => undefined);
  await created;
  return { url: withDatabase(server, name), drop: () => admin(server, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).then(() => undefined) };
}

async function makeTemplate(server: string): Promise<string> {
  // Templates left by test processes that were killed (their pid is gone) are dropped first.
  const stale = await admin(server, (c) => c.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE 'svc_template_%'`));
  for (const { datname } of stale.rows) {
    const pid = Number(datname.split('_')[2]);
    if (pid !== process.pid && !alive(pid)) await admin(server, (c) => c.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`)).catch(() => undefined);
  }
  const name = `svc_template_${process.pid}_${randomBytes(4).toString('hex')}`;
  await admin(server, (c) => c.query(`CREATE DATABASE ${name}`));
  await migratePg(withDatabase(server, name));
  let dropped = false;
  process.on('beforeExit', () => {
    if (dropped) return;
    dropped = true;
    void admin(server, (c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)).catch(() => undefined);
  });
  return name;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
