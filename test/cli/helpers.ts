import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';

/**
 * Runs the real CLI from source (`node --import tsx src/cli/entry.ts`) as a separate process,
 * the way an operator or a script would: no TTY, an explicit --data-dir, no SVC_* variables
 * inherited from the test's environment, and a timeout so a command that prompts fails the
 * test instead of hanging it.
 */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const ENTRY = join(REPO, 'src', 'cli', 'entry.ts');
// Resolved here, because `--import tsx` would be looked up from the child's cwd (a temp dir).
const TSX = import.meta.resolve('tsx');

/** The migration tags this source tree knows, in order. */
export const KNOWN_MIGRATIONS: string[] = (
  JSON.parse(readFileSync(join(REPO, 'migrations', 'meta', '_journal.json'), 'utf8')) as { entries: { idx: number; tag: string }[] }
).entries
  .sort((a, b) => a.idx - b.idx)
  .map((e) => e.tag);

/**
 * Each CLI process compiles the sources through tsx (about 1.5 s of CPU), so test files that
 * start many at once would only thrash a small machine and trip the timeouts. At most this
 * many are starting or running at once per test file; a timeout counts from the real start.
 */
const MAX_CONCURRENT = Math.max(2, availableParallelism());
let running = 0;
const waiting: (() => void)[] = [];

async function acquireSlot(): Promise<() => void> {
  if (running < MAX_CONCURRENT) running++;
  else await new Promise<void>((r) => waiting.push(r)); // the releaser hands its slot over
  let released = false;
  return () => {
    if (released) return;
    released = true;
    const next = waiting.shift();
    if (next) next();
    else running--;
  };
}

export function cliEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const key of Object.keys(env)) if (key.startsWith('SVC_') || key === 'NODE_TEST_CONTEXT') delete env[key];
  return { ...env, ...extra };
}

/**
 * A fresh folder under the OS temp dir, removed after the test (or after whatever else
 * registers clean-ups the same way, such as a suite's own list in its `after` hook).
 */
export function tempDir(t: Pick<TestContext, 'after'>, prefix = 'svc-cli-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface CliResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  /** stdout parsed as one JSON document (throws with the output when it is not). */
  json(): any;
}

export interface RunOptions {
  /** Text written to stdin, which is then closed; without it stdin is /dev/null. */
  stdin?: string | Buffer;
  env?: NodeJS.ProcessEnv;
  timeoutMs?: number;
  /** Working directory of the process (default: the OS temp dir). */
  cwd?: string;
}

/** The newest modification time of the files under a folder (0 when there is none). */
function newestMtime(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestMtime(path));
    else newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

/**
 * How the CLI is started: the bundle `npm run build` wrote (dist/svc.js), when it is newer than
 * every server source file and migration, as CI has it; otherwise the sources through tsx.
 * From source, each process spends about 2 s of CPU resolving and compiling modules (most of
 * it in Node's package-scope lookups for tsx's resolver); the bundle starts in about 0.35 s,
 * which is most of the time of the CLI and console tests. SVC_TEST_FROM_SOURCE=1 forces the
 * sources.
 */
const BUNDLE = join(REPO, 'dist', 'svc.js');
export const CLI_COMMAND: string[] = (() => {
  if (process.env.SVC_TEST_FROM_SOURCE === '1' || !existsSync(BUNDLE)) return ['--import', TSX, ENTRY];
  const sources = Math.max(
    newestMtime(join(REPO, 'src', 'core')),
    newestMtime(join(REPO, 'src', 'server')),
    newestMtime(join(REPO, 'src', 'cli')),
    newestMtime(join(REPO, 'src', 'engine')),
    newestMtime(join(REPO, 'migrations')),
  );
  return statSync(BUNDLE).mtimeMs >= sources ? [BUNDLE] : ['--import', TSX, ENTRY];
})();

