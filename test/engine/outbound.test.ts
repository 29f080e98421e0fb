/**
 * The guarded outbound connector, through real parts: every provider (smtp, twilio,
 * whatsapp) and http_request pointed at refused destinations is refused before a socket
 * opens (a listener on 127.0.0.1 sees nothing), and reaches real local servers once
 * allow-listed. 10.0.0.1 and 169.254.169.254 are never connected to: each test first
 * checks that the policy refuses them, then that the send does.
 */
import assert from 'node:assert/strict';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo } from 'node:net';
import { test } from 'node:test';
import { SMTPServer } from 'smtp-server';
import { HttpRequestError, safeRequest, type HttpPolicy } from '../../src/engine/http.js';
import { checkLiteral, OutboundError, resolveChecked, STRICT_OUTBOUND_POLICY, type OutboundPolicy } from '../../src/engine/outbound.js';
import { providerFor, type SendOptions, type SendResult } from '../../src/engine/providers/index.js';
import { outboundHooks } from '../outboundHooks.js';
import { sniServer } from '../tlsServer.js';

const closers = outboundHooks();

/** A TCP listener on 127.0.0.1 that only counts connections. */
async function trap(): Promise<{ port: number; connections: () => number }> {
  let n = 0;
  const server = createNetServer((socket) => {
    n++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.address() as AddressInfo).port, connections: () => n };
}

/** A local HTTP API answering `reply(n)` for the n-th request; counts sockets and concurrency. */
async function api(reply: (n: number, req: IncomingMessage) => { status: number; headers?: Record<string, string>; body?: string; delayMs?: number }) {
  const stats = { requests: 0, sockets: 0, inFlight: 0, maxInFlight: 0, paths: [] as string[] };
  const server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      const n = ++stats.requests;
      stats.paths.push(req.url ?? '');
      stats.inFlight++;
      stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
      const r = reply(n, req);
      setTimeout(() => {
        stats.inFlight--;
        res.writeHead(r.status, { 'content-type': 'application/json', ...(r.headers ?? {}) });
        res.end(r.body ?? '');
      }, r.delayMs ?? 0);
    });
  });
  server.on('connection', () => stats.sockets++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  closers.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { port, origin: `http://127.0.0.1:${port}`, stats };
}

