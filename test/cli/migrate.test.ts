import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { KNOWN_MIGRATIONS, lines, runCli, show, tempDir } from './helpers.js';

/** A data folder with a config.json (as an operator could restore one) but no database yet. */
function configOnlyFolder(dir: string): string {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const secrets = { jwtSecret: randomBytes(32).toString('base64url'), encryptionKey: randomBytes(32).toString('base64url') };
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ secrets }), { mode: 0o600 });
  return dir;
}

/** Marks the database as migrated by a later svc than this source tree. */
function stampFutureMigration(dataDir: string, tag = '9999_from_the_future'): string {
  const db = new Database(join(dataDir, 'svc.db'));
  try {
    db.prepare('INSERT INTO svc_migrations (tag, applied_at) VALUES (?, ?)').run(tag, new Date().toISOString());
  } finally {
    db.close();
  }
  return tag;
}

describe('svc migrate', { concurrency: true }, () => {
  test('reports pending migrations, applies them once, then is idempotent', async (t) => {
    const dataDir = configOnlyFolder(join(tempDir(t), 'data'));
    assert.ok(KNOWN_MIGRATIONS.length > 0);

    const before = await runCli(dataDir, ['migrate', '--status', '--json']);
    assert.equal(before.code, 0, show(before));
    assert.deepEqual(before.json(), { applied: [], pending: KNOWN_MIGRATIONS });

    // Other commands refuse a database that needs migrating, and say what to run.
    const refused = await runCli(dataDir, ['workspace', 'list', '--json']);
    assert.notEqual(refused.code, 0, show(refused));
    assert.equal(refused.stdout, '');
    assert.equal(lines(refused.stderr).length, 1, show(refused));
    assert.match(refused.stderr, /svc migrate/);

    const first = await runCli(dataDir, ['migrate', '--json']);
    assert.equal(first.code, 0, show(first));
    assert.deepEqual(first.json(), { applied: KNOWN_MIGRATIONS, pending: [] });

    const second = await runCli(dataDir, ['migrate']);
    assert.equal(second.code, 0, show(second));
    assert.match(second.stdout, /up to date/i, 'human output says there was nothing to apply');
  });

  test('init already migrates (migrate applies nothing); a database migrated by a newer svc is then refused', async (t) => {
    const dataDir = join(tempDir(t), 'data');
    const init = await runCli(dataDir, ['init', '--yes', '--json']);
    assert.equal(init.code, 0, show(init));

    const r = await runCli(dataDir, ['migrate', '--json']);
    assert.equal(r.code, 0, show(r));
    assert.deepEqual(r.json(), { applied: [], pending: [] });

    const tag = stampFutureMigration(dataDir);
    for (const args of [
      ['migrate', '--json'],
      ['workspace', 'list', '--json'],
    ]) {
      const r = await runCli(dataDir, args);
      assert.notEqual(r.code, 0, `${args.join(' ')}: ${show(r)}`);
      assert.equal(r.stdout, '', `${args.join(' ')}: ${show(r)}`);
      assert.equal(lines(r.stderr).length, 1, `${args.join(' ')}: ${show(r)}`);
      assert.match(r.stderr, /newer/i, `${args.join(' ')}: ${show(r)}`);
      assert.ok(r.stderr.includes(tag), `the message names the unknown migration: ${r.stderr}`);
    }
    // Nothing was rolled back or dropped.
    const db = new Database(join(dataDir, 'svc.db'), { readonly: true });
    try {
      const tags = (db.prepare('SELECT tag FROM svc_migrations ORDER BY id').all() as { tag: string }[]).map((r) => r.tag);
      assert.deepEqual(tags, [...KNOWN_MIGRATIONS, tag]);
    } finally {
      db.close();
    }
  });
});

describe('commands on an uninitialised data folder', { concurrency: true }, () => {
  const commands = [
    ['migrate', '--json'],
    ['workspace', 'list', '--json'],
    ['keys', 'list', '--workspace', '1'],
  ];
  for (const args of commands) {
    test(`svc ${args.join(' ')} tells to run svc init and creates nothing`, async (t) => {
      const dataDir = join(tempDir(t), 'missing');
      const r = await runCli(dataDir, args);
      assert.notEqual(r.code, 0, show(r));
      assert.equal(r.stdout, '', show(r));
      assert.equal(lines(r.stderr).length, 1, show(r));
      assert.match(r.stderr, /svc init/, show(r));
      assert.ok(!existsSync(dataDir), 'the data folder must not be created by a command that only reads it');
    });
  }
});
