import assert from 'node:assert/strict';
import { test } from 'node:test';
import { request } from '../helpers.js';
import { runCli, show, startServe, tempDir } from './helpers.js';

const PASSWORD = 'workflow-cli-pass-1';

test('svc workflow / webhook / runs: list, activate, deactivate, events, replay, runs', async (t) => {
  const dataDir = tempDir(t);
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', 'ops@example.com', '--password-stdin', '--json'], { stdin: PASSWORD });
  assert.equal(init.code, 0, show(init));
  const workspaceId = init.json().workspace.id as number;
  // An ingest-only server (no engine), so the runs stay QUEUED for the read side.
  const server = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_ENGINE: 'false' } });
  const login = await request(server.url, 'POST', '/auth/login', { body: { email: 'ops@example.com', password: PASSWORD } });
  const token = login.body.token as string;
  const created = await request(server.url, 'POST', '/workflows', {
    token,
    body: {
      name: 'signup',
      triggerSource: 'WEBHOOK',
      steps: [{ type: 'add_tags', tags: ['lead'] }],
      webhook: { lookup: 'email', path: 'user.email', createIfNotFound: true },
    },
  });
  assert.equal(created.status, 201, created.text);
  const id = String(created.body.id);

  const listed = await runCli(dataDir, ['workflow', 'list', '--workspace', String(workspaceId), '--json']);
  assert.equal(listed.code, 0, show(listed));
  assert.deepEqual(
    listed.json().map((w: { id: number; status: string }) => [w.id, w.status]),
    [[created.body.id, 'DRAFT']],
  );

  const activated = await runCli(dataDir, ['workflow', 'activate', id, '--json']);
  assert.equal(activated.code, 0, show(activated));
  const url = activated.json().webhook.url as string;
  assert.match(url, /\/v1\/webhooks\/in\/[0-9A-Za-z]{30}$/);
  // The server took a port of its own (--port 0) and no public URL is configured: the CLI
  // names the URL the API names, not the default port's.
  const viaApi = await request(server.url, 'GET', `/workflows/${id}`, { token });
  assert.equal(url, viaApi.body.webhook.url);
  assert.ok(url.startsWith(server.url.replace(/\/$/, '')), `${url} is on ${server.url}`);
  const path = new URL(url).pathname;

  const accepted = await request(server.url, 'POST', path, { body: { user: { email: 'New@Example.com' } } });
  assert.equal(accepted.status, 202, accepted.text);
  const refused = await request(server.url, 'POST', path, { body: { user: {} } });
  assert.equal(refused.status, 422);

  const events = await runCli(dataDir, ['webhook', 'events', '--workflow', id, '--json']);
  assert.equal(events.code, 0, show(events));
  const [last, first] = events.json();
  assert.equal(first.statusCode, 202);
  assert.equal(first.runId, accepted.body.runId);
  assert.equal(last.statusCode, 422);
  assert.equal(last.code, 'lookup_value_missing');
  const table = await runCli(dataDir, ['webhook', 'events', '--workflow', id]);
  assert.match(table.stdout, /^ID\s+RECEIVEDAT\s+STATUS/m);

  // A name set through the API (by any MEMBER) cannot drive the operator's terminal: control
  // characters are shown as escapes, and a newline forges no row.
  const hostile = await request(server.url, 'POST', '/workflows', {
    token,
    body: { name: 'evil\u001b]0;pwned\u0007\u001b[2J\nFAKE ROW', triggerSource: 'MANUAL', steps: [] },
  });
  assert.equal(hostile.status, 201, hostile.text);
  const listedTable = await runCli(dataDir, ['workflow', 'list', '--workspace', String(workspaceId)]);
  for (const c of listedTable.stdout) assert.ok(c === '\n' || c >= ' ', `a control character (${c.charCodeAt(0)}) reached the terminal`);
  assert.match(listedTable.stdout, /evil\\x1b\]0;pwned\\x07\\x1b\[2J\\nFAKE ROW/);
  assert.ok(!listedTable.stdout.split('\n').some((line) => line.startsWith('FAKE ROW')));

  const replayed = await runCli(dataDir, ['webhook', 'replay', String(first.id), '--json']);
  assert.equal(replayed.code, 0, show(replayed));
  assert.deepEqual(Object.keys(replayed.json()).sort(), ['contactId', 'runId']);
  assert.equal(replayed.json().contactId, accepted.body.contactId);
  assert.notEqual(replayed.json().runId, accepted.body.runId);
  const notReplayable = await runCli(dataDir, ['webhook', 'replay', String(last.id), '--json']);
  assert.notEqual(notReplayable.code, 0);
  assert.equal(notReplayable.stdout, '');
  assert.equal(notReplayable.stderr.trim().split('\n').length, 1, show(notReplayable));

  const runs = await runCli(dataDir, ['runs', 'list', '--workflow', id, '--json']);
  assert.equal(runs.code, 0, show(runs));
  assert.deepEqual(
    runs.json().map((r: { runId: number }) => r.runId),
    [replayed.json().runId, accepted.body.runId],
  );
  const one = await runCli(dataDir, ['runs', 'show', String(accepted.body.runId), '--json']);
  assert.equal(one.code, 0, show(one));
  assert.equal(one.json().status, 'QUEUED');
  assert.deepEqual(one.json().trigger, { user: { email: 'New@Example.com' } });
  assert.deepEqual(
    one.json().steps.map((s: { type: string }) => s.type),
    ['add_tags'],
  );
  const human = await runCli(dataDir, ['runs', 'show', String(accepted.body.runId)]);
  assert.match(human.stdout, /run \d+ of workflow \d+: QUEUED/);

  const paused = await runCli(dataDir, ['workflow', 'deactivate', id, '--json']);
  assert.equal(paused.json().status, 'PAUSED');
  assert.equal(paused.json().webhook.url, url, 'pausing keeps the URL');
  assert.equal((await request(server.url, 'POST', path, { body: { user: { email: 'x@example.com' } } })).status, 404);

  for (const args of [
    ['workflow', 'activate', '999'],
    ['workflow', 'list', '--workspace', '999'],
    ['keys', 'list', '--workspace', '999'],
    ['workflow', 'activate', 'abc'],
    ['runs', 'show', '999'],
    ['webhook', 'events', '--workflow', '999'],
    ['webhook', 'replay', '0'],
  ]) {
    const r = await runCli(dataDir, [...args, '--json']);
    assert.notEqual(r.code, 0, `${args.join(' ')}: ${show(r)}`);
    assert.equal(r.stdout, '');
    assert.equal(r.stderr.trim().split('\n').length, 1, show(r));
  }
  await server.stop();
});

test('svc workflow activate refuses a WEBHOOK workflow without a lookup', async (t) => {
  const dataDir = tempDir(t);
  assert.equal((await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', 'ops@example.com', '--password-stdin'], { stdin: PASSWORD })).code, 0);
  const server = await startServe(t, dataDir);
  const login = await request(server.url, 'POST', '/auth/login', { body: { email: 'ops@example.com', password: PASSWORD } });
  const wf = await request(server.url, 'POST', '/workflows', { token: login.body.token, body: { name: 'x', triggerSource: 'WEBHOOK' } });
  await server.stop();
  const r = await runCli(dataDir, ['workflow', 'activate', String(wf.body.id)]);
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /lookup/);
});
