/**
 * `svc checkout complete CHECKOUT_ID` (API.md section 6): an OWNER starts a manual checkout
 * through the API, the operator completes it with the CLI, the plan changes at once and ADMIN
 * keys can be minted; completing it again fails with one line.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../src/core/config.js';
import { openMigrated } from '../../src/core/bootstrap.js';
import { buildApp } from '../../src/server/app.js';
import { lines, runCli, show, tempDir } from './helpers.js';

test('svc checkout complete: completes a manual checkout once; the plan changes at once', async (t) => {
  const dataDir = `${tempDir(t)}/data`;
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'STARTER', '--email', 'owner@acme.test', '--password-stdin', '--json'], {
    stdin: 'owner-password-1\n',
  });
  assert.equal(init.code, 0, show(init));
  const workspaceId: number = init.json().workspace.id;

  // The server part in-process, on the same data folder.
  const config = loadConfig({ dataDir }, {});
  const { store } = openMigrated(config);
  const app = await buildApp({ config, store, logger: false });
  t.after(async () => {
    await app.close();
    await store.close();
  });
  const login = await app.inject({ method: 'POST', url: '/auth/login', payload: { email: 'owner@acme.test', password: 'owner-password-1' } });
  assert.equal(login.statusCode, 200, login.body);
  const auth = { authorization: `Bearer ${login.json().token}` };
  const mintAdmin = () => app.inject({ method: 'POST', url: '/api-keys', headers: auth, payload: { name: 'admin', role: 'ADMIN' } });

  assert.equal((await mintAdmin()).statusCode, 403);
  const checkout = await app.inject({ method: 'POST', url: '/billing/checkout', headers: auth, payload: { plan: 'GROWTH' } });
  assert.equal(checkout.statusCode, 201, checkout.body);
  assert.equal(checkout.json().status, 'PENDING');
  const id = String(checkout.json().checkoutId);

  const done = await runCli(dataDir, ['checkout', 'complete', id, '--json']);
  assert.equal(done.code, 0, show(done));
  assert.deepEqual(done.json(), { workspaceId, plan: 'GROWTH' });

  const plan = await app.inject({ method: 'GET', url: '/billing/plan', headers: auth });
  assert.equal(plan.json().plan, 'GROWTH');
  assert.equal((await mintAdmin()).statusCode, 201);

  const again = await runCli(dataDir, ['checkout', 'complete', id]);
  assert.notEqual(again.code, 0, show(again));
  assert.equal(again.stdout, '');
  assert.equal(lines(again.stderr).length, 1, show(again));
  assert.match(again.stderr, /already COMPLETED/);

  for (const bad of ['999', 'abc']) {
    const r = await runCli(dataDir, ['checkout', 'complete', bad]);
    assert.notEqual(r.code, 0, show(r));
    assert.equal(lines(r.stderr).length, 1, show(r));
  }
});
