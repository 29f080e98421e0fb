/**
 * Rate-limit answers defer instead of fail, through real local servers: a provider's "slow
 * down" (HTTP 429 with Retry-After, Twilio 20429, WhatsApp's rate-limit codes, SMTP
 * 421/451) is a transient failure with retryAfterMs, and the destination is blocked in
 * this thread until then: the next send to it waits, or is deferred at once when the wait
 * is longer than a send may be held.
 */
import assert from 'node:assert/strict';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { SMTPServer } from 'smtp-server';
import { HttpRequestError, safeRequest } from '../../src/engine/http.js';
import { closeOutbound, parseRetryAfter } from '../../src/engine/outbound.js';
import { providerFor, type SendResult } from '../../src/engine/providers/index.js';
import { closeSmtpTransports } from '../../src/engine/providers/smtp.js';
import { outboundHooks } from '../outboundHooks.js';

const closers = outboundHooks();

const OPEN = { allowPrivate: true, allowedHosts: [], perHostConcurrency: 64 };

async function api(reply: (n: number) => { status: number; headers?: Record<string, string>; body?: unknown }) {
  const seen: number[] = [];
  const server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      seen.push(Date.now());
      const r = reply(seen.length);
      res.writeHead(r.status, { 'content-type': 'application/json', ...(r.headers ?? {}) });
      res.end(r.body === undefined ? '' : JSON.stringify(r.body));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { port: (server.address() as AddressInfo).port, seen };
}

const twilio = (port: number, authToken = 'tw-token') =>
  providerFor('twilio').send(
    { channel: 'SMS', to: '+15551234567', rendered: { text: 'hi' } },
    { baseUrl: `http://127.0.0.1:${port}`, accountSid: 'AC1', from: '+15005550006' },
    { authToken },
    { timeoutMs: 3000, outbound: OPEN },
  );
const whatsapp = (port: number) =>
  providerFor('whatsapp').send(
    { channel: 'WHATSAPP', to: '+15551234567', rendered: { text: 'hi' } },
    { baseUrl: `http://127.0.0.1:${port}/v20.0`, phoneNumberId: '1' },
    { accessToken: 'wa-token' },
    { timeoutMs: 3000, outbound: OPEN },
  );

function deferral(r: SendResult): number {
  assert.equal(r.ok, false, JSON.stringify(r));
  assert.ok(!r.ok && r.transient, JSON.stringify(r));
  assert.ok(!r.ok && r.retryAfterMs !== undefined, `retryAfterMs missing: ${JSON.stringify(r)}`);
  return (r as { retryAfterMs: number }).retryAfterMs;
}

test('Retry-After is read as seconds or as an HTTP date, and capped at an hour', () => {
  const now = Date.parse('2026-01-01T00:00:00Z');
  assert.equal(parseRetryAfter('2', now), 2000);
  assert.equal(parseRetryAfter(' 0 ', now), 0);
  assert.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:05 GMT', now), 5000);
  assert.equal(parseRetryAfter('Wed, 31 Dec 2025 23:00:00 GMT', now), 0, 'a date in the past: now');
  assert.equal(parseRetryAfter('999999', now), 3_600_000);
  assert.equal(parseRetryAfter('soon', now), undefined);
  assert.equal(parseRetryAfter(undefined, now), undefined);
});

test('twilio 429 Retry-After: 2 defers by 2 s, and the next send to it waits that long instead of failing', async () => {
  const server = await api((n) =>
    n === 1 ? { status: 429, headers: { 'retry-after': '2' }, body: { code: 20429, message: 'Too Many Requests' } } : { status: 201, body: { sid: 'SM2' } },
  );
  const first = await twilio(server.port);
  const ms = deferral(first);
  assert.equal(ms, 2000);
  assert.match((first as { error: string }).error, /^twilio: HTTP 429: Too Many Requests \(code 20429\)$/);

  const started = Date.now();
  const second = await twilio(server.port);
  assert.deepEqual(second, { ok: true, providerMessageId: 'SM2' });
  assert.ok(Date.now() - started >= 1800, `waited ${Date.now() - started} ms`);
  assert.equal(server.seen.length, 2);
  assert.ok(server.seen[1]! - server.seen[0]! >= 1800, 'the provider was not called again before the time it named');
});

test('twilio 20429 without Retry-After defers by the default; a long block defers at once, per account', async () => {
  const coded = await api((n) => (n === 1 ? { status: 400, body: { code: 20429, message: 'Too many requests' } } : { status: 201, body: { sid: 'SM' } }));
  const ms = deferral(await twilio(coded.port));
  assert.ok(ms >= 1000 && ms <= 5000, `default ${ms}`);

  const long = await api((n) =>
    n === 1 ? { status: 429, headers: { 'retry-after': '60' }, body: { code: 20429, message: 'Too Many Requests' } } : { status: 201, body: { sid: 'SM3' } },
  );
  assert.equal(deferral(await twilio(long.port)), 60_000);
  const started = Date.now();
  const again = await twilio(long.port);
  const left = deferral(again);
  assert.ok(left > 55_000 && left <= 60_000, `left ${left}`);
  assert.ok(Date.now() - started < 500, 'not held in the thread for a minute');
  assert.match((again as { error: string }).error, /^twilio: rate limited/);
  assert.equal(long.seen.length, 1, 'the blocked destination was not called');
  // Another account at the same API is not held back by the first one's limit.
  assert.deepEqual(await twilio(long.port, 'other-token'), { ok: true, providerMessageId: 'SM3' });
});

