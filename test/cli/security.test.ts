/**
 * Issue 8 through the real CLI: the database files are private (0600) whatever the umask,
 * after `svc init` and while `svc serve` writes; and `svc workflow activate` refuses a
 * workflow whose send step names a missing template or one of another channel, like the API.
 */
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../src/core/config.js';
import { openSqliteStore } from '../../src/core/db/store.js';
import { createTemplate } from '../../src/core/services/templates.js';
import { createWorkflow } from '../../src/core/services/workflows.js';
import { request } from '../helpers.js';
import { runCli, show, startServe, tempDir } from './helpers.js';

function mode(file: string): number {
  return statSync(file).mode & 0o777;
}

function assertPrivate(dataDir: string, when: string, requireWal: boolean): void {
  assert.equal(mode(dataDir), 0o700, `${when}: the data folder is 0700`);
  assert.equal(mode(join(dataDir, 'config.json')), 0o600, `${when}: config.json is 0600`);
  const db = join(dataDir, 'svc.db');
  assert.equal(mode(db), 0o600, `${when}: svc.db is ${mode(db).toString(8)}`);
  for (const suffix of ['-wal', '-shm']) {
    const file = db + suffix;
    if (!existsSync(file)) {
      assert.ok(!requireWal, `${when}: ${file} should exist while the server runs`);
      continue;
    }
    assert.equal(mode(file), 0o600, `${when}: svc.db${suffix} is ${mode(file).toString(8)}`);
  }
}

/** Runs fn with a permissive umask (inherited by the processes it starts), restoring it after. */
async function withUmask<T>(mask: number, fn: () => Promise<T>): Promise<T> {
  const previous = process.umask(mask);
  try {
    return await fn();
  } finally {
    process.umask(previous);
  }
}

test('svc.db and its -wal/-shm files are 0600 after svc init and while svc serve writes, even under umask 000', async (t) => {
  const dataDir = join(tempDir(t), 'data');
  const init = await withUmask(0o000, () =>
    runCli(dataDir, ['init', '--yes', '--email', 'owner@example.test', '--password-stdin', '--json'], { stdin: 'owner-password-1\n' }),
  );
  assert.equal(init.code, 0, show(init));
  assertPrivate(dataDir, 'after svc init', false);

  const serve = await withUmask(0o000, () => startServe(t, dataDir, ['--port', '0']));
  const login = await request(serve.url, 'POST', '/auth/login', { body: { email: 'owner@example.test', password: 'owner-password-1' } });
  assert.equal(login.status, 200, login.text);
  for (let i = 0; i < 5; i++) {
    const res = await request(serve.url, 'POST', '/contacts', { token: login.body.token, body: { email: `c${i}@example.test` } });
    assert.equal(res.status, 201, res.text);
  }
  assertPrivate(dataDir, 'while svc serve writes', true);
  await serve.stop();
  assertPrivate(dataDir, 'after svc serve stopped', false);
});

test('svc workflow activate refuses a send step naming a missing template or one of another channel, with the step pointer', async (t) => {
  const dataDir = join(tempDir(t), 'data');
  const init = await runCli(dataDir, ['init', '--yes', '--json']);
  assert.equal(init.code, 0, show(init));
  const workspaceId: number = init.json().workspace.id;

  // The fixtures are made by the same services the API calls.
  const config = loadConfig({ dataDir }, {});
  const store = openSqliteStore(config.dbFile);
  const ctx = { db: store.db, store, config, workspaceId, actor: { type: 'CLI' as const, id: null, label: 'test' }, ip: null };
  const sms = await createTemplate(ctx, { name: 'sms', channel: 'SMS', content: { text: 'hi' } });
  const email = await createTemplate(ctx, { name: 'email', channel: 'EMAIL', content: { subject: 's', text: 't' } });
  const wrong = await createWorkflow(ctx, {
    name: 'wrong channel',
    steps: [
      { type: 'add_tags', tags: ['x'] },
      { type: 'send_email', templateId: sms.id },
    ],
  });
  const missing = await createWorkflow(ctx, { name: 'missing', steps: [{ type: 'send_sms', templateId: 9999 }] });
  const good = await createWorkflow(ctx, { name: 'good', steps: [{ type: 'send_email', templateId: email.id }] });
  await store.close();

  const [w, m, g] = await Promise.all([
    runCli(dataDir, ['workflow', 'activate', String(wrong.id), '--json']),
    runCli(dataDir, ['workflow', 'activate', String(missing.id), '--json']),
    runCli(dataDir, ['workflow', 'activate', String(good.id), '--json']),
  ]);
  for (const [r, pointer] of [
    [w, '/steps/1/templateId'],
    [m, '/steps/0/templateId'],
  ] as const) {
    assert.notEqual(r.code, 0, show(r));
    assert.equal(r.stdout, '', 'nothing on stdout');
    const lines = r.stderr.trim().split('\n');
    assert.equal(lines.length, 1, `one line on stderr: ${r.stderr}`);
    assert.ok(lines[0]!.includes(pointer), `stderr names ${pointer}: ${r.stderr}`);
  }
  assert.equal(g.code, 0, show(g));
  assert.equal(g.json().status, 'ACTIVE');

  const list = await runCli(dataDir, ['workflow', 'list', '--workspace', String(workspaceId), '--json']);
  assert.equal(list.code, 0, show(list));
  const statuses = Object.fromEntries(list.json().map((x: { name: string; status: string }) => [x.name, x.status]));
  assert.deepEqual(statuses, { 'wrong channel': 'DRAFT', missing: 'DRAFT', good: 'ACTIVE' });
});

