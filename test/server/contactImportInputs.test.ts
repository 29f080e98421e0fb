/**
 * What files from the wild bring to POST /contacts/import (issue 9.1), through the real server
 * on every store: quotes inside unquoted CSV cells, line numbers across quoted line breaks of
 * any kind, the API's length limits held to each row, rows that rename a contact and later rows
 * that name its old email, header spellings of other tools, a content type refused before the
 * body is parsed, a small gzip body that inflates past the limit after rows were committed, an
 * upload that failed early closed at once rather than left to the body timeout, blank lines read
 * in flat memory with progress shown, rows whose bytes are not UTF-8 refused one by one, and the
 * first 100 errors by line.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect } from 'node:net';
import { request as httpRequest } from 'node:http';
import { test } from 'node:test';
import { createGunzip, createGzip, gzipSync } from 'node:zlib';
import { assertProblem, build, buildAsOwner, seededRandom, type TestServer } from '../helpers.js';

const NDJSON = { 'content-type': 'application/x-ndjson' };
const CSV = { 'content-type': 'text/csv' };

function importText(s: TestServer, token: string, body: string | Buffer, headers: Record<string, string>) {
  return s.request('POST', '/contacts/import', { token, raw: body, headers });
}

async function contactsOf(s: TestServer, token: string): Promise<any[]> {
  const res = await s.request('GET', '/contacts?limit=200', { token });
  assert.equal(res.status, 200, res.text);
  assert.equal(res.body.nextCursor, null);
  return res.body.data;
}

const refused = (res: { body: any }) => res.body.errors.map((e: { line: number; field: string }) => [e.line, e.field]);

test('CSV: a quote inside a cell that does not start with one is kept as it is; a parse error is invalid_csv, never internal', async (t) => {
  // Answered when done, for the record over 1 MiB too.
  const { s, token } = await buildAsOwner(t, { env: { SVC_IMPORT_SYNC_BYTES: String(4 * 1024 * 1024) } });
  const res = await importText(s, token, 'email,firstName,item\nq1@example.com,O"Brien,12" monitor\nq2@example.com,"Said ""hi""",x"y"z\n', CSV);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual([res.body.status, res.body.created, res.body.errorCount], ['COMPLETED', 2, 0], res.text);
  const stored = await contactsOf(s, token);
  const q1 = stored.find((c) => c.email === 'q1@example.com');
  assert.deepEqual([q1.firstName, q1.attributes], ['O"Brien', { item: '12" monitor' }]);
  const q2 = stored.find((c) => c.email === 'q2@example.com');
  assert.deepEqual([q2.firstName, q2.attributes], ['Said "hi"', { item: 'x"y"z' }]);

  // What cannot be read at all stops the file as the client's error, at its line; the rows
  // read whole before it are kept.
  for (const [body, created] of [
    ['email\r\nok@example.com\r\n"unclosed@example.com\r\n', 1],
    [`email,n\r\nbig@example.com,${'a'.repeat(1_100_000)}\r\n`, 0],
  ] as const) {
    const bad = await importText(s, token, body, CSV);
    assert.equal(bad.status, 200, bad.text);
    assert.deepEqual([bad.body.status, bad.body.failure?.code, bad.body.created], ['FAILED', 'invalid_csv', created], bad.text);
    assert.doesNotMatch(bad.body.failure.detail, /internal/);
  }
  assert.ok((await contactsOf(s, token)).some((c) => c.email === 'ok@example.com'));
});

test('CSV line numbers are the lines an editor shows: a CRLF inside a quoted cell is one line break, empty lines count', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // 1 header, 2 empty, 3-4 a quoted CRLF, 5 empty, 6 bad, 7-9 two quoted CRLFs, 10 bad, 11-12 a quoted lone LF, 13 bad.
  const crlf = 'email,note\r\n\r\nm1@example.com,"d\r\ne"\r\n\r\nbad-6,y\r\nm2@example.com,"a\r\nb\r\nc"\r\nbad-10,z\r\nm3@example.com,"p\nq"\r\nbad-13,w\r\n';
  const res = await importText(s, token, crlf, CSV);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(refused(res), [
    [6, 'email'],
    [10, 'email'],
    [13, 'email'],
  ]);
  assert.equal(res.body.created, 3);
  assert.equal(res.body.lines, 13, 'where the last row starts');
  // The same with LF line ends.
  const lf = await importText(s, token, crlf.replaceAll('\r\n', '\n').replace('m1@', 'n1@').replace('m2@', 'n2@').replace('m3@', 'n3@'), CSV);
  assert.deepEqual(refused(lf), [
    [6, 'email'],
    [10, 'email'],
    [13, 'email'],
  ]);
  assert.equal(lf.body.lines, 13);
  // A file that cannot be read says where: after the last record read (line 4), counted the same way.
  const cut = await importText(s, token, 'email,note\r\nc1@example.com,"x\r\ny"\r\nc2@example.com,ok\r\n"c3@example.com,open\r\n', CSV);
  assert.equal(cut.body.failure?.code, 'invalid_csv', cut.text);
  assert.match(cut.body.failure.detail, /cannot be read after line 4: Quote Not Closed/, cut.body.failure.detail);
  assert.doesNotMatch(cut.body.failure.detail, /line 7/);
});

test("a row is held to POST /contacts' length limits (counted in characters), in NDJSON and CSV alike", async (t) => {
  const { s, token } = await buildAsOwner(t);
  const long = 'f'.repeat(201);
  const emoji = '😀'.repeat(200); // 200 characters, 400 UTF-16 units: within the limit
  const ndjson = [
    { email: 'ok@example.com', firstName: emoji, lastName: 'l'.repeat(200) },
    { email: 'long-first@example.com', firstName: long },
    { email: 'long-last@example.com', lastName: long },
    { email: `${'e'.repeat(310)}@example.com` },
    { phone: `+1613555${'0'.repeat(60)}` },
  ];
  const res = await importText(s, token, `${ndjson.map((r) => JSON.stringify(r)).join('\n')}\n`, NDJSON);
  assert.equal(res.status, 200, res.text);
  assert.deepEqual(refused(res), [
    [2, 'firstName'],
    [3, 'lastName'],
    [4, 'email'],
    [5, 'phone'],
  ]);
  assert.match(res.body.errors[0].reason, /more than 200 characters/);
  assert.equal(res.body.created, 1);
  const csv = await importText(s, token, `email,firstName\r\ncsv-ok@example.com,${emoji}\r\ncsv-long@example.com,${long}\r\n`, CSV);
  assert.deepEqual(refused(csv), [[3, 'firstName']]);
  // The API answers the same rows alike.
  assert.equal((await s.request('POST', '/contacts', { token, body: { email: 'api-ok@example.com', firstName: emoji } })).status, 201);
  assertProblem(await s.request('POST', '/contacts', { token, body: { email: 'api-long@example.com', firstName: long } }), 422, 'validation_failed');
  const stored = (await contactsOf(s, token)).map((c) => c.email).sort();
  assert.deepEqual(stored, ['api-ok@example.com', 'csv-ok@example.com', 'ok@example.com']);
});

test('a file imports as its rows would one by one: a row that renames a contact frees its old email for the rows after it', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const rows = (list: unknown[]) => `${list.map((r) => JSON.stringify(r)).join('\n')}\n`;
  // The case as a client met it: row 2 moves the contact to sd2 by its phone; row 3 names sd1,
  // which no contact has any more, and creates it, rather than rename the contact back.
  const res = await importText(
    s,
    token,
    rows([
      { email: 'sd1@example.com', phone: '+16135550166' },
      { email: 'sd2@example.com', phone: '+16135550166' },
      { email: 'sd1@example.com', firstName: 'third' },
    ]),
    NDJSON,
  );
  assert.deepEqual([res.body.created, res.body.updated, res.body.errorCount], [2, 1, 0], res.text);
  const stored = (await contactsOf(s, token)).map((c) => [c.email, c.phone, c.firstName]).sort();
  assert.deepEqual(stored, [
    ['sd1@example.com', null, 'third'],
    ['sd2@example.com', '+16135550166', null],
  ]);

  // Random files over a few emails and phones (renames back and forth, swaps, refusals): the
  // whole file into one workspace gives what each row imported on its own gives in another.
  const random = seededRandom(9);
  const pick = <T>(xs: T[]): T => xs[Math.floor(random() * xs.length)]!;
  const emails = ['a@example.com', 'b@example.com', 'c@example.com', 'd@example.com'];
  const phones = ['+16135550101', '+16135550102', '+16135550103'];
  for (const mode of ['upsert', 'update', 'create']) {
    const file: Record<string, unknown>[] = [];
    for (let i = 0; i < 300; i++) {
      const row: Record<string, unknown> = {};
      const r = random();
      if (r < 0.45) Object.assign(row, { email: pick(emails), phone: pick(phones) });
      else if (r < 0.75) row.email = pick(emails);
      else row.phone = pick(phones);
      if (random() < 0.5) row.firstName = `n${i}`;
      if (random() < 0.2) row.tags = [`t${i % 5}`];
      file.push(row);
    }
    const whole = await s.otherWorkspace();
    const oneByOne = await s.otherWorkspace();
    const all = await s.request('POST', `/contacts/import?mode=${mode}`, { token: whole.token, raw: rows(file), headers: NDJSON });
    assert.equal(all.status, 200, all.text);
    const sum = { created: 0, updated: 0, skipped: 0, errorCount: 0 };
    for (const row of file) {
      const one = await s.request('POST', `/contacts/import?mode=${mode}`, { token: oneByOne.token, raw: rows([row]), headers: NDJSON });
      assert.equal(one.status, 200, one.text);
      for (const k of Object.keys(sum) as (keyof typeof sum)[]) sum[k] += one.body[k];
    }
    assert.deepEqual(
      { created: all.body.created, updated: all.body.updated, skipped: all.body.skipped, errorCount: all.body.errorCount },
      sum,
      `mode ${mode}: the counts`,
    );
    const state = async (tok: string) => (await contactsOf(s, tok)).map((c) => JSON.stringify([c.email, c.phone, c.firstName, [...c.tags].sort()])).sort();
    assert.deepEqual(await state(whole.token), await state(oneByOne.token), `mode ${mode}: the contacts`);
  }
});

test('CSV headers in the spellings other tools write: Email Address, First Name, E-Mail, phone_number; one field twice is still refused', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // Mailchimp's export.
  const mc = await importText(s, token, 'Email Address,First Name,Last Name,Phone Number,Address\r\nmc@example.com,Mary,Jones,+16135550177,1 Main St\r\n', CSV);
  assert.deepEqual([mc.body.status, mc.body.created], ['COMPLETED', 1], mc.text);
  const other = await importText(s, token, 'E-Mail,first-name,LAST_NAME,phone_number,Tags\r\nem@example.com,Eve,Moss,+16135550178,a;b\r\n', CSV);
  assert.deepEqual([other.body.status, other.body.created], ['COMPLETED', 1], other.text);
  const stored = await contactsOf(s, token);
  const mary = stored.find((c) => c.email === 'mc@example.com');
  assert.deepEqual([mary.firstName, mary.lastName, mary.phone, mary.attributes], ['Mary', 'Jones', '+16135550177', { Address: '1 Main St' }]);
  const eve = stored.find((c) => c.email === 'em@example.com');
  assert.deepEqual([eve.firstName, eve.lastName, eve.phone, [...eve.tags].sort()], ['Eve', 'Moss', '+16135550178', ['a', 'b']]);
  const twice = await importText(s, token, 'email,first_name,First Name\r\ntw@example.com,a,b\r\n', CSV);
  assert.deepEqual([twice.body.status, twice.body.failure?.code, twice.body.created], ['FAILED', 'invalid_csv', 0], twice.text);
  assert.match(twice.body.failure.detail, /firstName twice \(columns 2 and 3\)/);
});

test('a body that is neither NDJSON nor CSV is refused 415 before it is parsed, whatever it holds; access is checked first', async (t) => {
  const s = await build(t);
  const token = await s.login(s.owner.email, s.owner.password);
  const json = { 'content-type': 'application/json' };
  for (const body of ['{bad', `{"x":"${'a'.repeat(2 * 1024 * 1024)}"}`, '{"email":"a@example.com"}']) {
    const res = await importText(s, token, body, json);
    assertProblem(res, 415, 'unsupported_media_type');
    assert.match(res.body.detail, /application\/x-ndjson or text\/csv/);
  }
  for (const type of ['text/plain', 'application/ndjson', 'multipart/form-data; boundary=x']) {
    const res = await importText(s, token, 'email\na@example.com\n', { 'content-type': type });
    assertProblem(res, 415, 'unsupported_media_type');
    assert.match(res.body.detail, /application\/x-ndjson or text\/csv/, type);
  }
  const viewer = await s.userWithRole('VIEWER');
  assertProblem(await importText(s, viewer.token, '{bad', json), 403, 'forbidden');
  assertProblem(await importText(s, '', '{bad', json), 401);
  assert.deepEqual((await s.request('GET', '/contacts/imports', { token })).body.data, []);
});

test('a small gzip body that inflates past the limit after rows were committed: 413 names the job that holds them', async (t) => {
  const s = await build(t, { env: { SVC_IMPORT_SYNC_BYTES: '65536', SVC_IMPORT_MAX_BYTES: '300000' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const valid = Array.from({ length: 2500 }, (_, i) => `{"email":"g${i}@example.com"}\n`).join('');
  const body = gzipSync(Buffer.concat([Buffer.from(valid), Buffer.alloc(400_000, 0x20)]));
  assert.ok(body.length < 65536);
  const res = await importText(s, token, body, { ...NDJSON, 'content-encoding': 'gzip' });
  assertProblem(res, 413, 'import_too_large');
  const id = res.body.importId;
  assert.ok(Number.isInteger(id), res.text);
  assert.equal(res.headers.get('location'), `/contacts/imports/${id}`);
  const job = (await s.request('GET', `/contacts/imports/${id}`, { token })).body;
  // Every row read whole before the limit was reached is kept.
  assert.deepEqual([job.status, job.failure?.code, job.created], ['FAILED', 'import_too_large', 2500]);
  assert.equal((await s.request('GET', '/billing/plan', { token })).body.usage.contacts, 2500);
});

test('an upload answered 202 whose file fails early is cut off at once, not left sending until the body timeout', async (t) => {
  const s = await build(t, { env: { SVC_IMPORT_SYNC_BYTES: '4096', SVC_BODY_TIMEOUT_SECONDS: '30' } });
  const token = await s.login(s.owner.email, s.owner.password);
  const total = 20 * 1024 * 1024;
  const req = httpRequest(new URL('/contacts/import', s.url), {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, ...CSV, 'content-length': total },
  });
  const answered = new Promise<{ status: number; text: string }>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, text }));
    });
    req.on('error', reject);
  });
  const closed = new Promise<number>((resolve) => req.on('close', () => resolve(Date.now())));
  req.on('error', () => undefined);
  // A first record over the 1 MiB a record may be: the file cannot be read on.
  req.write(`email,note\n${'x'.repeat(1200 * 1024)}`);
  const { status, text } = await answered;
  assert.equal(status, 202, text);
  const id = JSON.parse(text).id;
  const started = Date.now();
  // Go on sending, as curl does after an early answer, until the server closes the connection.
  let sent = 1200 * 1024;
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  const timer = setInterval(() => {
    if (!req.destroyed && sent + chunk.length < total) {
      req.write(chunk);
      sent += chunk.length;
    }
  }, 5);
  const at = await closed;
  clearInterval(timer);
  assert.ok(at - started < 5000, `closed after ${at - started} ms`);
  const job = (await s.request('GET', `/contacts/imports/${id}`, { token })).body;
  assert.deepEqual([job.status, job.failure?.code], ['FAILED', 'invalid_csv']);
  assert.ok(sent < total, 'the upload did not run to its end');
});

test('a file in another encoding, named by charset=, is read as such; a charset no decoder knows is refused before the body is read', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // ë is 0xEB and € is 0x80 in windows-1252 (latin1 and iso-8859-1 are its WHATWG labels too).
  const latinCsv = (email: string) => Buffer.from([...Buffer.from(`email,firstName,price\r\n${email},Zo`), 0xeb, ...Buffer.from(',5'), 0x80, 0x0d, 0x0a]);
  for (const [charset, email] of [
    ['windows-1252', 'zoe@example.com'],
    ['"ISO-8859-1"', 'zoe2@example.com'],
  ] as const) {
    const res = await importText(s, token, latinCsv(email), { 'content-type': `text/csv; charset=${charset}` });
    assert.deepEqual([res.body.status, res.body.created], ['COMPLETED', 1], res.text);
    const stored = (await s.request('GET', `/contacts?email=${email}`, { token })).body.data[0];
    assert.deepEqual([stored.firstName, stored.attributes], ['Zoë', { price: '5€' }]);
  }
  // UTF-16 with its name: NDJSON too.
  const utf16 = Buffer.from('{"email":"u16@example.com","firstName":"Zoë"}\n', 'utf16le');
  const u16 = await importText(s, token, utf16, { 'content-type': 'application/x-ndjson; charset=utf-16le' });
  assert.deepEqual([u16.body.created, u16.body.errorCount], [1, 0], u16.text);
  // A byte order mark says the encoding whatever the label, as WHATWG's decode has it: UTF-16LE
  // with its BOM, labelled big-endian, and UTF-8 with its BOM, labelled windows-1252.
  const le = Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('email,firstName\r\nbom16@example.com,Zoë\r\n', 'utf16le')]);
  const bom16 = await importText(s, token, le, { 'content-type': 'text/csv; charset=utf-16be' });
  assert.deepEqual([bom16.body.status, bom16.body.created], ['COMPLETED', 1], bom16.text);
  const bom8 = await importText(s, token, Buffer.from('\uFEFFemail,firstName\nbom8@example.com,Zoë\n'), { 'content-type': 'text/csv; charset=windows-1252' });
  assert.deepEqual([bom8.body.status, bom8.body.created], ['COMPLETED', 1], bom8.text);
  for (const email of ['bom16@example.com', 'bom8@example.com']) {
    assert.equal((await s.request('GET', `/contacts?email=${email}`, { token })).body.data[0].firstName, 'Zoë', email);
  }
  // UTF-8 said in any spelling is read as it is.
  const utf8 = await importText(s, token, 'email,firstName\nu8@example.com,Zoë\n', { 'content-type': 'text/csv; Charset=UTF-8' });
  assert.equal(utf8.body.created, 1, utf8.text);
  const bad = await importText(s, token, 'email\nx@example.com\n', { 'content-type': 'text/csv; charset=x-klingon' });
  assertProblem(bad, 415, 'unsupported_charset');
  assert.deepEqual((await s.request('GET', '/contacts/imports', { token })).body.data.length, 6, 'the refused one left no job');
});

/** A gzip stream of `head`, then `times` copies of `chunk`: compressed as it is made, never whole in memory. */
async function gzipOf(head: string | Buffer, chunk: Buffer, times: number): Promise<Buffer> {
  const gzip = createGzip({ level: 9 });
  const out: Buffer[] = [];
  gzip.on('data', (c: Buffer) => out.push(c));
  const ended = once(gzip, 'end');
  gzip.write(head);
  for (let i = 0; i < times; i++) if (!gzip.write(chunk)) await once(gzip, 'drain');
  gzip.end();
  await ended;
  return Buffer.concat(out);
}

