import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { startServe, type ServeProcess } from '../cli/helpers.js';
import { request } from '../helpers.js';
import { initFolder, login } from './folder.js';
import { slowService, type SlowService } from '../slowService.js';

/**
 * Leases across processes: real `svc serve` processes on one data folder, stopped with
 * SIGTERM and killed with SIGKILL while hundreds of runs wait on a slow local service.
 * The service counts the calls of each run: none may be executed twice, none left stuck.
 */

async function workflow(server: ServeProcess, token: string, steps: unknown[]): Promise<string> {
  const wf = await request(server.url, 'POST', '/workflows', {
    token,
    body: { name: 'slow', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps, webhook: { lookup: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  return new URL(wf.body.webhook.url).pathname;
}

const slowCall = (service: SlowService) => ({ type: 'http_request', method: 'POST', url: `${service.url}?key={{ run.id }}` });

async function postMany(url: string, path: string, n: number): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < n; i += 50) {
    const chunk = await Promise.all(
      Array.from({ length: Math.min(50, n - i) }, (_, j) => request(url, 'POST', path, { body: { email: `c${i + j}@example.com` } })),
    );
    for (const res of chunk) {
      assert.equal(res.status, 202, res.text);
      ids.push(res.body.runId);
    }
  }
  return ids;
}

function readDb<T>(dataDir: string, sql: string): T[] {
  const db = new Database(join(dataDir, 'svc.db'), { readonly: true });
  try {
    return db.prepare(sql).all() as T[];
  } finally {
    db.close();
  }
}

function statuses(dataDir: string): Record<string, number> {
  return Object.fromEntries(
    readDb<{ status: string; n: number }>(dataDir, 'SELECT status, COUNT(*) AS n FROM workflow_runs GROUP BY status').map((r) => [r.status, r.n]),
  );
}

async function waitUntil(what: string, test: () => boolean, timeoutMs = 90_000): Promise<void> {
  const started = Date.now();
  while (!test()) {
    if (Date.now() - started > timeoutMs) assert.fail(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const env = (service: SlowService, extra: NodeJS.ProcessEnv = {}) => ({
  SVC_LOG_LEVEL: 'warn',
  SVC_HTTP_ALLOWED_HOSTS: service.host,
  SVC_WEBHOOK_RATE_LIMIT: '1000000',
  ...extra,
});

test('two svc serve processes on one data folder, steps 3x the lease: every run executes once', async (t) => {
  // A lease of 2 s, renewed every 667 ms: one process may be starved for over a second by a
  // busy machine without the other taking its runs over (with 1 s, a CI run saw one run twice).
  const service = await slowService(t, 6_000);
  const dataDir = await initFolder(t, 'svc-leases-');
  const e = env(service, { SVC_RUN_LEASE_SECONDS: '2' });
  const one = await startServe(t, dataDir, ['--port', '0'], { env: e });
  const two = await startServe(t, dataDir, ['--port', '0'], { env: e });
  const token = await login(one);
  const path = await workflow(one, token, [slowCall(service), { type: 'add_tags', tags: ['done'] }]);
  const ids = await postMany(one.url, path, 40);
  await waitUntil('40 COMPLETED runs', () => (statuses(dataDir).COMPLETED ?? 0) === 40);
  for (const id of ids) assert.equal(service.calls.get(String(id)), 1, `run ${id} was executed ${service.calls.get(String(id))} times`);
  await Promise.all([one.stop(), two.stop()]);
});

test('SIGTERM with 200 runs in flight: they finish within the grace period, none twice, none stuck', async (t) => {
  // Calls of 3 s, well inside the 10 s grace: with 1 s calls, posting the 200 webhooks on a
  // busy machine took longer than the first calls, which were all over (135 at once at most)
  // before the wait for 100 in progress began.
  const service = await slowService(t, 3_000);
  const dataDir = await initFolder(t, 'svc-leases-');
  const server = await startServe(t, dataDir, ['--port', '0'], { env: env(service) });
  const token = await login(server);
  const path = await workflow(server, token, [slowCall(service), { type: 'add_tags', tags: ['done'] }]);
  const ids = await postMany(server.url, path, 200);
  await service.whenInProgress(100);
  const stopped = await server.stop('SIGTERM', 30_000);
  assert.equal(stopped.code, 0, server.stderr());
  assert.deepEqual(statuses(dataDir), { COMPLETED: 200 });
  for (const id of ids) assert.equal(service.calls.get(String(id)), 1, `run ${id} was executed ${service.calls.get(String(id))} times`);
});

test('SIGTERM with runs longer than the grace period: the rest are released at once and resumed by the next process', async (t) => {
  const service = await slowService(t, 4_000);
  const dataDir = await initFolder(t, 'svc-leases-');
  const e = env(service, { SVC_SHUTDOWN_GRACE: '1' });
  const first = await startServe(t, dataDir, ['--port', '0'], { env: e });
  const token = await login(first);
  const path = await workflow(first, token, [slowCall(service), { type: 'add_tags', tags: ['done'] }]);
  const ids = await postMany(first.url, path, 100);
  await service.whenInProgress(100);
  const stopped = await first.stop('SIGTERM', 30_000);
  assert.equal(stopped.code, 0, first.stderr());
  assert.ok(stopped.ms < 8_000, `stopping took ${stopped.ms} ms with a 1 s grace period`);
  // Nothing is left leased to the stopped process: every run is queued again, none stuck.
  const leased = readDb<{ n: number }>(dataDir, "SELECT COUNT(*) AS n FROM workflow_runs WHERE status = 'RUNNING' OR lease_owner IS NOT NULL")[0]!.n;
  assert.equal(leased, 0, JSON.stringify(statuses(dataDir)));
  const after = statuses(dataDir);
  assert.ok((after.QUEUED ?? 0) > 0 && (after.QUEUED ?? 0) + (after.COMPLETED ?? 0) === 100, JSON.stringify(after));

  const second = await startServe(t, dataDir, ['--port', '0'], { env: e });
  await waitUntil('100 COMPLETED runs', () => (statuses(dataDir).COMPLETED ?? 0) === 100, 60_000);
  // A call cut off by the shutdown is made again by the next process, once; a call that
  // was answered before the threads stopped is not.
  for (const id of ids) {
    const calls = service.calls.get(String(id)) ?? 0;
    assert.ok(calls === 1 || calls === 2, `run ${id}: ${calls} calls`);
  }
  assert.ok(service.total() <= 100 + (after.QUEUED ?? 0), `${service.total()} calls for 100 runs of which ${after.QUEUED} were released`);
  await second.stop();
});

test('kill -9 with 500 runs in flight: every accepted run completes after a restart, no message is sent twice', async (t) => {
  // Posting the 500 webhooks takes about 2 s on 2 cores with another test file running: the
  // first runs' calls must still be in flight when the last run's starts.
  const service = await slowService(t, 6_000);
  // A Twilio-compatible API that counts the messages of each run (the body names the run).
  const sms = new Map<string, number>();
  const twilio = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (d: string) => (body += d));
    req.on('end', () => {
      const text = new URLSearchParams(body).get('Body') ?? '';
      sms.set(text, (sms.get(text) ?? 0) + 1);
      res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ sid: `SM${sms.size}` }));
    });
  });
  await new Promise<void>((r) => twilio.listen(0, '127.0.0.1', r));
  t.after(() => {
    twilio.closeAllConnections();
    twilio.close();
  });
  const twilioHost = `127.0.0.1:${(twilio.address() as AddressInfo).port}`;

  const dataDir = await initFolder(t, 'svc-leases-');
  // 500 calls at once to one host: above the default per-host cap of 256 per thread.
  const e = env(service, { SVC_RUN_LEASE_SECONDS: '2', SVC_HTTP_ALLOWED_HOSTS: `${service.host},${twilioHost}`, SVC_OUTBOUND_PER_HOST_CONCURRENCY: '500' });
  const first = await startServe(t, dataDir, ['--port', '0'], { env: e });
  const token = await login(first);
  const put = await request(first.url, 'PUT', '/settings/channels', {
    token,
    body: {
      SMS: {
        provider: 'twilio',
        settings: { baseUrl: `http://${twilioHost}`, accountSid: 'AC123', from: '+15005550006' },
        credentials: { authToken: 'token' },
      },
    },
  });
  assert.equal(put.status, 200, put.text);
  const template = await request(first.url, 'POST', '/templates', { token, body: { name: 's', channel: 'SMS', content: { text: 'run {{ run.id }}' } } });
  assert.equal(template.status, 201, template.text);
  const path = await workflow(first, token, [
    slowCall(service),
    { type: 'send_sms', templateId: template.body.id, to: '+15005550009' },
    { type: 'add_tags', tags: ['done'] },
  ]);
  const ids = await postMany(first.url, path, 500);
  // Every run in flight is inside its slow call (none has answered yet): kill now.
  await service.whenInProgress(450);
  first.child.kill('SIGKILL');
  await new Promise((r) => first.child.once('exit', r));
  assert.equal(sms.size, 0, 'no message was sent before the kill');

  const second = await startServe(t, dataDir, ['--port', '0'], { env: e });
  await waitUntil('500 finished runs', () => {
    const s = statuses(dataDir);
    return (s.COMPLETED ?? 0) + (s.FAILED ?? 0) === 500;
  });
  assert.deepEqual(statuses(dataDir), { COMPLETED: 500 });
  for (const id of ids) assert.equal(sms.get(`run ${id}`), 1, `run ${id}: ${sms.get(`run ${id}`) ?? 0} messages`);
  const sentTwice = readDb<{ run_id: number }>(
    dataDir,
    "SELECT run_id FROM delivery_attempts WHERE status = 'SENT' GROUP BY run_id, step_index HAVING COUNT(*) > 1",
  );
  assert.deepEqual(sentTwice, []);
  await second.stop();
});

