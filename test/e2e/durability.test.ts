import assert from 'node:assert/strict';
import { test } from 'node:test';
import { runCli, startServe, tempDir } from '../cli/helpers.js';
import { request } from '../helpers.js';

const PASSWORD = 'durable-password-1';

async function setUp(t: Parameters<typeof tempDir>[0]) {
  const dataDir = tempDir(t, 'svc-durable-');
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', 'ops@example.com', '--password-stdin', '--json'], { stdin: PASSWORD });
  assert.equal(init.code, 0, init.stderr);
  return dataDir;
}

async function login(url: string): Promise<string> {
  const res = await request(url, 'POST', '/auth/login', { body: { email: 'ops@example.com', password: PASSWORD } });
  assert.equal(res.status, 200, res.text);
  return res.body.token;
}

test('kill -9 during webhook load loses no run that was answered 202', async (t) => {
  const dataDir = await setUp(t);
  const first = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_WEBHOOK_RATE_LIMIT: '1000000', SVC_LOG_LEVEL: 'warn' } });
  const token = await login(first.url);
  const wf = await request(first.url, 'POST', '/workflows', {
    token,
    body: { name: 'durable', triggerSource: 'WEBHOOK', status: 'ACTIVE', webhook: { lookup: 'email', path: 'customer.email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  const path = new URL(wf.body.webhook.url).pathname;

  const answered: number[] = [];
  let stop = false;
  const sender = async (n: number) => {
    for (let i = 0; !stop; i++) {
      try {
        const res = await request(first.url, 'POST', path, { body: { customer: { email: `c${n}-${i % 5}@example.com` }, seq: i } });
        if (res.status === 202) answered.push(res.body.runId);
      } catch {
        return; // the connection died with the server: that request was never answered
      }
    }
  };
  const senders = Array.from({ length: 16 }, (_, n) => sender(n));
  while (answered.length < 300) await new Promise((r) => setTimeout(r, 20));
  first.child.kill('SIGKILL');
  stop = true;
  await Promise.all(senders);
  assert.ok(answered.length >= 300);

  const second = await startServe(t, dataDir, ['--port', '0'], { env: { SVC_LOG_LEVEL: 'warn' } });
  const token2 = await login(second.url);
  const runs: number[] = [];
  let cursor: string | null = null;
  do {
    const page = await request(second.url, 'GET', `/workflows/${wf.body.id}/runs?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { token: token2 });
    assert.equal(page.status, 200, page.text);
    runs.push(...page.body.data.map((r: { runId: number }) => r.runId));
    cursor = page.body.nextCursor;
  } while (cursor);
  const stored = new Set(runs);
  const lost = answered.filter((id) => !stored.has(id));
  assert.deepEqual(lost, [], `${lost.length} of ${answered.length} answered runs were lost`);
  // 16 senders x 5 addresses each were created on miss: exactly once each, never twice.
  const contacts = await request(second.url, 'GET', '/contacts?limit=200', { token: token2 });
  const emails = contacts.body.data.map((c: { email: string }) => c.email);
  assert.equal(new Set(emails).size, emails.length);
  await second.stop();
});
