/**
 * Templates, workflows and runs in the console (issue 11, items 5, 7 and 8) as a user
 * clicks them: a template with a Liquid error shown at its field and line, then previewed
 * for a contact; a webhook workflow configured, activated, its URL copied, a signed POST
 * sent from the test, and the received event, the run and its steps seen in the console.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { test } from 'node:test';
import { consoleServer } from './server.js';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';

const { browser, skipOutsideCI } = await startBrowser();

test('a template: a Liquid error at its field and line, then a preview for a contact and a trigger body', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com', firstName: 'Ann' } });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/templates');
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByRole('link', { name: 'New template' }).click();
  await assertOneH1(page, 'New template');
  await page.getByLabel('Name').fill('Order confirmation');
  await page.getByLabel('Channel').selectOption('EMAIL');
  await page.getByLabel('Subject').fill('Thanks {{ contact.firstName }');
  await page.getByLabel('Text').fill('Hello {{ contact.firstName }}, your total is {{ trigger.total }}.');
  await page.getByRole('button', { name: 'Save' }).click();
  const subjectError = page
    .locator('.field-invalid')
    .filter({ has: page.getByLabel('Subject') })
    .locator('.field-error');
  await subjectError.waitFor();
  assert.match((await subjectError.textContent()) ?? '', /line 1/);
  await screenshot(page, 'template-error');

  await page.getByLabel('Subject').fill('Thanks {{ contact.firstName }}');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  await page.waitForURL(/\/app\/templates\/\d+$/);

  const preview = page.getByRole('region', { name: 'Preview' });
  await preview.getByLabel('Contact').selectOption({ label: 'ann@example.com' });
  await preview.getByLabel('Trigger body (JSON)').fill('{"total": 42}');
  await preview.getByRole('button', { name: 'Preview' }).click();
  await preview.getByText('Thanks Ann').waitFor();
  await preview.getByText('Hello Ann, your total is 42.').waitFor();
  await preview.getByLabel('Trigger body (JSON)').fill('{"total": ');
  await preview.getByRole('button', { name: 'Preview' }).click();
  await preview.getByText('Not valid JSON').waitFor();
  await preview.getByLabel('Trigger body (JSON)').fill('{"total": 42}');
  await preview.getByRole('button', { name: 'Preview' }).click();
  await assertAccessible(page, 'template editor with a preview');
  await screenshot(page, 'template');
  assert.deepEqual(problems, []);
});

test('a webhook workflow: configure, activate, copy the URL, post a signed body, see the event and the run', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t, { engine: true });
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: s.url });
  await page.goto('/app/workflows');
  await logIn(page, s.owner.email, s.owner.password);
  await page.getByRole('link', { name: 'New workflow' }).click();
  await page.getByLabel('Name').fill('Signups');
  await page.getByLabel('Trigger').selectOption('WEBHOOK');
  await page.getByRole('button', { name: 'Create workflow' }).click();
  await page.getByRole('heading', { level: 1, name: 'Signups' }).waitFor();
  await assertOneH1(page, 'Signups');
  const id = Number(new URL(page.url()).pathname.split('/').pop());

  // Without a lookup, activation is refused with the API's message.
  await page.getByLabel('Contact lookup').selectOption('');
  await page.getByRole('button', { name: 'Save webhook settings' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  await page.getByRole('button', { name: 'Activate' }).click();
  await page
    .getByRole('alert')
    .filter({ hasText: /lookup/i })
    .waitFor();

  await page.getByLabel('Contact lookup').selectOption('email');
  await page.getByLabel('Path in the body').fill('customer.email');
  // Off for a new workflow (SPEC.md): turned on here, where it is asked.
  const create = page.getByLabel('Create the contact when none matches');
  assert.equal(await create.isChecked(), false, 'a new workflow creates no contacts');
  await create.check();
  await page.getByRole('button', { name: 'Save webhook settings' }).click();
  await page.getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  await page.getByLabel('New step').selectOption('add_tags');
  await page.getByRole('button', { name: 'Add step' }).click();
  await page.getByRole('group', { name: 'Step 1: Add tags' }).getByLabel('Tags').fill('signed-up');
  await page.getByRole('button', { name: 'Save steps' }).click();
  await page.getByRole('region', { name: 'Steps' }).getByRole('status').filter({ hasText: 'Saved.' }).waitFor();
  const secret = 'a-signing-secret-of-32-characters';
  await page.getByLabel('Signing secret', { exact: true }).fill('short');
  await page.getByRole('button', { name: 'Set secret' }).click();
  await page
    .locator('.field-invalid')
    .filter({ has: page.getByLabel('Signing secret', { exact: true }) })
    .locator('.field-error')
    .waitFor();
  await page.getByLabel('Signing secret', { exact: true }).fill(secret);
  await page.getByRole('button', { name: 'Set secret' }).click();
  await page.getByText('The signing secret is set.').waitFor();

  await page.getByRole('button', { name: 'Activate' }).click();
  await page.getByRole('button', { name: 'Pause' }).waitFor();
  const urlField = page.getByLabel('Webhook URL');
  const url = await urlField.inputValue();
  assert.match(url, /\/v1\/webhooks\/in\/[A-Za-z0-9]{30}$/);
  await page.getByRole('button', { name: 'Copy' }).click();
  await page.getByRole('status').filter({ hasText: 'Copied' }).waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), url);

  // The test payload panel: a dry run that writes nothing.
  await page.getByLabel('Body (JSON)').fill('{"customer": {"email": "new@example.com"}}');
  await page.getByRole('button', { name: 'Test', exact: true }).click();
  await page.getByText('A new contact would be created (new@example.com)').waitFor();
  assert.equal((await s.request('GET', '/contacts?email=new@example.com', { token })).body.data.length, 0, 'the test created nothing');
  await page.getByText('Examples: send a test request').click();
  await assertAccessible(page, 'workflow page');
  await screenshot(page, 'workflow');

  // The examples work as pasted: each sends a signed body that is accepted.
  const examples = page.locator('.examples pre');
  const origin = new URL(url).origin;
  const shell = (await examples.nth(0).textContent())!.replaceAll(origin, s.url);
  const node = (await examples.nth(1).textContent())!.replaceAll(origin, s.url);
  const env = { ...process.env, SVC_SIGNING_SECRET: secret };
  // (Asynchronously: the server answering them runs in this process.)
  const curl = await run('bash', ['-c', `${shell} --silent --output /dev/null --write-out '%{http_code}'`], env);
  assert.equal(curl.stdout, '202', `the shell example: ${curl.stdout} ${curl.stderr}`);
  const script = await run(process.execPath, ['--input-type=module', '-e', node], env);
  assert.match(script.stdout, /^202 /, `the Node example: ${script.stdout} ${script.stderr}`);

  // A signed POST from outside, as a sender would.
  const body = JSON.stringify({ customer: { email: 'new@example.com' } });
  const signature = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
  const posted = await fetch(url.replace(/^https?:\/\/[^/]+/, s.url), {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-service-signature': signature },
    body,
  });
  assert.equal(posted.status, 202, await posted.clone().text());
  const { runId } = (await posted.json()) as { runId: number };

  await page.reload();
  const events = page.getByRole('region', { name: 'Received events' });
  await events.getByRole('cell', { name: String(runId), exact: true }).waitFor();
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Runs' }).click();
  await page.getByRole('link', { name: `Run ${runId}` }).click();
  await assertOneH1(page, `Run ${runId}`);
  await page.getByText('completed').first().waitFor();
  await page.getByRole('cell', { name: 'add tags', exact: true }).waitFor();
  await page.getByText('"new@example.com"').waitFor();
  await assertAccessible(page, 'run page');
  await screenshot(page, 'run');
  const contact = (await s.request('GET', '/contacts?email=new@example.com', { token })).body.data[0];
  assert.deepEqual(contact.tags, ['signed-up']);
  assert.ok(id > 0);
  assert.deepEqual(problems, []);
});

function run(file: string, args: string[], env: NodeJS.ProcessEnv): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { env, timeout: 30_000, encoding: 'utf8' }, (_err, stdout, stderr) => resolve({ stdout, stderr }));
  });
}
