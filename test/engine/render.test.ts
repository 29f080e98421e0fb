/**
 * Liquid rendering as the run engine and preview use it: the variables a template sees,
 * content rendered shape for shape, conditions, and the sandbox (no file system; time,
 * memory and output bounded, so a hostile template fails fast with RenderError).
 * Contract: API.md section 3 ("Template"), SPEC.md on Liquid variables.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { evaluateCondition, MAX_RENDERED_BYTES, renderContent, RenderError, renderString, type RenderContext } from '../../src/engine/render.js';

const ctx: RenderContext = {
  contact: { id: 7, email: 'ada@example.com', phone: null, firstName: 'Ada', lastName: '', attributes: { plan: 'gold', score: 42 }, tags: ['vip', 'beta'] },
  trigger: { total: 150, fields: [{ name: 'first', value: 'Forty-two' }, { value: 'second' }], nested: { a: { b: 'deep' } }, big: 'y'.repeat(1_000_000) },
  workspace: { id: 1, name: 'Acme', plan: 'PRO' },
  run: { id: 99, workflowId: 3 },
};

/** Asserts that fn rejects with our RenderError within `ms` milliseconds. */
async function assertRenderError(fn: () => Promise<unknown>, ms = 2000, message?: RegExp): Promise<RenderError> {
  const started = performance.now();
  let caught: unknown;
  try {
    await fn();
  } catch (err) {
    caught = err;
  }
  const elapsed = performance.now() - started;
  assert.ok(caught instanceof RenderError, `expected a RenderError, got ${caught instanceof Error ? `${caught.name}: ${caught.message}` : String(caught)}`);
  assert.ok(elapsed < ms, `failed after ${Math.round(elapsed)} ms, expected under ${ms} ms`);
  if (message) assert.match(caught.message, message);
  return caught;
}

// ---------------------------------------------------------------------------------------
// variables
// ---------------------------------------------------------------------------------------

test('contact, trigger (with array indexes), workspace and run variables render', async () => {
  assert.equal(await renderString('Hi {{ contact.firstName }} <{{ contact.email }}>', ctx), 'Hi Ada <ada@example.com>');
  assert.equal(await renderString('{{ trigger.fields[0].value }}/{{ trigger.fields[1].value }}', ctx), 'Forty-two/second');
  assert.equal(await renderString('{{ trigger.nested.a.b }} {{ trigger.total | plus: 1 }}', ctx), 'deep 151');
  assert.equal(await renderString('{{ workspace.name }} on {{ workspace.plan }}', ctx), 'Acme on PRO');
  assert.equal(await renderString('run {{ run.id }} of {{ run.workflowId }}', ctx), 'run 99 of 3');
  assert.equal(await renderString('{{ contact.attributes.plan }} {{ contact.tags | join: "," }} {{ contact.tags.size }}', ctx), 'gold vip,beta 2');
});

test('a missing variable renders empty, and default fills it', async () => {
  assert.equal(await renderString('[{{ contact.nope }}][{{ trigger.fields[9].value }}][{{ nothing.at.all }}]', ctx), '[][][]');
  assert.equal(await renderString('{{ contact.lastName | default: "friend" }}', ctx), 'friend');
  assert.equal(await renderString('Hello {{ contact.firstName | default: "friend" }}', { ...ctx, contact: {} }), 'Hello friend');
  assert.equal(await renderString('[{{ run.id }}]', { ...ctx, run: null }), '[]');
});

test('plain text passes through unchanged, including non-ASCII', async () => {
  assert.equal(await renderString('', ctx), '');
  assert.equal(await renderString('Grüße, 你好 👋 <b>&amp;</b>', ctx), 'Grüße, 你好 👋 <b>&amp;</b>');
});

test('only own properties are visible: no prototype or constructor reaches a template', async () => {
  const out = await renderString('[{{ contact.constructor }}][{{ contact.__proto__ }}][{{ trigger.toString }}][{{ contact.tags.constructor.name }}]', ctx);
  assert.equal(out, '[][][][]');
});

