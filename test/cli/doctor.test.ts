/**
 * `svc doctor` on real data folders: a healthy one passes, and each kind of problem is
 * reported with its status and what to do, exit code 1 on a FAIL.
 */
import assert from 'node:assert/strict';
import { chmodSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { initFolder } from '../e2e/folder.js';
import { KNOWN_MIGRATIONS, lines, runCli, show, startServe, tempDir, type CliResult } from './helpers.js';

interface Check {
  name: string;
  status: 'OK' | 'WARN' | 'FAIL';
  detail: string;
  fix?: string;
}

function checks(r: CliResult): Record<string, Check> {
  const report = r.json() as { ok: boolean; checks: Check[] };
  return Object.fromEntries(report.checks.map((c) => [c.name, c]));
}

function sql(dataDir: string, statement: string, ...params: unknown[]): void {
  const db = new Database(join(dataDir, 'svc.db'));
  try {
    db.prepare(statement).run(...params);
  } finally {
    db.close();
  }
}

describe('svc doctor', { concurrency: true }, () => {
  test('a healthy folder passes; with a running server it says so', async (t) => {
    const dataDir = await initFolder(t, 'svc-doctor-ok-');
    const r = await runCli(dataDir, ['doctor', '--json']);
    assert.equal(r.code, 0, show(r));
    const report = r.json();
    assert.equal(report.ok, true);
    const c = checks(r);
    for (const name of ['data folder', 'permissions', 'owner', 'disk space', 'config', 'integrity', 'migrations', 'secrets', 'server'])
      assert.equal(c[name]?.status, 'OK', `${name}: ${JSON.stringify(c[name])}`);
    assert.match(c.integrity!.detail, /integrity_check: ok/);
    assert.match(c.server!.detail, /not running/);
    assert.equal(c.backups!.status, 'WARN', 'no scheduled backups is worth a warning');

    const server = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_LOG_LEVEL: 'warn' } });
    const human = await runCli(dataDir, ['doctor']);
    assert.equal(human.code, 0, show(human));
    assert.match(human.stdout, /^CHECK\s+STATUS\s+DETAIL/m);
    assert.match(human.stdout, new RegExp(`server\\s+OK\\s+running \\(pid ${server.child.pid}\\)`));
    assert.match(human.stdout, /what to do:\n.*WARN backups: set SVC_BACKUP_DIR/);
    await server.stop();
  });

  test('a world-readable secret file fails with the chmod to run; a group-readable one warns', async (t) => {
    const dataDir = await initFolder(t, 'svc-doctor-perm-');
    chmodSync(join(dataDir, 'config.json'), 0o644);
    const r = await runCli(dataDir, ['doctor', '--json']);
    assert.equal(r.code, 1, show(r));
    assert.equal(r.json().ok, false);
    const perm = checks(r).permissions!;
    assert.equal(perm.status, 'FAIL');
    assert.match(perm.detail, /config\.json \(0644\)/);
    assert.match(perm.fix!, /chmod 600 .*config\.json/);
    assert.equal(lines(r.stderr).length, 1, show(r));
    assert.match(r.stderr, /1 check\(s\) failed: permissions/);

    chmodSync(join(dataDir, 'config.json'), 0o600);
    chmodSync(join(dataDir, 'svc.db'), 0o640);
    const group = await runCli(dataDir, ['doctor', '--json']);
    assert.equal(group.code, 0, show(group));
    assert.equal(checks(group).permissions!.status, 'WARN');
    assert.match(checks(group).permissions!.detail, /svc\.db \(0640\)/);
  });

  test('a pending migration warns with the command to run; a database from a newer svc fails', async (t) => {
    const dataDir = await initFolder(t, 'svc-doctor-mig-');
    const last = KNOWN_MIGRATIONS.at(-1)!;
    sql(dataDir, 'DELETE FROM svc_migrations WHERE tag = ?', last);
    const r = await runCli(dataDir, ['doctor', '--json']);
    assert.equal(r.code, 0, show(r));
    const mig = checks(r).migrations!;
    assert.equal(mig.status, 'WARN');
    assert.match(mig.detail, new RegExp(`1 pending: ${last}`));
    assert.match(mig.fix!, /svc migrate/);

    sql(dataDir, 'INSERT INTO svc_migrations (tag, applied_at) VALUES (?, ?)', last, new Date().toISOString());
    sql(dataDir, 'INSERT INTO svc_migrations (tag, applied_at) VALUES (?, ?)', '9999_from_the_future', new Date().toISOString());
    const newer = await runCli(dataDir, ['doctor', '--json']);
    assert.equal(newer.code, 1, show(newer));
    assert.equal(checks(newer).migrations!.status, 'FAIL');
    assert.match(checks(newer).migrations!.fix!, /upgrade svc/);
  });

  test('config problems fail: an invalid value, missing secrets, a missing folder', async (t) => {
    const dataDir = await initFolder(t, 'svc-doctor-cfg-');
    const bad = await runCli(dataDir, ['doctor', '--json'], { env: { SVC_BACKUP_INTERVAL: 'sometimes' } });
    assert.equal(bad.code, 1, show(bad));
    assert.equal(checks(bad).config!.status, 'FAIL');
    assert.match(checks(bad).config!.detail, /backup\.interval must be/);

    const file = join(dataDir, 'config.json');
    const config = JSON.parse(readFileSync(file, 'utf8'));
    delete config.secrets.encryptionKey;
    writeFileSync(file, JSON.stringify(config));
    const noSecret = await runCli(dataDir, ['doctor', '--json']);
    assert.equal(noSecret.code, 1, show(noSecret));
    assert.match(checks(noSecret).config!.detail, /secrets\.encryptionKey is missing/);
    assert.equal(checks(noSecret).integrity!.status, 'OK', 'the other checks still run');

    const missing = await runCli(join(tempDir(t), 'nowhere'), ['doctor']);
    assert.equal(missing.code, 1, show(missing));
    assert.match(missing.stdout, /data folder\s+FAIL\s+.*does not exist/);
    assert.match(missing.stdout, /svc init --data-dir/);
  });
});
