import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { sql } from 'drizzle-orm';
import { WriteBatcher } from '../../src/core/db/batcher.js';
import { sqliteIntake, stmt, type IntakeJob, type RunStart } from '../../src/core/db/intake.js';
import { isSqliteStore } from '../../src/core/db/store.js';
import { Engine, type EngineOptions } from '../../src/engine/scheduler.js';
import { build, rowsOf, waitForRun, type TestServer } from '../helpers.js';
import { slowService, type SlowService } from '../slowService.js';

/**
 * On SQLite the engine takes a webhook's run as intake writes it (Engine.lease): written
 * RUNNING under the engine's lease and executed once its batch commits, with no claiming
 * transaction in between, but only while nothing waits QUEUED and capacity is left. These
 * tests hold it to what a claimed run promises: executed once, in the order accepted when
 * capacity is short, and nothing taken for a batch that was rolled back.
 */

async function setUp(t: TestContext, delayMs: number, engine: EngineOptions) {
  const service = await slowService(t, delayMs);
  const s = await build(t, {
    store: 'sqlite',
    env: { SVC_HTTP_ALLOWED_HOSTS: service.host, SVC_WEBHOOK_RATE_LIMIT: '1000000' },
    engine: { shutdownGraceMs: 0, ...engine },
  });
  return { s, service, token: await s.login(s.owner.email, s.owner.password) };
}

const slowCall = (service: SlowService) => ({ type: 'http_request', method: 'POST', url: `${service.url}?key={{ run.id }}` });

