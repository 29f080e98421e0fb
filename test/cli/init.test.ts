import assert from 'node:assert/strict';
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { PASSWORD_HASH_COST } from '../../src/core/crypto.js';
import { lines, runCli, runCliArgs, show, tempDir } from './helpers.js';

describe('svc init', { concurrency: true }, () => {
  test('init --yes --json prints exactly one JSON document with a generated password, and a second init fails', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const r = await runCli(dataDir, ['init', '--yes', '--json']);
    assert.equal(r.code, 0, show(r));
    const doc = r.json();
    assert.deepEqual(Object.keys(doc).sort(), ['dataDir', 'password', 'user', 'workspace']);
    assert.equal(doc.dataDir, dataDir);
    assert.deepEqual(Object.keys(doc.workspace).sort(), ['id', 'name', 'plan']);
    assert.deepEqual(Object.keys(doc.user).sort(), ['email', 'id']);
    assert.ok(Number.isInteger(doc.workspace.id) && doc.workspace.id > 0);
    assert.ok(Number.isInteger(doc.user.id) && doc.user.id > 0);
    assert.equal(doc.workspace.plan, 'STARTER');
    assert.equal(typeof doc.workspace.name, 'string');
    assert.match(doc.user.email, /@/);
    assert.equal(typeof doc.password, 'string');
    assert.ok(doc.password.length >= 12, `generated password too short: ${doc.password}`);
    // The password is shown once, in the JSON, never on stderr.
    assert.ok(!r.stderr.includes(doc.password), 'the generated password leaked to stderr');

    // The data folder: config with secrets readable only by the owner, and a database.
    const config = join(dataDir, 'config.json');
    assert.ok(existsSync(config), 'config.json written');
    assert.ok(existsSync(join(dataDir, 'svc.db')), 'svc.db written');
    if (process.platform !== 'win32') assert.equal(statSync(config).mode & 0o077, 0, 'config.json must not be readable by group/others');
    // The password is kept as a scrypt hash at the product's cost (N=2^15, r=8, p=1), never as itself.
    const db = new Database(join(dataDir, 'svc.db'), { readonly: true });
    const [stored] = db.prepare('SELECT password_hash FROM users').pluck().all() as string[];
    db.close();
    assert.match(stored ?? '', new RegExp(`^scrypt\\$${PASSWORD_HASH_COST}\\$8\\$1\\$[A-Za-z0-9_-]{22}\\$[A-Za-z0-9_-]{43}$`));
    assert.equal(PASSWORD_HASH_COST, 32768);

    const again = await runCli(dataDir, ['init', '--yes', '--json']);
    assert.notEqual(again.code, 0, show(again));
    assert.equal(again.stdout, '', 'nothing on stdout on error');
    assert.equal(lines(again.stderr).length, 1, `one line on stderr:\n${again.stderr}`);
    assert.match(again.stderr, /already initiali[sz]ed/i);
  });

  test('init takes --workspace, --email, --plan and --password-stdin; no password is printed then', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const r = await runCli(
      dataDir,
      ['init', '--yes', '--workspace', 'Acme Inc', '--email', ' Owner@Example.COM ', '--plan', 'growth', '--password-stdin', '--json'],
      {
        stdin: 'correct horse battery staple\n',
      },
    );
    assert.equal(r.code, 0, show(r));
    const doc = r.json();
    assert.deepEqual(Object.keys(doc).sort(), ['dataDir', 'user', 'workspace'], 'no password key when it was given on stdin');
    assert.equal(doc.dataDir, dataDir);
    assert.equal(doc.workspace.name, 'Acme Inc');
    assert.equal(doc.workspace.plan, 'GROWTH');
    assert.equal(doc.user.email, 'owner@example.com', 'email is trimmed and lower-cased');
    assert.ok(!r.stdout.includes('correct horse'), 'the password is never echoed');
    assert.ok(!r.stderr.includes('correct horse'), 'the password is never echoed');
  });

  test('without a TTY and without --yes, init does not prompt (and does not hang)', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const r = await runCli(dataDir, ['init', '--json']);
    if (r.code === 0) {
      const doc = r.json();
      assert.equal(doc.dataDir, dataDir);
      assert.ok(doc.workspace && doc.user, show(r));
    } else {
      assert.equal(lines(r.stderr).length, 1, show(r));
    }
  });

  const refused: { name: string; args: string[]; stdin?: string; message: RegExp }[] = [
    { name: 'a bad email', args: ['--email', 'not-an-email'], message: /email/i },
    { name: 'an unknown plan', args: ['--plan', 'ENTERPRISE'], message: /plan/i },
    { name: 'a short password', args: ['--password-stdin'], stdin: 'short\n', message: /password/i },
    { name: 'an empty password on stdin', args: ['--password-stdin'], stdin: '', message: /password/i },
  ];
  for (const c of refused) {
    test(`init with ${c.name} exits non-zero with one line and creates nothing`, async (t) => {
      const dataDir = join(tempDir(t), 'data');
      const r = await runCli(dataDir, ['init', '--yes', '--json', ...c.args], c.stdin === undefined ? {} : { stdin: c.stdin });
      assert.notEqual(r.code, 0, show(r));
      assert.equal(r.stdout, '', show(r));
      assert.equal(lines(r.stderr).length, 1, show(r));
      assert.match(r.stderr, c.message);
      assert.ok(!existsSync(join(dataDir, 'config.json')), 'no config.json after a refused init');
      assert.ok(!existsSync(join(dataDir, 'svc.db')), 'no database after a refused init');
    });
  }

  test('after a refused init the folder can still be initialised; human output shows the password and a login hint', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const bad = await runCli(dataDir, ['init', '--yes', '--email', 'nope']);
    assert.notEqual(bad.code, 0, show(bad));
    const r = await runCli(dataDir, ['init', '--yes', '--email', 'boss@example.com']);
    assert.equal(r.code, 0, show(r));
    assert.throws(() => JSON.parse(r.stdout), 'without --json the output is text');
    assert.match(r.stdout, /boss@example\.com/);
    assert.match(r.stdout, /password\s+\S{12,}/);
    assert.match(r.stdout, /\/auth\/login/);
    assert.match(r.stdout, /svc( --data-dir \S+)? keys create/);
  });

  test('the data folder: --data-dir wins over $SVC_DATA_DIR, which wins over ./data', async (t) => {
    const root = tempDir(t);
    const [flagged, fromEnv] = await Promise.all([
      runCliArgs(['init', '--yes', '--json', '--data-dir', join(root, 'flag')], { env: { SVC_DATA_DIR: join(root, 'env-ignored') }, cwd: root }),
      runCliArgs(['init', '--yes', '--json'], { env: { SVC_DATA_DIR: join(root, 'env') }, cwd: root }),
    ]);
    assert.equal(flagged.code, 0, show(flagged));
    assert.equal(flagged.json().dataDir, join(root, 'flag'));
    assert.ok(!existsSync(join(root, 'env-ignored')));
    assert.equal(fromEnv.code, 0, show(fromEnv));
    assert.equal(fromEnv.json().dataDir, join(root, 'env'));

    const byDefault = await runCliArgs(['init', '--yes', '--json'], { cwd: join(root, 'env') });
    assert.equal(byDefault.code, 0, show(byDefault));
    assert.equal(byDefault.json().dataDir, join(root, 'env', 'data'));
    assert.ok(existsSync(join(root, 'env', 'data', 'config.json')));

    // An empty SVC_DATA_DIR is no value: ./data, not the current folder itself.
    const empty = await runCliArgs(['init', '--yes', '--json'], { env: { SVC_DATA_DIR: '' }, cwd: join(root, 'flag') });
    assert.equal(empty.code, 0, show(empty));
    assert.equal(empty.json().dataDir, join(root, 'flag', 'data'));
    assert.ok(existsSync(join(root, 'flag', 'data', 'config.json')));
  });
});