/** A chunked upload (answered 202 at once) that the test goes on writing. */
function chunkedUpload(s: TestServer, token: string, headers: Record<string, string>) {
  const req = httpRequest(new URL('/contacts/import', s.url), {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, ...headers, 'transfer-encoding': 'chunked' },
  });
  const answered = new Promise<{ status: number; body: any }>((resolve, reject) => {
    req.on('response', (res) => {
      let text = '';
      res.on('data', (c) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
    });
    req.on('error', reject);
  });
  return { req, answered };
}

async function jobOf(s: TestServer, token: string, id: number): Promise<any> {
  const res = await s.request('GET', `/contacts/imports/${id}`, { token });
  assert.equal(res.status, 200, res.text);
  return res.body;
}

test('blank lines are counted, never held: a small gzip of 128 MiB of them is read in flat memory (CSV and NDJSON)', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const mib = 128;
  for (const [headers, head] of [
    [CSV, 'email\n'],
    [NDJSON, ''],
  ] as const) {
    const body = await gzipOf(head, Buffer.alloc(1 << 20, 0x0a), mib);
    assert.ok(body.length < 1 << 20, 'answered when done');
    // The server is this process: its memory while the import runs, against before.
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
    }, 5);
    const res = await importText(s, token, body, { ...headers, 'content-encoding': 'gzip' });
    clearInterval(sampler);
    assert.equal(res.status, 200, res.text);
    const blank = mib * 1024 * 1024;
    assert.deepEqual(
      [res.body.status, res.body.created, res.body.errorCount, res.body.lines, res.body.bytesRead],
      ['COMPLETED', 0, 0, blank + (head ? 1 : 0), head.length + blank],
      res.text,
    );
    // The parser kept every blank line it skipped in a buffer of the record to come: 128 MiB
    // of them grew the process by 286-298 MB. Read a chunk at a time, it grows by what the
    // chunks not yet collected hold (95 MB here), whatever the file's length.
    const grown = Math.round((peak - before) / 1e6);
    assert.ok(grown < 160, `the process grew by ${grown} MB while reading ${mib} MiB of blank lines`);
  }
});

