/**
 * Where SQLite's temporary files go. Intake's multi-row INSERTs keep a statement journal that
 * SQLite moves to a file past 64 KiB, so the busiest path writes temporary files; opening the
 * store keeps them beside the database (unless SQLITE_TMPDIR says otherwise), where they take
 * the data folder's space, which the storage health watches, and where a read-only root file
 * system cannot refuse them. The environment is the process's: this file runs in its own.
 */
import assert from 'node:assert/strict';
import { watch } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { keepSqliteTempFilesIn } from '../../src/core/db/connection.js';
import { openSqliteStore } from '../../src/core/db/store.js';
import { tempDir } from '../helpers.js';

test('SQLITE_TMPDIR set by the operator is kept; unset, it becomes the folder given', () => {
  const env: NodeJS.ProcessEnv = { SQLITE_TMPDIR: '/srv/sqlite-tmp' };
  assert.equal(keepSqliteTempFilesIn('/data', env), '/srv/sqlite-tmp');
  assert.equal(env.SQLITE_TMPDIR, '/srv/sqlite-tmp');
  const bare: NodeJS.ProcessEnv = {};
  assert.equal(keepSqliteTempFilesIn('/data', bare), '/data');
  assert.equal(bare.SQLITE_TMPDIR, '/data');
});

test('a store opened without SQLITE_TMPDIR has SQLite write its temporary files in the data folder', async (t) => {
  delete process.env.SQLITE_TMPDIR;
  const dir = tempDir(t);
  const store = openSqliteStore(join(dir, 'svc.db'));
  t.after(() => store.close());
  assert.equal(process.env.SQLITE_TMPDIR, dir);

  const created: string[] = [];
  const watcher = watch(dir, (_event, name) => {
    if (name) created.push(name);
  });
  t.after(() => watcher.close());
  // A temporary table with a one-page cache: its pages go to a temporary file at once.
  const c = store.writer.$client;
  c.pragma('temp.cache_size = 1');
  c.exec('CREATE TEMP TABLE scratch (x BLOB)');
  const insert = c.prepare('INSERT INTO scratch (x) VALUES (?)');
  c.transaction(() => {
    for (let i = 0; i < 200; i++) insert.run(Buffer.alloc(2048, i));
  })();
  // An unnamed file (O_TMPFILE, which the kernel names #<inode>) or, where that is not
  // available, etilqs_* unlinked at once.
  const temporary = (name: string) => /^(#\d+|etilqs_)/.test(name);
  for (let waited = 0; waited < 2000 && !created.some(temporary); waited += 50) await sleep(50);
  assert.ok(created.some(temporary), `SQLite made its temporary file in the data folder; seen there: ${created.join(', ') || 'nothing'}`);
});