test('the same source renders with each context (the parse cache holds no data)', async () => {
  const source = 'Hi {{ contact.firstName }}';
  for (let i = 0; i < 50; i++) assert.equal(await renderString(source, { ...ctx, contact: { firstName: `n${i}` } }), `Hi n${i}`);
  const many = await Promise.all(Array.from({ length: 100 }, (_, i) => renderString(`{{ trigger.n }}-${i}`, { ...ctx, trigger: { n: i } })));
  many.forEach((out, i) => assert.equal(out, `${i}-${i}`));
});

test('more distinct templates than the cache holds still render correctly', async () => {
  for (let i = 0; i < 1200; i++) assert.equal(await renderString(`{{ trigger.total | plus: ${i} }}`, ctx), String(150 + i));
  assert.equal(await renderString('{{ trigger.total | plus: 0 }}', ctx), '150');
});

// ---------------------------------------------------------------------------------------
// renderContent
// ---------------------------------------------------------------------------------------

test('renderContent renders every string and keeps the shape', async () => {
  const email = { subject: 'Hi {{ contact.firstName }}', html: '<p>{{ workspace.name }}</p>', text: '{{ trigger.total }}' };
  assert.deepEqual(await renderContent(email, ctx), { subject: 'Hi Ada', html: '<p>Acme</p>', text: '150' });

  const whatsapp = {
    templateName: 'order_{{ trigger.fields[1].value }}',
    language: 'en_US',
    parameters: ['{{ contact.firstName }}', '{{ trigger.total }}', 'plain'],
  };
  assert.deepEqual(await renderContent(whatsapp, ctx), { templateName: 'order_second', language: 'en_US', parameters: ['Ada', '150', 'plain'] });
});

test('renderContent recurses through objects and arrays, keeps non-strings, and leaves the input alone', async () => {
  const content = { body: { list: ['{{ run.id }}', 1, true, null, { deep: ['{{ workspace.id }}'] }], n: 3.5 }, empty: [], obj: {} };
  const copy = structuredClone(content);
  const out = await renderContent(content, ctx);
  assert.deepEqual(out, { body: { list: ['99', 1, true, null, { deep: ['1'] }], n: 3.5 }, empty: [], obj: {} });
  assert.deepEqual(content, copy);
});

test('renderContent names the failing string in RenderError.path', async () => {
  const err = await assertRenderError(() => renderContent({ subject: 'ok', parameters: ['fine', '{{ x | no_such_filter }}'] }, ctx));
  assert.equal(err.path, '/parameters/1');
});

// ---------------------------------------------------------------------------------------
// conditions
// ---------------------------------------------------------------------------------------

test('evaluateCondition evaluates Liquid conditions against the context', async () => {
  const cases: [string, boolean][] = [
    ['trigger.total > 100 and contact.email contains "@example.com"', true],
    ['trigger.total > 200', false],
    ['trigger.total > 100 and contact.email contains "@other.com"', false],
    ['trigger.total > 200 or contact.tags contains "vip"', true],
    ['contact.firstName == "Ada"', true],
    ['contact.firstName != "Ada"', false],
    ['trigger.fields[0].value == "Forty-two"', true],
    ['contact.attributes.score >= 42', true],
    ['workspace.plan == "PRO"', true],
    ['trigger.missing', false],
    ['trigger.missing == nil', true],
    ['run', true],
    ['contact.lastName == empty', true],
  ];
  for (const [condition, expected] of cases) assert.equal(await evaluateCondition(condition, ctx), expected, condition);
  assert.equal(await evaluateCondition('run', { ...ctx, run: null }), false);
});

test('an invalid condition is a RenderError, including one that closes the tag itself', async () => {
  await assertRenderError(() => evaluateCondition('', ctx));
  await assertRenderError(() => evaluateCondition('   ', ctx));
  await assertRenderError(() => evaluateCondition('x | nope', ctx));
  await assertRenderError(() => evaluateCondition('true %}{% if true', ctx));
  await assertRenderError(() => evaluateCondition('false %}true{% endif %}{% if false', ctx));
});

// ---------------------------------------------------------------------------------------
// errors and the sandbox
// ---------------------------------------------------------------------------------------

