/**
 * GET /metrics (issue 10, item 4): Prometheus text, off the public port unless a token is
 * set, counters that move with webhooks, runs and deliveries, and labels that carry route
 * patterns, never raw URLs (a webhook URL is a credential).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { freePort } from '../../src/cli/serve.js';
import { ConfigError, loadConfig } from '../../src/core/config.js';
import { sql } from 'drizzle-orm';
import { execute } from '../../src/core/db/dialect.js';
import { assertProblem, build, request, waitForRun, type TestServer } from '../helpers.js';
import { assertLoopbackOnly, parseMetrics, sampleValue, type Family } from '../prometheus.js';

const TOKEN = 'metrics-token-0123456789abcdef';

async function scrape(s: TestServer): Promise<Map<string, Family>> {
  const res = await s.request('GET', '/metrics', { token: TOKEN });
  assert.equal(res.status, 200, res.text.slice(0, 300));
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return parseMetrics(res.text);
}

async function webhookWorkflow(s: TestServer, token: string, steps: unknown[]) {
  const wf = await s.request('POST', '/workflows', {
    token,
    body: { name: 'flow', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps, webhook: { lookup: 'email', path: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  return new URL(wf.body.webhook.url as string).pathname;
}

test('without a token or a metrics port, /metrics is no route on the public port', async (t) => {
  const s = await build(t);
  assert.equal(s.app.metrics, undefined);
  assertProblem(await s.request('GET', '/metrics'), 404, 'route_not_found');
  assertProblem(await s.request('GET', '/metrics', { token: TOKEN }), 404, 'route_not_found');
});

test('with SVC_METRICS_TOKEN the public /metrics needs exactly that bearer token', async (t) => {
  const s = await build(t, { env: { SVC_METRICS_TOKEN: TOKEN } });
  for (const headers of [
    {} as Record<string, string>,
    { authorization: `Bearer ${TOKEN.slice(0, -1)}x` },
    { authorization: `Bearer ${TOKEN}x` },
    { authorization: 'Bearer short' },
    { authorization: TOKEN },
    { authorization: `Basic ${TOKEN}` },
  ]) {
    const res = await s.request('GET', '/metrics', { headers });
    assertProblem(res, 401, 'invalid_token');
    assert.equal(res.headers.get('www-authenticate'), 'Bearer');
    assert.doesNotMatch(res.text, /svc_http_requests_total/);
  }
  // An access token of the API is no metrics token.
  const apiToken = await s.login(s.owner.email, s.owner.password);
  assertProblem(await s.request('GET', '/metrics', { token: apiToken }), 401, 'invalid_token');
  const families = await scrape(s);
  for (const name of [
    'svc_build_info',
    'svc_http_requests_total',
    'svc_http_request_duration_seconds',
    'svc_webhooks_accepted_total',
    'svc_webhooks_refused_total',
    'svc_runs',
    'svc_runs_queue_depth',
    'svc_runs_claim_lag_seconds',
    'svc_runs_finished_total',
    'svc_deliveries_total',
    'svc_engine_threads',
    'svc_engine_utilization',
    'svc_storage_full',
    'process_cpu_user_seconds_total',
    'process_resident_memory_bytes',
    'nodejs_eventloop_lag_seconds',
  ]) {
    assert.ok(families.has(name), `${name} is exposed`);
  }
  assert.equal(families.get('svc_http_request_duration_seconds')!.type, 'HISTOGRAM');
  // The SQLite file's gauges on a SQLite node; PostgreSQL reports on its own server.
  const sqliteGauges = ['svc_sqlite_page_count', 'svc_sqlite_page_size_bytes', 'svc_sqlite_wal_bytes'];
  if (s.store.dialect === 'sqlite') {
    for (const name of sqliteGauges) assert.ok(families.has(name), `${name} is exposed`);
    assert.ok(sampleValue(families, 'svc_sqlite_page_count') > 0);
    assert.equal(sampleValue(families, 'svc_sqlite_page_size_bytes'), 4096);
    assert.ok(sampleValue(families, 'svc_sqlite_wal_bytes') >= 0);
  } else {
    for (const name of sqliteGauges) assert.ok(!families.has(name), `${name} is not exposed on PostgreSQL`);
  }
  assert.equal(sampleValue(families, 'svc_storage_full'), 0);
  // This node runs no engine: its gauges say so rather than failing.
  assert.equal(sampleValue(families, 'svc_engine_threads'), 0);
});

test('webhooks, runs and deliveries move the counters; labels are route patterns, never the token', async (t) => {
  const s = await build(t, { env: { SVC_METRICS_TOKEN: TOKEN }, engine: { pollMs: 50 } });
  const token = await s.login(s.owner.email, s.owner.password);
  const template = await s.request('POST', '/templates', { token, body: { name: 'hi', channel: 'EMAIL', content: { subject: 'Hi', text: 'Hello' } } });
  assert.equal(template.status, 201, template.text);
  const path = await webhookWorkflow(s, token, [{ type: 'send_email', templateId: template.body.id }]);
  const webhookToken = path.split('/').pop()!;

  const before = await scrape(s);
  const accepted = (f: Map<string, Family>) => sampleValue(f, 'svc_webhooks_accepted_total', { replayed: 'false' });
  const refused = (f: Map<string, Family>, code: string) => sampleValue(f, 'svc_webhooks_refused_total', { code });
  const completed = (f: Map<string, Family>) => sampleValue(f, 'svc_runs_finished_total', { outcome: 'COMPLETED' });
  const sent = (f: Map<string, Family>) => sampleValue(f, 'svc_deliveries_total', { channel: 'EMAIL', provider: 'outbox', status: 'SENT' });
  const webhookRequests = (f: Map<string, Family>, status: string) =>
    sampleValue(f, 'svc_http_requests_total', { route: '/v1/webhooks/in/:token', method: 'POST', status });

  const res = await s.request('POST', path, { body: { email: 'jane@example.com' } });
  assert.equal(res.status, 202, res.text);
  const replay = await s.request('POST', path, { body: { email: 'jane@example.com' }, headers: { 'idempotency-key': 'k-1' } });
  assert.equal(replay.status, 202);
  assert.equal(
    (await s.request('POST', path, { body: { email: 'jane@example.com' }, headers: { 'idempotency-key': 'k-1' } })).headers.get('idempotent-replayed'),
    'true',
  );
  assertProblem(await s.request('POST', '/v1/webhooks/in/no-such-token', { body: {} }), 404, 'webhook_not_found');
  assertProblem(await s.request('POST', path, { raw: 'x', headers: { 'content-type': 'text/plain' } }), 415, 'unsupported_media_type');
  assertProblem(await s.request('POST', path, { raw: '{not json', headers: { 'content-type': 'application/json' } }), 400);
  await waitForRun(s, token, res.body.runId, ['COMPLETED']);
  await waitForRun(s, token, replay.body.runId, ['COMPLETED']);
  // The worker threads report in batches on the engine's channel: allow them a moment.
  let after = await scrape(s);
  for (const until = Date.now() + 15_000; (completed(after) < completed(before) + 2 || sent(after) < sent(before) + 2) && Date.now() < until; ) {
    await new Promise((r) => setTimeout(r, 50));
    after = await scrape(s);
  }

  assert.equal(accepted(after) - accepted(before), 2);
  assert.equal(sampleValue(after, 'svc_webhooks_accepted_total', { replayed: 'true' }), 1);
  assert.equal(refused(after, 'webhook_not_found') - refused(before, 'webhook_not_found'), 1);
  assert.equal(refused(after, 'unsupported_media_type'), 1);
  assert.equal(refused(after, 'invalid_json'), 1);
  assert.equal(webhookRequests(after, '202') - webhookRequests(before, '202'), 3);
  assert.equal(webhookRequests(after, '404'), 1);
  assert.equal(completed(after) - completed(before), 2);
  assert.equal(sent(after) - sent(before), 2);
  assert.ok(sampleValue(after, 'svc_engine_threads') >= 1);
  assert.ok(sampleValue(after, 'svc_engine_run_capacity') >= 1);

  // Labels are route patterns: no token, no id, no query string.
  const text = (await s.request('GET', '/metrics', { token: TOKEN })).text;
  // (The parser keeps no labels of histogram samples: the latency is read from the text.)
  const count = /^svc_http_request_duration_seconds_count\{method="POST",route="\/v1\/webhooks\/in\/:token"\} (\d+)$/m.exec(text);
  const inf = /^svc_http_request_duration_seconds_bucket\{le="\+Inf",method="POST",route="\/v1\/webhooks\/in\/:token"\} (\d+)$/m.exec(text);
  assert.ok(count && Number(count[1]) >= 6 && inf?.[1] === count[1], text.slice(0, 500));
  assert.ok(!text.includes(webhookToken), 'the webhook token is not in the metrics');
  assert.ok(!text.includes('no-such-token'));
  assert.match(text, /route="\/runs\/:runId"/);
  assert.doesNotMatch(text, new RegExp(`route="/runs/${res.body.runId}"`));
  assertProblem(await s.request('GET', '/nowhere/secret-path'), 404, 'route_not_found');
  const unmatched = parseMetrics((await s.request('GET', '/metrics', { token: TOKEN })).text);
  assert.equal(sampleValue(unmatched, 'svc_http_requests_total', { route: '(unmatched)', method: 'GET', status: '404' }), 1);
  assert.ok(!(await s.request('GET', '/metrics', { token: TOKEN })).text.includes('secret-path'));
});

test('runs by status, queue depth and claim lag come from the database (no engine here: runs stay QUEUED)', async (t) => {
  const s = await build(t, { env: { SVC_METRICS_TOKEN: TOKEN } });
  const token = await s.login(s.owner.email, s.owner.password);
  const path = await webhookWorkflow(s, token, [{ type: 'add_tags', tags: ['x'] }]);
  let families = await scrape(s);
  assert.equal(sampleValue(families, 'svc_runs', { status: 'QUEUED' }), 0);
  assert.equal(sampleValue(families, 'svc_runs_claim_lag_seconds'), 0);
  for (const email of ['a@example.com', 'b@example.com', 'c@example.com']) assert.equal((await s.request('POST', path, { body: { email } })).status, 202);
  // One run queued a minute ago, one that waits until tomorrow.
  await s.store.transaction(async (tx) => {
    const minuteAgo = new Date(Date.now() - 60_000).toISOString();
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
    await execute(s.store, tx, sql`UPDATE workflow_runs SET run_at = ${minuteAgo} WHERE id = (SELECT min(id) FROM workflow_runs)`);
    await execute(s.store, tx, sql`UPDATE workflow_runs SET status = 'WAITING', run_at = ${tomorrow} WHERE id = (SELECT max(id) FROM workflow_runs)`);
  });
  families = await scrape(s);
  assert.equal(sampleValue(families, 'svc_runs', { status: 'QUEUED' }), 2);
  assert.equal(sampleValue(families, 'svc_runs', { status: 'WAITING' }), 1);
  assert.equal(sampleValue(families, 'svc_runs', { status: 'RUNNING' }), 0);
  assert.equal(sampleValue(families, 'svc_runs_queue_depth'), 2);
  const lag = sampleValue(families, 'svc_runs_claim_lag_seconds');
  assert.ok(lag >= 59 && lag < 120, `claim lag ${lag}`);
});

test('a scrape reads no table: counts use the indexes and stop at a cap', async (t) => {
  const s = await build(t, { env: { SVC_METRICS_TOKEN: TOKEN }, store: 'sqlite' });
  const plans = ['QUEUED', 'WAITING', 'RUNNING'].map((status) =>
    (
      s.db.$client.prepare('EXPLAIN QUERY PLAN SELECT count(*) AS n FROM (SELECT 1 FROM workflow_runs WHERE status = ? LIMIT ?)').all(status, 10) as {
        detail: string;
      }[]
    )
      .map((r) => r.detail)
      .join('; '),
  );
  for (const plan of plans) assert.match(plan, /USING (COVERING )?INDEX/, plan);
  const lagPlan = (
    s.db.$client.prepare("EXPLAIN QUERY PLAN SELECT min(run_at) FROM workflow_runs WHERE status = 'QUEUED' AND run_at <= ?").all('x') as { detail: string }[]
  )
    .map((r) => r.detail)
    .join('; ');
  assert.match(lagPlan, /USING (COVERING )?INDEX/, lagPlan);
  assert.doesNotMatch(lagPlan, /SCAN workflow_runs\b(?! USING)/);
});

test('SVC_METRICS_PORT: a listener on 127.0.0.1 only, serving /metrics without a token', async (t) => {
  const port = await freePort('127.0.0.1');
  const s = await build(t, { env: { SVC_METRICS_PORT: String(port) } });
  assert.ok(s.app.metrics);
  const url = await s.app.metrics.listen(port);
  assert.equal(url, `http://127.0.0.1:${port}`);
  const res = await request(url, 'GET', '/metrics');
  assert.equal(res.status, 200);
  assert.ok(parseMetrics(res.text).has('svc_http_requests_total'));
  assert.equal((await request(url, 'GET', '/healthz')).status, 404, 'only /metrics is served there');
  // No token is set, so the public port does not serve them.
  assertProblem(await s.request('GET', '/metrics'), 404, 'route_not_found');
  // Not reachable on any other address of this machine.
  await assertLoopbackOnly(port);
});

test('the metrics settings are validated at start-up, naming the setting', async (t) => {
  const s = await build(t);
  const load = (env: NodeJS.ProcessEnv) => loadConfig({ dataDir: s.dataDir }, env);
  assert.throws(
    () => load({ SVC_METRICS_TOKEN: 'short' }),
    (err: Error) => err instanceof ConfigError && /metricsToken must be 16 to 512 printable characters/.test(err.message),
  );
  assert.throws(() => load({ SVC_METRICS_TOKEN: 'has a space in it 0123456789' }), ConfigError);
  for (const port of ['0', '65536', 'abc', '80.5'])
    assert.throws(
      () => load({ SVC_METRICS_PORT: port }),
      (err: Error) => err instanceof ConfigError && /metricsPort must be an integer from 1 to 65535/.test(err.message),
    );
  assert.throws(() => load({ SVC_LOG_FORMAT: 'xml' }), /logFormat must be one of auto, pretty, json/);
  const ok = load({ SVC_METRICS_TOKEN: TOKEN, SVC_METRICS_PORT: '9464', SVC_LOG_FORMAT: 'JSON' });
  assert.deepEqual([ok.metricsToken, ok.metricsPort, ok.logFormat], [TOKEN, 9464, 'json']);
  const defaults = load({});
  assert.deepEqual([defaults.metricsToken, defaults.metricsPort, defaults.logFormat], [null, null, 'auto']);
});