test('a file that fills no batch still shows its progress: its rows so far committed, lines and bytesRead moving while it is read', async (t) => {
  const { s, token } = await buildAsOwner(t);
  for (const [headers, head, row] of [
    [CSV, 'email\n', 'csv-sparse@example.com\n'],
    [NDJSON, '', '{"email":"ndjson-sparse@example.com"}\n'],
  ] as const) {
    const { req, answered } = chunkedUpload(s, token, headers);
    req.write(`${head}${row}`);
    const { status, body } = await answered;
    assert.equal(status, 202);
    // One row, then blank lines, slowly: far from the 2,000 rows of a batch.
    const blank = Buffer.alloc(64 * 1024, 0x0a);
    let sent = Buffer.byteLength(head + row);
    let job = await jobOf(s, token, body.id);
    const started = Date.now();
    while (job.created === 0 || job.lines <= 2) {
      assert.ok(Date.now() - started < 20_000, `no progress: ${JSON.stringify(job)}`);
      req.write(blank);
      sent += blank.length;
      await new Promise((r) => setTimeout(r, 100));
      job = await jobOf(s, token, body.id);
    }
    assert.equal(job.status, 'RUNNING');
    assert.ok(job.bytesRead > Buffer.byteLength(head + row) && job.bytesRead <= sent, JSON.stringify(job));
    // Every line up to `lines` is read and its row committed: the one row, and blank lines after it.
    const lines = job.lines;
    assert.ok(lines > 2 && lines <= sent, JSON.stringify(job));
    req.end();
    while (job.status === 'RUNNING') {
      await new Promise((r) => setTimeout(r, 50));
      job = await jobOf(s, token, body.id);
    }
    assert.deepEqual([job.status, job.created, job.bytesRead, job.lines], ['COMPLETED', 1, sent, sent - Buffer.byteLength(head + row) + (head ? 2 : 1)]);
  }
});

