/**
 * A request body that stops arriving is cut off after the body timeout (server/bodyTimeout.ts):
 * answered 408 request_timeout when nothing was answered yet, and closed; an import already
 * answered 202 is closed and its job says the client went away. A body that keeps moving is
 * never cut, however long it takes, and neither is a kept-alive connection between requests.
 * A shutdown waits for answers under way for its grace period at most (server/app.ts), and
 * not at all for a connection that has sent nothing.
 * Raw sockets against the real server, with a 1 s timeout.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import pg from 'pg';
import { buildAsOwner, webhookWorkflow, type TestServer } from '../helpers.js';

const env = { SVC_BODY_TIMEOUT_SECONDS: '1', SVC_WEBHOOK_RATE_LIMIT: '1000' };

/** A raw connection to the server, collecting what it answers until it closes. */
async function open(s: TestServer): Promise<{ socket: Socket; closed: Promise<{ text: string; ms: number }> }> {
  const { hostname, port } = new URL(s.url);
  const socket = connect(Number(port), hostname);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const started = Date.now();
  let text = '';
  socket.setEncoding('utf8');
  socket.on('data', (c: string) => (text += c));
  const closed = new Promise<{ text: string; ms: number }>((resolve) => socket.once('close', () => resolve({ text, ms: Date.now() - started })));
  socket.on('error', () => {});
  return { socket, closed };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function head(method: string, path: string, headers: Record<string, string | number>): string {
  return `${method} ${path} HTTP/1.1\r\nHost: localhost\r\n${Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}`)
    .join('\r\n')}\r\n\r\n`;
}

/** The head of a POST /contacts carrying `body`, with further headers. */
function createContactHead(token: string, body: string, extra: Record<string, string>): string {
  return head('POST', '/contacts', {
    authorization: `Bearer ${token}`,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    ...extra,
  });
}

function assertTimeoutAnswer(text: string, requestId?: string): void {
  assert.match(text, /^HTTP\/1\.1 408 /, text);
  assert.match(text, /content-type: application\/problem\+json/i);
  assert.match(text, /connection: close/i);
  assert.match(text, /x-content-type-options: nosniff/i);
  // Every answer carries X-Request-Id, the client's when it sent one (API.md).
  assert.match(text, requestId ? new RegExp(`x-request-id: ${requestId}\r\n`, 'i') : /x-request-id: [0-9a-f-]{36}\r\n/i);
  const body = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
  assert.equal(body.status, 408);
  assert.equal(body.code, 'request_timeout');
}

test('a body that stalls halfway is answered 408 request_timeout and its connection closed; nothing is written', async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  const { socket, closed } = await open(s);
  const body = JSON.stringify({ email: 'stalled@example.com', firstName: 'Stalled' });
  socket.write(createContactHead(token, body, { 'x-request-id': 'trace-42' }));
  socket.write(body.slice(0, 10));
  const { text, ms } = await closed;
  assertTimeoutAnswer(text, 'trace-42');
  assert.ok(ms >= 900 && ms < 5000, `closed after ${ms} ms`);
  const list = await s.request('GET', '/contacts', { token });
  assert.deepEqual(list.body.data, []);
  // The server goes on answering.
  assert.equal((await s.request('POST', '/contacts', { token, body: { email: 'next@example.com' } })).status, 201);
});

test('a stalled webhook body is cut off the same way, and no event or run is recorded', async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  const path = await webhookWorkflow(s, token, 'stall', [{ type: 'add_tags', tags: ['x'] }]);
  const { socket, closed } = await open(s);
  socket.write(head('POST', path, { 'content-type': 'application/json', 'content-length': 200 }));
  socket.write('{"email": "a@exa');
  const { text } = await closed;
  assertTimeoutAnswer(text);
  const workflowId = (await s.request('GET', '/workflows', { token })).body.data[0].id;
  const events = await s.request('GET', `/workflows/${workflowId}/webhook-events`, { token });
  assert.equal(events.status, 200, events.text);
  assert.deepEqual(events.body.data, []);
  assert.deepEqual((await s.request('GET', '/runs', { token })).body.data, []);
});

test('a body that keeps moving is not cut, though it takes several timeouts to arrive', async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  const { socket, closed } = await open(s);
  const body = JSON.stringify({ email: 'slow@example.com', firstName: 'Slow' });
  socket.write(createContactHead(token, body, { connection: 'close' }));
  // About 3 s in all, a piece every 180 ms or so: far inside the 1 s between pieces that is
  // allowed, so a pause of this (loaded) process cannot make a gap look like a stall.
  const pieces = body.match(/.{1,3}/g)!;
  for (const piece of pieces) {
    socket.write(piece);
    await sleep(3000 / pieces.length);
  }
  const { text } = await closed;
  assert.match(text, /^HTTP\/1\.1 201 /, text);
  assert.equal((await s.request('GET', '/contacts?email=slow%40example.com', { token })).body.data.length, 1);
});

test('a kept-alive connection idle between requests for longer than the body timeout still serves the next request', async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  const { socket, closed } = await open(s);
  const get = head('GET', '/contacts', { authorization: `Bearer ${token}` });
  let text = '';
  socket.on('data', (c: string) => (text += c));
  socket.write(get);
  await sleep(2500);
  assert.match(text, /^HTTP\/1\.1 200 /);
  assert.ok(!socket.destroyed, 'the idle kept-alive connection is still open');
  socket.write(head('GET', '/contacts', { authorization: `Bearer ${token}`, connection: 'close' }));
  const all = (await closed).text;
  assert.equal(all.match(/HTTP\/1\.1 200 /g)?.length, 2, all);
});

test('an import upload that stalls after its 202: the connection is closed and the job reports the rows it committed', async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  const { socket, closed } = await open(s);
  socket.write(head('POST', '/contacts/import', { authorization: `Bearer ${token}`, 'content-type': 'application/x-ndjson', 'transfer-encoding': 'chunked' }));
  const rows = `${Array.from({ length: 4500 }, (_, i) => JSON.stringify({ email: `u${i}@example.com` })).join('\n')}\n{"email": "half@ex`;
  socket.write(`${Buffer.byteLength(rows).toString(16)}\r\n${rows}\r\n`);
  // Then nothing: no further chunk, no end.
  const { text, ms } = await closed;
  assert.match(text, /^HTTP\/1\.1 202 /, text);
  assert.ok(ms < 10_000, `closed after ${ms} ms`);
  const id = JSON.parse(
    text
      .slice(text.indexOf('\r\n\r\n') + 4)
      .replace(/^[0-9a-f]+\r\n/, '')
      .replace(/\r\n0\r\n\r\n$/, ''),
  ).id;
  let job: any;
  for (let i = 0; i < 100; i++) {
    job = (await s.request('GET', `/contacts/imports/${id}`, { token })).body;
    if (job.status !== 'RUNNING') break;
    await sleep(100);
  }
  assert.equal(job.status, 'FAILED', JSON.stringify(job));
  assert.equal(job.failure.code, 'client_disconnected');
  // Every row sent whole; the cut last one is not written.
  assert.equal(job.created, 4500, JSON.stringify(job));
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.usage.contacts, 4500);
});