async function workflow(s: TestServer, token: string, steps: unknown[]): Promise<{ id: number; path: string }> {
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'flow', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps, webhook: { lookup: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  return { id: wf.body.id, path: new URL(wf.body.webhook.url).pathname };
}

async function post(s: TestServer, path: string, email: string): Promise<number> {
  const res = await s.request('POST', path, { body: { email } });
  assert.equal(res.status, 202, res.text);
  return res.body.runId;
}

function engineOf(s: TestServer): Engine {
  const engine = (s.app as unknown as { engine?: Engine }).engine;
  assert.ok(engine, 'the server runs an engine');
  return engine;
}

async function waitUntil(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const started = Date.now();
  while (!(await check())) {
    if (Date.now() - started > timeoutMs) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('on an idle engine each webhook run is taken as it is written, not claimed from the queue, and executed once', async (t) => {
  // A poll far away: only what intake and the finished runs set off can claim.
  const { s, service, token } = await setUp(t, 0, { pollMs: 60_000 });
  const { path } = await workflow(s, token, [slowCall(service), { type: 'add_tags', tags: ['done'] }]);
  // The engine's first claim at start finds the queue empty; until it ran, a run is queued.
  const first = await post(s, path, 'first@example.com');
  await waitForRun(s, token, first, ['COMPLETED'], 10_000);
  const before = engineOf(s).stats().taken;

  const ids: number[] = [];
  for (let i = 0; i < 20; i++) ids.push(await post(s, path, `c${i}@example.com`));
  for (const id of ids) assert.equal((await waitForRun(s, token, id, ['COMPLETED', 'FAILED'], 10_000)).status, 'COMPLETED');

  const after = engineOf(s).stats().taken;
  assert.equal(after.intake - before.intake, 20, 'every run was taken as it was written');
  assert.equal(after.claim - before.claim, 0, 'none was claimed from the queue');
  for (const id of ids) assert.equal(service.calls.get(String(id)), 1, `run ${id} called once`);
  // Its lease was this process's, and is finished with.
  const rows = await rowsOf<{ status: string; lease_owner: string | null }>(
    s,
    sql`SELECT status, lease_owner FROM workflow_runs WHERE id IN (${sql.join(
      ids.map((id) => sql`${id}`),
      sql`, `,
    )})`,
  );
  assert.deepEqual(new Set(rows.map((r) => r.status)), new Set(['COMPLETED']));
  await waitUntil('no run in flight', () => engineOf(s).stats().runsInFlight === 0);
});

test('with no slot free, new runs wait their turn: runs start in the order they were accepted', async (t) => {
  const { s, service, token } = await setUp(t, 150, { pollMs: 50, runConcurrency: 1 });
  const { path } = await workflow(s, token, [slowCall(service)]);
  const ids: number[] = [];
  for (let i = 0; i < 4; i++) ids.push(await post(s, path, `a${i}@example.com`));
  // More arrive while the first ones execute: they queue behind the ones already waiting.
  await service.whenReceived(2);
  for (let i = 0; i < 4; i++) ids.push(await post(s, path, `b${i}@example.com`));
  for (const id of ids) assert.equal((await waitForRun(s, token, id, ['COMPLETED', 'FAILED'], 20_000)).status, 'COMPLETED');
  assert.deepEqual([...service.calls.keys()], ids.map(String), 'executed in the order accepted');
  assert.equal(service.maxInProgress(), 1, 'never more than runConcurrency at once');
  const taken = engineOf(s).stats().taken;
  assert.ok(taken.claim >= 6, `the waiting runs were claimed from the queue (${JSON.stringify(taken)})`);
});

test('a batch rolled back takes nothing: its runs that commit alone afterwards are executed once, the failed one never exists', async (t) => {
  const service = await slowService(t, 0);
  const s = await build(t, { store: 'sqlite', env: { SVC_HTTP_ALLOWED_HOSTS: service.host }, engine: false });
  assert.ok(isSqliteStore(s.store));
  const token = await s.login(s.owner.email, s.owner.password);
  const { id: workflowId } = await workflow(s, token, [slowCall(service)]);
  const contact = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com' } });
  assert.equal(contact.status, 201, contact.text);
  // The server runs no engine: this test's own, on the server's database, with the intake
  // it takes runs from, both on a group commit of their own.
  const errors: unknown[] = [];
  const log = { info() {}, warn() {}, error: (obj: object) => errors.push(obj) };
  const batcher = new WriteBatcher(s.store);
  const intake = sqliteIntake(s.store, batcher);
  const engine = new Engine(s.store, s.config, batcher, log, { pollMs: 50, shutdownGraceMs: 0 });
  intake.births = engine.asBirths;
  engine.start();
  t.after(async () => {
    await engine.stop();
    await batcher.close();
  });
  const steps = JSON.stringify([slowCall(service)]);
  const start = (fail: boolean) =>
    intake.run(function* (): IntakeJob<RunStart> {
      const run = yield* stmt((q) => q.insertRun(s.workspaceId, workflowId, contact.body.id, steps, '{"email":"ann@example.com"}'));
      if (fail) throw new Error('this job fails after its run was written');
      return run;
    });
  // Once the engine's first claim found the queue empty, runs are taken as they are written.
  const probes: RunStart[] = [];
  await waitUntil('a run taken as it is written', async () => {
    probes.push(await start(false));
    return probes.at(-1)!.claimed;
  });

  // Queued in one turn: one batch, which the failing job rolls back; the others run again alone.
  const outcomes = await Promise.allSettled([start(false), start(false), start(true), start(false)]);
  assert.equal(outcomes[2]!.status, 'rejected');
  const started = outcomes.filter((o): o is PromiseFulfilledResult<RunStart> => o.status === 'fulfilled').map((o) => o.value);
  assert.equal(started.length, 3);
  for (const run of started) assert.equal(run.claimed, true, 'taken as written in the transaction it committed in');

  const all = [...probes, ...started].map((r) => r.id);
  await waitUntil('every run executed', () => all.every((id) => service.calls.get(String(id)) === 1));
  await waitUntil('no run in flight', () => engine.stats().runsInFlight === 0);
  const rows = await rowsOf<{ id: number; status: string }>(s, sql`SELECT id, status FROM workflow_runs ORDER BY id`);
  assert.deepEqual(
    rows.map((r) => r.id),
    [...all].sort((a, b) => a - b),
    'the failed job left no run behind',
  );
  await waitUntil('every run COMPLETED', async () =>
    (await rowsOf<{ status: string }>(s, sql`SELECT status FROM workflow_runs`)).every((r) => r.status === 'COMPLETED'),
  );
  for (const id of all) assert.equal(service.calls.get(String(id)), 1, `run ${id} called once`);
  // Runs taken for the rolled-back transaction were never in flight: the count is exact.
  assert.equal(engine.stats().taken.intake, started.length + probes.filter((p) => p.claimed).length);
  assert.deepEqual(errors, []);
});