test('the CLI holds to API.md 6 where a black-box review found it did not: one line on stderr, --json, private folders, passwords a login can send, no member of a sandbox', async (t) => {
  const dir = tempDir(t);
  // A folder that was there, empty and readable by all, becomes a private data folder.
  const dataDir = join(dir, 'existing');
  mkdirSync(dataDir, { mode: 0o755 });
  chmodSync(dataDir, 0o755);
  const init = await runCli(dataDir, ['init', '--yes', '--json']);
  assert.equal(init.code, 0, show(init));
  assertPrivate(dataDir, 'svc init into an existing folder', false);

  const oneLine = (r: { code: number | null; stderr: string; stdout: string }, message: RegExp) => {
    assert.notEqual(r.code, 0, show(r as never));
    assert.match(r.stderr, message, show(r as never));
    assert.equal(r.stderr.trimEnd().split('\n').length, 1, show(r as never));
    assert.equal(r.stdout, '', show(r as never));
  };
  // A command with subcommands, named without one.
  oneLine(await runCli(dataDir, []), /^error: svc needs a command: init, migrate, serve/);
  oneLine(await runCli(dataDir, ['workspace']), /^error: svc workspace needs a command: create, list, show/);
  oneLine(await runCli(dataDir, ['--json', 'db']), /^error: svc db needs a command: copy/);
  // What the operator typed is quoted with its control characters escaped, on one line.
  oneLine(await runCli(dataDir, ['admin', 'grant', 'a\nb\x1b[2J@example.com']), /^error: No user with email a\\nb\\x1b\[2J@example\.com$/m);
  // An id past 2^53 would be read as another id.
  oneLine(await runCli(dataDir, ['runs', 'show', '9007199254740993']), /id must be a positive integer up to 2\^53-1, got "9007199254740993"/);
  // A password no login could send.
  oneLine(await runCli(dataDir, ['user', 'passwd', 'admin@svc.local', '--password-stdin'], { stdin: 'abc\0defghijklmnop\n' }), /must not contain U\+0000/);
  oneLine(
    await runCli(dataDir, ['user', 'passwd', 'admin@svc.local', '--password-stdin'], {
      stdin: Buffer.from([0xff, 0xfe, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x0a]),
    }),
    /not UTF-8 text/,
  );
  // A sandbox has no members of its own.
  const sandbox = await runCli(dataDir, ['workspace', 'sandbox', String(init.json().workspace.id), '--json']);
  assert.equal(sandbox.code, 0, show(sandbox));
  oneLine(
    await runCli(dataDir, ['user', 'create', '--email', 'u6@example.com', '--workspace', String(sandbox.json().id), '--role', 'MEMBER']),
    /not available in a sandbox/,
  );
  // --version --json is JSON.
  const version = await runCli(dataDir, ['--version', '--json']);
  assert.equal(version.code, 0, show(version));
  assert.deepEqual(Object.keys(version.json()), ['version', 'schema']);
});
