/**
 * The API reference page at /docs: served from the program's own files (no network), under
 * a strict CSP, and it renders every operation of /openapi.json in a real browser.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { newContext, screenshot, startBrowser } from '../console/browser.js';
import { assertProblem, build } from '../helpers.js';

test('/docs and its files are served with a strict policy; unknown files are 404 problems', async (t) => {
  const s = await build(t);
  const page = await s.request('GET', '/docs');
  assert.equal(page.status, 200);
  assert.match(page.headers.get('content-type') ?? '', /text\/html/);
  const csp = page.headers.get('content-security-policy') ?? '';
  assert.match(csp, /script-src 'self'(;|$)/);
  assert.match(csp, /frame-ancestors 'none'/);
  assert.doesNotMatch(page.text, /<script>[^<]/, 'no inline script');
  assert.doesNotMatch(page.text, /https?:\/\//, 'nothing is loaded from another host');
  for (const [file, type] of [
    ['swagger-ui-bundle.js', /javascript/],
    ['swagger-ui.css', /text\/css/],
    ['init.js', /javascript/],
  ] as const) {
    const res = await s.request('GET', `/docs/${file}`);
    assert.equal(res.status, 200, file);
    assert.match(res.headers.get('content-type') ?? '', type);
  }
  assertProblem(await s.request('GET', '/docs/package.json'), 404, 'not_found');
  assertProblem(await s.request('GET', '/docs/..%2Fpackage.json'), 404);
  assertProblem(await s.request('GET', '/docs/index.html'), 404, 'not_found');
});

test('the reference page renders every operation of the document in a browser, with no CSP violation', async (t) => {
  const started = await startBrowser();
  // Under CI=true startBrowser throws instead; only a machine outside CI may lack Chromium.
  if (!started.browser) return t.skip(started.skipOutsideCI);
  const s = await build(t);
  const doc = (await s.request('GET', '/openapi.json')).body as { paths: Record<string, Record<string, unknown>> };
  const operations = Object.values(doc.paths).reduce((n, ops) => n + Object.keys(ops).length, 0);
  const { context, page, problems } = await newContext(started.browser, s.url);
  t.after(() => context.close());
  // Offline: any request to another host fails the test.
  const outside: string[] = [];
  await context.route(/^(?!http:\/\/127\.0\.0\.1)/, (route) => {
    outside.push(route.request().url());
    return route.abort();
  });
  await page.goto('/docs');
  await page.locator('.opblock').first().waitFor({ timeout: 30_000 });
  assert.equal(await page.locator('.opblock').count(), operations);
  assert.ok(await page.getByText('/contacts/{id}', { exact: true }).first().isVisible());
  await screenshot(page, 'api-reference');
  assert.deepEqual(problems, []);
  assert.deepEqual(outside, []);
});