/** The chunks gzip's reader gives of a body (16 KiB each but the last), as the import reads them. */
async function gunzippedChunks(body: Buffer): Promise<Buffer[]> {
  const gunzip = createGunzip();
  const chunks: Buffer[] = [];
  gunzip.on('data', (c: Buffer) => chunks.push(c));
  const ended = once(gunzip, 'end');
  gunzip.end(body);
  await ended;
  return chunks;
}

test('a row whose bytes are not UTF-8 is refused at its line, the others imported as they are; a character cut by a chunk is whole', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const latin1 = (text: string) => Buffer.from(text, 'latin1');
  const notUtf8 = /^is not UTF-8 text: .*charset=windows-1252/;
  // A CSV: José and Zoë saved as windows-1252 (one byte each), a byte UTF-8 never has, a
  // character cut short at its line's end; and valid two-, three- and four-byte characters.
  const csv = Buffer.concat([
    Buffer.from('email,firstName,city\nok1@example.com,Zoë,Köln\n'),
    latin1('lat1@example.com,José,x\n'),
    Buffer.from('ok2@example.com,€uro,😀\n'),
    latin1('lat2@example.com,Ann,Zoë\n'),
    Buffer.from([...Buffer.from('lat3@example.com,'), 0xff, 0xfe, 0x0a]),
    Buffer.from([...Buffer.from('lat4@example.com,Cut,'), 0xe2, 0x82, 0x0a]),
    Buffer.from('ok3@example.com,"Ça, va",Zürich\n'),
  ]);
  const res = await importText(s, token, csv, CSV);
  assert.deepEqual([res.body.status, res.body.created, res.body.errorCount], ['COMPLETED', 3, 4], res.text);
  assert.deepEqual(refused(res), [
    [3, 'firstName'],
    [5, 'city'],
    [6, 'firstName'],
    [7, 'city'],
  ]);
  for (const e of res.body.errors) assert.match(e.reason, notUtf8);
  assert.match(res.body.errors[0].reason, /text\/csv; charset=windows-1252/);
  // NDJSON alike (a line has no field of its own to name).
  const ndjson = Buffer.concat([
    Buffer.from('{"email":"nd-ok1@example.com","firstName":"Zoë"}\n'),
    latin1('{"email":"nd-lat1@example.com","firstName":"José"}\n'),
    Buffer.from('\n{"email":"nd-ok2@example.com","lastName":"😀€"}\r\n'),
    Buffer.from([...Buffer.from('{"email":"nd-lat2@example.com","firstName":"'), 0xc3, 0x28, ...Buffer.from('"}\n')]),
  ]);
  const nd = await importText(s, token, ndjson, NDJSON);
  assert.deepEqual([nd.body.status, nd.body.created, nd.body.errorCount], ['COMPLETED', 2, 2], nd.text);
  assert.deepEqual(refused(nd), [
    [2, null],
    [5, null],
  ]);
  for (const e of nd.body.errors) assert.match(e.reason, /^is not UTF-8 text: .*application\/x-ndjson; charset=windows-1252/);
  const stored = Object.fromEntries((await contactsOf(s, token)).map((c) => [c.email, [c.firstName, c.lastName, c.attributes.city ?? null]]));
  assert.deepEqual(stored, {
    'ok1@example.com': ['Zoë', null, 'Köln'],
    'ok2@example.com': ['€uro', null, '😀'],
    'ok3@example.com': ['Ça, va', null, 'Zürich'],
    'nd-ok1@example.com': ['Zoë', null, null],
    'nd-ok2@example.com': [null, '😀€', null],
  });
  // The same bytes, named as windows-1252, are read as that encoding: every row imports.
  const named = await importText(s, token, latin1('email,firstName\nnamed@example.com,José\n'), { 'content-type': 'text/csv; charset=windows-1252' });
  assert.deepEqual([named.body.created, named.body.errorCount], [1, 0], named.text);
  // A header that is not UTF-8 leaves nothing to read rows by: the file stops, saying why.
  const header = await importText(s, token, latin1('email,prénom\nh@example.com,x\n'), CSV);
  assert.deepEqual([header.body.status, header.body.failure?.code], ['FAILED', 'invalid_csv'], header.text);
  assert.match(header.body.failure.detail, /header \(line 1\) is not UTF-8 text/);

  // Valid characters cut in two by the chunks the file is read in (here gzip's 16 KiB) are read
  // whole, in a CSV and in NDJSON; a row of bad bytes among them is still found.
  for (const [headers, head, rowOf] of [
    [CSV, 'email,firstName\n', (i: number, name: string) => `cut${i}@example.com,${name}\n`],
    [NDJSON, '', (i: number, name: string) => `{"email":"ndcut${i}@example.com","firstName":"${name}"}\n`],
  ] as const) {
    const parts: Buffer[] = [Buffer.from(head)];
    let length = parts[0]!.length;
    const expected: Record<string, string> = {};
    let row = 0;
    const add = (bytes: Buffer) => {
      parts.push(bytes);
      length += bytes.length;
    };
    // é, € and 😀 across the boundaries of 16 KiB, cut at each place they can be.
    const cuts = (
      [
        ['é', 1],
        ['€', 1],
        ['€', 2],
        ['😀', 1],
        ['😀', 2],
        ['😀', 3],
      ] as const
    ).map(([char, before], k) => ({ char, before, at: 16384 * (k + 1) }));
    for (const { char, before, at } of cuts) {
      while (length + 200 < at) add(Buffer.from(rowOf(row++, 'Plain')));
      // A name padded so that `before` bytes of the character come before the boundary.
      const nameAt = Buffer.from(rowOf(row, '\u0001')).indexOf(1);
      const name = `${'a'.repeat(at - before - length - nameAt)}${char}`;
      expected[rowOf(row, '').match(/\w+@example\.com/)![0]] = name;
      add(Buffer.from(rowOf(row++, name)));
    }
    add(latin1(rowOf(row++, 'Bad é')));
    const body = gzipSync(Buffer.concat(parts));
    // The test cuts what it says it cuts: each character spans two of the chunks read.
    const chunks = await gunzippedChunks(body);
    for (const [k, { char, before }] of cuts.entries()) {
      assert.equal(chunks[k]!.length, 16384);
      assert.deepEqual(chunks[k]!.subarray(16384 - before), Buffer.from(char).subarray(0, before), `cut ${k}`);
    }
    const cut = await importText(s, token, body, { ...headers, 'content-encoding': 'gzip' });
    assert.deepEqual([cut.body.status, cut.body.created, cut.body.errorCount], ['COMPLETED', row - 1, 1], cut.text);
    assert.match(cut.body.errors[0].reason, notUtf8);
    for (const [email, name] of Object.entries(expected)) {
      const found = (await s.request('GET', `/contacts?email=${email}`, { token })).body.data[0];
      assert.equal(found?.firstName, name, email);
    }
  }
});

