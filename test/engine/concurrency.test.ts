import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { EngineOptions } from '../../src/engine/scheduler.js';
import { sql } from 'drizzle-orm';
import { execute } from '../../src/core/db/dialect.js';
import { build, rowsOf, waitForRun, type TestServer } from '../helpers.js';
import { slowService, type SlowService } from '../slowService.js';

/**
 * The engine executes many runs at once, each in its own execution: runs waiting on the
 * outside world overlap, claims are shared fairly across workspaces, and a lease is kept
 * (renewed) for as long as its run is in flight, so a slow step never runs twice.
 */

async function setUp(t: TestContext, delayMs: number, engine: EngineOptions = {}) {
  const service = await slowService(t, delayMs);
  const s = await build(t, {
    env: { SVC_HTTP_ALLOWED_HOSTS: service.host, SVC_WEBHOOK_RATE_LIMIT: '1000000' },
    engine: { pollMs: 50, shutdownGraceMs: 0, ...engine },
  });
  return { s, service };
}

/** An ACTIVE webhook workflow in the token's workspace; returns its inbound path. */
async function workflow(s: TestServer, token: string, steps: unknown[]): Promise<string> {
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'flow', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps, webhook: { lookup: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  return new URL(wf.body.webhook.url).pathname;
}

const slowCall = (service: SlowService) => ({
  type: 'http_request',
  method: 'POST',
  url: `${service.url}?key={{ run.id }}`,
  body: { email: '{{ contact.email }}' },
});

async function postMany(s: TestServer, path: string, n: number, prefix: string): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < n; i += 50) {
    const chunk = await Promise.all(
      Array.from({ length: Math.min(50, n - i) }, (_, j) => s.request('POST', path, { body: { email: `${prefix}${i + j}@example.com` } })),
    );
    for (const res of chunk) {
      assert.equal(res.status, 202, res.text);
      ids.push(res.body.runId);
    }
  }
  return ids;
}

async function statusCounts(s: TestServer, workspaceId?: number): Promise<Record<string, number>> {
  const rows = await rowsOf<{ status: string; n: number }>(
    s,
    sql`SELECT status, COUNT(*) AS n FROM workflow_runs ${workspaceId ? sql`WHERE workspace_id = ${workspaceId}` : sql``} GROUP BY status`,
  );
  return Object.fromEntries(rows.map((r) => [r.status, Number(r.n)]));
}

