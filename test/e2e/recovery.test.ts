import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { startServe } from '../cli/helpers.js';
import { request } from '../helpers.js';
import { initFolder, login } from './folder.js';

async function waitForRun(url: string, token: string, runId: number, statuses: string[], timeoutMs = 30_000): Promise<any> {
  const started = Date.now();
  for (;;) {
    const res = await request(url, 'GET', `/runs/${runId}`, { token });
    if (res.status === 200 && statuses.includes(res.body.status)) return res.body;
    if (Date.now() - started > timeoutMs) assert.fail(`run ${runId} not in ${statuses} after ${timeoutMs} ms: ${res.text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function workflow(url: string, token: string, steps: unknown[]) {
  const template = await request(url, 'POST', '/templates', {
    token,
    body: { name: 't', channel: 'EMAIL', content: { subject: 'Hello', text: 'Body {{ trigger.n }}' } },
  });
  assert.equal(template.status, 201, template.text);
  const resolved = JSON.parse(JSON.stringify(steps).replaceAll('"TEMPLATE_ID"', String(template.body.id)));
  const wf = await request(url, 'POST', '/workflows', {
    token,
    body: { name: 'r', triggerSource: 'WEBHOOK', status: 'ACTIVE', steps: resolved, webhook: { lookup: 'email', createIfNotFound: true } },
  });
  assert.equal(wf.status, 201, wf.text);
  return new URL(wf.body.webhook.url).pathname;
}

test('a wait survives a restart and the run completes on time', async (t) => {
  const dataDir = await initFolder(t, 'svc-recovery-');
  const env = { SVC_LOG_LEVEL: 'warn' };
  const first = await startServe(t, dataDir, ['--port', '0'], { env });
  const token = await login(first);
  const path = await workflow(first.url, token, [
    { type: 'wait', seconds: 2 },
    { type: 'add_tags', tags: ['woke'] },
  ]);
  const accepted = await request(first.url, 'POST', path, { body: { email: 'sleepy@example.com' } });
  assert.equal(accepted.status, 202, accepted.text);
  await waitForRun(first.url, token, accepted.body.runId, ['WAITING']);
  await first.stop();

  const second = await startServe(t, dataDir, ['--port', '0'], { env });
  const token2 = await login(second);
  const run = await waitForRun(second.url, token2, accepted.body.runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  const contact = await request(second.url, 'GET', `/contacts/${accepted.body.contactId}`, { token: token2 });
  assert.deepEqual(contact.body.tags, ['woke']);
  await second.stop();
});

test('kill -9 in the middle of a run: the run is taken up again, nothing is lost, no message is sent twice', async (t) => {
  // A local endpoint that hangs on its first call (the moment we kill the server) and answers later ones.
  let calls = 0;
  let firstCall: () => void = () => {};
  const reached = new Promise<void>((r) => (firstCall = r));
  const hook = createServer((req: IncomingMessage, res: ServerResponse) => {
    calls++;
    req.resume();
    if (calls === 1) firstCall();
    else res.end('ok');
  });
  await new Promise<void>((r) => hook.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => hook.close(() => r())).then(() => hook.closeAllConnections()));
  const hookAddress = `127.0.0.1:${(hook.address() as AddressInfo).port}`;

  const dataDir = await initFolder(t, 'svc-recovery-');
  const env = { SVC_LOG_LEVEL: 'warn', SVC_RUN_LEASE_SECONDS: '2', SVC_HTTP_ALLOWED_HOSTS: hookAddress };
  const first = await startServe(t, dataDir, ['--port', '0'], { env });
  const token = await login(first);
  const path = await workflow(first.url, token, [
    { type: 'send_email', templateId: 'TEMPLATE_ID' },
    { type: 'http_request', method: 'POST', url: `http://${hookAddress}/slow`, body: { n: '{{ trigger.n }}' } },
    { type: 'add_tags', tags: ['done'] },
  ]);
  const accepted = await request(first.url, 'POST', path, { body: { email: 'crash@example.com', n: 7 } });
  assert.equal(accepted.status, 202, accepted.text);
  await reached;
  first.child.kill('SIGKILL');
  await new Promise((r) => first.child.once('exit', r));

  const second = await startServe(t, dataDir, ['--port', '0'], { env });
  const token2 = await login(second);
  const run = await waitForRun(second.url, token2, accepted.body.runId, ['COMPLETED', 'FAILED']);
  assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  const attempts = await request(second.url, 'GET', `/messages/delivery-attempts?runId=${accepted.body.runId}`, { token: token2 });
  assert.equal(attempts.status, 200, attempts.text);
  assert.equal(attempts.body.data.length, 1, 'the email was recorded once, not again after the crash');
  assert.equal(attempts.body.data[0].status, 'SENT');
  assert.equal(calls, 2, 'the interrupted http_request ran again once');
  await second.stop();
});
