/**
 * `svc backup` and `svc restore` against real `svc serve` processes and real SQLite files:
 * a backup taken while webhooks keep arriving holds every run answered 202 before it
 * started, restores into a new folder where the secrets still open the stored credentials,
 * and restore refuses what it must (a running server, a newer schema, a damaged file).
 * Scheduled backups appear and are pruned to the newest N.
 */
import assert from 'node:assert/strict';
import { createHash, createHmac, randomBytes } from 'node:crypto';
import { chmodSync, cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { ConfigError, loadConfig } from '../../src/core/config.js';
import { openDatabase } from '../../src/core/db/connection.js';
import { migrate } from '../../src/core/db/migrate.js';
import { resolveChannel } from '../../src/core/services/channels.js';
import { initFolder, login, OPS } from '../e2e/folder.js';
import { request } from '../helpers.js';
import { KNOWN_MIGRATIONS, lines, REPO, runCli, show, startServe, tempDir, type ServeProcess } from './helpers.js';

const SIGNING_SECRET = 'backup-test-signing-secret-0123456789';
const AUTH_TOKEN = 'twilio-auth-token-kept-in-the-backup';
const sign = (raw: string) => `sha256=${createHmac('sha256', SIGNING_SECRET).update(raw).digest('hex')}`;
const mode = (file: string) => statSync(file).mode & 0o777;
const sha256 = (file: string) => createHash('sha256').update(readFileSync(file)).digest('hex');

function postSigned(url: string, path: string, body: unknown) {
  const raw = JSON.stringify(body);
  return request(url, 'POST', path, { raw: Buffer.from(raw), headers: { 'content-type': 'application/json', 'x-service-signature': sign(raw) } });
}

/** A signed webhook workflow, and Twilio credentials on the SMS channel. */
async function setUpWorkspace(server: ServeProcess, token: string): Promise<{ workflowId: number; path: string }> {
  const wf = await request(server.url, 'POST', '/workflows', {
    token,
    body: {
      name: 'backed up',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      webhook: { lookup: 'email', path: 'customer.email', createIfNotFound: true, signingSecret: SIGNING_SECRET },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const channels = await request(server.url, 'PUT', '/settings/channels', {
    token,
    body: { SMS: { provider: 'twilio', settings: { accountSid: 'AC123', from: '+15550001111' }, credentials: { authToken: AUTH_TOKEN } } },
  });
  assert.equal(channels.status, 200, channels.text);
  return { workflowId: wf.body.id, path: new URL(wf.body.webhook.url).pathname };
}

async function allRunIds(url: string, token: string, workflowId: number): Promise<Set<number>> {
  const ids = new Set<number>();
  let cursor: string | null = null;
  do {
    const page = await request(url, 'GET', `/workflows/${workflowId}/runs?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token });
    assert.equal(page.status, 200, page.text);
    for (const r of page.body.data as { runId: number }[]) ids.add(r.runId);
    cursor = page.body.nextCursor;
  } while (cursor);
  return ids;
}

function integrity(file: string): string[] {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare('PRAGMA integrity_check').pluck().all() as string[];
  } finally {
    db.close();
  }
}

const LOAD_ENV = { SVC_WEBHOOK_RATE_LIMIT: '1000000', SVC_LOG_LEVEL: 'warn' };

describe('svc backup and restore', { concurrency: true }, () => {
  test('the scheduled backup settings: durations with units, bounds, defaults, config.json keys', (t) => {
    const dataDir = tempDir(t);
    const secrets = { jwtSecret: randomBytes(32).toString('base64url'), encryptionKey: randomBytes(32).toString('base64url') };
    writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ secrets }), { mode: 0o600 });
    assert.deepEqual(loadConfig({ dataDir }, {}).backup, { dir: null, intervalSeconds: 86_400, keep: 7 });
    const interval = (value: string) => loadConfig({ dataDir }, { SVC_BACKUP_INTERVAL: value }).backup.intervalSeconds;
    assert.equal(interval('3600'), 3600);
    assert.equal(interval('90s'), 90);
    assert.equal(interval('15m'), 900);
    assert.equal(interval('6H'), 21_600);
    assert.equal(interval('30d'), 30 * 86_400);
    for (const bad of ['0', '31d', '1w', '-5', '1.5h', 'hourly']) assert.throws(() => interval(bad), ConfigError, bad);
    assert.throws(() => loadConfig({ dataDir }, { SVC_BACKUP_KEEP: '0' }), /backup\.keep must be an integer from 1 to 1000/);
    assert.equal(loadConfig({ dataDir }, { SVC_BACKUP_DIR: 'relative/backups' }).backup.dir, join(process.cwd(), 'relative', 'backups'));
    writeFileSync(join(dataDir, 'config.json'), JSON.stringify({ secrets, backup: { dir: '/srv/backups', interval: '12h', keep: 3 } }));
    assert.deepEqual(loadConfig({ dataDir }, {}).backup, { dir: '/srv/backups', intervalSeconds: 43_200, keep: 3 });
    assert.equal(loadConfig({ dataDir }, { SVC_BACKUP_KEEP: '10' }).backup.keep, 10, 'the environment wins over config.json');
  });

  test('a backup under webhook load restores into a new folder with every run answered before it, and its secrets', async (t) => {
    const dataDir = await initFolder(t, 'svc-backup-src-');
    const server = await startServe(t, dataDir, ['--port', '0'], { env: LOAD_ENV });
    const token = await login(server);
    const { workflowId, path } = await setUpWorkspace(server, token);

    const answered: { runId: number; at: number }[] = [];
    let stop = false;
    const sender = async (n: number) => {
      for (let i = 0; !stop; i++) {
        const res = await postSigned(server.url, path, { customer: { email: `c${n}-${i % 7}@example.com` }, seq: i });
        assert.equal(res.status, 202, res.text);
        answered.push({ runId: res.body.runId, at: Date.now() });
      }
    };
    const senders = Array.from({ length: 8 }, (_, n) => sender(n));
    while (answered.length < 200) await new Promise((r) => setTimeout(r, 20));

    const backupFile = join(tempDir(t, 'svc-backup-out-'), 'live.svcbackup');
    const backupStarted = Date.now();
    // Every answer so far came before the backup started: taken as they are, not by timestamp,
    // since answers in the same millisecond as backupStarted are no less before it.
    const before = answered.map((a) => a.runId);
    const backup = await runCli(dataDir, ['backup', '--to', backupFile, '--json']);
    const backupEnded = Date.now();
    stop = true;
    await Promise.all(senders);
    assert.equal(backup.code, 0, show(backup));
    const during = answered.filter((a) => a.at >= backupStarted && a.at <= backupEnded).length;
    assert.ok(during > 0, 'webhooks kept being answered while the backup ran');

    const report = backup.json();
    assert.equal(report.path, backupFile);
    assert.equal(report.size, statSync(backupFile).size);
    assert.equal(report.schemaVersion, KNOWN_MIGRATIONS.at(-1));
    assert.equal(typeof report.durationMs, 'number');
    assert.equal(report.containsSecrets, true);
    assert.equal(mode(backupFile), 0o600, 'the backup holds the secrets: owner-only');
    assert.deepEqual(readdirSync(join(backupFile, '..')), ['live.svcbackup'], 'no partial file is left beside it');
    await server.stop();

    // Moving machines: a folder that does not exist yet, the backup copied over with a mode
    // anyone may read (`cp` under a umask of 022): the restored database is still 0600.
    chmodSync(backupFile, 0o644);
    const target = join(tempDir(t, 'svc-backup-dst-'), 'data');
    const restore = await runCli(target, ['restore', backupFile, '--json']);
    assert.equal(restore.code, 0, show(restore));
    const restored = restore.json();
    assert.equal(restored.integrity, 'ok');
    assert.equal(restored.schemaVersion, KNOWN_MIGRATIONS.at(-1));
    assert.deepEqual(restored.pendingMigrations, []);
    assert.deepEqual(restored.previous, { database: null, files: [], config: null });
    assert.equal(restored.secretsRestored, true);
    assert.deepEqual(integrity(join(target, 'svc.db')), ['ok']);
    assert.equal(mode(join(target, 'svc.db')), 0o600);
    assert.equal(mode(join(target, 'config.json')), 0o600);
    assert.equal(mode(target), 0o700);
    const sourceSecrets = JSON.parse(readFileSync(join(dataDir, 'config.json'), 'utf8')).secrets;
    assert.deepEqual(JSON.parse(readFileSync(join(target, 'config.json'), 'utf8')).secrets, sourceSecrets);
    const restoredDb = new Database(join(target, 'svc.db'), { readonly: true });
    const stamp = restoredDb.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'svc_backup'").pluck().get();
    restoredDb.close();
    assert.equal(stamp, 0, 'the backup stamp (with the secrets) is not left in the restored database');

    const second = await startServe(t, target, ['--port', '0'], { env: LOAD_ENV });
    // The JWT key came back with the database: a token issued before the backup still works.
    const stored = await allRunIds(second.url, token, workflowId);
    const lost = before.filter((id) => !stored.has(id));
    assert.deepEqual(lost, [], `${lost.length} of ${before.length} runs answered before the backup are missing`);
    assert.ok(before.length >= 200);

    // The encryption key came back too: the signing secret and the provider credentials decrypt.
    const channels = await request(second.url, 'GET', '/settings/channels', { token: await login(second) });
    assert.equal(channels.status, 200, channels.text);
    assert.equal(channels.body.SMS.provider, 'twilio');
    assert.equal(channels.body.SMS.hasCredentials, true);
    assert.equal(JSON.stringify(channels.body).includes(AUTH_TOKEN), false, 'credentials are never returned');
    const signed = await postSigned(second.url, path, { customer: { email: 'after-restore@example.com' } });
    assert.equal(signed.status, 202, signed.text);
    const forged = await request(second.url, 'POST', path, { body: { customer: { email: 'x@example.com' } }, headers: { 'x-service-signature': 'sha256=00' } });
    assert.equal(forged.status, 401, forged.text);
    await second.stop();

    const config = loadConfig({ dataDir: target }, {});
    const db = openDatabase(config.dbFile);
    try {
      const workspaceId = db.$client.prepare('SELECT workspace_id FROM workflows WHERE id = ?').pluck().get(workflowId) as number;
      const sms = await resolveChannel(db, config, workspaceId, 'SMS');
      assert.equal(sms.credentials.authToken, AUTH_TOKEN, 'the stored credentials are usable by the engine');
    } finally {
      db.$client.close();
    }
    assert.deepEqual(integrity(join(target, 'svc.db')), ['ok']);
  });

  test('restore refuses while a server holds the folder, ignores the lock of a killed one, and keeps the previous database aside', async (t) => {
    const dataDir = await initFolder(t, 'svc-restore-lock-');
    const backupFile = join(tempDir(t), 'b.db');
    // While a restore swaps the database (its lock names a live process), no server starts.
    mkdirSync(join(dataDir, 'locks'), { mode: 0o700 });
    writeFileSync(
      join(dataDir, 'locks', 'restore.json'),
      JSON.stringify({ pid: process.pid, hostname: hostname(), startedAt: new Date().toISOString(), procStart: null }),
    );
    const blocked = await runCli(dataDir, ['serve', '--port', '0']);
    assert.notEqual(blocked.code, 0, show(blocked));
    assert.match(blocked.stderr, new RegExp(`restore into .* is in progress \\(pid ${process.pid}\\)`));
    rmSync(join(dataDir, 'locks', 'restore.json'));
    const server = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_LOG_LEVEL: 'warn' } });
    const backup = await runCli(dataDir, ['backup', '--to', backupFile]);
    assert.equal(backup.code, 0, show(backup));
    assert.match(backup.stdout, /secrets/i, 'the human output says the file holds the secrets');
    const again = await runCli(dataDir, ['backup', '--to', backupFile]);
    assert.notEqual(again.code, 0, 'an existing file is never overwritten');
    assert.match(again.stderr, /already exists/);

    const dbBefore = sha256(join(dataDir, 'svc.db'));
    const refused = await runCli(dataDir, ['restore', backupFile, '--json']);
    assert.notEqual(refused.code, 0, show(refused));
    assert.equal(refused.stdout, '');
    assert.equal(lines(refused.stderr).length, 1, show(refused));
    assert.match(refused.stderr, new RegExp(`server is running .*pid ${server.child.pid}`));
    assert.equal(sha256(join(dataDir, 'svc.db')), dbBefore);
    assert.deepEqual(
      readdirSync(dataDir).filter((f) => f.includes('before-restore')),
      [],
    );

    // Several servers may share a folder: a second one holds it too.
    const other = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_LOG_LEVEL: 'warn' } });
    await server.stop();
    assert.equal(readdirSync(join(dataDir, 'locks')).length, 1, 'a stopped server removes its pid file');
    const stillRefused = await runCli(dataDir, ['restore', backupFile]);
    assert.match(stillRefused.stderr, new RegExp(`pid ${other.child.pid}`));

    // kill -9 leaves its pid file behind; a dead process holds nothing.
    other.child.kill('SIGKILL');
    await new Promise((r) => other.child.once('exit', r));
    assert.equal(readdirSync(join(dataDir, 'locks')).length, 1);
    const restore = await runCli(dataDir, ['restore', backupFile, '--json']);
    assert.equal(restore.code, 0, show(restore));
    const result = restore.json();
    assert.match(result.previous.database, /svc\.db\.before-restore-\d{4}-\d\d-\d\dT[-\dZ]+$/);
    assert.ok(result.previous.files.includes(result.previous.database));
    assert.ok(
      result.previous.files.some((f: string) => f.endsWith('-wal')),
      'the killed server left a -wal file, kept aside with the database',
    );
    for (const f of result.previous.files) assert.ok(existsSync(f), f);
    assert.ok(existsSync(result.previous.config));
    assert.deepEqual(integrity(result.previous.database), ['ok'], 'the database kept aside opens with its -wal');

    const restarted = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_LOG_LEVEL: 'warn' } });
    const res = await request(restarted.url, 'POST', '/auth/login', { body: OPS });
    assert.equal(res.status, 200, res.text);
    await restarted.stop();
  });

  test('restore refuses a newer schema, a damaged file and a file that is not a backup, and changes nothing', async (t) => {
    const dataDir = await initFolder(t, 'svc-restore-bad-');
    const dir = tempDir(t);
    const good = join(dir, 'good.db');
    const backup = await runCli(dataDir, ['backup', '--to', good]);
    assert.equal(backup.code, 0, show(backup));
    const dbBefore = sha256(join(dataDir, 'svc.db'));
    const configBefore = readFileSync(join(dataDir, 'config.json'), 'utf8');

    const newer = join(dir, 'newer.db');
    writeFileSync(newer, readFileSync(good));
    const db = new Database(newer);
    db.prepare('INSERT INTO svc_migrations (tag, applied_at) VALUES (?, ?)').run('9999_from_the_future', new Date().toISOString());
    db.close();

    const text = join(dir, 'notes.txt');
    writeFileSync(text, 'this is not a backup\n'.repeat(10));
    const plain = join(dir, 'plain.db');
    const p = new Database(plain);
    p.exec('CREATE TABLE t (a); INSERT INTO t VALUES (1)');
    p.close();
    const damaged = join(dir, 'damaged.db');
    const bytes = readFileSync(good);
    const pageSize = bytes.readUInt16BE(16);
    for (let page = 2; page * pageSize < bytes.length; page += 3) bytes.fill(0xa5, page * pageSize + 8, page * pageSize + pageSize / 2);
    writeFileSync(damaged, bytes);

    const cases: [string, string, RegExp][] = [
      // Named by the migrations the file holds, not by the backup's own label (which said 0017...).
      ['newer schema', newer, /holds a schema newer than this svc knows \(its migrations 9999_from_the_future are unknown here\)/],
      ['not SQLite', text, /not a usable svc backup: it is not an SQLite database/],
      ['SQLite but not a backup', plain, /not a usable svc backup: .*not written by "svc backup"/],
      ['damaged', damaged, /not a usable svc backup: (the integrity check failed|SQLite cannot read it)/],
      ['missing', join(dir, 'nope.db'), /does not exist/],
    ];
    for (const [name, file, message] of cases) {
      const r = await runCli(dataDir, ['restore', file]);
      assert.notEqual(r.code, 0, `${name}: ${show(r)}`);
      assert.equal(lines(r.stderr).length, 1, `${name}: one line on stderr\n${show(r)}`);
      assert.match(r.stderr, message, name);
    }
    assert.equal(sha256(join(dataDir, 'svc.db')), dbBefore, 'the database was not touched');
    assert.equal(readFileSync(join(dataDir, 'config.json'), 'utf8'), configBefore);
    assert.deepEqual(
      readdirSync(dataDir).filter((f) => f !== 'config.json' && f !== 'svc.db' && f !== 'locks'),
      [],
      'nothing was left in the folder',
    );

    // Refused into a folder that did not exist, it leaves none behind (a later serve would
    // take an empty folder for a new one).
    const fresh = join(dir, 'fresh');
    for (const file of [newer, damaged]) {
      const r = await runCli(fresh, ['restore', file]);
      assert.notEqual(r.code, 0, show(r));
      assert.equal(existsSync(fresh), false, `the refused restore of ${file} left ${fresh}`);
    }

    const ok = await runCli(dataDir, ['restore', good, '--json']);
    assert.equal(ok.code, 0, show(ok));
  });

  test('a backup of an older schema restores, and the server migrates it when it starts', async (t) => {
    const root = tempDir(t);
    // A data folder as the previous svc left it: every migration but the newest applied.
    const older = join(root, 'migrations');
    cpSync(join(REPO, 'migrations'), older, { recursive: true });
    const journalFile = join(older, 'meta', '_journal.json');
    const journal = JSON.parse(readFileSync(journalFile, 'utf8'));
    journal.entries = journal.entries.filter((e: { tag: string }) => e.tag !== KNOWN_MIGRATIONS.at(-1));
    writeFileSync(journalFile, JSON.stringify(journal));
    const source = join(root, 'old');
    mkdirSync(source, { mode: 0o700 });
    const secrets = { jwtSecret: randomBytes(32).toString('base64url'), encryptionKey: randomBytes(32).toString('base64url') };
    writeFileSync(join(source, 'config.json'), JSON.stringify({ secrets }), { mode: 0o600 });
    const db = openDatabase(join(source, 'svc.db'));
    migrate(db, older);
    db.$client.close();

    const file = join(root, 'old.db');
    const backup = await runCli(source, ['backup', '--to', file, '--json']);
    assert.equal(backup.code, 0, show(backup));
    assert.equal(backup.json().schemaVersion, KNOWN_MIGRATIONS.at(-2));
    const target = join(root, 'new');
    const restore = await runCli(target, ['restore', file, '--json']);
    assert.equal(restore.code, 0, show(restore));
    assert.deepEqual(restore.json().pendingMigrations, [KNOWN_MIGRATIONS.at(-1)]);
    assert.deepEqual(JSON.parse(readFileSync(join(target, 'config.json'), 'utf8')).secrets, secrets);

    const server = await startServe(t, target, ['--port', '0'], { env: { SVC_LOG_LEVEL: 'warn' } });
    await server.stop();
    const status = await runCli(target, ['migrate', '--status', '--json']);
    assert.deepEqual(status.json(), { applied: KNOWN_MIGRATIONS, pending: [] });
  });

  test('scheduled backups appear while the server runs and only the newest N are kept', async (t) => {
    const dataDir = await initFolder(t, 'svc-backup-sched-');
    const backupDir = join(tempDir(t), 'backups');
    const bad = await runCli(dataDir, ['serve', '--port', '0'], { env: { SVC_BACKUP_DIR: backupDir, SVC_BACKUP_INTERVAL: 'often' } });
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /backup\.interval must be a number of seconds or a duration/);

    const server = await startServe(t, dataDir, ['--port', '0'], {
      env: { SVC_BACKUP_DIR: backupDir, SVC_BACKUP_INTERVAL: '1s', SVC_BACKUP_KEEP: '2', SVC_LOG_LEVEL: 'info' },
    });
    const written = () => (server.stdout() + server.stderr()).split('\n').filter((l) => l.includes('scheduled backup written')).length;
    const deadline = Date.now() + 60_000;
    while (written() < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    assert.ok(written() >= 4, `four scheduled backups were logged\n${server.stdout()}${server.stderr()}`);
    await server.stop();

    const files = readdirSync(backupDir).sort();
    assert.equal(files.length, 2, `only the newest 2 are kept: ${files.join(', ')}`);
    for (const f of files) {
      assert.match(f, /^svc-backup-\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d-\d{3}Z\.db$/);
      assert.equal(mode(join(backupDir, f)), 0o600);
    }
    const log = (server.stdout() + server.stderr()).split('\n').find((l) => l.includes('scheduled backup written'))!;
    assert.match(log, /"schemaVersion"/);
    const restore = await runCli(join(tempDir(t), 'data'), ['restore', join(backupDir, files.at(-1)!), '--json']);
    assert.equal(restore.code, 0, show(restore));
  });
});