/**
 * The contacts table's write lock, held from outside the server for `ms` once `locked` has
 * resolved: on PostgreSQL by another session (LOCK TABLE), on SQLite by another process
 * (BEGIN IMMEDIATE on the file), as a backup, a migration or a slow disk would hold it.
 */
async function holdWriteLock(s: TestServer, ms: number): Promise<{ locked: Promise<void>; released: Promise<void> }> {
  if (s.store.dialect === 'pg') {
    const client = new pg.Client({ connectionString: s.config.databaseUrl! });
    await client.connect();
    await client.query('BEGIN');
    await client.query('LOCK TABLE contacts IN EXCLUSIVE MODE');
    const released = sleep(ms).then(async () => {
      await client.query('COMMIT');
      await client.end();
    });
    return { locked: Promise.resolve(), released };
  }
  const holder = spawn(
    process.execPath,
    [
      '-e',
      `const db = new (require('better-sqlite3'))(process.argv[1]); db.pragma('busy_timeout = 5000'); db.exec('BEGIN IMMEDIATE');
       process.stdout.write('locked\\n'); setTimeout(() => { db.exec('COMMIT'); db.close(); }, ${ms});`,
      s.config.dbFile,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const locked = new Promise<void>((resolve, reject) => {
    holder.stdout.once('data', () => resolve());
    holder.once('exit', (code) => reject(new Error(`the lock holder exited (${code}) before locking`)));
  });
  const released = new Promise<void>((resolve) => holder.once('exit', () => resolve()));
  return { locked, released };
}

/** Rows `from` to `to` of an NDJSON upload as one HTTP chunk. */
function rowsChunk(from: number, to: number): string {
  const rows = `${Array.from({ length: to - from }, (_, i) => JSON.stringify({ email: `held${from + i}@example.com` })).join('\n')}\n`;
  return `${Buffer.byteLength(rows).toString(16)}\r\n${rows}\r\n`;
}

/**
 * A chunked import's first 2,000 rows, answered 202; then the contacts table's write lock is
 * held from outside for three body timeouts while `rows` more are sent: they wait in the
 * server's paused socket and the kernel's buffers, the client blocked by back-pressure, not
 * stalled. Returns once the lock is released.
 */
async function importBehindLock(s: TestServer, token: string, rows: number) {
  const { socket, closed } = await open(s);
  let text = '';
  socket.on('data', (c: string) => (text += c));
  socket.write(head('POST', '/contacts/import', { authorization: `Bearer ${token}`, 'content-type': 'application/x-ndjson', 'transfer-encoding': 'chunked' }));
  socket.write(rowsChunk(0, 2000));
  for (let i = 0; i < 200 && !text.includes('\r\n\r\n'); i++) await sleep(25);
  assert.match(text, /^HTTP\/1\.1 202 /, text);
  const id = Number(/"id":(\d+)/.exec(text)?.[1]);
  const lock = await holdWriteLock(s, 3000);
  await lock.locked;
  socket.write(rowsChunk(2000, 2000 + rows));
  await lock.released;
  return { id, socket, closed };
}

async function finishedJob(s: TestServer, token: string, id: number): Promise<any> {
  let job: any;
  for (let i = 0; i < 300; i++) {
    job = (await s.request('GET', `/contacts/imports/${id}`, { token })).body;
    if (job.status !== 'RUNNING') break;
    await sleep(100);
  }
  return job;
}

test("an import whose server stops reading for longer than the body timeout (its writes wait on a lock) is not cut: the time is the server's", async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  const { id, socket, closed } = await importBehindLock(s, token, 28_000);
  socket.write('0\r\n\r\n');
  const job = await finishedJob(s, token, id);
  assert.equal(job.status, 'COMPLETED', JSON.stringify(job));
  assert.equal(job.created, 30_000, JSON.stringify(job));
  socket.end();
  await closed;
});

test('an import whose client stalls once the server reads again after such a wait is still cut off', async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  // 9,500 more rows and then nothing: no further chunk, no end.
  const { id, closed } = await importBehindLock(s, token, 9500);
  const cut = await Promise.race([closed, sleep(8000).then(() => null)]);
  assert.ok(cut, 'the stalled upload was cut off');
  const job = await finishedJob(s, token, id);
  assert.equal(job.status, 'FAILED', JSON.stringify(job));
  assert.equal(job.failure.code, 'client_disconnected');
  // Every row sent whole (2,000 before the wait and 9,500 after), though the last 1,500 filled no batch.
  assert.equal(job.created, 11_500, JSON.stringify(job));
});

