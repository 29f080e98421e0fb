/**
 * `svc db copy` through the real CLI and real servers: a data folder filled through the API
 * (contacts with tags, an API key, a signed webhook's COMPLETED run, a channel's credentials)
 * is copied into an empty PostgreSQL database owned by an ordinary role, served from there
 * with the same secrets, then copied back into a new data folder and served on SQLite; each
 * time logins, the API key, counts, tags, search, the signing secret and new ids work. Then
 * the refusals: a server on the source, a non-empty or foreign target, a newer target, a
 * source not at this build's schema, text PostgreSQL cannot hold, the wrong secrets.
 */
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { decryptSecret } from '../../src/core/secrets.js';
import { createTestDatabase, skipOutsideCIWithoutPostgres, testDatabaseServer } from '../pg.js';
import { runCli, show, startServe, tempDir, type CliResult, type ServeProcess } from './helpers.js';

const OWNER = 'owner@example.com';
const SIGNING_SECRET = 'whsec-db-copy-Zq8vN3rT-long-enough';
const TWILIO_TOKEN = 'twilio-token-Hk29xLmQ';

async function pgQuery<T extends Record<string, unknown>>(url: string, text: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<T>(text, values)).rows;
  } finally {
    await client.end();
  }
}

/**
 * A new database owned by a new role that is not a superuser (so the copy is proven to need
 * no more than owning the database), dropped with its role after the test. Where the test
 * server's user may not create roles, a database of the test server's user.
 */