/** A real SMTP server on 127.0.0.1. */
async function smtp(opts: { onMailFrom?: (n: number) => Error | undefined; banner?: string } = {}) {
  const stats = { connections: 0, messages: [] as string[], mailFrom: 0 };
  const server = new SMTPServer({
    closeTimeout: 200, // pooled connections of the server under test are cut, not awaited for 30 s
    secure: false,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    ...(opts.banner ? { banner: opts.banner } : {}),
    onConnect(_session, cb) {
      stats.connections++;
      cb();
    },
    onMailFrom(_address, _session, cb) {
      cb(opts.onMailFrom?.(++stats.mailFrom) ?? null);
    },
    onData(stream, _session, cb) {
      let raw = '';
      stream.on('data', (c: Buffer) => (raw += c.toString()));
      stream.on('end', () => {
        stats.messages.push(raw);
        cb();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port: (server.server.address() as AddressInfo).port, stats };
}

function smtpError(code: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode: code });
}

const policy = (extra: Partial<OutboundPolicy> = {}): OutboundPolicy => ({ ...STRICT_OUTBOUND_POLICY, ...extra });
const opts = (outbound: OutboundPolicy, timeoutMs = 3000): SendOptions => ({ timeoutMs, outbound });
const httpPolicy = (outbound: OutboundPolicy, timeoutMs = 3000): HttpPolicy => ({ ...outbound, timeoutMs, maxResponseBytes: 64 * 1024 });

const sms = { channel: 'SMS' as const, to: '+15551234567', rendered: { text: 'Your code is 42' } };
const wa = { channel: 'WHATSAPP' as const, to: '+15551234567', rendered: { text: 'Hello' } };
const email = { channel: 'EMAIL' as const, to: 'buyer@example.com', rendered: { subject: 'Hi', text: 'Thanks' } };

const twilio = (host: string, port: number, outbound: OutboundPolicy, timeoutMs?: number) =>
  providerFor('twilio').send(
    sms,
    { baseUrl: `http://${host}:${port}`, accountSid: 'AC1', from: '+15005550006' },
    { authToken: 'tw-token' },
    opts(outbound, timeoutMs),
  );
const whatsapp = (host: string, port: number, outbound: OutboundPolicy) =>
  providerFor('whatsapp').send(wa, { baseUrl: `http://${host}:${port}/v20.0`, phoneNumberId: '1098765' }, { accessToken: 'wa-token' }, opts(outbound));
const mail = (host: string, port: number, outbound: OutboundPolicy, timeoutMs?: number) =>
  providerFor('smtp').send(email, { host, port, secure: false, requireTLS: false, from: 'shop@example.com' }, {}, opts(outbound, timeoutMs));

function assertRefused(r: SendResult, provider: string): void {
  assert.equal(r.ok, false);
  if (r.ok) return;
  assert.equal(r.transient, false, `${provider}: a refused destination is permanent: ${r.error}`);
  assert.equal(r.retryAfterMs, undefined);
  assert.match(r.error, new RegExp(`^${provider}: destination refused by the outbound policy: .*private, loopback or reserved`));
}

// ---------------------------------------------------------------------------------------
// Refused before a socket opens

const REFUSED_HOSTS = ['127.0.0.1', '10.0.0.1', '169.254.169.254', 'localhost'];

test('the policy refuses the literal addresses and a name resolving to loopback', async () => {
  for (const host of ['127.0.0.1', '10.0.0.1', '169.254.169.254', '0.0.0.0', '::1', '::ffff:127.0.0.1', '100.64.0.1', '224.0.0.1', 'fe80::1']) {
    assert.throws(
      () => checkLiteral(host, 80, STRICT_OUTBOUND_POLICY),
      (e: unknown) => e instanceof OutboundError && e.code === 'blocked_address',
      host,
    );
  }
  await assert.rejects(resolveChecked('localhost', 80, STRICT_OUTBOUND_POLICY), (e: unknown) => e instanceof OutboundError && e.code === 'blocked_address');
  // A name that rebinds between two lookups: the one answer we get is the one checked.
  await assert.rejects(
    resolveChecked('rebind.test', 80, STRICT_OUTBOUND_POLICY, async () => [{ address: '93.184.216.34' }, { address: '10.0.0.1' }]),
    /rebind\.test resolves to 10\.0\.0\.1/,
  );
});

for (const host of REFUSED_HOSTS) {
  test(`every provider and http_request aimed at ${host} is refused before a socket opens`, async () => {
    const t = await trap();
    // Guard first: a send is only tried once the policy is known to refuse the address.
    if (host === 'localhost') await assert.rejects(resolveChecked(host, t.port, STRICT_OUTBOUND_POLICY), OutboundError);
    else assert.throws(() => checkLiteral(host, t.port, STRICT_OUTBOUND_POLICY), OutboundError);

    const started = Date.now();
    assertRefused(await twilio(host, t.port, policy()), 'twilio');
    assertRefused(await whatsapp(host, t.port, policy()), 'whatsapp');
    assertRefused(await mail(host, t.port, policy()), 'smtp');
    await assert.rejects(
      safeRequest({ method: 'POST', url: `http://${host}:${t.port}/hook`, body: 'x' }, httpPolicy(policy())),
      (e: unknown) => e instanceof HttpRequestError && e.code === 'blocked_address',
    );
    // Another port being allow-listed does not open this one.
    assertRefused(await twilio(host, t.port, policy({ allowedHosts: [`${host}:${t.port + 1}`] })), 'twilio');
    assert.equal(t.connections(), 0, 'no connection reached the listener');
    assert.ok(Date.now() - started < 2000, 'refused at once, not after a connect timeout');
  });
}

test('allow-listed host:port pairs (or allow-private) reach real local servers', async () => {
  const tw = await api(() => ({ status: 201, body: JSON.stringify({ sid: 'SM1' }) }));
  const graph = await api(() => ({ status: 200, body: JSON.stringify({ messages: [{ id: 'wamid.1' }] }) }));
  const hook = await api(() => ({ status: 200, body: 'ok' }));
  const mailer = await smtp();

  const listed = policy({ allowedHosts: [`127.0.0.1:${tw.port}`, `127.0.0.1:${graph.port}`, `127.0.0.1:${hook.port}`, `localhost:${mailer.port}`] });
  assert.deepEqual(await twilio('127.0.0.1', tw.port, listed), { ok: true, providerMessageId: 'SM1' });
  assert.deepEqual(await whatsapp('127.0.0.1', graph.port, listed), { ok: true, providerMessageId: 'wamid.1' });
  const sent = await mail('localhost', mailer.port, listed);
  assert.equal(sent.ok, true, JSON.stringify(sent));
  assert.equal(mailer.stats.messages.length, 1);
  assert.match(mailer.stats.messages[0]!, /Subject: Hi/);
  const res = await safeRequest({ method: 'GET', url: `${hook.origin}/x` }, httpPolicy(listed));
  assert.equal(res.status, 200);

  const open = policy({ allowPrivate: true });
  assert.equal((await twilio('localhost', tw.port, open)).ok, true);
  assert.equal((await mail('127.0.0.1', mailer.port, open)).ok, true);
  assert.equal(mailer.stats.messages.length, 2);
});

test('a name that only resolves to loopback stays refused for SMTP even on a listening port', async () => {
  const mailer = await smtp();
  assertRefused(await mail('localhost', mailer.port, policy({ allowedHosts: [`127.0.0.1:${mailer.port}`] })), 'smtp');
  assert.equal(mailer.stats.connections, 0);
});

test('SMTP over implicit TLS connects to the checked address and still names the host (SNI)', async (t) => {
  const { port, seen } = await sniServer(t, 'localhost');
  const r = await providerFor('smtp').send(
    email,
    { host: 'localhost', port, secure: true, requireTLS: false, from: 'shop@example.com' },
    {},
    opts(policy({ allowedHosts: [`localhost:${port}`] }), 2000),
  );
  // The self-signed certificate is refused (verification stays on): a permanent TLS failure.
  assert.deepEqual(r, { ok: false, transient: false, error: 'smtp: TLS failed, the certificate was not accepted (ETLS)' });
  assert.deepEqual(seen, ['localhost']);
});

// ---------------------------------------------------------------------------------------
// Stored errors: the provider's own fields only

test('stored provider errors carry only the provider error fields, never a raw body or banner', async () => {
  const open = policy({ allowPrivate: true });
  const html = await api(() => ({ status: 500, headers: { 'content-type': 'text/html' }, body: '<html>internal-admin-page secret=hunter2</html>' }));
  const tw = await twilio('127.0.0.1', html.port, open);
  assert.deepEqual(tw, { ok: false, transient: true, error: 'twilio: HTTP 500: no details' });
  const graph = await whatsapp('127.0.0.1', html.port, open);
  assert.deepEqual(graph, { ok: false, transient: true, error: 'whatsapp: HTTP 500: no details' });

  const long = await api(() => ({
    status: 400,
    body: JSON.stringify({ code: 21211, message: `bad number\n${'x'.repeat(1000)}`, more_info: 'https://internal.example/secret' }),
  }));
  const r = await twilio('127.0.0.1', long.port, open);
  assert.equal(r.ok, false);
  if (!r.ok) {
    assert.ok(r.error.length < 260, r.error);
    assert.ok(!r.error.includes('\n') && !r.error.includes('internal.example'));
    assert.match(r.error, /^twilio: HTTP 400: bad number x+… \(code 21211\)$/);
  }

  const mailer = await smtp({ banner: 'relay.internal secret-banner-7f3', onMailFrom: () => smtpError(550, `Mailbox unavailable ${'y'.repeat(400)}`) });
  const m = await mail('127.0.0.1', mailer.port, open);
  assert.equal(m.ok, false);
  if (!m.ok) {
    assert.equal(m.transient, false);
    assert.match(m.error, /^smtp: the server answered 550 /);
    assert.ok(!m.error.includes('secret-banner') && m.error.length < 160, m.error);
    assert.match(m.error, /^smtp: the server answered 550 Mailbox unavailable y+…$/);
  }
});

test('a non-SMTP service behind an allowed SMTP host: its banner never reaches the stored error', async () => {
  const server = createNetServer((socket) => {
    socket.on('error', () => undefined);
    socket.end('SSH-2.0-OpenSSH_9.6 internal-host-banner-c0ffee\r\n');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const r = await mail('127.0.0.1', (server.address() as AddressInfo).port, policy({ allowPrivate: true }), 1000);
  assert.equal(r.ok, false);
  if (!r.ok) {
    assert.ok(!r.error.includes('internal-host-banner') && !r.error.includes('SSH'), r.error);
    assert.match(r.error, /^smtp: /);
  }
});

// ---------------------------------------------------------------------------------------
// Pooling and the per-destination cap

test('HTTP providers and http_request reuse keep-alive connections', async () => {
  const open = policy({ allowPrivate: true });
  const tw = await api(() => ({ status: 201, body: JSON.stringify({ sid: 'SM' }) }));
  for (let i = 0; i < 10; i++) assert.equal((await twilio('127.0.0.1', tw.port, open)).ok, true);
  assert.equal(tw.stats.requests, 10);
  // undici may open a second socket while the first answer is still being settled; never more.
  assert.ok(tw.stats.sockets <= 2, `ten sequential sends over ${tw.stats.sockets} connections`);

  const hook = await api(() => ({ status: 200, body: 'ok' }));
  for (let i = 0; i < 10; i++) assert.equal((await safeRequest({ method: 'GET', url: `${hook.origin}/${i}` }, httpPolicy(open))).status, 200);
  assert.ok(hook.stats.sockets <= 2, `ten sequential http_request calls over ${hook.stats.sockets} connections`);

  // Concurrent calls open more sockets, but far fewer than requests once they are reused.
  await Promise.all(
    Array.from({ length: 30 }, (_, i) => safeRequest({ method: 'GET', url: `${hook.origin}/c${i}` }, httpPolicy({ ...open, perHostConcurrency: 5 }))),
  );
  assert.ok(hook.stats.sockets <= 7, `sockets: ${hook.stats.sockets}`);
});

test('never more than the per-destination cap in flight; the rest wait their turn in order', async () => {
  const open = policy({ allowPrivate: true, perHostConcurrency: 3 });
  const slow = await api(() => ({ status: 200, body: 'ok', delayMs: 60 }));
  const results = await Promise.all(Array.from({ length: 12 }, (_, i) => safeRequest({ method: 'GET', url: `${slow.origin}/${i}` }, httpPolicy(open))));
  assert.ok(results.every((r) => r.status === 200));
  assert.equal(slow.stats.maxInFlight, 3);

  const tw = await api(() => ({ status: 201, body: JSON.stringify({ sid: 'SM' }), delayMs: 60 }));
  const sends = await Promise.all(Array.from({ length: 10 }, () => twilio('127.0.0.1', tw.port, policy({ allowPrivate: true, perHostConcurrency: 2 }))));
  assert.ok(sends.every((r) => r.ok));
  assert.equal(tw.stats.maxInFlight, 2);

  const fifo = await api(() => ({ status: 200, body: 'ok', delayMs: 5 }));
  await Promise.all(
    Array.from({ length: 8 }, (_, i) => safeRequest({ method: 'GET', url: `${fifo.origin}/${i}` }, httpPolicy({ ...open, perHostConcurrency: 1 }))),
  );
  assert.deepEqual(fifo.stats.paths, ['/0', '/1', '/2', '/3', '/4', '/5', '/6', '/7'], 'first come, first served');
});

test('SMTP sends share one pooled connection per channel configuration', async () => {
  const mailer = await smtp();
  const open = policy({ allowPrivate: true });
  for (let i = 0; i < 5; i++) assert.equal((await mail('127.0.0.1', mailer.port, open)).ok, true);
  assert.equal(mailer.stats.messages.length, 5);
  assert.equal(mailer.stats.connections, 1);
});