test('errors are the first 100 by line, whichever check refused them and whichever batch they were in; errorCount counts all', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // A row naming one contact's email and another's phone is refused once the batch has read its
  // contacts, after the rows it could not normalise.
  for (const body of [{ email: 'has-email@example.com' }, { email: 'has-phone@example.com', phone: '+16135550190' }]) {
    assert.equal((await s.request('POST', '/contacts', { token, body })).status, 201);
  }
  const conflict = { email: 'has-email@example.com', phone: '+16135550190' };
  const rows = (list: unknown[]) => `${list.map((r) => JSON.stringify(r)).join('\n')}\n`;
  // The case as a tester met it: a conflict on line 1, then 150 bad emails.
  const first = await importText(s, token, rows([conflict, ...Array.from({ length: 150 }, (_, i) => ({ email: `bad-${i}` }))]), NDJSON);
  assert.equal(first.body.errorCount, 151, first.text);
  assert.deepEqual(
    first.body.errors.map((e: { line: number }) => e.line),
    Array.from({ length: 100 }, (_, i) => i + 1),
  );
  assert.deepEqual(first.body.errors[0], { line: 1, field: 'phone', reason: first.body.errors[0].reason });
  assert.match(first.body.errors[0].reason, /belongs to another contact/);
  // Under 100, in line order too.
  const few = await importText(s, token, rows([{ email: 'bad-a' }, conflict, { email: 'ok-few@example.com' }, conflict, { email: 'bad-b' }]), NDJSON);
  assert.deepEqual(refused(few), [
    [1, 'email'],
    [2, 'phone'],
    [4, 'phone'],
    [5, 'email'],
  ]);
  // Across batches of 2,000 rows (CSV): 40 conflicts in the first, then a bad email every third
  // line and more conflicts in the second; the first 100 are the 40, then the second's first 60.
  const lines: string[] = ['email,phone'];
  const refusedLines: number[] = [];
  for (let line = 2; line <= 2700; line++) {
    if (line % 50 === 0) lines.push(`${conflict.email},${conflict.phone}`);
    else if (line > 2001 && line % 3 === 0) lines.push(`bad-${line}`);
    else lines.push(`row${line}@example.com,`);
    if (line % 50 === 0 || (line > 2001 && line % 3 === 0)) refusedLines.push(line);
  }
  const many = await importText(s, token, `${lines.join('\n')}\n`, CSV);
  assert.equal(many.body.errorCount, refusedLines.length, many.text);
  assert.deepEqual(
    many.body.errors.map((e: { line: number }) => e.line),
    refusedLines.slice(0, 100),
  );
  assert.equal(many.body.created, 2699 - refusedLines.length);
});

