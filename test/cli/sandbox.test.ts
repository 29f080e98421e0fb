import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { runCli, show, tempDir } from './helpers.js';

test('svc workspace sandbox creates, shows and resets the twin; its keys are svc_test_ keys', async (t) => {
  const dataDir = join(tempDir(t), 'data');
  const env = { SVC_SANDBOX_URL: 'https://sandbox.example.com' };
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'GROWTH', '--json']);
  assert.equal(init.code, 0, show(init));
  const liveId = init.json().workspace.id as number;

  const created = await runCli(dataDir, ['workspace', 'sandbox', String(liveId), '--json'], { env });
  assert.equal(created.code, 0, show(created));
  const sandbox = created.json();
  assert.equal(sandbox.liveWorkspaceId, liveId);
  assert.equal(sandbox.baseUrl, 'https://sandbox.example.com');
  assert.equal(sandbox.plan, 'GROWTH');
  assert.equal(sandbox.created, true);
  assert.equal(sandbox.reset, false);

  const key = await runCli(dataDir, ['keys', 'create', '--workspace', String(sandbox.id), '--role', 'MEMBER', '--name', 'ci', '--json']);
  assert.equal(key.code, 0, show(key));
  assert.match(key.json().key, /^svc_test_/);
  const liveKey = await runCli(dataDir, ['keys', 'create', '--workspace', String(liveId), '--role', 'MEMBER', '--name', 'prod', '--json']);
  assert.match(liveKey.json().key, /^svc_live_/);

  // Again: the same sandbox, for people as a sentence.
  const again = await runCli(dataDir, ['workspace', 'sandbox', String(liveId)], { env });
  assert.equal(again.code, 0, show(again));
  assert.match(again.stdout, new RegExp(`exists: sandbox workspace ${sandbox.id} of workspace ${liveId}`));
  assert.match(again.stdout, /base URL https:\/\/sandbox\.example\.com/);

  const reset = await runCli(dataDir, ['workspace', 'sandbox', String(sandbox.id), '--reset', '--json'], { env });
  assert.equal(reset.code, 0, show(reset));
  assert.equal(reset.json().id, sandbox.id);
  assert.equal(reset.json().reset, true);
  // Keys survive a reset.
  const keys = await runCli(dataDir, ['keys', 'list', '--workspace', String(sandbox.id), '--json']);
  assert.equal(keys.code, 0, show(keys));
  assert.equal(JSON.stringify(keys.json()).includes('"ci"'), true, keys.stdout);

  const list = await runCli(dataDir, ['workspace', 'list', '--json']);
  assert.equal(list.json().find((w: { id: number }) => w.id === sandbox.id).sandboxOf, liveId);

  // Bad input: an unknown or malformed id, a plan set on the sandbox itself.
  const unknown = await runCli(dataDir, ['workspace', 'sandbox', '999', '--json']);
  assert.notEqual(unknown.code, 0);
  assert.match(unknown.stderr, /No workspace with id 999/);
  assert.equal(unknown.stdout, '');
  const malformed = await runCli(dataDir, ['workspace', 'sandbox', 'abc']);
  assert.notEqual(malformed.code, 0);
  assert.match(malformed.stderr, /workspace id/);
  const plan = await runCli(dataDir, ['workspace', 'set-plan', String(sandbox.id), 'PRO']);
  assert.notEqual(plan.code, 0);
  assert.match(plan.stderr, /sandbox/);
  // Setting the live plan moves the sandbox with it.
  assert.equal((await runCli(dataDir, ['workspace', 'set-plan', String(liveId), 'PRO'])).code, 0);
  const shown = await runCli(dataDir, ['workspace', 'show', String(sandbox.id), '--json']);
  assert.equal(shown.json().plan, 'PRO');
});
