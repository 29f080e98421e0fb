import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { test } from 'node:test';
import { runCli, startServe, tempDir } from '../cli/helpers.js';
import { request } from '../helpers.js';

const PASSWORD = 'coherent-password-1';
const sign = (secret: string, body: string) => `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;

test('a workflow changed by the CLI or another server applies to the very next webhook', async (t) => {
  const dataDir = tempDir(t, 'svc-coherent-');
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', 'ops@example.com', '--password-stdin', '--json'], { stdin: PASSWORD });
  assert.equal(init.code, 0, init.stderr);
  const [a, b] = await Promise.all([startServe(t, dataDir), startServe(t, dataDir)]);
  const login = await request(a.url, 'POST', '/auth/login', { body: { email: 'ops@example.com', password: PASSWORD } });
  const token = login.body.token as string;
  const wf = await request(a.url, 'POST', '/workflows', {
    token,
    body: {
      name: 'w',
      triggerSource: 'WEBHOOK',
      status: 'ACTIVE',
      webhook: { lookup: 'email', path: 'email', createIfNotFound: true, signingSecret: 'first-secret-0123456789' },
    },
  });
  assert.equal(wf.status, 201, wf.text);
  const path = new URL(wf.body.webhook.url).pathname;
  const post = (raw: string, secret: string) =>
    request(b.url, 'POST', path, { raw, headers: { 'content-type': 'application/json', 'x-service-signature': sign(secret, raw) } });
  const body = JSON.stringify({ email: 'jane@example.com', nested: { mail: 'ann@example.com' } });

  // B learns the workflow (and caches it) from an accepted request.
  assert.equal((await post(body, 'first-secret-0123456789')).status, 202);

  // Paused by the CLI (a third process): B refuses at once, and accepts again after activation.
  assert.equal((await runCli(dataDir, ['workflow', 'deactivate', String(wf.body.id), '--json'])).code, 0);
  assert.equal((await post(body, 'first-secret-0123456789')).status, 404);
  assert.equal((await runCli(dataDir, ['workflow', 'activate', String(wf.body.id), '--json'])).code, 0);
  assert.equal((await post(body, 'first-secret-0123456789')).status, 202);

  // The secret rotated through server A: B takes the new one and refuses the stale one.
  const rotated = await request(a.url, 'PATCH', `/workflows/${wf.body.id}`, { token, body: { webhook: { signingSecret: 'second-secret-0123456789' } } });
  assert.equal(rotated.status, 200, rotated.text);
  assert.equal((await post(body, 'first-secret-0123456789')).status, 401);
  assert.equal((await post(body, 'second-secret-0123456789')).status, 202);

  // The path changed through A: B's next run is for the contact at the new path.
  await request(a.url, 'PATCH', `/workflows/${wf.body.id}`, { token, body: { webhook: { path: 'nested.mail' } } });
  const moved = await post(body, 'second-secret-0123456789');
  assert.equal(moved.status, 202, moved.text);
  const contact = await request(a.url, 'GET', `/contacts/${moved.body.contactId}`, { token });
  assert.equal(contact.body.email, 'ann@example.com');

  // Signing turned off through A: B accepts unsigned bodies at once.
  await request(a.url, 'PATCH', `/workflows/${wf.body.id}`, { token, body: { webhook: { signingSecret: null } } });
  const unsigned = await request(b.url, 'POST', path, { raw: body, headers: { 'content-type': 'application/json' } });
  assert.equal(unsigned.status, 202, unsigned.text);
  await Promise.all([a.stop(), b.stop()]);
});
