/**
 * How the console is served (issue 11, item 1): / redirects to /app/, client routes fall
 * back to index.html without shadowing the API, hashed assets are cached for good and
 * index.html is not, every console answer carries a strict CSP, and the OpenAPI document
 * does not list the console's routes.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { gunzipSync } from 'node:zlib';
import { consoleFile, consoleRoutes, CONSOLE_CSP, defaultConsoleDir } from '../../src/server/console.js';
import { build, buildAsOwner } from '../helpers.js';
import { ensureConsoleBuilt } from './browser.js';

const built = await ensureConsoleBuilt();

const assetsOf = (html: string) => [...html.matchAll(/\/app\/assets\/([^"]+)/g)].map((m) => m[1]!);

test('/ and /app redirect to /app/; client routes and /invite answer the page with a strict CSP and no-cache', async (t) => {
  const s = await build(t);
  for (const path of ['/', '/app']) {
    const res = await fetch(s.url + path, { redirect: 'manual' });
    assert.equal(res.status, 302, path);
    assert.equal(res.headers.get('location'), '/app/');
  }
  const index = readFileSync(join(built, 'index.html'), 'utf8');
  // A query the API would refuse (`%` alone, U+0000) is the console's own: the page still answers.
  for (const path of [
    '/app/',
    '/app/contacts',
    '/app/contacts/12?q=ann',
    '/app/contacts?q=%',
    '/app/contacts?q=50%25%',
    '/app/contacts?q=%00',
    '/app/settings/api-keys',
    '/app/no/such/page',
    '/invite',
  ]) {
    const res = await s.request('GET', path);
    assert.equal(res.status, 200, path);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
    assert.equal(res.text, index, `${path} answers index.html`);
    assert.equal(res.headers.get('cache-control'), 'no-cache');
    assert.equal(res.headers.get('content-security-policy'), CONSOLE_CSP);
    assert.equal(res.headers.get('x-frame-options'), 'DENY');
  }
  const csp = CONSOLE_CSP;
  for (const part of ["default-src 'self'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "object-src 'none'"])
    assert.ok(csp.includes(part), part);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval|\*/);
  // The page has no inline script for the CSP to allow.
  assert.doesNotMatch(index, /<script(?![^>]*\bsrc=)[^>]*>/);
});

test('hashed assets are cached for a year, compressed on request, and answer 304 to their ETag; unknown ones 404', async (t) => {
  const s = await build(t);
  const index = (await s.request('GET', '/app/')).text;
  const assets = assetsOf(index);
  assert.ok(assets.some((a) => a.endsWith('.js')) && assets.some((a) => a.endsWith('.css')), index);
  for (const name of assets) {
    assert.match(name, /-[A-Z0-9]{8}\.(js|css)$/, `${name} carries a content hash`);
    const res = await fetch(`${s.url}/app/assets/${name}`, { headers: { 'accept-encoding': 'identity' } });
    assert.equal(res.status, 200, name);
    assert.equal(res.headers.get('cache-control'), 'public, max-age=31536000, immutable');
    assert.match(res.headers.get('content-type') ?? '', name.endsWith('.js') ? /^text\/javascript/ : /^text\/css/);
    assert.equal(res.headers.get('content-security-policy'), CONSOLE_CSP);
    const body = Buffer.from(await res.arrayBuffer());
    assert.deepEqual(body, readFileSync(join(built, 'assets', name)));
    const again = await fetch(`${s.url}/app/assets/${name}`, { headers: { 'if-none-match': res.headers.get('etag')! } });
    assert.equal(again.status, 304);
  }
  // Node's fetch would decompress; ask the raw socket-level answer through undici's request.
  const { request } = await import('undici');
  const gz = await request(`${s.url}/app/assets/${assets.find((a) => a.endsWith('.js'))}`, { headers: { 'accept-encoding': 'gzip' } });
  assert.equal(gz.headers['content-encoding'], 'gzip');
  assert.ok(gunzipSync(Buffer.from(await gz.body.arrayBuffer())).length > 1000);

  const missing = await s.request('GET', '/app/assets/nope-12345678.js');
  assert.equal(missing.status, 404);
  assert.equal(missing.body.code, 'not_found');
});

test('the console never shadows the API: API paths answer as the API, and the document lists no console route', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const contacts = await s.request('GET', '/contacts', { token });
  assert.equal(contacts.status, 200);
  assert.ok(Array.isArray(contacts.body.data));
  const anonymous = await s.request('GET', '/contacts');
  assert.equal(anonymous.status, 401);
  const unknown = await s.request('GET', '/no-such-api-path');
  assert.equal(unknown.status, 404);
  assert.match(unknown.headers.get('content-type') ?? '', /problem\+json/);
  assert.equal(unknown.headers.get('content-security-policy'), null, 'API answers carry no console CSP');
  const doc = (await s.request('GET', '/openapi.json')).body as { paths: Record<string, unknown> };
  for (const path of Object.keys(doc.paths)) assert.ok(path !== '/' && !path.startsWith('/app') && path !== '/invite', `${path} is API`);
});

test('the console is found beside the bundle, or in dist/console from source', () => {
  assert.match(defaultConsoleDir(), /dist[\\/]console$/);
});

test('without a built console the pages say how to build it, and the API still works', async (t) => {
  const Fastify = (await import('fastify')).default;
  const app = Fastify();
  t.after(() => app.close());
  await app.register(consoleRoutes as never, { files: null });
  const res = await app.inject({ method: 'GET', url: '/app/contacts' });
  assert.equal(res.statusCode, 503);
  assert.match(res.body, /npm run build/);
  assert.equal(res.headers['content-security-policy'], CONSOLE_CSP);
  // Small files are not compressed; larger text ones are.
  assert.equal(consoleFile('a.js', Buffer.from('x')).gzip, undefined);
  assert.ok(consoleFile('a.js', Buffer.from('abc '.repeat(500))).gzip);
});

test('SVC_CONSOLE_DIR serves the console built there instead of the bundled one; a folder without a build gets the "not built" page', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'svc-console-dir-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'index.html'), '<!doctype html><title>my console</title><p>customised</p>');
  const s = await build(t, { env: { SVC_CONSOLE_DIR: dir } });
  const page = await s.request('GET', '/app/contacts');
  assert.equal(page.status, 200);
  assert.match(page.text, /customised/);
  assert.equal(page.headers.get('content-security-policy'), CONSOLE_CSP);

  const empty = mkdtempSync(join(tmpdir(), 'svc-console-dir-'));
  t.after(() => rmSync(empty, { recursive: true, force: true }));
  const bare = await build(t, { env: { SVC_CONSOLE_DIR: empty } });
  const missing = await bare.request('GET', '/app/');
  assert.equal(missing.status, 503);
  assert.match(missing.text, /The console is not built/);
  assert.equal((await bare.request('GET', '/healthz')).status, 200, 'the API works without it');
});