/**
 * A workspace of 6,000 contacts of 1.5 KB each: an export of about 9 MB, more than loopback's
 * socket buffers hold (few rows of large attributes, which no index holds, import quickly).
 */
async function manyContacts(t: Parameters<typeof buildAsOwner>[0], extra: Record<string, string>): Promise<{ s: TestServer; token: string }> {
  const { s, token } = await buildAsOwner(t, { env: { ...env, SVC_IMPORT_SYNC_BYTES: String(64 * 1024 * 1024), ...extra } });
  const rows = Array.from({ length: 6000 }, (_, i) => JSON.stringify({ email: `reader${i}@example.com`, attributes: { bio: 'x'.repeat(1500) } })).join('\n');
  const res = await s.request('POST', '/contacts/import', { token, raw: rows, headers: { 'content-type': 'application/x-ndjson' } });
  assert.equal(res.body.created, 6000, res.text);
  return { s, token };
}

test('a shutdown waits for answers under way for the grace period at most, then closes their connections', async (t) => {
  const { s, token } = await manyContacts(t, { SVC_BODY_TIMEOUT_SECONDS: '60', SVC_SHUTDOWN_GRACE: '1' });
  const reader = await open(s);
  reader.socket.write(head('GET', '/contacts/export', { authorization: `Bearer ${token}` }));
  reader.socket.pause();
  // Until the answer has started (bytes wait in the paused socket): from then on it is under
  // way, held by the reader, rather than assumed to be after a fixed pause.
  for (let i = 0; i < 400 && reader.socket.readableLength === 0; i++) await sleep(25);
  assert.ok(reader.socket.readableLength > 0, 'the export has started');
  const started = Date.now();
  await s.app.close();
  const ms = Date.now() - started;
  assert.ok(ms >= 900 && ms < 5000, `closed in ${ms} ms`);
  reader.socket.resume();
  const cut = await Promise.race([reader.closed, sleep(5000).then(() => null)]);
  assert.ok(cut, 'its connection was closed');
  assert.ok(!cut.text.endsWith('0\r\n\r\n'), 'before the end of the answer');
});

