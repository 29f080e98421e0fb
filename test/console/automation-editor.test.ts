/**
 * The visual automation editor (issue 11, item 6), driven with the mouse and the keyboard in
 * Chromium against a real `svc serve`: a new automation built from the palette (dragged and
 * added with a button), handles connected, a condition's branches, the side panel, a cycle
 * refused with its edge highlighted, undo/redo, Save with the positions kept across a reload,
 * Activate and Run on a contact; and a VIEWER's read-only graph.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Locator, Page } from 'playwright-core';
import { assertAccessible, assertOneH1, logIn, newContext, screenshot, startBrowser } from './browser.js';
import { consoleServer } from './server.js';

const { browser, skipOutsideCI } = await startBrowser();

const node = (page: Page, id: string) => page.locator(`.react-flow__node[data-id="${id}"]`);

async function centre(locator: Locator): Promise<{ x: number; y: number }> {
  const box = await locator.boundingBox();
  assert.ok(box, 'the element is on screen');
  return { x: box.x + box.width / 2, y: box.y + box.height / 2 };
}

/** Drags from a node's output handle (the condition's `true`/`false` one) to another node's input handle. */
async function connect(page: Page, from: string, to: string, branch?: 'true' | 'false'): Promise<void> {
  const source = page.locator(`.react-flow__handle.source[data-nodeid="${from}"]${branch ? `[data-handleid="${branch}"]` : ''}`);
  const target = page.locator(`.react-flow__handle.target[data-nodeid="${to}"]`);
  const a = await centre(source);
  const b = await centre(target);
  await page.mouse.move(a.x, a.y);
  await page.mouse.down();
  await page.mouse.move((a.x + b.x) / 2, (a.y + b.y) / 2, { steps: 5 });
  await page.mouse.move(b.x, b.y, { steps: 5 });
  await page.mouse.up();
}

/** The node's position in the flow (React Flow draws it with translate(x, y) inside the viewport). */
async function flowPosition(locator: Locator): Promise<{ x: number; y: number }> {
  const transform = await locator.evaluate((el) => (el as HTMLElement).style.transform);
  const m = /translate\((-?[\d.]+)px, ?(-?[\d.]+)px\)/.exec(transform);
  assert.ok(m, `a translate in ${transform}`);
  return { x: Math.round(Number(m[1])), y: Math.round(Number(m[2])) };
}

