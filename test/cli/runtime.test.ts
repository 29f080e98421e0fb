import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { test } from 'node:test';
import { skipOutsideCI } from '../ci.js';
import { cliEnv, REPO } from './helpers.js';

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