async function waitUntil(what: string, test: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const started = Date.now();
  while (!(await test())) {
    if (Date.now() - started > timeoutMs) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test('runs waiting on a slow service overlap: 200 runs, at least 50 calls at once, each run calls once', async (t) => {
  // Calls of 1 s: long enough that the first runs are still waiting when the last of the 200
  // webhooks is accepted, on either store (each one creates its contact first).
  const { s, service } = await setUp(t, 1_000);
  const token = await s.login(s.owner.email, s.owner.password);
  const path = await workflow(s, token, [slowCall(service), { type: 'add_tags', tags: ['called'] }]);
  const started = Date.now();
  const runIds = await postMany(s, path, 200, 'overlap');
  await waitUntil('200 COMPLETED runs', async () => ((await statusCounts(s)).COMPLETED ?? 0) === 200);
  const seconds = (Date.now() - started) / 1000;
  assert.ok(service.maxInProgress() >= 50, `the service saw at most ${service.maxInProgress()} calls at once`);
  assert.equal(service.total(), 200);
  for (const id of runIds) assert.equal(service.calls.get(String(id)), 1, `run ${id} called ${service.calls.get(String(id)) ?? 0} times`);
  // One at a time per thread would take 200 x 1 s / threads; overlapping takes a few seconds.
  assert.ok(seconds < 20, `200 runs of 1 s took ${seconds} s`);
});

test('a quick run of another workspace is not held up by a backlog of slow runs (round-robin claims)', async (t) => {
  // 40 runs in flight at most: 300 slow runs of A would hold up anything queued after them
  // for about 300 / 40 x 2 s = 15 s if claims were oldest-first. (Calls of 2 s, so that A
  // still has its backlog when posting the 300 is slow on a busy machine.)
  const { s, service } = await setUp(t, 2_000, { runConcurrency: 40 });
  const tokenA = await s.login(s.owner.email, s.owner.password);
  const pathA = await workflow(s, tokenA, [slowCall(service)]);
  const b = await s.otherWorkspace();
  const pathB = await workflow(s, b.token, [{ type: 'add_tags', tags: ['quick'] }]);
  await postMany(s, pathA, 300, 'backlog');
  await service.whenInProgress(40);
  assert.ok(((await statusCounts(s)).QUEUED ?? 0) > 200, 'A has a backlog');
  const started = Date.now();
  const quick = await s.request('POST', pathB, { body: { email: 'quick@example.com' } });
  assert.equal(quick.status, 202, quick.text);
  const run = await waitForRun(s, b.token, quick.body.runId, ['COMPLETED', 'FAILED'], 10_000);
  const ms = Date.now() - started;
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  // Oldest-first claims would hold it about 15 s; a busy machine may take a second or two.
  assert.ok(ms < 5_000, `B's run took ${ms} ms behind A's backlog`);
  assert.ok(service.maxInProgress() <= 40, `at most runConcurrency runs are in flight (saw ${service.maxInProgress()})`);
});

test('a workspace never has more runs in flight than workspaceConcurrency, while others still run', async (t) => {
  const { s, service } = await setUp(t, 300, { workspaceConcurrency: 10 });
  const tokenA = await s.login(s.owner.email, s.owner.password);
  const pathA = await workflow(s, tokenA, [slowCall(service)]);
  const b = await s.otherWorkspace();
  const pathB = await workflow(s, b.token, [slowCall(service)]);
  await Promise.all([postMany(s, pathA, 60, 'a'), postMany(s, pathB, 60, 'b')]);
  await waitUntil('120 COMPLETED runs', async () => ((await statusCounts(s)).COMPLETED ?? 0) === 120);
  // Two workspaces, ten each: never more than 20 calls at once, and both made progress together.
  assert.ok(service.maxInProgress() <= 20, `saw ${service.maxInProgress()} calls at once`);
  assert.ok(service.maxInProgress() > 10, `both workspaces ran at once (saw ${service.maxInProgress()})`);
});

test('a step five times longer than the lease runs once: the lease is renewed while the run is in flight', async (t) => {
  const { s, service } = await setUp(t, 5_000, { leaseSeconds: 1 });
  const token = await s.login(s.owner.email, s.owner.password);
  const path = await workflow(s, token, [slowCall(service), { type: 'add_tags', tags: ['once'] }]);
  const runIds = await postMany(s, path, 5, 'lease');
  for (const id of runIds) {
    const run = await waitForRun(s, token, id, ['COMPLETED', 'FAILED'], 30_000);
    assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  }
  for (const id of runIds) assert.equal(service.calls.get(String(id)), 1, `run ${id} was executed ${service.calls.get(String(id))} times`);
});

test('a stall of the process longer than the lease: its own runs are renewed before expired claims are taken back, none runs twice', async (t) => {
  // A 2 s lease (renewed every 667 ms), not 1 s: on a busy CI machine, PostgreSQL's renewals
  // could come late by themselves, and the test is about the stalls it makes.
  const { s, service } = await setUp(t, 6_000, { leaseSeconds: 2 });
  const token = await s.login(s.owner.email, s.owner.password);
  const path = await workflow(s, token, [slowCall(service), { type: 'add_tags', tags: ['once'] }]);
  const runIds = await postMany(s, path, 5, 'stall');
  await service.whenInProgress(5);
  // The engine's main thread is this one: block it twice for longer than the lease, as a
  // starved process or a long pause would. When it wakes, the claim's timer and the renewal's
  // are both due; whichever fires first, the process's own runs must keep their leases.
  const cell = new Int32Array(new SharedArrayBuffer(4));
  for (let i = 0; i < 2; i++) {
    Atomics.wait(cell, 0, 0, 2_500);
    await new Promise((r) => setTimeout(r, 200));
  }
  for (const id of runIds) {
    const run = await waitForRun(s, token, id, ['COMPLETED', 'FAILED'], 30_000);
    assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  }
  for (const id of runIds) assert.equal(service.calls.get(String(id)), 1, `run ${id} was executed ${service.calls.get(String(id))} times`);
});

test('with 20,000 slow runs of workspace A queued, a webhook run of workspace B completes within 2 s', async (t) => {
  const { s, service } = await setUp(t, 2_000);
  const tokenA = await s.login(s.owner.email, s.owner.password);
  const pathA = await workflow(s, tokenA, [slowCall(service)]);
  const b = await s.otherWorkspace();
  const pathB = await workflow(s, b.token, [{ type: 'add_tags', tags: ['quick'] }]);
  // One real run of A, then 19,999 copies of it queued in one statement.
  const [first] = await postMany(s, pathA, 1, 'seed');
  await s.store.transaction((tx) =>
    execute(
      s.store,
      tx,
      sql`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 19999)
          INSERT INTO workflow_runs (workspace_id, workflow_id, contact_id, status, definition, step_states, "trigger", run_at)
          SELECT r.workspace_id, r.workflow_id, r.contact_id, 'QUEUED', r.definition, '[]', r."trigger", r.run_at FROM workflow_runs r, n WHERE r.id = ${first}`,
    ),
  );
  await service.whenInProgress(100);
  assert.ok(((await statusCounts(s, s.workspaceId)).QUEUED ?? 0) > 15_000, 'A has a backlog of queued runs');
  const started = Date.now();
  const quick = await s.request('POST', pathB, { body: { email: 'quick@example.com' } });
  assert.equal(quick.status, 202, quick.text);
  const run = await waitForRun(s, b.token, quick.body.runId, ['COMPLETED', 'FAILED'], 10_000);
  const ms = Date.now() - started;
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  assert.ok(ms < 2_000, `B's run took ${ms} ms behind 20,000 runs of A`);
});