test('build an automation with the mouse: palette, handles, branches, a refused cycle, undo/redo, save, run', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t, { engine: true });
  const ann = await s.request('POST', '/contacts', { token, body: { email: 'ann@example.com', firstName: 'Ann' } });
  assert.equal(ann.status, 201, ann.text);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/automations');
  await logIn(page, s.owner.email, s.owner.password);
  await assertOneH1(page, 'Automations');

  // New automation: a name, then the editor with the trigger alone.
  await page.getByRole('button', { name: 'New automation' }).click();
  const form = page.getByRole('form', { name: 'New automation' });
  await form.getByRole('button', { name: 'Create' }).click();
  await form.getByText('Give the automation a name').waitFor();
  assert.equal(await form.getByLabel('Name').getAttribute('aria-invalid'), 'true');
  await assertAccessible(page, 'new automation');
  await screenshot(page, 'automation-new');
  await form.getByLabel('Name').fill('Greet by name');
  await form.getByRole('button', { name: 'Create' }).click();
  await page.waitForURL(/\/app\/automations\/\d+$/);
  const id = Number(page.url().split('/').pop());
  await node(page, 'trigger').waitFor();
  await assertOneH1(page, 'Greet by name');
  const status = page.getByRole('status').filter({ hasText: /changes|Saving/ });
  assert.equal(await status.textContent(), 'All changes saved');
  assert.equal(await page.getByRole('button', { name: 'Save' }).isDisabled(), true);

  const canvas = page.getByRole('region', { name: /^Automation graph editor/ });
  const palette = page.getByRole('region', { name: 'Add a step' });
  const box = (await canvas.boundingBox())!;
  const mid = box.width / 2;
  assert.equal(await palette.getByRole('button', { name: 'Trigger' }).isDisabled(), true, 'one trigger only');

  // Move the trigger to the top of the canvas, then drag the steps from the palette below it.
  const t0 = await centre(node(page, 'trigger'));
  await page.mouse.move(t0.x, t0.y);
  await page.mouse.down();
  await page.mouse.move(box.x + mid, box.y + 50, { steps: 8 });
  await page.mouse.up();
  assert.equal(await status.textContent(), 'Unsaved changes');
  await palette.getByRole('button', { name: 'Condition', exact: true }).dragTo(canvas, { targetPosition: { x: mid, y: 180 } });
  await node(page, 'condition_1').waitFor();
  await palette.getByRole('button', { name: 'Add tags' }).dragTo(canvas, { targetPosition: { x: mid - 125, y: 330 } });
  await node(page, 'add_tags_1').waitFor();
  await palette.getByRole('button', { name: 'Add tags' }).dragTo(canvas, { targetPosition: { x: mid + 125, y: 330 } });
  await node(page, 'add_tags_2').waitFor();
  assert.equal(await page.locator('.react-flow__node').count(), 4);

  // The side panel edits the selected node: the condition, then each branch's tags.
  await node(page, 'condition_1').click();
  const panel = page.getByRole('complementary', { name: 'Condition' });
  await panel.getByLabel('Condition').fill('contact.firstName == "Ann"');
  await node(page, 'condition_1').getByText('contact.firstName == "Ann"').waitFor();
  await node(page, 'add_tags_1').click();
  await page.getByRole('complementary', { name: 'Add tags' }).getByLabel('Tags').fill('is-ann');
  await node(page, 'add_tags_2').click();
  await page.getByRole('complementary', { name: 'Add tags' }).getByLabel('Tags').fill('not-ann');
  await node(page, 'add_tags_2').getByText('not-ann').waitFor();

  // Connect by dragging between handles; the condition's outputs are its true and false branches.
  await connect(page, 'trigger', 'condition_1');
  await connect(page, 'condition_1', 'add_tags_1', 'true');
  await connect(page, 'condition_1', 'add_tags_2', 'false');
  const edges = page.locator('.react-flow__edge');
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 3);
  assert.deepEqual((await page.locator('.react-flow__edge-text').allTextContents()).sort(), ['false', 'true']);
  await page.getByRole('button', { name: 'Undo' }).isEnabled();
  await assertAccessible(page, 'automation editor');
  await screenshot(page, 'automation-editor');

  // A step added with the keyboard (a palette button adds it at the centre), then deleted with the Delete key.
  await palette.getByRole('button', { name: 'Wait' }).press('Enter');
  await node(page, 'wait_1').waitFor();
  await page.getByRole('complementary', { name: 'Wait' }).getByLabel('Wait (seconds)').waitFor();
  await palette.getByRole('button', { name: 'Wait' }).press('Delete');
  await node(page, 'wait_1').waitFor({ state: 'detached' });

  // A cycle: the true branch leads back to the condition. Save is refused, the closing edge highlighted.
  await connect(page, 'add_tags_1', 'condition_1');
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 4);
  await page.getByRole('button', { name: 'Save' }).click();
  const alert = page.getByRole('alert').filter({ hasText: 'The automation graph is invalid' });
  await alert.waitFor();
  assert.match((await alert.textContent()) ?? '', /Edge from Add tags “is-ann” to Condition “contact\.firstName == "Ann"”: closes a cycle/);
  const invalid = page.locator('.react-flow__edge.edge-invalid');
  assert.equal(await invalid.count(), 1);
  assert.match((await invalid.getAttribute('aria-label')) ?? '', /^Edge from Add tags “is-ann” to Condition .*\(invalid\)$/);
  assert.equal(await status.textContent(), 'Unsaved changes');
  const stored = await s.request('GET', `/automations/${id}`, { token });
  assert.equal(stored.body.graph.nodes.length, 1, 'nothing was saved');
  await assertAccessible(page, 'automation editor with a refused save');
  await screenshot(page, 'automation-editor-cycle');

  // Undo and redo by keyboard (focus on the canvas, not in a field), then Undo the cycle for good.
  await node(page, 'condition_1').focus();
  await page.keyboard.press('Control+z');
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 3);
  await page.keyboard.press('Control+Shift+z');
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 4);
  await page.keyboard.press('Control+z');
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 3);
  await page.keyboard.press('Control+y');
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 4);
  await page.getByRole('button', { name: 'Undo' }).click();
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 3);
  assert.equal(await invalid.count(), 0);
  assert.equal(await edges.count(), 3);
  // Typing in a field undoes the field's text, not the graph.
  await node(page, 'add_tags_2').click();
  const tags = page.getByRole('complementary', { name: 'Add tags' }).getByLabel('Tags');
  await tags.press('Control+z');
  assert.equal(await edges.count(), 3);

  // Save: kept with the positions; a reload shows the same graph at the same places.
  const before = new Map<string, { x: number; y: number }>();
  for (const n of ['trigger', 'condition_1', 'add_tags_1', 'add_tags_2']) before.set(n, await flowPosition(node(page, n)));
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('status').filter({ hasText: 'All changes saved' }).waitFor();
  const saved = await s.request('GET', `/automations/${id}`, { token });
  assert.deepEqual(saved.body.graph.edges.map((e: { from: string; to: string; branch?: boolean }) => `${e.from}>${e.to}:${e.branch}`).sort(), [
    'condition_1>add_tags_1:true',
    'condition_1>add_tags_2:false',
    'trigger>condition_1:undefined',
  ]);
  for (const n of saved.body.graph.nodes as { id: string; position: { x: number; y: number } }[]) assert.deepEqual(n.position, before.get(n.id), n.id);
  assert.deepEqual(saved.body.graph.nodes.find((n: { id: string }) => n.id === 'condition_1').data, { condition: 'contact.firstName == "Ann"' });
  await page.reload();
  await node(page, 'add_tags_2').waitFor();
  for (const [n, at] of before) assert.deepEqual(await flowPosition(node(page, n)), at, `${n} kept its place`);
  assert.equal(await page.locator('.react-flow__edge').count(), 3);

  // Activate, run it on Ann, and see the branch it took.
  await page.getByRole('button', { name: 'Activate' }).click();
  await page.getByRole('button', { name: 'Pause' }).waitFor();
  const run = page.getByRole('form', { name: 'Run on a contact' });
  await run.getByLabel('Contact').selectOption({ label: 'ann@example.com' });
  await run.getByRole('button', { name: 'Run on a contact' }).click();
  await run.getByRole('link', { name: /^run \d+$/ }).click();
  await page.getByText('completed').first().waitFor();
  const path = page.getByRole('region', { name: /^Path taken/ });
  await path.locator('.react-flow__node').nth(3).waitFor();
  assert.deepEqual(await path.locator('.react-flow__node.node-skipped').evaluateAll((els) => els.map((e) => e.getAttribute('data-id'))), ['add_tags_2']);
  assert.equal(await path.locator('.react-flow__node.node-taken').count(), 3);
  const contact = await s.request('GET', `/contacts/${ann.body.id}`, { token });
  assert.deepEqual(contact.body.tags, ['is-ann']);
  assert.deepEqual(problems, []);
});