test('the largest contact svc keeps exports as CSV and NDJSON and imports back from both, whole', async (t) => {
  const { s, token } = await buildAsOwner(t);
  // 1,000 tags of 64 four-byte characters, names of 200, 64 KiB of attributes that are all
  // quotes (doubled again in a CSV cell): a record far over the 256 KiB records were once held to.
  const tags = Array.from({ length: 1000 }, (_, i) => `${String(i).padStart(4, '0')}${'\u{1F600}'.repeat(60)}`);
  const big = {
    email: 'big@example.com',
    firstName: '\u{1F600}'.repeat(200),
    lastName: 'Lovelace, "Ada"\nof London',
    tags,
    attributes: { q: '"'.repeat(32_000), note: 'a,b;c' },
  };
  const created = await importText(s, token, `${JSON.stringify(big)}\n${JSON.stringify({ email: 'small@example.com' })}\n`, NDJSON);
  assert.deepEqual([created.body.created, created.body.errorCount], [2, 0], created.text.slice(0, 500));
  const shape = (c: any) => ({ email: c.email, firstName: c.firstName, lastName: c.lastName, tags: [...c.tags].sort(), attributes: c.attributes });
  const original = (await contactsOf(s, token)).map(shape);
  assert.deepEqual(
    original.find((c) => c.email === 'big@example.com'),
    shape(big),
  );
  for (const format of ['csv', 'ndjson'] as const) {
    const exported = await s.request('GET', `/contacts/export?format=${format}`, { token });
    assert.equal(exported.status, 200);
    assert.ok(Buffer.byteLength(exported.text) > 300_000, `${format}: ${Buffer.byteLength(exported.text)} bytes`);
    const other = await s.otherWorkspace('PRO');
    const back = await importText(s, other.token, exported.text, format === 'csv' ? CSV : NDJSON);
    assert.deepEqual([back.body.status, back.body.created, back.body.errorCount], ['COMPLETED', 2, 0], back.text.slice(0, 500));
    // Newest first on export, so the copy is in the other order.
    assert.deepEqual((await contactsOf(s, other.token)).map(shape).reverse(), original, format);
  }
});