/**
 * A Twilio-compatible API that holds every message until `hold` is false, counting the
 * messages of each run (the body names the run).
 */
async function heldTwilio(t: import('node:test').TestContext) {
  const state = { hold: true, received: new Map<string, number>(), waiting: [] as (() => void)[] };
  const server = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8').on('data', (d: string) => (body += d));
    req.on('end', () => {
      const text = new URLSearchParams(body).get('Body') ?? '';
      state.received.set(text, (state.received.get(text) ?? 0) + 1);
      const answer = () => {
        if (!res.destroyed) res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ sid: `SM${Math.random()}` }));
      };
      if (state.hold) state.waiting.push(answer);
      else answer();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  const release = () => {
    state.hold = false;
    for (const answer of state.waiting.splice(0)) answer();
  };
  return { state, release, host: `127.0.0.1:${(server.address() as AddressInfo).port}` };
}

for (const stop of ['SIGKILL', 'SIGTERM'] as const) {
  test(`${stop} while messages wait for their turn (a slot of their destination): they are sent after the restart, only the one under way is not`, async (t) => {
    const twilio = await heldTwilio(t);
    const dataDir = await initFolder(t, 'svc-leases-');
    // One message at a time to the provider: the others wait for their turn in the process.
    const e = {
      SVC_LOG_LEVEL: 'warn',
      SVC_WEBHOOK_RATE_LIMIT: '1000000',
      SVC_RUN_LEASE_SECONDS: '2',
      SVC_SHUTDOWN_GRACE: '1',
      SVC_HTTP_TIMEOUT_MS: '60000',
      SVC_HTTP_ALLOWED_HOSTS: twilio.host,
      SVC_OUTBOUND_PER_HOST_CONCURRENCY: '1',
    };
    const first = await startServe(t, dataDir, ['--port', '0'], { env: e });
    const token = await login(first);
    const put = await request(first.url, 'PUT', '/settings/channels', {
      token,
      body: {
        SMS: {
          provider: 'twilio',
          settings: { baseUrl: `http://${twilio.host}`, accountSid: 'AC123', from: '+15005550006' },
          credentials: { authToken: 'token' },
        },
      },
    });
    assert.equal(put.status, 200, put.text);
    const template = await request(first.url, 'POST', '/templates', { token, body: { name: 's', channel: 'SMS', content: { text: 'run {{ run.id }}' } } });
    const path = await workflow(first, token, [{ type: 'send_sms', templateId: template.body.id, to: '+15005550009' }]);
    const ids = await postMany(first.url, path, 5);
    await waitUntil('the first message at the provider', () => twilio.state.received.size === 1);
    // Give the others time to reach their turn's queue, then stop the process.
    await new Promise((r) => setTimeout(r, 500));
    const sending = () => readDb<{ n: number }>(dataDir, "SELECT COUNT(*) AS n FROM delivery_attempts WHERE status = 'SENDING'")[0]!.n;
    assert.equal(sending(), 1, 'only the message under way is recorded as being sent');
    if (stop === 'SIGKILL') {
      first.child.kill('SIGKILL');
      await new Promise((r) => first.child.once('exit', r));
    } else {
      const stopped = await first.stop('SIGTERM', 30_000);
      assert.equal(stopped.code, 0, first.stderr());
    }
    twilio.release();

    const second = await startServe(t, dataDir, ['--port', '0'], { env: e });
    await waitUntil('5 finished runs', () => {
      const s = statuses(dataDir);
      return (s.COMPLETED ?? 0) + (s.FAILED ?? 0) === 5;
    });
    // The one under way may have been sent: it is not sent again (at most once); its attempt is settled.
    const [underWay] = [...twilio.state.received.keys()];
    const failed = readDb<{ id: number }>(dataDir, "SELECT id FROM workflow_runs WHERE status = 'FAILED'").map((r) => r.id);
    if (stop === 'SIGKILL')
      assert.deepEqual(
        failed.map((id) => `run ${id}`),
        [underWay],
      );
    for (const id of ids) {
      const messages = twilio.state.received.get(`run ${id}`) ?? 0;
      assert.equal(messages, 1, `run ${id}: ${messages} messages`);
    }
    assert.equal(sending(), 0, 'no attempt is left SENDING');
    await second.stop();
  });
}