test('a field error of a refused save is shown in the side panel, at its node', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const created = await s.request('POST', '/automations', {
    token,
    body: { name: 'Half done', graph: { nodes: [{ id: 'trigger', type: 'trigger', data: { source: 'MANUAL' }, position: { x: 0, y: 0 } }], edges: [] } },
  });
  assert.equal(created.status, 201, created.text);
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto(`/app/automations/${created.body.id}`);
  await logIn(page, s.owner.email, s.owner.password);
  await node(page, 'trigger').waitFor();
  const palette = page.getByRole('region', { name: 'Add a step' });
  await palette.getByRole('button', { name: 'Filter' }).click();
  await node(page, 'filter_1').waitFor();
  await palette.getByRole('button', { name: 'Send email' }).click();
  // Connected from the keyboard: the side panel's "Then" choices of each output.
  await node(page, 'trigger').focus();
  await page.keyboard.press('Enter');
  await page.getByRole('complementary', { name: 'Trigger' }).getByLabel('Next step').selectOption({ label: 'Filter “No condition yet”' });
  await node(page, 'filter_1').focus();
  await page.keyboard.press('Enter');
  await page.getByRole('complementary', { name: 'Filter' }).getByLabel('Next step').selectOption({ label: 'Send email “No template yet”' });
  await page.waitForFunction(() => document.querySelectorAll('.react-flow__edge').length === 2);
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByRole('alert').filter({ hasText: 'The automation graph is invalid' }).waitFor();
  // Both steps lack a field: both are marked, and each names its field in the side panel.
  assert.deepEqual(await page.locator('.react-flow__node.node-invalid').evaluateAll((els) => els.map((e) => e.getAttribute('data-id')).sort()), [
    'filter_1',
    'send_email_1',
  ]);
  await node(page, 'filter_1').click();
  const field = page.getByRole('complementary', { name: 'Filter' }).getByLabel('Condition');
  assert.equal(await field.getAttribute('aria-invalid'), 'true');
  await page
    .getByRole('complementary', { name: 'Filter' })
    .getByText(/^Is required|^Is not a valid condition/)
    .first()
    .waitFor();
  await node(page, 'send_email_1').click();
  const template = page.getByRole('complementary', { name: 'Send email' }).getByLabel('Template');
  assert.equal(await template.getAttribute('aria-invalid'), 'true');
  await page.getByRole('complementary', { name: 'Send email' }).getByText('Is required').waitFor();
  await assertAccessible(page, 'automation editor with field errors');
  await screenshot(page, 'automation-editor-field-errors');
  assert.deepEqual(problems, []);
});