test('syntax errors and unknown filters fail with RenderError', async () => {
  await assertRenderError(() => renderString('{% if %}', ctx), 2000, /syntax/);
  await assertRenderError(() => renderString('{{ contact.firstName', ctx));
  await assertRenderError(() => renderString('{{ contact.firstName | shout }}', ctx));
  await assertRenderError(() => renderString('{% for x in trigger.fields %}', ctx));
});

test('no file system: include, render and layout fail with RenderError', async () => {
  for (const source of ['{% include "header" %}', '{% render "/etc/passwd" %}', '{% layout "../../package.json" %}', "{% include '../../../etc/hosts' %}"]) {
    const err = await assertRenderError(() => renderString(source, ctx));
    assert.doesNotMatch(err.message, /root:|127\.0\.0\.1/, 'no file content leaks');
  }
});

test('a loop over a hundred million items fails fast (memory limit)', async () => {
  await assertRenderError(() => renderString('{% for i in (1..100000000) %}x{% endfor %}', ctx), 2000);
});

test('a long-running loop that prints nothing fails on the render time limit, in under 2 s', async () => {
  await assertRenderError(() => renderString('{% for i in (1..3000) %}{% for j in (1..3000) %}{% endfor %}{% endfor %}', ctx), 2000, /limit/);
});

test('a huge | append chain fails fast (memory limit)', async () => {
  const doubling = '{% assign s = "xxxxxxxxxx" %}{% for i in (1..60) %}{% assign s = s | append: s %}{% endfor %}{{ s }}';
  await assertRenderError(() => renderString(doubling, ctx), 2000);
  const chain = `{{ trigger.big${' | append: trigger.big'.repeat(200)} }}`;
  await assertRenderError(() => renderString(chain, ctx), 2000);
});

test('capture doubling cannot build an unbounded string', async () => {
  // 24 doublings of 10 characters is 167 million: cheap as a rope, costly once a filter
  // flattens it. Captured text is bounded like output, so this fails at 256 KiB instead.
  for (const use of ['size', 'url_decode | size', 'upcase | size']) {
    const source = `{% assign s = "xxxxxxxxxx" %}{% for i in (1..24) %}{% capture s %}{{ s }}{{ s }}{% endcapture %}{% endfor %}{{ s | ${use} }}`;
    await assertRenderError(() => renderString(source, ctx), 2000, /larger than/);
  }
});

test(`output over MAX_RENDERED_BYTES (${MAX_RENDERED_BYTES}) fails; output at the limit renders`, async () => {
  assert.equal(MAX_RENDERED_BYTES, 256 * 1024);
  const exact = await renderString('{{ trigger.s }}', { ...ctx, trigger: { s: 'a'.repeat(MAX_RENDERED_BYTES) } });
  assert.equal(exact.length, MAX_RENDERED_BYTES);
  await assertRenderError(() => renderString('{{ trigger.s }}!', { ...ctx, trigger: { s: 'a'.repeat(MAX_RENDERED_BYTES) } }), 2000, /larger than/);
  await assertRenderError(() => renderString('{{ trigger.big }}', ctx), 2000, /larger than/);
  await assertRenderError(() => renderString('{% for i in (1..1000000) %}{{ trigger.fields[0].value }}{% endfor %}', ctx), 2000);
  // The limit is in bytes: 150,000 two-byte characters are under it in characters, over it in bytes.
  await assertRenderError(() => renderString('{{ trigger.s }}', { ...ctx, trigger: { s: 'é'.repeat(150_000) } }), 2000, /larger than/);
});

test("a run's renders share one budget: once it is spent, the next render fails at once", async () => {
  const slow = '{% for i in (1..3000) %}{% for j in (1..3000) %}{% endfor %}{% endfor %}';
  const budget = { remainingMs: 150 };
  await assertRenderError(() => renderString(slow, { ...ctx, budget }), 2000, /took more than their 1000 ms of rendering/);
  assert.ok(budget.remainingMs <= 0, `left: ${budget.remainingMs}`);
  const started = performance.now();
  await assertRenderError(() => renderString('{{ run.id }}', { ...ctx, budget }), 2000, /took more than their 1000 ms of rendering/);
  await assertRenderError(() => evaluateCondition('run.id == 99', { ...ctx, budget }), 2000, /took more than/);
  assert.ok(performance.now() - started < 200, 'refused before rendering');
  // A budget with time left renders as usual and is spent by what the render took.
  const fresh = { remainingMs: 1000 };
  assert.equal(await renderString('{{ run.id }}', { ...ctx, budget: fresh }), '99');
  assert.ok(fresh.remainingMs < 1000 && fresh.remainingMs > 500, `left: ${fresh.remainingMs}`);
});

