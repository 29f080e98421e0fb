/**
 * Machine-readable start-up (issue 8): `svc serve --json` prints exactly one JSON line on
 * stdout, {url, publicUrl, dataDir, pid} (plus the generated owner, once, when it initialised
 * the folder), and logs only to stderr; `svc init --json` never prompts, even on a terminal
 * (a real pseudo-terminal from util-linux `script`). Real `svc` processes throughout.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { request } from '../helpers.js';
import { cliEnv, lines, REPO, tempDir } from './helpers.js';

const ENTRY = join(REPO, 'src', 'cli', 'entry.ts');
const TSX = import.meta.resolve('tsx');

interface JsonServe {
  child: ChildProcess;
  line: any;
  stdout(): string;
  stderr(): string;
  stop(): Promise<number | null>;
}

/** Starts `svc --data-dir DIR serve --json --port 0` and resolves with its first stdout line, parsed. */
function startJsonServe(t: TestContext, dataDir: string): Promise<JsonServe> {
  const child = spawn(process.execPath, ['--import', TSX, ENTRY, '--data-dir', dataDir, 'serve', '--json', '--port', '0'], {
    cwd: REPO,
    env: cliEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<number | null>((res) => child.on('exit', (code) => res(code)));
  let alive = true;
  void exited.then(() => (alive = false));
  t.after(() => {
    if (alive) child.kill('SIGKILL');
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`no start line within 60 s\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, 60_000);
    const check = () => {
      const end = stdout.indexOf('\n');
      if (end === -1) return;
      clearTimeout(timer);
      child.stdout!.off('data', check);
      let line: unknown;
      try {
        line = JSON.parse(stdout.slice(0, end));
      } catch {
        reject(new Error(`the first stdout line is not JSON: ${stdout}\nstderr: ${stderr}`));
        return;
      }
      resolve({
        child,
        line,
        stdout: () => stdout,
        stderr: () => stderr,
        async stop() {
          child.kill('SIGTERM');
          return exited;
        },
      });
    };
    child.stdout!.on('data', check);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`svc serve --json exited (${code}) before its start line\nstdout: ${stdout}\nstderr: ${stderr}`));
    });
  });
}

describe('svc serve --json', { concurrency: true }, () => {
  test('on an empty folder: one JSON line {url, publicUrl, dataDir, pid, initialised, owner}, logs on stderr only; then without owner', async (t) => {
    const dataDir = join(tempDir(t), 'fresh');
    const server = await startJsonServe(t, dataDir);
    const line = server.line;
    assert.deepEqual(Object.keys(line).sort(), ['dataDir', 'initialised', 'owner', 'pid', 'publicUrl', 'url']);
    assert.equal(line.pid, server.child.pid);
    assert.equal(line.dataDir, dataDir);
    assert.match(line.url, /^http:\/\/127\.0\.0\.1:\d+$/);
    assert.equal(line.publicUrl, line.url, 'with no public URL configured, the public URL is where it listens');
    assert.equal(line.initialised, true);
    assert.deepEqual(Object.keys(line.owner).sort(), ['email', 'password']);
    assert.equal(line.owner.email, 'admin@svc.local');
    assert.equal(typeof line.owner.password, 'string');
    assert.ok(line.owner.password.length >= 12);

    // It serves, and the owner's password logs in.
    assert.equal((await request(line.url, 'GET', '/healthz')).status, 200);
    assert.equal((await request(line.url, 'GET', '/nowhere')).status, 404);
    const login = await request(line.url, 'POST', '/auth/login', { body: { email: line.owner.email, password: line.owner.password } });
    assert.equal(login.status, 200, login.text);

    const code = await server.stop();
    assert.equal(code, 0, server.stderr());
    // After requests and a shutdown, stdout still holds exactly the one line.
    assert.equal(lines(server.stdout()).length, 1, `stdout:\n${server.stdout()}`);
    assert.ok(server.stdout().endsWith('\n'));
    // The logs went to stderr, as JSON lines, and never carry the password.
    const logs = lines(server.stderr()).map((l) => JSON.parse(l));
    assert.ok(
      logs.some((l) => l.req?.url === '/healthz' || /incoming request|request completed/.test(l.msg ?? '')),
      server.stderr(),
    );
    assert.ok(
      logs.some((l) => /shutting down|stopped/.test(l.msg ?? '')),
      'shutdown is logged to stderr',
    );
    assert.ok(!server.stderr().includes(line.owner.password), 'the password is never logged');

    // The folder is initialised now: the next start says where it is, nothing more.
    const again = await startJsonServe(t, dataDir);
    assert.deepEqual(Object.keys(again.line).sort(), ['dataDir', 'pid', 'publicUrl', 'url']);
    assert.equal(again.line.pid, again.child.pid);
    const relogin = await request(again.line.url, 'POST', '/auth/login', { body: { email: line.owner.email, password: line.owner.password } });
    assert.equal(relogin.status, 200, relogin.text);
    assert.equal(await again.stop(), 0);
    assert.equal(lines(again.stdout()).length, 1, again.stdout());
  });
});

/**
 * Runs `svc ...args` on a pseudo-terminal (stdin and stdout are TTYs, as for an operator at
 * a shell); resolves with its output when it exits, or once `until` matches (then kills it).
 */
function onTerminal(t: TestContext, args: string[], until?: RegExp): Promise<{ output: string; code: number | null; matched: boolean }> {
  const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
  const command = [process.execPath, '--import', TSX, ENTRY, ...args].map(quote).join(' ');
  const child = spawn('script', ['-qec', command, '/dev/null'], { cwd: REPO, env: { ...cliEnv(), TERM: 'dumb' }, stdio: ['pipe', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (output += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (output += d));
  let alive = true;
  t.after(() => {
    if (alive) child.kill('SIGKILL');
  });
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
    const check = () => {
      if (!until?.test(output)) return;
      clearTimeout(timer);
      child.stdout!.off('data', check);
      child.kill('SIGKILL');
      resolve({ output, code: null, matched: true });
    };
    child.stdout!.on('data', check);
    child.on('exit', (code) => {
      alive = false;
      clearTimeout(timer);
      resolve({ output, code, matched: until?.test(output) ?? false });
    });
  });
}

// Needs util-linux `script` (Debian/Ubuntu: bsdutils) for the pseudo-terminal.
describe('svc init --json on a terminal', { concurrency: true }, () => {
  test('never prompts: it initialises with the defaults and prints one JSON document', async (t) => {
    const dataDir = join(tempDir(t), 'tty');
    const r = await onTerminal(t, ['--data-dir', dataDir, 'init', '--json']);
    assert.equal(r.code, 0, r.output);
    assert.doesNotMatch(r.output, /Workspace name|Owner email|Owner password/, r.output);
    const doc = JSON.parse(r.output.replace(/\r/g, '').slice(r.output.indexOf('{')));
    assert.equal(doc.dataDir, dataDir);
    assert.equal(doc.user.email, 'admin@svc.local');
    assert.equal(doc.workspace.name, 'Default');
    assert.equal(typeof doc.password, 'string');
  });

  test('the same terminal does prompt without --json (so the test above is on a real TTY)', async (t) => {
    const dataDir = join(tempDir(t), 'tty');
    const r = await onTerminal(t, ['--data-dir', dataDir, 'init'], /Workspace name/);
    assert.ok(r.matched, `expected a prompt on the terminal:\n${r.output}`);
  });
});
