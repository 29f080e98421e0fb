/**
 * A full disk (API.md section 8, "Faults"), for real: the data folder is a small tmpfs,
 * filled up while `svc serve` takes webhooks. A request whose write fails answers 503
 * storage_full with Retry-After (not 500), /readyz reports not ready until a write
 * succeeds again, the log says so once (not once a request), every run answered 202 is
 * kept, and intake resumes by itself once space is freed.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, mkdirSync, mkdtempSync, openSync, rmSync, statfsSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { StorageHealth } from '../../src/core/db/storage.js';
import { UNDER_CI, skipOutsideCI } from '../ci.js';
import { lines, runCli, startServe } from '../cli/helpers.js';
import { assertProblem, request, type HttpResult } from '../helpers.js';
import { parseMetrics, sampleValue } from '../prometheus.js';
import { login, OPS } from './folder.js';

const MOUNT_SIZE = '24m';
const METRICS_TOKEN = 'disk-full-metrics-token-0123456789';

/**
 * A fresh tmpfs mounted on a new folder, unmounted and removed after the test. Needs root
 * (CI runs as root); under CI a folder that cannot be mounted fails the test.
 */
function mountSmallDisk(t: TestContext): string | undefined {
  const dir = mkdtempSync(join(tmpdir(), 'svc-diskfull-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${MOUNT_SIZE},mode=0700`, 'tmpfs', dir], { stdio: 'pipe' });
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    if (UNDER_CI) assert.fail(`CI must be able to mount a tmpfs for the disk-full test (run as root): ${(err as Error).message}`);
    return undefined;
  }
  t.after(() => {
    execFileSync('umount', ['-l', dir]);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

/** Writes a file until the file system has no room left; returns its path. */
function fillDisk(dir: string): string {
  const file = join(dir, 'filler');
  const fd = openSync(file, 'w');
  const chunk = Buffer.alloc(64 * 1024, 1);
  try {
    for (let size = chunk.length; size >= 512; ) {
      try {
        writeSync(fd, chunk, 0, size);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
        size = Math.floor(size / 2);
      }
    }
  } finally {
    closeSync(fd);
  }
  return file;
}

const canMount = process.getuid?.() === 0 || UNDER_CI;

test('disk full: 503 storage_full with Retry-After, readyz not ready, 202s kept, intake resumes by itself', {
  skip: canMount ? false : skipOutsideCI('needs root to mount a tmpfs (CI runs it)'),
  timeout: 180_000,
}, async (t) => {
  const disk = mountSmallDisk(t);
  if (!disk) return t.skip(skipOutsideCI('could not mount a tmpfs here'));
  const dataDir = join(disk, 'data');
  mkdirSync(dataDir, { mode: 0o700 });
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', OPS.email, '--password-stdin'], { stdin: OPS.password });
  assert.equal(init.code, 0, init.stderr);
  const server = await startServe(t, dataDir, ['--port', '0'], {
    env: { SVC_WEBHOOK_RATE_LIMIT: '100000', SVC_WORKERS: '1', SVC_METRICS_TOKEN: METRICS_TOKEN },
  });
  const token = await login(server);
  const wf = await request(server.url, 'POST', '/workflows', {
    token,
    body: {
      name: 'intake',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['seen'] }],
      webhook: { lookup: 'email', path: 'email', createIfNotFound: true },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const path = new URL(wf.body.webhook.url).pathname;
  // Bodies big enough that every webhook needs fresh pages of the WAL and database file.
  const padding = 'x'.repeat(64 * 1024);
  let n = 0;
  const post = () => request(server.url, 'POST', path, { body: { email: `c${++n}@example.com`, padding } });

  const accepted: number[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await post();
    assert.equal(res.status, 202, res.text);
    accepted.push(res.body.runId);
  }
  assert.equal((await request(server.url, 'GET', '/readyz')).status, 200);

  // Fill the disk, then keep posting: the first write that needs room fails.
  const filler = fillDisk(disk);
  let refused: HttpResult | undefined;
  for (let i = 0; i < 200 && !refused; i++) {
    const res = await post();
    if (res.status === 202) accepted.push(res.body.runId);
    else refused = res;
  }
  assert.ok(refused, `no write failed on a full disk (${statfsSync(disk).bavail} blocks free)`);
  assertProblem(refused, 503, 'storage_full');
  assert.equal(refused.headers.get('retry-after'), '30');
  assert.doesNotMatch(refused.text, /SQLITE|ENOSPC|disk I\/O/i, 'no internals in the answer');

  // More refusals, and /readyz not ready meanwhile.
  for (let i = 0; i < 5; i++) {
    const res = await post();
    assertProblem(res, 503, 'storage_full');
  }
  // Any route's write, not only the webhook's: a template that needs fresh pages.
  const template = await request(server.url, 'POST', '/templates', {
    token,
    body: { name: 'big', channel: 'EMAIL', content: { subject: 'Hi', html: padding, text: padding } },
  });
  assertProblem(template, 503, 'storage_full');
  assert.equal(template.headers.get('retry-after'), '30');
  const metrics = parseMetrics((await request(server.url, 'GET', '/metrics', { token: METRICS_TOKEN })).text);
  assert.equal(sampleValue(metrics, 'svc_storage_full'), 1);
  assert.equal(sampleValue(metrics, 'svc_webhooks_refused_total', { code: 'storage_full' }), 6);
  const ready = await request(server.url, 'GET', '/readyz');
  assertProblem(ready, 503, 'storage_full');
  assert.equal(ready.body.checks.storage, 'full');
  assert.ok(Number(ready.headers.get('retry-after')) > 0);
  // Reads still work.
  assert.equal((await request(server.url, 'GET', '/healthz')).status, 200);

  // Space returns: intake resumes by itself, and readiness with the first write that works.
  unlinkSync(filler);
  const back = await post();
  assert.equal(back.status, 202, back.text);
  accepted.push(back.body.runId);
  const readyAgain = await request(server.url, 'GET', '/readyz');
  assert.equal(readyAgain.status, 200, readyAgain.text);
  const after = parseMetrics((await request(server.url, 'GET', '/metrics', { token: METRICS_TOKEN })).text);
  assert.equal(sampleValue(after, 'svc_storage_full'), 0);
  // The engine goes on too: the run accepted after recovery is executed.
  for (let i = 0; ; i++) {
    const run = await request(server.url, 'GET', `/runs/${back.body.runId}`, { token });
    if (run.body.status === 'COMPLETED') break;
    assert.ok(i < 300, `run ${back.body.runId} is ${run.body.status} after recovery`);
    await new Promise((r) => setTimeout(r, 50));
  }

  await server.stop();
  // The log said "disk full" once (not once a request), and that it recovered.
  const logs = lines(server.stdout())
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { level: number; msg: string });
  const full = logs.filter((l) => /disk of the data folder is full/.test(l.msg));
  assert.equal(full.length, 1, JSON.stringify(full));
  assert.equal(full[0]!.level, 50);
  assert.ok(logs.some((l) => /takes writes again/.test(l.msg)));
  assert.ok(
    !logs.some((l) => ['request failed', 'webhook failed', 'claiming runs failed', 'renewing run leases failed'].includes(l.msg)),
    'no error per request or per poll',
  );

  // Every run answered 202 is in the database, which is sound.
  const db = new Database(join(dataDir, 'svc.db'), { readonly: true });
  t.after(() => db.close());
  assert.equal(db.pragma('integrity_check', { simple: true }), 'ok');
  const ids = new Set((db.prepare('SELECT id FROM workflow_runs').all() as { id: number }[]).map((r) => r.id));
  for (const id of accepted) assert.ok(ids.has(id), `run ${id}, answered 202, is kept`);
  assert.ok(accepted.length >= 6, `${accepted.length} runs answered 202`);
});

test('StorageHealth: logs a full disk once a minute with the count of failed writes, and its recovery once', (t) => {
  t.mock.timers.enable({ apis: ['Date'], now: Date.parse('2026-01-01T00:00:00Z') });
  const logged: { level: string; obj: Record<string, unknown>; msg: string }[] = [];
  const log = {
    error: (obj: object, msg: string) => logged.push({ level: 'error', obj: obj as Record<string, unknown>, msg }),
    info: (obj: object, msg: string) => logged.push({ level: 'info', obj: obj as Record<string, unknown>, msg }),
  };
  const health = new StorageHealth(tmpdir(), log);
  assert.equal(health.noteFailure(Object.assign(new Error('constraint'), { code: 'SQLITE_CONSTRAINT_UNIQUE' })), false, 'not a space problem');
  assert.equal(health.full, false);
  for (let i = 0; i < 50; i++) assert.equal(health.noteFailure(Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' })), true);
  assert.equal(health.full, true);
  assert.equal(logged.length, 1);
  t.mock.timers.tick(30_000);
  health.noteFailure(Object.assign(new Error('no space'), { code: 'ENOSPC' }));
  assert.equal(logged.length, 1, 'not again within the minute');
  t.mock.timers.tick(31_000);
  health.noteFailure(Object.assign(new Error('database or disk is full'), { code: 'SQLITE_FULL' }));
  assert.equal(logged.length, 2, 'again after a minute');
  assert.equal(logged[1]!.obj.failedWrites, 51, 'with the writes that failed since the last line (49 + 1 + this one)');
  // An I/O error is a full disk only when the disk is (nearly) full: here it has room.
  assert.equal(health.noteFailure(Object.assign(new Error('disk I/O error'), { code: 'SQLITE_IOERR_WRITE' })), false);
  health.noteSuccess();
  assert.equal(health.full, false);
  assert.deepEqual(
    logged.map((l) => l.level),
    ['error', 'error', 'info'],
  );
  health.noteSuccess();
  assert.equal(logged.length, 3, 'recovery is said once');
});