function spawnCli(args: string[], opts: { stdin?: string | Buffer; env?: NodeJS.ProcessEnv; cwd?: string }): ChildProcess {
  const child = spawn(process.execPath, [...CLI_COMMAND, ...args], {
    cwd: opts.cwd ?? tmpdir(),
    env: cliEnv(opts.env),
    stdio: [opts.stdin === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  });
  if (opts.stdin !== undefined) child.stdin!.end(opts.stdin);
  return child;
}

/** Runs `svc --data-dir DIR ...args` to completion. */
export function runCli(dataDir: string, args: string[], opts: RunOptions = {}): Promise<CliResult> {
  return runCliArgs(['--data-dir', dataDir, ...args], opts);
}

/** Runs `svc ...args` exactly as given (no --data-dir added) to completion. */
export async function runCliArgs(args: string[], opts: RunOptions = {}): Promise<CliResult> {
  const release = await acquireSlot();
  try {
    return await runNow(args, opts);
  } finally {
    release();
  }
}

function runNow(args: string[], opts: RunOptions): Promise<CliResult> {
  // Generous: the machine may be busy; a command that prompts would wait forever, not 60 s.
  const timeoutMs = opts.timeoutMs ?? 60_000;
  return new Promise((resolvePromise, reject) => {
    const child = spawnCli(args, opts);
    let stdout = '';
    let stderr = '';
    child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`svc ${args.join(' ')} did not finish within ${timeoutMs} ms (did it prompt?)\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolvePromise({
        code,
        signal,
        stdout,
        stderr,
        json() {
          try {
            return JSON.parse(stdout);
          } catch {
            throw new Error(`stdout of svc ${args.join(' ')} is not one JSON document (exit ${code}):\n${stdout}\nstderr: ${stderr}`);
          }
        },
      });
    });
  });
}

/** Describes a result for assertion messages. */
export function show(r: CliResult): string {
  return `exit ${r.code}${r.signal ? ` (${r.signal})` : ''}\n--- stdout\n${r.stdout}--- stderr\n${r.stderr}`;
}

export interface ServeProcess {
  url: string;
  child: ChildProcess;
  /** Everything written so far. */
  stdout(): string;
  stderr(): string;
  /** Sends the signal and resolves with the exit status; rejects when it does not stop in time. */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }>;
}

/**
 * Starts `svc serve` and resolves once it prints "svc listening on <address>". The process is
 * killed after the test if the test did not stop it.
 */
export async function startServe(
  t: Pick<TestContext, 'after'>,
  dataDir: string,
  args: string[] = ['--port', '0'],
  opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
): Promise<ServeProcess> {
  const release = await acquireSlot();
  try {
    return await startServeNow(t, dataDir, args, opts);
  } finally {
    release();
  }
}

function startServeNow(
  t: Pick<TestContext, 'after'>,
  dataDir: string,
  args: string[],
  opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number },
): Promise<ServeProcess> {
  const timeoutMs = opts.timeoutMs ?? 60_000;
  const child = spawnCli(['--data-dir', dataDir, 'serve', ...args], { env: opts.env ?? {} });
  let stdout = '';
  let stderr = '';
  child.stdout!.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((res) => child.on('exit', (code, signal) => res({ code, signal })));
  let alive = true;
  void exited.then(() => (alive = false));
  t.after(() => {
    if (alive) child.kill('SIGKILL');
  });

  const stop: ServeProcess['stop'] = async (signal = 'SIGTERM', stopTimeoutMs = 10_000) => {
    const started = Date.now();
    child.kill(signal);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, rej) => {
      timer = setTimeout(
        () => rej(new Error(`svc serve did not stop within ${stopTimeoutMs} ms of ${signal}\nstdout: ${stdout}\nstderr: ${stderr}`)),
        stopTimeoutMs,
      );
    });
    try {
      const status = await Promise.race([exited, timeout]);
      return { ...status, ms: Date.now() - started };
    } finally {
      clearTimeout(timer);
    }
  };

  return new Promise((resolvePromise, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`svc serve did not start listening within ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    const check = () => {
      const m = /svc listening on (https?:\/\/\S+)/.exec(stdout);
      if (!m) return;
      clearTimeout(timer);
      child.stdout!.off('data', check);
      resolvePromise({ url: m[1]!, child, stdout: () => stdout, stderr: () => stderr, stop });
    };
    child.stdout!.on('data', check);
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`svc serve exited (${code ?? signal}) before listening\nstdout: ${stdout}\nstderr: ${stderr}`));
    });
  });
}

/** Runs `svc serve` expecting it to fail at start-up; resolves with its result. */
export function runServeExpectingFailure(dataDir: string, args: string[] = ['--port', '0']): Promise<CliResult> {
  return runCli(dataDir, ['serve', ...args]);
}

/** The non-empty lines of a stream. */
export function lines(text: string): string[] {
  return text.split('\n').filter((l) => l.trim() !== '');
}