test('a VIEWER sees the graph read-only: no palette, no Save, no New automation', { skip: skipOutsideCI }, async (t) => {
  const { s, token } = await consoleServer(t);
  const graph = {
    nodes: [
      { id: 't', type: 'trigger', data: { source: 'MANUAL' }, position: { x: 200, y: 0 } },
      { id: 'c', type: 'condition', data: { condition: 'trigger.total > 100' }, position: { x: 200, y: 130 } },
      { id: 'yes', type: 'add_tags', data: { tags: ['big'] }, position: { x: 60, y: 270 } },
      { id: 'no', type: 'add_tags', data: { tags: ['small'] }, position: { x: 340, y: 270 } },
    ],
    edges: [
      { from: 't', to: 'c' },
      { from: 'c', to: 'yes', branch: true },
      { from: 'c', to: 'no', branch: false },
    ],
  };
  const created = await s.request('POST', '/automations', { token, body: { name: 'Order size', graph } });
  assert.equal(created.status, 201, created.text);
  const viewer = await s.userWithRole('VIEWER');
  const { context, page, problems } = await newContext(browser!, s.url);
  t.after(() => context.close());
  await page.goto('/app/automations');
  await logIn(page, viewer.email, viewer.password);
  await page.getByRole('link', { name: 'Order size' }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'New automation' }).count(), 0);
  await page.getByRole('link', { name: 'Order size' }).click();
  await assertOneH1(page, 'Order size');
  await page.locator('.react-flow__node').nth(3).waitFor();
  assert.equal(await page.getByRole('region', { name: 'Add a step' }).count(), 0, 'no palette');
  for (const name of ['Save', 'Undo', 'Redo', 'Delete', 'Activate', 'Run on a contact'])
    assert.equal(await page.getByRole('button', { name, exact: true }).count(), 0, `no ${name}`);
  assert.equal(await page.locator('.react-flow__handle.connectable').count(), 0, 'nothing to connect');
  await page.getByRole('region', { name: /^Automation graph with 4 nodes/ }).waitFor();
  await assertAccessible(page, 'automation, read-only');
  await screenshot(page, 'automation-viewer');
  assert.deepEqual(problems, []);
});
