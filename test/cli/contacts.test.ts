/**
 * `svc contacts import FILE --workspace ID` and `svc contacts export` (issue 9.1, 9.2): real
 * svc processes on a real data folder. The import streams the file through the same service
 * as POST /contacts/import; the export's files import back into another workspace.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gunzipSync, gzipSync } from 'node:zlib';
import { test } from 'node:test';
import { normalizePhone } from '../../src/core/validation.js';
import { CLI_COMMAND, cliEnv, runCli, show, tempDir } from './helpers.js';

const PASSWORD = 'contacts-cli-pass-1';

test('svc contacts import / export: NDJSON and CSV files, errors by line, --json, round trip into another workspace', async (t) => {
  const dataDir = tempDir(t);
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', 'ops@example.com', '--password-stdin', '--json'], { stdin: PASSWORD });
  assert.equal(init.code, 0, show(init));
  const ws = String(init.json().workspace.id);

  const ndjson = join(dataDir, 'people.ndjson');
  writeFileSync(
    ndjson,
    [
      JSON.stringify({ email: 'Ada@Example.com', firstName: 'Ada', tags: ['vip'], attributes: { plan: 'pro' } }),
      JSON.stringify({ email: 'nope', firstName: 'Bad' }),
      JSON.stringify({ phone: '+1 613 555 0138', lastName: 'Phone' }),
    ].join('\n'),
  );
  const imported = await runCli(dataDir, ['contacts', 'import', ndjson, '--workspace', ws, '--json']);
  assert.equal(imported.code, 0, show(imported));
  const job = imported.json();
  assert.deepEqual([job.status, job.created, job.errorCount, job.errors[0].line, job.errors[0].field], ['COMPLETED', 2, 1, 2, 'email']);
  assert.equal(imported.stderr, '', 'no progress bar when stderr is not a terminal');

  const csv = join(dataDir, 'more.csv');
  writeFileSync(
    csv,
    '\uFEFFemail,firstName,lastName,tags,city\r\nbob@example.com,Bob,"Builder, Jr.",vip;trade,"Paris\nFrance"\r\nada@example.com,Ada,Lovelace,,\r\n',
  );
  const human = await runCli(dataDir, ['contacts', 'import', csv, '--workspace', ws]);
  assert.equal(human.code, 0, show(human));
  assert.match(human.stdout, /import \d+: COMPLETED\n {2}1 created, 1 updated, 0 skipped, 0 refused, 4 lines/);

  const createOnly = await runCli(dataDir, ['contacts', 'import', csv, '--workspace', ws, '--mode', 'create', '--json']);
  assert.deepEqual([createOnly.json().created, createOnly.json().skipped], [0, 2]);

  // Export to a file and to standard output, with the list's filters. A file already there
  // (0644 here) is replaced and made 0600; its count is of contacts, though Bob's city holds
  // a line break.
  const out = join(dataDir, 'export.csv');
  writeFileSync(out, 'old\n', { mode: 0o644 });
  const exported = await runCli(dataDir, ['contacts', 'export', '--workspace', ws, '--format', 'csv', '--out', out, '--json']);
  assert.equal(exported.code, 0, show(exported));
  assert.deepEqual(exported.json(), { file: out, format: 'csv', contacts: 3 });
  assert.equal(statSync(out).mode & 0o777, 0o600);
  const bobCsv = join(dataDir, 'bob.csv');
  const bobOnly = await runCli(dataDir, ['contacts', 'export', '--workspace', ws, '--format', 'csv', '--email', 'bob@example.com', '--out', bobCsv, '--json']);
  assert.deepEqual(bobOnly.json(), { file: bobCsv, format: 'csv', contacts: 1 });
  assert.equal(readFileSync(out, 'utf8').split('\r\n')[0], 'id,email,phone,firstName,lastName,tags,attributes,createdAt,updatedAt');
  const vip = await runCli(dataDir, ['contacts', 'export', '--workspace', ws, '--tag', 'VIP']);
  assert.equal(vip.code, 0, show(vip));
  const vipRows = vip.stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  assert.deepEqual(
    vipRows.map((c) => c.email),
    ['bob@example.com', 'ada@example.com'],
  );
  assert.deepEqual(vipRows[0].attributes, { city: 'Paris\nFrance' });

  // Round trip: both exports import into a new workspace as the same contacts.
  const ndOut = join(dataDir, 'export.ndjson');
  assert.equal((await runCli(dataDir, ['contacts', 'export', '--workspace', ws, '--out', ndOut])).code, 0);
  const all = (await runCli(dataDir, ['contacts', 'export', '--workspace', ws])).stdout
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  const shape = (c: any) => ({ email: c.email, phone: c.phone, firstName: c.firstName, lastName: c.lastName, tags: c.tags, attributes: c.attributes });
  for (const file of [out, ndOut]) {
    const other = await runCli(dataDir, ['workspace', 'create', '--name', `copy ${file}`, '--json']);
    const otherId = String(other.json().id);
    const back = await runCli(dataDir, ['contacts', 'import', file, '--workspace', otherId, '--json']);
    assert.equal(back.code, 0, show(back));
    assert.deepEqual([back.json().created, back.json().errorCount], [3, 0]);
    const copy = (await runCli(dataDir, ['contacts', 'export', '--workspace', otherId])).stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    // The export is newest first, so the copy was created in the other order.
    assert.deepEqual(copy.map(shape).reverse(), all.map(shape), file);
  }
});

test('svc contacts import / export refuse bad arguments with one line and a non-zero exit', async (t) => {
  const dataDir = tempDir(t);
  const init = await runCli(dataDir, ['init', '--yes', '--email', 'ops@example.com', '--password-stdin', '--json'], { stdin: PASSWORD });
  const ws = String(init.json().workspace.id);
  const txt = join(dataDir, 'people.txt');
  writeFileSync(txt, 'email\nx@example.com\n');
  const cases: [string[], RegExp][] = [
    [['contacts', 'import', txt, '--workspace', ws], /--format ndjson or --format csv/],
    [['contacts', 'import', txt, '--workspace', ws, '--format', 'xml'], /--format must be ndjson or csv/],
    [['contacts', 'import', join(dataDir, 'missing.csv'), '--workspace', ws], /cannot read/],
    [['contacts', 'import', dataDir, '--workspace', ws, '--format', 'csv'], /is a folder/],
    [['contacts', 'import', txt, '--workspace', '999', '--format', 'csv'], /workspace/i],
    [['contacts', 'import', txt, '--workspace', ws, '--format', 'csv', '--mode', 'merge'], /--mode must be one of create, update, upsert/],
    [['contacts', 'import', txt, '--workspace', ws, '--format', 'csv', '--charset', 'x-klingon'], /--charset: The charset "x-klingon" is not one/],
    [['contacts', 'export', '--workspace', ws, '--format', 'xml'], /--format must be ndjson or csv/],
    [['contacts', 'export', '--workspace', ws, '--json'], /--json prints the summary of an export written with --out FILE/],
  ];
  for (const [args, message] of cases) {
    const r = await runCli(dataDir, args);
    assert.notEqual(r.code, 0, show(r));
    assert.match(r.stderr, message, show(r));
    assert.equal(r.stderr.trim().split('\n').length, 1, show(r));
  }
  // A file in another encoding, named with --charset, is read as such (ë and € in windows-1252).
  const latin = join(dataDir, 'latin.csv');
  writeFileSync(latin, Buffer.from([...Buffer.from('email,firstName,price\nzoe@example.com,Zo'), 0xeb, ...Buffer.from(',5'), 0x80, 0x0a]));
  const decoded = await runCli(dataDir, ['contacts', 'import', latin, '--workspace', ws, '--charset', 'windows-1252', '--json']);
  assert.equal(decoded.json().created, 1, show(decoded));
  const zoe = JSON.parse((await runCli(dataDir, ['contacts', 'export', '--workspace', ws, '--email', 'zoe@example.com'])).stdout);
  assert.deepEqual([zoe.firstName, zoe.attributes], ['Zoë', { price: '5€' }]);
  // A CSV with the right flag imports; an unreadable one says FAILED and exits non-zero.
  assert.equal((await runCli(dataDir, ['contacts', 'import', txt, '--workspace', ws, '--format', 'csv', '--json'])).json().created, 1);
  writeFileSync(txt, 'email\n"unclosed@example.com\n');
  const broken = await runCli(dataDir, ['contacts', 'import', txt, '--workspace', ws, '--format', 'csv', '--json']);
  assert.equal(broken.code, 1, show(broken));
  assert.equal(broken.json().failure.code, 'invalid_csv');
  // The job is the answer on standard output; the failure is also one line on stderr.
  assert.match(broken.stderr, /^error: import \d+ FAILED: invalid_csv: /, show(broken));
  assert.equal(broken.stderr.trim().split('\n').length, 1, show(broken));
});

test('svc contacts import takes a gzip-compressed file (by its bytes, not its name) or pipe; a cut or inflating one fails clearly', async (t) => {
  const dataDir = tempDir(t);
  const init = await runCli(dataDir, ['init', '--yes', '--json'], { env: { SVC_IMPORT_MAX_BYTES: '65536' } });
  assert.equal(init.code, 0, show(init));
  const ws = String(init.json().workspace.id);
  const env = { SVC_IMPORT_MAX_BYTES: '65536' };
  const rows = Array.from({ length: 300 }, (_, i) => `person${i}@example.com,Person ${i}`).join('\n');
  const packed = gzipSync(`email,firstName\n${rows}\n`);

  const named = join(dataDir, 'people.csv.gz');
  writeFileSync(named, packed);
  const first = await runCli(dataDir, ['contacts', 'import', named, '--workspace', ws, '--json'], { env });
  assert.equal(first.code, 0, show(first));
  assert.deepEqual([first.json().status, first.json().created, first.json().lines], ['COMPLETED', 300, 301]);

  // A .csv that is really gzip, and gzip on standard input: told apart by the first bytes.
  const misnamed = join(dataDir, 'more.csv');
  writeFileSync(misnamed, gzipSync('email,firstName\nnew@example.com,New\n'));
  const second = await runCli(dataDir, ['contacts', 'import', misnamed, '--workspace', ws, '--json'], { env });
  assert.deepEqual([second.json().status, second.json().created], ['COMPLETED', 1], show(second));
  const piped = await runCli(dataDir, ['contacts', 'import', '-', '--format', 'csv', '--mode', 'update', '--workspace', ws, '--json'], {
    env,
    stdin: gzipSync('email,lastName\nnew@example.com,Piped\n'),
  });
  assert.deepEqual([piped.json().status, piped.json().updated], ['COMPLETED', 1], show(piped));

  // Cut short: FAILED invalid_gzip, exit 1, and what came before the damage is kept.
  const cut = join(dataDir, 'cut.csv.gz');
  writeFileSync(cut, packed.subarray(0, packed.length - 40));
  const damaged = await runCli(dataDir, ['contacts', 'import', cut, '--workspace', ws, '--mode', 'create', '--json'], { env });
  assert.equal(damaged.code, 1, show(damaged));
  assert.deepEqual([damaged.json().status, damaged.json().failure.code], ['FAILED', 'invalid_gzip']);

  // A small file that inflates past the import limit (64 KiB here) is stopped like a large one.
  const bomb = join(dataDir, 'bomb.ndjson.gz');
  writeFileSync(bomb, gzipSync(Buffer.alloc(10 * 1024 * 1024, 0x20)));
  const inflated = await runCli(dataDir, ['contacts', 'import', bomb, '--workspace', ws, '--json'], { env });
  assert.equal(inflated.code, 1, show(inflated));
  assert.deepEqual([inflated.json().status, inflated.json().failure.code], ['FAILED', 'import_too_large']);
  const list = await runCli(dataDir, ['contacts', 'export', '--workspace', ws]);
  assert.equal(list.stdout.trim().split('\n').length, 301, 'the 300 contacts and the new one, nothing from the failed files');

  // --out FILE.gz writes gzip, which imports back as it is.
  const out = join(dataDir, 'all.ndjson.gz');
  const exported = await runCli(dataDir, ['contacts', 'export', '--workspace', ws, '--out', out, '--json'], { env });
  assert.deepEqual(exported.json(), { file: out, format: 'ndjson', contacts: 301 }, show(exported));
  assert.equal(gunzipSync(readFileSync(out)).toString('utf8'), list.stdout);
  const again = await runCli(dataDir, ['contacts', 'import', out, '--workspace', ws, '--json'], { env });
  assert.deepEqual([again.json().status, again.json().skipped, again.json().lines], ['COMPLETED', 301, 301], show(again));
});

/**
 * `svc ...args` on a pseudo-terminal (util-linux `script`), as a person at a terminal runs it:
 * what it printed there, carriage returns included.
 */