test('whatsapp rate-limit codes defer; the pair limit (131056) does not block other recipients', async () => {
  for (const code of [4, 80007, 130429, 131048]) {
    const server = await api(() => ({ status: 400, body: { error: { message: 'Rate limit hit', code } } }));
    const ms = deferral(await whatsapp(server.port));
    assert.ok(ms >= 1000 && ms <= 5000);
    await closeOutbound();
  }
  const pair = await api((n) =>
    n === 1 ? { status: 400, body: { error: { message: 'Pair rate limit', code: 131056 } } } : { status: 200, body: { messages: [{ id: 'wamid.2' }] } },
  );
  deferral(await whatsapp(pair.port));
  const started = Date.now();
  assert.deepEqual(await whatsapp(pair.port), { ok: true, providerMessageId: 'wamid.2' });
  assert.ok(Date.now() - started < 500);

  const limited = await api(() => ({ status: 429, headers: { 'retry-after': '3' }, body: { error: { message: 'Too many calls', code: 80007 } } }));
  assert.equal(deferral(await whatsapp(limited.port)), 3000);
  const other = await api(() => ({ status: 400, body: { error: { message: 'Invalid parameter', code: 100 } } }));
  assert.deepEqual(await whatsapp(other.port), { ok: false, transient: false, error: 'whatsapp: HTTP 400: Invalid parameter (code 100)' });
});

test('SMTP 421 and 451 are transient with retryAfterMs and hold the next send; 450 is transient without', async () => {
  let answer: number | null = 421;
  const seen: number[] = [];
  const server = new SMTPServer({
    closeTimeout: 200, // pooled connections of the server under test are cut, not awaited for 30 s
    secure: false,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onMailFrom(_address, _session, cb) {
      seen.push(Date.now());
      const code = answer;
      answer = null;
      cb(code === null ? null : Object.assign(new Error(code === 450 ? 'Mailbox busy' : 'Too many messages, slow down'), { responseCode: code }));
    },
    onData(stream, _session, cb) {
      stream.resume();
      stream.on('end', () => cb());
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const port = (server.server.address() as AddressInfo).port;
  const send = () =>
    providerFor('smtp').send(
      { channel: 'EMAIL', to: 'a@example.com', rendered: { subject: 's', text: 't' } },
      { host: '127.0.0.1', port, secure: false, requireTLS: false, from: 'shop@example.com' },
      {},
      { timeoutMs: 3000, outbound: OPEN },
    );

  const first = await send();
  const ms = deferral(first);
  assert.ok(ms >= 1000 && ms <= 5000);
  assert.match((first as { error: string }).error, /^smtp: the server answered 421 /);
  const started = Date.now();
  assert.equal((await send()).ok, true);
  assert.ok(Date.now() - started >= ms - 200, 'the next send waited for the block');
  assert.ok(seen[1]! - seen[0]! >= ms - 200);

  closeSmtpTransports();
  await closeOutbound();
  answer = 451;
  deferral(await send());
  await closeOutbound();
  answer = 450;
  const busy = await send();
  assert.deepEqual([busy.ok, !busy.ok && busy.transient, !busy.ok && busy.retryAfterMs], [false, true, undefined]);
});

test('http_request: 429 carries retryAfterMs and blocks the origin; a 503 without Retry-After does not', async () => {
  const server = await api((n) =>
    n === 1
      ? { status: 429, headers: { 'retry-after': '1' } }
      : n === 3
        ? { status: 503 }
        : n === 4
          ? { status: 429, headers: { 'retry-after': '120' } }
          : { status: 200 },
  );
  const policy = { ...OPEN, timeoutMs: 3000, maxResponseBytes: 4096 };
  const url = `http://127.0.0.1:${server.port}/crm`;

  const limited = await safeRequest({ method: 'POST', url, body: '{}' }, policy);
  assert.equal(limited.status, 429);
  assert.equal(limited.retryAfterMs, 1000);
  const started = Date.now();
  const next = await safeRequest({ method: 'POST', url, body: '{}' }, policy);
  assert.equal(next.status, 200);
  assert.equal(next.retryAfterMs, undefined);
  assert.ok(Date.now() - started >= 900, 'waited for the block');

  const unavailable = await safeRequest({ method: 'GET', url }, policy);
  assert.deepEqual([unavailable.status, unavailable.retryAfterMs], [503, undefined]);

  const long = await safeRequest({ method: 'GET', url }, policy);
  assert.deepEqual([long.status, long.retryAfterMs], [429, 120_000]);
  const t0 = Date.now();
  await assert.rejects(safeRequest({ method: 'GET', url }, policy), (e: unknown) => {
    assert.ok(e instanceof HttpRequestError && e.code === 'rate_limited', String(e));
    assert.ok(e.retryAfterMs! > 115_000 && e.retryAfterMs! <= 120_000);
    return true;
  });
  assert.ok(Date.now() - t0 < 500);
  assert.equal(server.seen.length, 4, 'the blocked origin was not called');
  // Another account (Authorization) at the same origin is not held back.
  assert.equal((await safeRequest({ method: 'GET', url, headers: { authorization: 'Bearer other' } }, policy)).status, 200);
});