test("a shutdown closes at once a connection that has sent nothing (a browser's preconnect), and finishes an upload still arriving", async (t) => {
  const { s, token } = await buildAsOwner(t, { env: { SVC_BODY_TIMEOUT_SECONDS: '60', SVC_SHUTDOWN_GRACE: '30' } });
  const silent = await open(s);
  // Kept alive after a whole exchange.
  const kept = await open(s);
  kept.socket.write(head('GET', '/healthz', {}));
  await new Promise((resolve) => kept.socket.once('data', resolve));
  const upload = await open(s);
  const body = JSON.stringify({ email: 'arriving@example.com', firstName: 'Arriving' });
  upload.socket.write(createContactHead(token, body, {}));
  upload.socket.write(body.slice(0, 10));
  await sleep(200);
  const started = Date.now();
  const closing = s.app.close();
  const cut = await Promise.race([silent.closed, sleep(5000).then(() => null)]);
  assert.ok(cut, 'the connection that sent nothing is closed');
  assert.equal(cut.text, '', 'nothing is answered on it');
  assert.ok(await Promise.race([kept.closed, sleep(5000).then(() => null)]), 'the kept-alive connection is closed');
  await sleep(300);
  assert.equal(upload.socket.destroyed, false, 'the upload is still open');
  upload.socket.write(body.slice(10));
  const answered = await Promise.race([upload.closed, sleep(5000).then(() => null)]);
  assert.ok(answered, 'the upload is answered and its connection closed');
  assert.match(answered.text, /^HTTP\/1\.1 201 /, answered.text);
  await closing;
  const ms = Date.now() - started;
  assert.ok(ms < 5000, `stopped in ${ms} ms, not after the 30 s grace`);
});

test('a request the HTTP parser refuses is answered as a problem (400, or 431 for huge headers) and closed; nothing is written', async (t) => {
  const { s, token } = await buildAsOwner(t, { env });
  const path = await webhookWorkflow(s, token, 'malformed', [{ type: 'add_tags', tags: ['x'] }]);
  const body = JSON.stringify({ email: 'smuggled@example.com' });
  const chunked = `${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`;
  const cases: [string, string, number][] = [
    // Request smuggling's shape: both framings at once.
    [
      'Content-Length with Transfer-Encoding',
      `${head('POST', path, { 'content-type': 'application/json', 'content-length': 5, 'transfer-encoding': 'chunked' })}${chunked}`,
      400,
    ],
    [
      'a bad chunk size',
      `${head('POST', '/contacts', { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'transfer-encoding': 'chunked' })}zz\r\n${body}\r\n0\r\n\r\n`,
      400,
    ],
    ['a header name with a space', `POST /contacts HTTP/1.1\r\nHost: localhost\r\nBad Header: 1\r\nContent-Length: 2\r\n\r\n{}`, 400],
    ['a request line that is not HTTP', 'HELLO THERE\r\n\r\n', 400],
    ['headers past the limit', head('GET', '/contacts', { authorization: `Bearer ${token}`, 'x-filler': 'a'.repeat(20_000) }), 431],
  ];
  for (const [name, request, status] of cases) {
    const { socket, closed } = await open(s);
    socket.write(request);
    const { text } = await closed;
    assert.match(text, new RegExp(`^HTTP/1\\.1 ${status} `), `${name}: ${text}`);
    assert.match(text, /content-type: application\/problem\+json/i, name);
    assert.match(text, /x-request-id: [0-9a-f-]{36}\r\n/i, name);
    assert.match(text, /x-content-type-options: nosniff/i, name);
    const problem = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4));
    assert.deepEqual(
      { type: problem.type, status: problem.status, code: problem.code },
      { type: 'about:blank', status, code: status === 431 ? 'headers_too_large' : 'bad_request' },
      name,
    );
  }
  const contacts = await s.request('GET', '/contacts', { token });
  assert.deepEqual(contacts.body.data, [], 'no contact was created');
  const workflowId = (await s.request('GET', '/workflows', { token })).body.data[0].id;
  const events = await s.request('GET', `/workflows/${workflowId}/webhook-events`, { token });
  assert.equal(events.status, 200, events.text);
  assert.deepEqual(events.body.data, []);
  assert.deepEqual((await s.request('GET', '/runs', { token })).body.data, []);
});
