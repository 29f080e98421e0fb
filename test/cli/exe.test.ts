import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { request } from '../helpers.js';
import { KNOWN_MIGRATIONS, REPO, tempDir } from './helpers.js';

/**
 * The single executable (issue 10): build it once with build-exe.mjs (about 15 to 30 s here,
 * more on a busy machine), copy it alone into an empty folder and run it there with an
 * environment of its own: no node on PATH, no node_modules above it, HOME a fresh folder
 * (the cache of extracted files goes there). No network is used.
 */

const VERSION = (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version;
const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

interface Folder {
  exe: string;
  work: string;
  home: string;
  env: NodeJS.ProcessEnv;
}

let built: { file: string; log: string } | undefined;
/** The executable built once for this file (by the before hook). */
function exe(): { file: string; log: string } {
  assert.ok(built, 'the executable was built');
  return built;
}
const buildDir = mkdtempSync(join(tmpdir(), 'svc-exe-build-'));
after(() => rmSync(buildDir, { recursive: true, force: true }));

before(async () => {
  const out = join(buildDir, 'svc');
  const started = Date.now();
  const log = await new Promise<string>((resolve, reject) => {
    const child = spawn(process.execPath, [join(REPO, 'build-exe.mjs')], {
      cwd: REPO,
      env: { ...process.env, SVC_EXE_OUT: out },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let text = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (text += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (text += d));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(text) : reject(new Error(`build-exe.mjs failed (${code}):\n${text}`))));
  });
  built = { file: out, log: `${log.trim()} [test: ${((Date.now() - started) / 1000).toFixed(1)} s]` };
  process.stderr.write(`# ${built.log}\n`);
});

/** An empty folder holding only the executable, a HOME of its own and an empty PATH folder. */
function folder(t: Parameters<typeof tempDir>[0]): Folder {
  const root = tempDir(t, 'svc-exe-');
  const work = join(root, 'work');
  const home = join(root, 'home');
  const bin = join(root, 'bin');
  for (const dir of [work, home, bin]) mkdirSync(dir);
  const file = join(work, 'svc');
  copyFileSync(exe().file, file);
  // Nothing svc could borrow: no node_modules in any folder above it, no node on PATH.
  for (let dir = work; dir !== dirname(dir); dir = dirname(dir)) assert.ok(!existsSync(join(dir, 'node_modules')), `${dir}/node_modules exists`);
  return { exe: file, work, home, env: { PATH: bin, HOME: home, LANG: 'C.UTF-8' } };
}

interface Result {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

function runExe(f: Folder, args: string[], opts: { stdin?: string; timeoutMs?: number } = {}): Promise<Result> {
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(f.exe, args, { cwd: f.work, env: f.env, stdio: 'pipe' });
    child.stdin.end(opts.stdin ?? '');
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`svc ${args.join(' ')} did not finish\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, opts.timeoutMs ?? 60_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - started });
    });
  });
}

/** The one line `svc serve --json` prints. */
interface ServeLine {
  url: string;
  pid: number;
  dataDir: string;
  initialised?: boolean;
  owner?: { email: string; password: string };
}

interface Served {
  url: string;
  first: ServeLine;
  child: ChildProcess;
  /** Milliseconds from spawn to the first 200 from /healthz. */
  readyMs: number;
  stop(): Promise<number | null>;
  output(): string;
}

/** `svc serve --json --port 0`: resolves once /healthz answers 200. */
async function serve(t: Parameters<typeof tempDir>[0], f: Folder): Promise<Served> {
  const started = Date.now();
  const child = spawn(f.exe, ['serve', '--json', '--port', '0'], { cwd: f.work, env: { ...f.env, SVC_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  let alive = true;
  void exited.then(() => (alive = false));
  t.after(() => {
    if (alive) child.kill('SIGKILL');
  });
  const output = () => `stdout: ${stdout}\nstderr: ${stderr}`;
  for (;;) {
    assert.ok(alive, `svc serve exited\n${output()}`);
    assert.ok(Date.now() - started < 60_000, `svc serve did not answer /healthz within 60 s\n${output()}`);
    const line = stdout.split('\n')[0];
    if (stdout.includes('\n') && line) {
      const first = JSON.parse(line) as ServeLine;
      const ok = await fetch(`${first.url}/healthz`).then(
        (r) => r.status === 200,
        () => false,
      );
      if (ok) {
        const readyMs = Date.now() - started;
        return {
          url: first.url,
          first,
          child,
          readyMs,
          output,
          stop: async () => {
            child.kill('SIGTERM');
            return exited;
          },
        };
      }
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function waitForRun(url: string, token: string, runId: number, status: string): Promise<{ status: string; steps: { type: string }[] }> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const run = await request(url, 'GET', `/runs/${runId}`, { token });
    assert.equal(run.status, 200, run.text);
    if (run.body.status === status) return run.body;
    assert.ok(Date.now() < deadline, `run ${runId} is ${run.body.status}, not ${status}: ${run.text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

test('the executable runs alone: version, serve on an empty folder, a webhook run, /docs, backup', async (t) => {
  const f = folder(t);
  const version = await runExe(f, ['--version']);
  assert.equal(version.code, 0, version.stderr);
  // What `node bin/svc --version` prints: the version (and the schema version it carries).
  const [printed, schema] = /^(\S+)(?: \(schema (\S+)\))?$/.exec(version.stdout.trim())?.slice(1) ?? [];
  assert.equal(printed, VERSION, version.stdout);
  if (schema !== undefined) assert.equal(schema, KNOWN_MIGRATIONS.at(-1));
  const bad = await runExe(f, ['no-such-command']);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /unknown command/);

  const server = await serve(t, f);
  assert.equal(server.first.initialised, true, server.output());
  assert.equal(server.first.dataDir, join(f.work, 'data'));
  assert.ok(server.first.owner, 'serve --json names the generated owner');
  const { email, password } = server.first.owner;
  // serve re-executed itself with 4 MB semi-spaces and bin/svc's malloc settings (same pid).
  assert.equal(server.first.pid, server.child.pid);
  if (process.platform === 'linux') {
    const environ = readFileSync(`/proc/${server.child.pid}/environ`, 'utf8').split('\0');
    assert.ok(environ.includes('NODE_OPTIONS=--max-semi-space-size=4'), environ.join(' '));
    assert.ok(environ.includes('MALLOC_ARENA_MAX=1'), environ.join(' '));
    assert.ok(environ.includes('MALLOC_MMAP_THRESHOLD_=32768'), environ.join(' '));
    // Started without short builtin calls (the executable's own execArgv): V8 maps no second
    // copy of its builtins' code beside a thread's code, so no part of the file is mapped
    // executable twice.
    const exe = realpathSync(`/proc/${server.child.pid}/exe`);
    const code = readFileSync(`/proc/${server.child.pid}/maps`, 'utf8')
      .split('\n')
      .filter((line) => line.endsWith(` ${exe}`) && line.split(/\s+/)[1]!.includes('x'))
      .map((line) => {
        const [range, , offset] = line.split(/\s+/);
        const [from, to] = range!.split('-').map((x) => Number.parseInt(x, 16));
        const start = Number.parseInt(offset!, 16);
        return { start, end: start + to! - from!, line };
      });
    for (const a of code) for (const b of code) if (a !== b) assert.ok(a.end <= b.start || b.end <= a.start, `mapped twice:\n${a.line}\n${b.line}`);
  }
  const health = await request(server.url, 'GET', '/healthz');
  assert.equal(health.body.version, VERSION);
  assert.equal(health.body.schemaVersion, KNOWN_MIGRATIONS.at(-1));

  const login = await request(server.url, 'POST', '/auth/login', { body: { email, password } });
  assert.equal(login.status, 200, login.text);
  const token = login.body.token as string;
  const wf = await request(server.url, 'POST', '/workflows', {
    token,
    body: {
      name: 'signup',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [{ type: 'add_tags', tags: ['lead'] }],
      webhook: { lookup: 'email', createIfNotFound: true },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const hook = new URL(wf.body.webhook.url as string).pathname;
  const accepted = await request(server.url, 'POST', hook, { body: { email: 'ada@example.com' } });
  assert.equal(accepted.status, 202, accepted.text);
  // A worker thread of the engine (Piscina, extracted script) ran it on SQLite (extracted addon).
  const run = await waitForRun(server.url, token, accepted.body.runId as number, 'COMPLETED');
  assert.deepEqual(
    run.steps.map((s: { type: string }) => s.type),
    ['add_tags'],
  );

  // The render pool's thread (the same extracted worker script, its `render` export).
  const tpl = await request(server.url, 'POST', '/templates', {
    token,
    body: { name: 'hi', channel: 'SMS', content: { text: 'Hi {{ contact.firstName | default: "friend" }}' } },
  });
  assert.equal(tpl.status, 201, tpl.text);
  const preview = await request(server.url, 'POST', `/templates/${tpl.body.id}/preview`, { token, body: {} });
  assert.equal(preview.status, 200, preview.text);
  assert.deepEqual(preview.body.rendered, { text: 'Hi friend' });

  const docs = await request(server.url, 'GET', '/docs');
  assert.equal(docs.status, 200);
  assert.match(docs.text, /swagger-ui-bundle\.js/);
  const bundle = await request(server.url, 'GET', '/docs/swagger-ui-bundle.js');
  assert.equal(bundle.status, 200);
  assert.ok(bundle.text.length > 500_000, 'the Swagger UI bundle is served whole');
  assert.equal((await request(server.url, 'GET', '/openapi.json')).status, 200);
  const app = await request(server.url, 'GET', '/app/');
  if (/no console/.test(exe().log)) assert.equal(app.status, 404);
  else {
    assert.equal(app.status, 200, app.text);
    assert.match(app.text, /<script[^>]+src="\/app\/assets\//);
  }

  // A backup of the live database: its thread loads the extracted better-sqlite3 driver.
  const backupFile = join(f.work, 'backup.db');
  const backup = await runExe(f, ['backup', '--to', backupFile, '--json']);
  assert.equal(backup.code, 0, backup.stderr);
  const report = JSON.parse(backup.stdout) as { size: number; schemaVersion: string };
  assert.equal(report.schemaVersion, KNOWN_MIGRATIONS.at(-1));
  assert.equal(statSync(backupFile).size, report.size);
  assert.equal(statSync(backupFile).mode & 0o777, 0o600);

  assert.equal(await server.stop(), 0, server.output());
});

test('the extracted addon is checked at every start: a damaged copy is written again', async (t) => {
  const f = folder(t);
  const init = await runExe(f, ['init', '--yes', '--email', 'ops@example.com', '--password-stdin', '--json'], { stdin: 'exe-test-password-1' });
  assert.equal(init.code, 0, init.stderr);

  const root = join(f.home, '.cache', 'svc');
  const builds = readdirSync(root);
  const [build, ...others] = builds;
  assert.ok(build && others.length === 0, builds.join(', '));
  const cache = join(root, build);
  for (const dir of [root, cache]) assert.equal(statSync(dir).mode & 0o777, 0o700, dir);
  const addon = join(cache, 'better_sqlite3.node');
  assert.equal(statSync(addon).mode & 0o777, 0o600);
  const good = sha256(addon);
  for (const name of ['worker.js', 'piscina-worker.js', 'sqlite-driver.js', join('migrations', 'meta', '_journal.json')]) {
    assert.ok(existsSync(join(cache, name)), name);
  }

  // Same length, other bytes: only the hash can tell.
  const damaged = readFileSync(addon);
  damaged.fill(0, 4096, 8192);
  writeFileSync(addon, damaged);
  assert.notEqual(sha256(addon), good);
  const migrate = await runExe(f, ['migrate', '--json']);
  assert.equal(migrate.code, 0, migrate.stderr);
  assert.equal(sha256(addon), good, 'the addon was written again before it was loaded');

  // A missing worker script is written again too, and a later start serves.
  writeFileSync(join(cache, 'worker.js'), 'throw new Error("tampered")');
  const server = await serve(t, f);
  const login = await request(server.url, 'POST', '/auth/login', { body: { email: 'ops@example.com', password: 'exe-test-password-1' } });
  assert.equal(login.status, 200, login.text);
  assert.doesNotMatch(readFileSync(join(cache, 'worker.js'), 'utf8'), /tampered/);
  assert.equal(await server.stop(), 0, server.output());

  // XDG_CACHE_HOME moves the cache; a cache that cannot be made is one clear line, exit 1.
  const xdg = join(f.home, 'elsewhere');
  const moved = await runExe({ ...f, env: { ...f.env, XDG_CACHE_HOME: xdg } }, ['migrate', '--json']);
  assert.equal(moved.code, 0, moved.stderr);
  assert.equal(sha256(join(xdg, 'svc', build, 'better_sqlite3.node')), good);
  const blocked = await runExe({ ...f, env: { ...f.env, XDG_CACHE_HOME: f.exe } }, ['migrate', '--json']);
  assert.equal(blocked.code, 1, blocked.stderr);
  assert.equal(blocked.stdout, '');
  assert.match(blocked.stderr, /^error: svc could not prepare its cache folder .*set XDG_CACHE_HOME to a private, writable folder\n$/);
});