test('chunked framing broken after the 202: the connection is closed without a second answer, and the rows sent whole are kept', async (t) => {
  const { s, token } = await buildAsOwner(t);
  const url = new URL(s.url);
  const socket = connect(Number(url.port), url.hostname);
  t.after(() => socket.destroy());
  let received = '';
  socket.setEncoding('latin1');
  socket.on('data', (d: string) => (received += d));
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  const rows = Array.from({ length: 30 }, (_, i) => `{"email":"frame${i}@example.com"}\n`).join('');
  socket.write(
    `POST /contacts/import HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${token}\r\ncontent-type: application/x-ndjson\r\ntransfer-encoding: chunked\r\n\r\n`,
  );
  socket.write(`${Buffer.byteLength(rows).toString(16)}\r\n${rows}\r\n`);
  for (let i = 0; i < 200 && !received.includes('\r\n\r\n{'); i++) await new Promise((r) => setTimeout(r, 25));
  assert.match(received, /^HTTP\/1\.1 202 /);
  const id = Number(/"id":(\d+)/.exec(received)?.[1]);
  socket.write('zz-not-a-chunk-size\r\nmore\r\n');
  const shut = await Promise.race([closed.then(() => true), new Promise<boolean>((r) => setTimeout(r, 10_000, false))]);
  assert.ok(shut, `the connection was not closed: ${received}`);
  assert.equal(received.match(/HTTP\/1\.1 \d{3} /g)?.length, 1, received);
  let job: any;
  for (let i = 0; i < 200; i++) {
    job = (await s.request('GET', `/contacts/imports/${id}`, { token })).body;
    if (job.status !== 'RUNNING') break;
    await new Promise((r) => setTimeout(r, 25));
  }
  assert.deepEqual([job.status, job.failure?.code, job.created], ['FAILED', 'client_disconnected', 30]);
});
