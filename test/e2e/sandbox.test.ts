import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { build, waitForRun, type TestServer } from '../helpers.js';
import { smtpSink } from '../smtpSink.js';
import { postToMintedUrl } from '../hostRequest.js';

const SANDBOX_URL = 'http://sandbox.test:8443';

/** A local HTTP server that answers 200 and counts what reached it. */
async function countingServer(t: TestContext) {
  const calls: { method: string; path: string; body: string }[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      calls.push({ method: req.method ?? '', path: req.url ?? '', body });
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ sid: 'SM1', id: 'x' }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return { calls, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/**
 * The same messaging setup on one side: EMAIL through SMTP, SMS through Twilio (both real
 * local servers), and a workflow that sends both and calls an HTTP endpoint.
 */
async function configure(s: TestServer, token: string, where: { smtpPort: number; twilio: string; target: string }) {
  const put = await s.request('PUT', '/settings/channels', {
    token,
    body: {
      EMAIL: { provider: 'smtp', settings: { host: '127.0.0.1', port: where.smtpPort, secure: false, from: 'shop@example.com' } },
      SMS: {
        provider: 'twilio',
        settings: { baseUrl: where.twilio, accountSid: 'AC123', from: '+15005550006' },
        credentials: { authToken: 'twilio-secret-1' },
      },
    },
  });
  assert.equal(put.status, 200, put.text);
  const email = await s.request('POST', '/templates', {
    token,
    body: { name: 'mail', channel: 'EMAIL', content: { subject: 'Order {{ trigger.order }}', text: 'Thanks' } },
  });
  const sms = await s.request('POST', '/templates', { token, body: { name: 'sms', channel: 'SMS', content: { text: 'Order {{ trigger.order }} shipped' } } });
  assert.equal(email.status, 201, email.text);
  assert.equal(sms.status, 201, sms.text);
  const wf = await s.request('POST', '/workflows', {
    token,
    body: {
      name: 'notify',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      steps: [
        { type: 'send_email', templateId: email.body.id },
        { type: 'send_sms', templateId: sms.body.id, to: '{{ trigger.phone }}' },
        {
          type: 'http_request',
          method: 'POST',
          url: `${where.target}/orders/{{ trigger.order }}`,
          headers: { 'x-shop': 'acme' },
          body: { order: '{{ trigger.order }}' },
        },
        { type: 'add_tags', tags: ['notified'] },
      ],
      webhook: { lookup: 'email', createIfNotFound: true },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  return wf.body as { id: number; webhook: { url: string } };
}

test('nothing leaves the machine from a sandbox: SMTP, Twilio and http_request servers receive nothing', async (t) => {
  const sink = await smtpSink(t);
  const twilio = await countingServer(t);
  const target = await countingServer(t);
  const s = await build(t, { engine: { pollMs: 50 }, env: { SVC_HTTP_ALLOW_PRIVATE: '1', SVC_SANDBOX_URL: SANDBOX_URL } });
  const owner = await s.login(s.owner.email, s.owner.password);
  const sandbox = await s.request('POST', '/sandbox', { token: owner });
  assert.equal(sandbox.status, 201, sandbox.text);
  const test = await s.mintKey('ADMIN', sandbox.body.id);
  const where = { smtpPort: sink.port, twilio: twilio.url, target: target.url };

  const wf = await configure(s, test, where);
  assert.ok(wf.webhook.url.startsWith(`${SANDBOX_URL}/v1/webhooks/in/`), wf.webhook.url);
  const runs: number[] = [];
  for (let i = 0; i < 3; i++) {
    const res = await postToMintedUrl(s, wf.webhook.url, { email: `buyer${i}@example.com`, phone: '+15005550010', order: `A-${i}` });
    assert.equal(res.status, 202, res.text);
    runs.push(res.body.runId as number);
  }
  const test2 = await s.request('POST', '/messages/test-email', { token: test, body: { to: 'qa@example.com', subject: 'S', text: 'T' } });
  assert.equal(test2.status, 202, test2.text);
  for (const runId of runs) {
    const run = await waitForRun(s, test, runId, ['COMPLETED', 'FAILED']);
    assert.equal(run.status, 'COMPLETED', JSON.stringify(run));
  }

  // What would have been sent is recorded in the sandbox...
  const attempts = await s.request('GET', '/messages/delivery-attempts?limit=50', { token: test });
  assert.equal(attempts.status, 200, attempts.text);
  assert.equal(attempts.body.data.length, 7, attempts.text); // 3 emails + 3 SMS + 1 test email
  for (const a of attempts.body.data) {
    assert.equal(a.provider, 'outbox');
    assert.equal(a.status, 'SENT');
  }
  assert.ok(attempts.body.data.some((a: any) => a.channel === 'SMS' && a.rendered.text === 'Order A-1 shipped' && a.to === '+15005550010'));
  assert.ok(attempts.body.data.some((a: any) => a.channel === 'EMAIL' && a.rendered.subject === 'Order A-2' && a.to === 'buyer2@example.com'));
  const recorded = await s.request('GET', '/sandbox/requests', { token: test });
  assert.equal(recorded.status, 200, recorded.text);
  assert.equal(recorded.body.data.length, 3);
  const first = recorded.body.data.find((r: any) => r.runId === runs[0]);
  assert.equal(first.method, 'POST');
  assert.equal(first.url, `${target.url}/orders/A-0`);
  assert.equal(first.stepIndex, 2);
  assert.equal(first.headers['x-shop'], 'acme');
  assert.deepEqual(JSON.parse(first.body), { order: 'A-0' });
  // A read-only key of the sandbox sees what was recorded, the header values and the URL past its host masked.
  const readOnly = await s.mintKey('VIEWER', sandbox.body.id);
  const seen = await s.request('GET', '/sandbox/requests', { token: readOnly });
  assert.equal(seen.status, 200, seen.text);
  assert.deepEqual(
    seen.body.data.map((r: any) => r.headers),
    recorded.body.data.map((r: any) => Object.fromEntries(Object.keys(r.headers).map((k) => [k, '••••']))),
  );
  assert.equal(seen.body.data.find((r: any) => r.runId === runs[0]).url, `${target.url}/••••`);
  // ... the steps after them ran ...
  const contacts = await s.request('GET', '/contacts?tag=notified', { token: test });
  assert.equal(contacts.body.data.length, 3);
  // ... and no server was reached.
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(sink.received.length, 0, 'the SMTP server received nothing');
  assert.equal(twilio.calls.length, 0, 'the SMS API received nothing');
  assert.equal(target.calls.length, 0, 'the http_request target received nothing');

  // The control: the same setup in the live workspace reaches all three servers, so the
  // servers above would have seen a leak.
  const liveWf = await configure(s, owner, where);
  const live = await postToMintedUrl(s, liveWf.webhook.url, { email: 'live@example.com', phone: '+15005550011', order: 'L-1' });
  assert.equal(live.status, 202, live.text);
  assert.equal((await waitForRun(s, owner, live.body.runId, ['COMPLETED', 'FAILED'])).status, 'COMPLETED');
  assert.equal(sink.received.length, 1);
  assert.equal(twilio.calls.length, 1);
  assert.deepEqual(
    target.calls.map((c) => c.path),
    ['/orders/L-1'],
  );
  // The live side records no sandbox requests, and sees none of the sandbox's.
  assert.deepEqual((await s.request('GET', '/sandbox/requests', { token: owner })).body.data, []);
});