function onTerminal(dataDir: string, args: string[]): Promise<string> {
  const quote = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
  const command = [process.execPath, ...CLI_COMMAND, '--data-dir', dataDir, ...args].map(quote).join(' ');
  return new Promise((resolve, reject) =>
    execFile('script', ['-qfec', command, '/dev/null'], { env: cliEnv(), timeout: 120_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout) =>
      err ? reject(new Error(`${err.message}\n${stdout}`)) : resolve(stdout),
    ),
  );
}

test('on a terminal, an import and an export into a file show a progress line that ends at 100%', async (t) => {
  const dataDir = tempDir(t);
  const init = await runCli(dataDir, ['init', '--yes', '--json']);
  assert.equal(init.code, 0, show(init));
  const ws = String(init.json().workspace.id);
  const file = join(dataDir, 'many.csv');
  const rows = ['email,firstName'];
  for (let i = 0; i < 150_000; i++) rows.push(`p${i}@example.com,P${i}`);
  writeFileSync(file, rows.join('\n'));

  const imported = await onTerminal(dataDir, ['contacts', 'import', file, '--workspace', ws]);
  const importLines = imported.split('\r').filter((l) => l.includes('lines,'));
  assert.ok(importLines.length >= 1, imported);
  assert.match(importLines[0]!, /^\[[#.]{30}\] +\d+% \d+ lines, \d+ created, 0 updated, 0 errors/);
  assert.match(imported, /import \d+: COMPLETED/);

  const out = join(dataDir, 'all.csv');
  const exported = await onTerminal(dataDir, ['contacts', 'export', '--workspace', ws, '--format', 'csv', '--out', out]);
  const exportLines = exported.split(/\r|\n/).filter((l) => l.includes('contacts written') && l.startsWith('['));
  assert.ok(exportLines.length >= 1, exported);
  // The whole list: a bar over the workspace's contact count, its last state full.
  assert.match(exportLines.at(-1)!, /^\[#{30}\] 100% 150000 contacts written/);
  assert.match(exported, /150000 contacts written to .*all\.csv \(csv\)/);
  // With a filter its size is not known: the count alone.
  const some = await onTerminal(dataDir, ['contacts', 'export', '--workspace', ws, '--q', 'p14', '--out', join(dataDir, 'some.ndjson')]);
  assert.match(some, /^\r?\d+ contacts written\r?\n/m);
  assert.match(some, /11111 contacts written to /);
});

test('phone numbers are checked and normalised by the built program exactly as by libphonenumber-js itself (the bundle compiles its patterns once)', async (t) => {
  const dataDir = tempDir(t);
  const init = await runCli(dataDir, ['init', '--yes', '--plan', 'PRO', '--email', 'ops@example.com', '--password-stdin', '--json'], { stdin: PASSWORD });
  assert.equal(init.code, 0, show(init));
  const ws = String(init.json().workspace.id);
  // Numbers of calling codes several countries share (+1, +7, +39, +44, +47, +262, +590), of
  // single countries, national ones read in the default region (US), and invalid ones; then
  // numbers made of random digits behind common calling codes, most of them invalid.
  const inputs = [
    '+1 613 555 0138',
    '+14155552671',
    '+1 242 357 1234',
    '+1 876 927 1234',
    '+1 000 000 0000',
    '+1 784 457 1234',
    '+44 7911 123456',
    '+44 1534 123456',
    '+44 1624 123456',
    '+44 20 1234',
    '+33 6 12 34 56 78',
    '+49 30 123456',
    '+81 3-1234-5678',
    '+61 2 9876 5432',
    '+7 912 345 67 89',
    '+7 701 234 5678',
    '+39 06 1234 5678',
    '+39 06 698 12345',
    '+47 22 12 34 56',
    '+47 79 12 34 56',
    '+262 262 12 34 56',
    '+262 269 61 23 45',
    '+590 590 12 34 56',
    '+590 690 00 12 34',
    '(415) 555-2671',
    '415.555.2671',
    '212 555 0100',
    '555-0100',
    '12',
    '+999 123',
    'abc',
    '+800 1234 5678',
    '+882 1234 5678',
  ];
  let seed = 7;
  const random = () => {
    seed = (seed * 48271) % 2147483647;
    return seed / 2147483647;
  };
  for (const code of ['1', '7', '33', '44', '49', '52', '55', '61', '86', '91', '234', '262', '590']) {
    for (let i = 0; i < 25; i++) {
      const length = 6 + Math.floor(random() * 7);
      inputs.push(`+${code}${Array.from({ length }, () => Math.floor(random() * 10)).join('')}`);
    }
  }
  // What the library answers, unbundled (this test process runs the sources); a number two
  // inputs share is kept once, since the second row would be refused as another contact's.
  const cases: { email: string; input: string; phone: string | undefined }[] = [];
  const seen = new Set<string>();
  for (const input of inputs) {
    const phone = normalizePhone(input, 'US');
    if (phone !== undefined && seen.has(phone)) continue;
    if (phone !== undefined) seen.add(phone);
    cases.push({ email: `p${cases.length}@example.com`, input, phone });
  }
  const valid = cases.filter((c) => c.phone !== undefined).length;
  assert.ok(valid >= 30 && cases.length - valid >= 100, `${valid} valid numbers of ${cases.length}`);
  const file = join(dataDir, 'phones.ndjson');
  writeFileSync(file, cases.map((c) => JSON.stringify({ email: c.email, phone: c.input })).join('\n'));
  const imported = await runCli(dataDir, ['contacts', 'import', file, '--workspace', ws, '--json']);
  assert.equal(imported.code, 0, show(imported));
  assert.deepEqual([imported.json().created, imported.json().errorCount], [valid, cases.length - valid]);
  const exported = await runCli(dataDir, ['contacts', 'export', '--workspace', ws]);
  assert.equal(exported.code, 0, show(exported));
  const stored = new Map(
    exported.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { email: string; phone: string | null })
      .map((c) => [c.email, c.phone ?? undefined]),
  );
  // A refused number leaves no contact; an accepted one is stored as the library wrote it.
  assert.deepEqual(
    cases.map((c) => [c.input, stored.get(c.email)]),
    cases.map((c) => [c.input, c.phone]),
  );
});