async function ownedDatabase(t: TestContext): Promise<string> {
  const server = testDatabaseServer()!;
  const suffix = `${process.pid}_${randomBytes(4).toString('hex')}`;
  const role = `svc_copy_${suffix}`;
  const name = `svc_test_copy_${suffix}`;
  const password = randomBytes(12).toString('hex');
  try {
    await pgQuery(server, `CREATE ROLE ${role} LOGIN NOSUPERUSER PASSWORD '${password}'`);
  } catch {
    return createTestDatabase(t);
  }
  await pgQuery(server, `CREATE DATABASE ${name} OWNER ${role}`);
  t.after(async () => {
    await pgQuery(server, `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await pgQuery(server, `DROP ROLE IF EXISTS ${role}`);
  });
  const url = new URL(server);
  url.username = role;
  url.password = password;
  url.pathname = `/${name}`;
  return url.toString();
}

interface Api {
  call(method: string, path: string, body?: unknown, auth?: string): Promise<{ status: number; body: any }>;
}

async function login(server: ServeProcess, password: string): Promise<Api & { token: string }> {
  const res = await fetch(`${server.url}/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: OWNER, password }),
  });
  assert.equal(res.status, 200, 'the owner logs in');
  const token = ((await res.json()) as { token: string }).token;
  return {
    token,
    async call(method, path, body, auth = token) {
      const r = await fetch(server.url + path, {
        method,
        headers: { authorization: `Bearer ${auth}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        ...(body ? { body: JSON.stringify(body) } : {}),
      });
      const text = await r.text();
      return { status: r.status, body: text ? JSON.parse(text) : null };
    },
  };
}

/** Posts a webhook signed with the secret (or a wrong one) and, when accepted, waits for its run to complete. */
async function signedWebhook(api: Api, url: string, email: string, secret = SIGNING_SECRET): Promise<{ status: number; run?: any }> {
  const body = JSON.stringify({ email });
  const signature = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-service-signature': signature }, body });
  if (res.status !== 202) return { status: res.status };
  const { runId } = (await res.json()) as { runId: number };
  let run = await api.call('GET', `/runs/${runId}`);
  for (let i = 0; i < 300 && run.body.status !== 'COMPLETED' && run.body.status !== 'FAILED'; i++) {
    await new Promise((r) => setTimeout(r, 50));
    run = await api.call('GET', `/runs/${runId}`);
  }
  return { status: 202, run: run.body };
}

/** What the API says about the workspace, to compare across stores. */
async function snapshot(api: Api) {
  const plan = await api.call('GET', '/billing/plan');
  const tags = await api.call('GET', '/tags');
  const search = await api.call('GET', '/contacts?q=lovelace');
  const contacts = await api.call('GET', '/contacts?limit=100');
  assert.equal(plan.status, 200);
  return {
    usage: plan.body.usage,
    tags: tags.body.data,
    search: search.body.data.map((c: { email: string }) => c.email),
    contactIds: contacts.body.data.map((c: { id: number }) => c.id),
  };
}

/** Proves a served copy: the owner, the API key, counts, tags, search, the signing secret, new ids. */
async function proveServed(server: ServeProcess, password: string, apiKey: string, webhookUrl: string, expected: Awaited<ReturnType<typeof snapshot>>) {
  const api = await login(server, password);
  const viaKey = await api.call('GET', '/contacts?limit=1', undefined, apiKey);
  assert.equal(viaKey.status, 200, 'the API key authenticates');
  assert.deepEqual(await snapshot(api), expected, 'usage, tags, search and contacts as before the copy');

  // The signing secret still decrypts: a correctly signed webhook runs, a wrongly signed one is refused.
  assert.equal((await signedWebhook(api, webhookUrl, 'x@example.com', 'not-the-secret-at-all-000')).status, 401);
  const hook = await signedWebhook(api, webhookUrl, `hook-${randomBytes(3).toString('hex')}@example.com`);
  assert.equal(hook.status, 202, 'the signed webhook is accepted');
  assert.equal(hook.run.status, 'COMPLETED', JSON.stringify(hook.run));

  // The sequences are past the copied ids.
  const contact = await api.call('POST', '/contacts', { email: `new-${randomBytes(3).toString('hex')}@example.com`, tags: ['vip'] });
  assert.equal(contact.status, 201, JSON.stringify(contact.body));
  assert.ok(contact.body.id > Math.max(...expected.contactIds), 'a new contact gets a new id');
  const wf = await api.call('POST', '/workflows', { name: `after copy ${randomBytes(2).toString('hex')}`, steps: [{ type: 'add_tags', tags: ['x'] }] });
  assert.equal(wf.status, 201, JSON.stringify(wf.body));
  const after = await snapshot(api);
  assert.equal(after.usage.contacts, expected.usage.contacts + 2, 'the webhook and the new contact counted once each');
  assert.equal(after.usage.workflows, expected.usage.workflows + 1);
  assert.equal(after.usage.runsThisMonth, expected.usage.runsThisMonth + 1);
  return { api, after };
}

function assertCopyJson(r: CliResult, from: string, to: string): { tables: { table: string; rows: number }[]; totalRows: number } {
  assert.equal(r.code, 0, show(r));
  const doc = r.json();
  assert.deepEqual(Object.keys(doc).sort(), ['from', 'ms', 'tables', 'to', 'totalRows']);
  assert.equal(doc.from.store, from);
  assert.equal(doc.to.store, to);
  assert.equal(typeof doc.ms, 'number');
  assert.equal(
    doc.totalRows,
    doc.tables.reduce((n: number, t: { rows: number }) => n + t.rows, 0),
  );
  const names = doc.tables.map((t: { table: string }) => t.table);
  for (const table of ['workspaces', 'users', 'contacts', 'contact_tags', 'tag_counts', 'workspace_counters', 'run_month_counts', 'workflows', 'workflow_runs'])
    assert.ok(names.includes(table), `${table} copied`);
  assert.ok(
    !names.some((n: string) => n.startsWith('contacts_fts') || n === 'svc_migrations'),
    'neither the FTS index nor the migrations are tables of the copy',
  );
  assert.ok(names.indexOf('workspaces') < names.indexOf('contacts') && names.indexOf('contacts') < names.indexOf('contact_tags'), 'parents first');
  return doc;
}

const rowsOf = (doc: { tables: { table: string; rows: number }[] }, table: string) => doc.tables.find((t) => t.table === table)?.rows;

describe('svc db copy', { skip: skipOutsideCIWithoutPostgres() }, () => {
  test('SQLite → PostgreSQL → a new SQLite folder, each served with the same secrets; then the refusals', async (t) => {
    const root = tempDir(t);
    const dataDir = join(root, 'data');
    const init = await runCli(dataDir, ['init', '--yes', '--email', OWNER, '--json']);
    assert.equal(init.code, 0, show(init));
    const { password } = init.json() as { password: string };
    const [url, busyTarget] = await Promise.all([ownedDatabase(t), createTestDatabase(t)]);

    // Real data through the API of a server on the SQLite folder.
    const sqliteServer = await startServe(t, dataDir);
    const api = await login(sqliteServer, password);
    for (const [i, c] of [
      { email: 'ada@example.com', firstName: 'Ada', lastName: 'Lovelace', tags: ['VIP', 'early'] },
      { email: 'grace@example.com', firstName: 'Grace', lastName: 'Hopper', tags: ['vip'] },
      { email: 'alan@example.com', firstName: 'Alan', lastName: 'Turing' },
      { email: 'lovelace.fan@example.com', tags: ['early'], attributes: { plan: 'gold', nested: { a: [1, 2] } } },
      { phone: '+14155550100', firstName: 'Phone', lastName: 'Only', tags: ['sms'] },
    ].entries()) {
      const r = await api.call('POST', '/contacts', c);
      assert.equal(r.status, 201, `contact ${i}: ${JSON.stringify(r.body)}`);
    }
    const deleted = await api.call('POST', '/contacts', { email: 'deleted@example.com', tags: ['gone'] });
    assert.equal((await api.call('DELETE', `/contacts/${deleted.body.id}`)).status, 204);
    const key = await api.call('POST', '/api-keys', { name: 'reader', role: 'VIEWER' });
    assert.equal(key.status, 201, JSON.stringify(key.body));
    const wf = await api.call('POST', '/workflows', {
      name: 'signed hook',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['hooked'] }],
      webhook: { lookup: 'email', path: 'email', createIfNotFound: true, signingSecret: SIGNING_SECRET },
    });
    assert.equal(wf.status, 201, JSON.stringify(wf.body));
    const webhookPath = new URL(wf.body.webhook.url).pathname;
    const first = await signedWebhook(api, sqliteServer.url + webhookPath, 'hooked@example.com');
    assert.equal(first.run?.status, 'COMPLETED', JSON.stringify(first));
    const channels = await api.call('PUT', '/settings/channels', {
      SMS: { provider: 'twilio', settings: { accountSid: 'AC123', from: '+15005550006' }, credentials: { authToken: TWILIO_TOKEN } },
    });
    assert.equal(channels.status, 200, JSON.stringify(channels.body));
    const before = await snapshot(api);
    assert.deepEqual(before.search, ['lovelace.fan@example.com', 'ada@example.com']);
    assert.equal(before.usage.contacts, 6);

    // While a server runs on the folder, the copy is refused and the target untouched.
    const whileServing = await runCli(dataDir, ['db', 'copy', '--to', busyTarget]);
    assert.equal(whileServing.code, 1, show(whileServing));
    assert.match(whileServing.stderr, /^error: A server is running on .*stop it first/m);
    assert.deepEqual(await pgQuery(busyTarget, "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"), []);
    await sqliteServer.stop();

    // SQLite → PostgreSQL.
    const toPg = await runCli(dataDir, ['db', 'copy', '--to', url, '--json']);
    const toPgDoc = assertCopyJson(toPg, 'sqlite', 'postgres');
    assert.equal(toPg.stderr, '', 'no progress without a terminal');
    assert.equal(rowsOf(toPgDoc, 'contacts'), 6);
    assert.equal(rowsOf(toPgDoc, 'workspace_counters'), 1);
    assert.doesNotMatch(toPg.stdout, new RegExp(new URL(url).password || 'no-password-given'), 'the password is never printed');
    const [counter] = await pgQuery<{ contacts: string }>(url, 'SELECT contacts FROM workspace_counters');
    assert.equal(Number(counter!.contacts), 6, 'the contact counter copied once, not doubled by the triggers');
    const triggers = await pgQuery<{ tgenabled: string }>(url, 'SELECT tgenabled FROM pg_trigger WHERE NOT tgisinternal');
    assert.ok(triggers.length >= 4 && triggers.every((r) => r.tgenabled === 'O'), 'the triggers are on again');
    // The search's candidate buckets (PostgreSQL's alone, not copied): rebuilt from the copied contacts, as their triggers would have kept them.
    const [buckets] = await pgQuery<{ n: string; lovelace: string }>(
      url,
      "SELECT count(*) AS n, count(*) FILTER (WHERE trigram IN ('lov', 'ove', 'vel')) AS lovelace FROM contact_search_buckets",
    );
    assert.ok(Number(buckets!.n) > 50 && Number(buckets!.lovelace) >= 3, JSON.stringify(buckets));
    const [stored] = await pgQuery<{ credentials: string }>(url, "SELECT credentials FROM channel_settings WHERE channel = 'SMS'");
    const secrets = (JSON.parse(readFileSync(join(dataDir, 'config.json'), 'utf8')) as { secrets: { jwtSecret: string; encryptionKey: string } }).secrets;
    assert.equal(
      JSON.parse(decryptSecret({ secrets }, stored!.credentials)).authToken,
      TWILIO_TOKEN,
      "the channel's credentials decrypt with the folder's key",
    );

    const pgServer = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_DATABASE_URL: url } });
    const onPg = await proveServed(pgServer, password, key.body.key, pgServer.url + webhookPath, before);
    await pgServer.stop();

    // PostgreSQL → a new data folder, with the secrets of the folder the nodes use.
    const newDir = join(root, 'back');
    const back = await runCli(dataDir, ['db', 'copy', '--from', url, '--to-data-dir', newDir, '--json']);
    const backDoc = assertCopyJson(back, 'postgres', 'sqlite');
    assert.equal(rowsOf(backDoc, 'contacts'), 8);
    assert.deepEqual(JSON.parse(readFileSync(join(newDir, 'config.json'), 'utf8')), { secrets }, 'the secrets carried over, nothing else');
    const sqliteAgain = await startServe(t, newDir);
    await proveServed(sqliteAgain, password, key.body.key, sqliteAgain.url + webhookPath, onPg.after);
    await sqliteAgain.stop();

    // Refusals: each exits 1 with one line on stderr and writes nothing.
    const [foreignTarget, newerTarget, nulTarget] = await Promise.all([createTestDatabase(t), createTestDatabase(t), createTestDatabase(t)]);
    await pgQuery(foreignTarget, 'CREATE TABLE other_app (id int)');
    await pgQuery(
      newerTarget,
      'CREATE TABLE svc_migrations (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tag text NOT NULL UNIQUE, applied_at text NOT NULL)',
    );
    await pgQuery(newerTarget, "INSERT INTO svc_migrations (tag, applied_at) VALUES ('9999_from_the_future', 'now')");
    const countsOf = async (u: string) =>
      (await pgQuery<{ c: string; a: string }>(u, 'SELECT (SELECT count(*) FROM contacts) AS c, (SELECT count(*) FROM audit_logs) AS a'))[0];
    const pgBefore = await countsOf(url);
    const usedDir = join(root, 'used');
    mkdirSync(usedDir);
    writeFileSync(join(usedDir, 'notes.txt'), 'mine');
    const wrongSecrets = { SVC_JWT_SECRET: 'j'.repeat(40), SVC_ENCRYPTION_KEY: 'k'.repeat(40) };
    const [nonEmpty, foreign, newer, usedFolder, wrongKey, noDirection, notPostgres, noDatabase, notAUrl] = await Promise.all([
      runCli(dataDir, ['db', 'copy', '--to', url]),
      runCli(dataDir, ['db', 'copy', '--to', foreignTarget]),
      runCli(dataDir, ['db', 'copy', '--to', newerTarget]),
      runCli(dataDir, ['db', 'copy', '--from', url, '--to-data-dir', usedDir]),
      runCli(dataDir, ['db', 'copy', '--from', url, '--to-data-dir', join(root, 'wrong-key')], { env: wrongSecrets }),
      runCli(dataDir, ['db', 'copy']),
      runCli(dataDir, ['db', 'copy', '--to', 'mysql://root:hunter2@127.0.0.1/svc']),
      runCli(dataDir, ['db', 'copy', '--from', 'postgres://root:hunter2@127.0.0.1', '--to-data-dir', join(root, 'no-database')]),
      runCli(dataDir, ['db', 'copy', '--to', 'not a url']),
    ]);
    const refused = (r: CliResult, message: RegExp) => {
      assert.equal(r.code, 1, show(r));
      assert.equal(r.stdout, '', show(r));
      assert.match(r.stderr, message);
      assert.equal(r.stderr.trim().split('\n').length, 1, `one line: ${r.stderr}`);
    };
    refused(nonEmpty, /error: The target database .* is not empty: .*contacts \(8 rows\).*createdb/);
    assert.deepEqual(await countsOf(url), pgBefore, 'the non-empty target is unchanged');
    refused(foreign, /holds 1 table that is not svc's \(other_app\)/);
    assert.deepEqual(
      (await pgQuery<{ t: string }>(foreignTarget, "SELECT table_name AS t FROM information_schema.tables WHERE table_schema = 'public'")).map((r) => r.t),
      ['other_app'],
      'nothing written next to a foreign table',
    );
    refused(newer, /migrated by a newer svc \(unknown migrations: 9999_from_the_future\)/);
    refused(usedFolder, /used is not empty \(notes\.txt\)/);
    refused(wrongKey, /encryption key given does not decrypt a workflow's webhook signing secret/);
    assert.equal(existsSync(join(root, 'wrong-key')), false, 'no folder left behind');
    refused(noDirection, /say where to copy/);
    refused(notPostgres, /--to must be a postgres:\/\/ URL \(got a mysql:\/\/ one\)$/m);
    refused(noDatabase, /--from must name a host and a database/);
    refused(notAUrl, /--to must be a postgres:\/\/user@host:port\/database URL/);
    for (const r of [notPostgres, noDatabase]) assert.doesNotMatch(r.stderr, /hunter2/, 'the password is never printed');
    assert.equal(existsSync(join(root, 'no-database')), false, 'no folder made for a refused URL');

    // A source not at this build's schema, then one holding a NUL character: refused.
    const db = new Database(join(newDir, 'svc.db'));
    const last = db.prepare('SELECT id, tag, applied_at FROM svc_migrations ORDER BY id DESC LIMIT 1').get() as { id: number; tag: string; applied_at: string };
    db.prepare('DELETE FROM svc_migrations WHERE id = ?').run(last.id);
    const pending = await runCli(newDir, ['db', 'copy', '--to', nulTarget]);
    refused(pending, new RegExp(`not at this build's schema \\(1 pending migration: ${last.tag}\\); run "svc migrate" first`));
    db.prepare('INSERT INTO svc_migrations (id, tag, applied_at) VALUES (?, ?, ?)').run(last.id, last.tag, last.applied_at);
    const ada = db.prepare("SELECT id FROM contacts WHERE email = 'ada@example.com'").get() as { id: number };
    db.prepare('UPDATE contacts SET last_name = ? WHERE id = ?').run('Love\u0000lace', ada.id);
    db.close();
    const nul = await runCli(newDir, ['db', 'copy', '--to', nulTarget]);
    refused(nul, new RegExp(`contacts \\(id ${ada.id}\\) holds U\\+0000 .* in last_name`));
    assert.deepEqual(await countsOf(nulTarget), { c: '0', a: '0' }, 'nothing committed: the target is migrated and empty');
  });
});