test('the strings of one content share one time budget', async () => {
  const slow = '{% for i in (1..3000) %}{% for j in (1..3000) %}{% endfor %}{% endfor %}';
  const started = performance.now();
  await assertRenderError(() => renderContent({ subject: slow, html: slow, text: slow, parameters: [slow, slow] }, ctx), 2000);
  assert.ok(performance.now() - started < 2000);
});

test('a deeply nested template fails cleanly instead of overflowing the stack', async () => {
  await assertRenderError(() => renderString(`${'{% if true %}'.repeat(20_000)}x${'{% endif %}'.repeat(20_000)}`, ctx), 2000);
});

test('renderer stays usable after hostile templates', async () => {
  await assertRenderError(() => renderString('{% for i in (1..100000000) %}x{% endfor %}', ctx));
  assert.equal(await renderString('Hi {{ contact.firstName }}', ctx), 'Hi Ada');
  assert.equal(await evaluateCondition('trigger.total > 100', ctx), true);
});

// ---------------------------------------------------------------------------------------
// HTML escaping in the html part of emails
// ---------------------------------------------------------------------------------------

const hostile: RenderContext = { ...ctx, contact: { ...ctx.contact, firstName: `<script>alert("x")</script> & 'co'` } };

test('output in the html part is HTML-escaped; | raw opts out; | escape is not escaped twice', async () => {
  const out = await renderContent(
    {
      subject: 'Hi {{ contact.firstName }}',
      html: '<p>{{ contact.firstName }}</p><i>{{ contact.firstName | upcase }}</i>{{ contact.firstName | raw }}|{{ contact.firstName | escape }}|{{ contact.firstName | escape_once }}{% assign n = contact.firstName %}<b>{{ n }}</b>{% capture c %}{{ contact.firstName }}{% endcapture %}',
      text: 'Hi {{ contact.firstName }}',
    },
    hostile,
  );
  const escaped = '&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;co&#39;';
  assert.equal(
    out.html,
    `<p>${escaped}</p><i>&lt;SCRIPT&gt;ALERT(&#34;X&#34;)&lt;/SCRIPT&gt; &amp; &#39;CO&#39;</i><script>alert("x")</script> & 'co'|${escaped}|${escaped}<b>${escaped}</b>`,
  );
  // The template's own markup is untouched; subject and text are plain text, not escaped.
  assert.equal(out.subject, `Hi <script>alert("x")</script> & 'co'`);
  assert.equal(out.text, `Hi <script>alert("x")</script> & 'co'`);
});

test('SMS and WhatsApp content, and renderString, are never HTML-escaped', async () => {
  const raw = `<script>alert("x")</script> & 'co'`;
  assert.deepEqual(await renderContent({ text: '{{ contact.firstName }}' }, hostile), { text: raw });
  assert.deepEqual(await renderContent({ templateName: 't', language: 'en', parameters: ['{{ contact.firstName }}'] }, hostile), {
    templateName: 't',
    language: 'en',
    parameters: [raw],
  });
  assert.equal(await renderString('{{ contact.firstName }}', hostile), raw);
  // A nested "html" key (an http_request body, say) is data, not an email body.
  assert.deepEqual(await renderContent({ body: { html: '{{ contact.firstName }}' } }, hostile), { body: { html: raw } });
});

test('the same source renders escaped in html and plain in text, whichever comes first (no cache mix-up)', async () => {
  const source = '{{ contact.firstName }}!';
  assert.equal((await renderContent({ text: source }, hostile)).text, `<script>alert("x")</script> & 'co'!`);
  assert.equal((await renderContent({ html: source }, hostile)).html, '&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; &#39;co&#39;!');
  assert.equal((await renderContent({ text: source }, hostile)).text, `<script>alert("x")</script> & 'co'!`);
});
