import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { skipOutsideCI } from '../ci.js';
import { cliEnv, REPO, tempDir } from './helpers.js';

/**
 * The runtime check of bin/svc: a Node older than 22 gets one clear line and exit 1 before
 * the bundle (and its native SQLite addon) loads; the Node the checkout pins runs it.
 */

const BIN = join(REPO, 'bin', 'svc');

function nodeMajor(node: string): number | undefined {
  try {
    return Number(execFileSync(node, ['-p', 'process.versions.node'], { encoding: 'utf8' }).split('.')[0]);
  } catch {
    return undefined;
  }
}

/** A Node older than 22: SVC_TEST_OLD_NODE, else the first `node` on PATH outside node_modules. */
function findOldNode(): string | undefined {
  const candidates = [
    process.env.SVC_TEST_OLD_NODE,
    ...(process.env.PATH ?? '')
      .split(delimiter)
      .filter((dir) => dir && !dir.includes('node_modules'))
      .map((dir) => join(dir, 'node')),
  ];
  for (const node of candidates) {
    if (!node || !existsSync(node)) continue;
    const major = nodeMajor(node);
    if (major !== undefined && major < 22) return node;
  }
  return undefined;
}

const oldNode = findOldNode();

// The machine's own Node (20) is the one this test is about; a developer machine without an
// old Node has nothing to run it with, but CI must (it fails there instead of skipping).
test('bin/svc on a Node older than 22 prints one line and exits 1, before any native addon loads', {
  skip: oldNode ? false : skipOutsideCI('no Node older than 22 on PATH (set SVC_TEST_OLD_NODE)'),
}, () => {
  assert.ok(oldNode, 'CI needs a Node older than 22 on PATH or in SVC_TEST_OLD_NODE to test the refusal');
  const version = execFileSync(oldNode, ['-p', 'process.versions.node'], { encoding: 'utf8' }).trim();
  for (const args of [['--version'], ['serve', '--port', '0'], ['init', '--yes', '--json']]) {
    const r: ReturnType<typeof spawnSync> = spawnSync(oldNode!, [BIN, ...args], { encoding: 'utf8', env: cliEnv(), timeout: 30_000 });
    assert.equal(r.status, 1, `exit status for ${args.join(' ')}: ${r.stderr}`);
    assert.equal(r.signal, null);
    assert.equal(r.stdout, '');
    assert.equal(r.stderr, `svc needs Node.js 22 or newer; this is ${version}. Run it with npx svc, or install Node 24.\n`);
  }
});

test('bin/svc runs on the Node that runs the tests (22 or newer)', () => {
  assert.ok(Number(process.versions.node.split('.')[0]) >= 22, `the tests run on Node ${process.versions.node}; npm scripts use the pinned node package`);
  const r = spawnSync(process.execPath, [BIN, '--version'], { encoding: 'utf8', env: cliEnv(), timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout.trim(), /^\d+\.\d+\.\d+ \(schema \d{4}_[a-z0-9_]+\)$/);
});

/** Starts `bin/svc serve` on a fresh folder and gives back the V8 flags its process runs with. */
async function serveFlags(t: TestContext, env: NodeJS.ProcessEnv): Promise<string[]> {
  const child = spawn(process.execPath, [BIN, '--data-dir', tempDir(t), 'serve', '--port', '0'], { env: cliEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d));
  const until = Date.now() + 60_000;
  while (!/svc listening on/.test(output)) {
    assert.ok(Date.now() < until && child.exitCode === null, `serve did not start:\n${output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  // Re-executed in place: the same pid, its command line now carrying the flags.
  return readFileSync(`/proc/${child.pid}/cmdline`, 'utf8')
    .split('\0')
    .filter((a) => a.startsWith('--'));
}

test('bin/svc contacts import and export re-execute with 16 MB semi-spaces (a million rows peaked over 300 MB without)', {
  skip: process.platform === 'linux' ? false : skipOutsideCI('reads /proc, which only Linux has'),
}, async (t) => {
  const dataDir = tempDir(t);
  const init = spawnSync(process.execPath, [BIN, '--data-dir', dataDir, 'init', '--yes', '--email', 'owner@example.com', '--json'], {
    encoding: 'utf8',
    env: cliEnv(),
    timeout: 60_000,
  });
  assert.equal(init.status, 0, init.stderr);
  // Reading standard input, which stays open until the flags were read.
  const child = spawn(process.execPath, [BIN, '--data-dir', dataDir, 'contacts', 'import', '-', '--format', 'ndjson', '--workspace', '1', '--json'], {
    env: cliEnv(),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (output += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (output += d));
  const flags = () =>
    readFileSync(`/proc/${child.pid}/cmdline`, 'utf8')
      .split('\0')
      .filter((a) => a.startsWith('--max-semi-space-size'));
  const until = Date.now() + 30_000;
  while (flags().length === 0) {
    assert.ok(Date.now() < until && child.exitCode === null, `no re-execution:\n${output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.deepEqual(flags(), ['--max-semi-space-size=16']);
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  child.stdin.end('{"email":"ada@example.com"}\n');
  assert.equal(await exited, 0, output);
  assert.equal(JSON.parse(output).created, 1);
});

test('bin/svc serve re-executes with 4 MB semi-spaces, 16 MB on an ingest-only node', {
  skip: process.platform === 'linux' ? false : skipOutsideCI('reads /proc, which only Linux has'),
}, async (t) => {
  const withEngine = await serveFlags(t, {});
  assert.ok(withEngine.includes('--max-semi-space-size=4'), withEngine.join(' '));
  assert.ok(withEngine.includes('--no-short-builtin-calls'), withEngine.join(' '));
  for (const value of ['false', ' OFF ', '0']) {
    const ingestOnly = await serveFlags(t, { SVC_ENGINE: value });
    assert.ok(ingestOnly.includes('--max-semi-space-size=16'), `SVC_ENGINE=${value}: ${ingestOnly.join(' ')}`);
  }
});
