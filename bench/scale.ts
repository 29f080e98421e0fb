// npm run bench:scale [contacts]: reads at scale and a bulk import (issue 9, items 1-3 and 5).
// One database holds a workspace of `contacts` (default 1,000,000; 10% tagged vip) and a
// workspace of 1,000, each with as many runs, webhook events, delivery attempts and audit
// entries as it has contacts, seeded by plain SQL (bench/seed.ts). The built server (bin/svc,
// engine off: only reads are measured) answers each read of the table in turn, one request
// at a time; p50/p99 are measured by the client over BENCH_READS requests (default 1,000) after
// BENCH_WARMUP more (default 100), from a child process of its own that drops each body as it
// streams (see measure: the client's own garbage collection must not be in the timings).
// Then a fresh server imports an NDJSON file of `contacts` contacts through
// POST /contacts/import, and its time to COMPLETED and the server's peak RSS are printed; it
// exports them back, then imports the same contacts again, each renamed (every row an update
// and a rewrite in the search index), timed the same way, and times a search for a new name.
// BENCH_SKIP_IMPORT=1 or BENCH_SKIP_READS=1 leave a part out. BENCH_PHONE_EVERY=n gives the
// imported contacts a phone number on one row in n (default 10; 1: every row, as a list for SMS);
// BENCH_IMPORT_FORMAT=csv imports the same contacts as CSV (header row; plan as a column).
// BENCH_DATABASE_URL=postgres://... runs it all on PostgreSQL, in a database of its own.
import { execFileSync, spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, statSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import { Pool } from 'undici';
import { json, peakRssMb, resetPeakRss, startProcess, stop } from './lib.js';
import pg from 'pg';
import { pgSeedActivity, pgSeedContacts, pgSeedCounters, seedActivity, seedContacts, type SeedContactsOptions } from './seed.js';
import { PG_REBUILD_SEARCH_BUCKETS } from '../src/core/db/dialect.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const BIG = Number(process.argv[2] ?? process.env.BENCH_CONTACTS ?? 1_000_000);
const SMALL = 1_000;
/**
 * Requests of each read that are timed. The p99 of 200 is their second-slowest: one pause of a
 * 2-core machine shared by client, server and V8's helper threads (a collection, a compile, the
 * host) that met two of them decided a row, a different row in every run. Of 1,000 it is the
 * tenth-slowest, which a single pause does not decide.
 */
const READS = Number(process.env.BENCH_READS ?? 1000);
/**
 * Requests of each read sent before it is timed. A perf profile of a fresh server showed V8's
 * optimising compiler busy on its threads at the same request early in its life, and again as
 * later reads' code turned hot: on two cores that starves both processes, and the requests it
 * met came out slow whichever read was being timed. Steady state is what the table compares,
 * so each read runs warm first.
 */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 100);
const PASSWORD = 'bench-password-123';
/** One imported row in this many has a phone number (checked and normalised: the dearest field). */
const PHONE_EVERY = Math.max(1, Number(process.env.BENCH_PHONE_EVERY ?? 10));
/** The imported file's format: NDJSON (default) or CSV. */
const IMPORT_FORMAT = process.env.BENCH_IMPORT_FORMAT === 'csv' ? 'csv' : 'ndjson';

if (!Number.isInteger(BIG) || BIG < SMALL) {
  console.error('usage: npm run bench:scale [contacts]   (default 1000000, at least 1000)');
  process.exit(2);
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/**
 * One GET at a time on one kept-alive connection, timed by the client; returns [p50, p99] in
 * ms. The body is read to its end and dropped chunk by chunk: buffered whole (fetch's
 * arrayBuffer), pages of 200 kept the client's old generation growing, and its major garbage
 * collections, one every few hundred milliseconds, landed in the timings as p99s of 10-25 ms.
 */
async function measure(base: string, token: string, paths: () => string, n = READS): Promise<[number, number]> {
  const pool = new Pool(new URL(base).origin, { connections: 1 });
  const times: number[] = [];
  try {
    for (let i = 0; i < n + WARMUP; i++) {
      const url = new URL(base + paths());
      const t0 = performance.now();
      const res = await pool.request({ method: 'GET', path: url.pathname + url.search, headers: { authorization: `Bearer ${token}` } });
      for await (const _ of res.body);
      if (res.statusCode !== 200) throw new Error(`GET ${url.pathname}${url.search}: ${res.statusCode}`);
      if (i >= WARMUP) times.push(performance.now() - t0);
    }
  } finally {
    await pool.close();
  }
  times.sort((a, b) => a - b);
  return [percentile(times, 50), percentile(times, 99)];
}

/** Follows nextCursor from `start` for `pages` pages of 200, timing each page. */
async function walkPages(base: string, token: string, start: string, pages: number): Promise<number[]> {
  const times: number[] = [];
  let cursor: string | null = start;
  for (let i = 0; i < pages && cursor !== null; i++) {
    const t0 = performance.now();
    const res = await fetch(`${base}/contacts?limit=200${cursor ? `&cursor=${cursor}` : ''}`, { headers: { authorization: `Bearer ${token}` } });
    const body = (await res.json()) as { nextCursor: string | null };
    times.push(performance.now() - t0);
    cursor = body.nextCursor;
  }
  return times;
}

const cursorAt = (id: number) => Buffer.from(`v1:${id}`).toString('base64url');
/** A cursor at a row picked at random among a workspace's ids (contacts', runs', ...). */
const anywhere = (ids: { lo: number; hi: number }) => cursorAt(ids.lo + Math.floor(Math.random() * (ids.hi - ids.lo)) + 1);
const fmt = (n: number) => n.toFixed(1).padStart(6);

/** What the reads need to know of each seeded workspace: its contacts' and activity's id ranges, its workflow, audit entries to start pages below. */
interface Seeded {
  ws: number;
  ids: IdRange;
  ranges: { runs: IdRange; events: IdRange; attempts: IdRange };
  wf: number;
  audit: number[];
}
type IdRange = { lo: number; hi: number };

async function seededOf(db: BenchDb, ws: number): Promise<Seeded> {
  const ids = async (table: string): Promise<IdRange> => {
    const r = await db.get<{ lo: unknown; hi: unknown }>(`SELECT min(id) AS lo, max(id) AS hi FROM ${table} WHERE workspace_id = ?`, [ws]);
    return { lo: Number(r.lo), hi: Number(r.hi) };
  };
  return {
    ws,
    ids: await ids('contacts'),
    ranges: { runs: await ids('workflow_runs'), events: await ids('webhook_events'), attempts: await ids('delivery_attempts') },
    wf: Number((await db.get<{ id: unknown }>('SELECT id FROM workflows WHERE workspace_id = ?', [ws])).id),
    // Entries of the workspace to start pages below (its ids interleave with the other's: logins).
    audit: (await db.all<{ id: unknown }>('SELECT id FROM audit_logs WHERE workspace_id = ? ORDER BY random() LIMIT 500', [ws])).map((r) => Number(r.id)),
  };
}

async function reads(svcBin: string, env: NodeJS.ProcessEnv, bigSeeded: Seeded, smallSeeded: Seeded): Promise<void> {
  const server = await startProcess(svcBin, ['serve', '--port', '0'], env, /svc listening on (\S+)/);
  const base = server.match[1]!;
  try {
    const login = async (ws: number) =>
      (await json(`${base}/auth/login`, 'POST', { email: 'bench@example.com', password: PASSWORD, workspaceId: ws })).token as string;
    const big = await login(bigSeeded.ws);
    const small = await login(smallSeeded.ws);
    const sizes = [
      { name: `${SMALL.toLocaleString('en')}`, token: small, n: SMALL, prefix: 'small', ...smallSeeded },
      { name: `${BIG.toLocaleString('en')}`, token: big, n: BIG, prefix: 'big', ...bigSeeded },
    ];
    let k = 0;
    const rows: [string, (s: (typeof sizes)[number]) => string][] = [
      ['GET /contacts?limit=50 (first page)', () => '/contacts?limit=50'],
      ['GET /contacts?q=Smith77', () => '/contacts?q=Smith77'],
      ['GET /contacts?q=user<n>@ (one match)', (s) => `/contacts?q=${encodeURIComponent(`user${(++k % s.n) + 1}@`)}`],
      ['GET /contacts?q=zq (two characters, no match)', () => '/contacts?q=zq'],
      ['GET /contacts?tag=vip&q=zq (no match)', () => '/contacts?tag=vip&q=zq'],
      ['GET /contacts?tag=nosuch&q=Smith (no match)', () => '/contacts?tag=nosuch&q=Smith'],
      ['GET /contacts?tag=vip', () => '/contacts?tag=vip'],
      ['GET /contacts?email=...', (s) => `/contacts?email=user${(++k % s.n) + 1}@${s.prefix}.example`],
      ['GET /contacts?limit=200&cursor=<anywhere>', (s) => `/contacts?limit=200&cursor=${anywhere(s.ids)}`],
      ['GET /contacts?tag=vip&limit=200&cursor=<anywhere>', (s) => `/contacts?tag=vip&limit=200&cursor=${anywhere(s.ids)}`],
      // Every contact's email ends so: a q whose matches are the whole workspace, and one of a ninth.
      ['GET /contacts?q=.example&limit=200&cursor=<anywhere>', (s) => `/contacts?q=.example&limit=200&cursor=${anywhere(s.ids)}`],
      ['GET /contacts?q=Smith7&cursor=<anywhere>', (s) => `/contacts?q=Smith7&cursor=${anywhere(s.ids)}`],
      ['GET /contacts?tag=vip&q=Smith7&cursor=<anywhere>', (s) => `/contacts?tag=vip&q=Smith7&cursor=${anywhere(s.ids)}`],
      ['GET /tags', () => '/tags'],
      ['GET /billing/plan', () => '/billing/plan'],
      ['GET /runs?limit=50', () => '/runs?limit=50'],
      ['GET /runs?status=FAILED', () => '/runs?status=FAILED'],
      ['GET /workflows/:id/runs', (s) => `/workflows/${s.wf}/runs`],
      ['GET /runs?workflowId=:id&status=WAITING', (s) => `/runs?workflowId=${s.wf}&status=WAITING`],
      ['GET /workflows/:id/runs?status=WAITING', (s) => `/workflows/${s.wf}/runs?status=WAITING`],
      ['GET /messages/delivery-attempts?status=FAILED', () => '/messages/delivery-attempts?status=FAILED'],
      ['GET /workflows/:id/webhook-events', (s) => `/workflows/${s.wf}/webhook-events`],
      ['GET /messages/delivery-attempts', () => '/messages/delivery-attempts'],
      ['GET /runs?limit=200&cursor=<anywhere>', (s) => `/runs?limit=200&cursor=${anywhere(s.ranges.runs)}`],
      ['GET /runs?status=FAILED&cursor=<anywhere>', (s) => `/runs?status=FAILED&cursor=${anywhere(s.ranges.runs)}`],
      ['GET /workflows/:id/webhook-events?cursor=<anywhere>', (s) => `/workflows/${s.wf}/webhook-events?cursor=${anywhere(s.ranges.events)}`],
      ['GET /messages/delivery-attempts?cursor=<anywhere>', (s) => `/messages/delivery-attempts?cursor=${anywhere(s.ranges.attempts)}`],
      ['GET /audit-logs', () => '/audit-logs'],
      ['GET /audit-logs?action=contact.updated', () => '/audit-logs?action=contact.updated'],
      ['GET /audit-logs?actorType=USER', () => '/audit-logs?actorType=USER'],
      ['GET /audit-logs?action=workflow.* (no match)', () => '/audit-logs?action=workflow.*'],
      ['GET /audit-logs?since=<tomorrow> (no match)', () => `/audit-logs?since=${new Date(Date.now() + 86_400_000).toISOString()}`],
      ['GET /audit-logs?limit=200&cursor=<anywhere>', (s) => `/audit-logs?limit=200&cursor=${cursorAt(s.audit[++k % s.audit.length]!)}`],
    ];
    console.log(`\nreads, ${READS} requests each, one at a time (ms)`);
    console.log(`${'read'.padEnd(50)} ${sizes.map((s) => `${s.name} p50 / p99`.padStart(24)).join(' ')}   ratio p99`);
    for (const [label, path] of rows) {
      const results: [number, number][] = [];
      for (const s of sizes) results.push(await measure(base, s.token, () => path(s)));
      const ratio = results[1]![1] / results[0]![1];
      console.log(`${label.padEnd(50)} ${results.map(([a, b]) => `${fmt(a)} / ${fmt(b)}`.padStart(24)).join(' ')}   ${ratio.toFixed(1)}x`);
    }
    // The super-admin's numbers, over both workspaces (the console's admin page asks every 15 s).
    const [p50, p99] = await measure(base, big, () => '/admin/stats', 50);
    console.log(`GET /admin/stats (${(BIG + SMALL).toLocaleString('en')} runs and as many deliveries, 50 requests): p50 ${fmt(p50)} / p99 ${fmt(p99)} ms`);
    const pages = await walkPages(base, big, '', 20);
    const deep = await walkPages(base, big, cursorAt(sizes[1]!.ids.lo + Math.floor(BIG / 2)), 20);
    console.log(
      `following nextCursor, 20 pages of 200 from the start: up to ${fmt(Math.max(...pages))} ms a page; from the middle: up to ${fmt(Math.max(...deep))} ms`,
    );
  } finally {
    await stop(server.child);
  }
}

/**
 * A file of n contacts: email, names, 10% vip, a phone on one in PHONE_EVERY, one attribute.
 * `rename`: the same contacts again, each with a new last name, a new tag and its attribute
 * changed (an upsert that updates every one of them, and rewrites its row in the search index).
 */
async function writeImportFile(file: string, n: number, rename = false): Promise<void> {
  const out = createWriteStream(file);
  const csv = IMPORT_FORMAT === 'csv';
  let chunk = csv ? (rename ? 'email,lastName,tags,plan\n' : 'email,phone,firstName,lastName,tags,plan\n') : '';
  for (let i = 1; i <= n; i++) {
    const phone = i % PHONE_EVERY === 0 ? `+1613${String(2_000_000 + (i % 7_000_000)).padStart(7, '0')}` : '';
    const vip = i % 10 === 0;
    if (rename)
      chunk += csv
        ? `import${i}@example.org,Lovelace${i},renamed,q${i % 7}\n`
        : `{"email":"import${i}@example.org","lastName":"Lovelace${i}","tags":["renamed"],"attributes":{"plan":"q${i % 7}"}}\n`;
    else
      chunk += csv
        ? `import${i}@example.org,${phone},Grace${i},Hopper${i},${vip ? 'vip' : ''},p${i % 7}\n`
        : `{"email":"import${i}@example.org"${phone ? `,"phone":"${phone}"` : ''},"firstName":"Grace${i}","lastName":"Hopper${i}","tags":${vip ? '["vip"]' : '[]'},"attributes":{"plan":"p${i % 7}"}}\n`;
    if (chunk.length > 1 << 20) {
      if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      chunk = '';
    }
  }
  out.end(chunk);
  await new Promise<void>((r) => out.once('finish', () => r()));
}

interface ImportJob {
  status: string;
  created: number;
  updated: number;
  errorCount: number;
  lines: number;
  failure: unknown;
}

/** POSTs `file` to /contacts/import with curl and waits for its job: the job and the seconds from the first byte to its end. */
async function uploadImport(base: string, token: string, file: string): Promise<{ job: ImportJob; seconds: number; afterRows: number }> {
  const started = performance.now();
  // curl keeps sending after the early 202 (Node's http client stops writing once it has
  // a complete answer); it streams the file from disk with its declared length.
  const accepted = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const curl = spawn('curl', [
      '-sS',
      '-w',
      '\n%{http_code}',
      '-X',
      'POST',
      '-H',
      `authorization: Bearer ${token}`,
      '-H',
      `content-type: ${IMPORT_FORMAT === 'csv' ? 'text/csv' : 'application/x-ndjson'}`,
      '-T',
      file,
      `${base}/contacts/import`,
    ]);
    let out = '';
    curl.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    curl.on('error', reject);
    curl.on('exit', () => {
      const cut = out.lastIndexOf('\n');
      resolve({ status: Number(out.slice(cut + 1)), body: out.slice(0, cut) });
    });
  });
  if (accepted.status !== 202) throw new Error(`import answered ${accepted.status}: ${accepted.body}`);
  const id = JSON.parse(accepted.body).id as number;
  let job: ImportJob;
  // When each count of lines was first seen: the job's last stretch, after its last row was
  // committed, is the search index's compaction (SQLite).
  const seen = new Map<number, number>();
  for (;;) {
    job = await json(`${base}/contacts/imports/${id}`, 'GET', undefined, token);
    if (!seen.has(job.lines)) seen.set(job.lines, performance.now());
    if (job.status !== 'RUNNING') break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const end = performance.now();
  return { job, seconds: (end - started) / 1000, afterRows: (end - seen.get(job.lines)!) / 1000 };
}

async function bulkImport(svcBin: string, env: NodeJS.ProcessEnv, dataDir: string, workspaceId: number): Promise<void> {
  const file = join(dataDir, `import.${IMPORT_FORMAT}`);
  await writeImportFile(file, BIG);
  const size = statSync(file).size;
  const server = await startProcess(svcBin, ['serve', '--port', '0'], env, /svc listening on (\S+)/);
  const base = server.match[1]!;
  const pid = server.child.pid!;
  try {
    const token = (await json(`${base}/auth/login`, 'POST', { email: 'bench@example.com', password: PASSWORD, workspaceId })).token as string;
    // The import's peak RSS, not the login's (scrypt takes 32 MiB for a moment).
    resetPeakRss(pid);
    const { job, seconds } = await uploadImport(base, token, file);
    console.log(
      `\nimport of ${BIG.toLocaleString('en')} contacts (${IMPORT_FORMAT.toUpperCase()}, ${(size / 1e6).toFixed(0)} MB, a phone on one row in ${PHONE_EVERY}, POST /contacts/import): ${job.status}, ${job.created} created, ${job.errorCount} refused, ${seconds.toFixed(1)} s, server peak RSS ${peakRssMb(pid)} MB`,
    );
    if (job.failure) console.log(JSON.stringify(job.failure));
    if (job.status !== 'COMPLETED') return;
    for (const format of ['ndjson', 'csv'] as const) await bulkExport(pid, base, token, format, job.created);
    // The same contacts again, each renamed: every row an update, and a rewrite in the search
    // index, which is compacted before the job completes; then a search for a new name.
    const renames = join(dataDir, `rename.${IMPORT_FORMAT}`);
    await writeImportFile(renames, BIG, true);
    resetPeakRss(pid);
    const again = await uploadImport(base, token, renames);
    console.log(
      `re-import renaming them all (upsert, ${(statSync(renames).size / 1e6).toFixed(0)} MB): ${again.job.status}, ${again.job.updated} updated, ${again.job.errorCount} refused, ${again.seconds.toFixed(1)} s${PG_URL ? '' : ` (the last ${again.afterRows.toFixed(1)} s after its last row: the search index compacted)`}, server peak RSS ${peakRssMb(pid)} MB`,
    );
    if (again.job.failure) console.log(JSON.stringify(again.job.failure));
    // One match: a number above a tenth of the contacts starts no other's. From 1 to 200, each
    // is the start of many names (Lovelace12: 12, 120-129, 1200-1299, ...), the only search
    // this timed until the twenty-fourth session (then labelled one match).
    const tenth = Math.floor(BIG / 10);
    let k = 0;
    const [o50, o99] = await measure(base, token, () => `/contacts?q=Lovelace${tenth + 1 + ((k++ * 7919) % (BIG - tenth))}`, 200);
    let j = 0;
    const [p50, p99] = await measure(base, token, () => `/contacts?q=Lovelace${(j++ % 200) + 1}`, 200);
    const [c50, c99] = await measure(base, token, () => '/contacts?q=Lovelace77', 200);
    console.log(
      `after it, GET /contacts?q=Lovelace<n> p50 / p99: one match ${o50.toFixed(1)} / ${o99.toFixed(1)} ms; n from 1 to 200 (a prefix of many) ${p50.toFixed(1)} / ${p99.toFixed(1)} ms; q=Lovelace77 ${c50.toFixed(1)} / ${c99.toFixed(1)} ms`,
    );
  } finally {
    await stop(server.child);
  }
}

/**
 * The imported workspace exported back (GET /contacts/export), read by curl as fast as it
 * comes: its rows counted, the time from the request to the last byte, the server's peak RSS.
 */
async function bulkExport(pid: number, base: string, token: string, format: 'ndjson' | 'csv', expected: number): Promise<void> {
  resetPeakRss(pid);
  const started = performance.now();
  const { lines, bytes, status } = await new Promise<{ lines: number; bytes: number; status: number }>((resolve, reject) => {
    const curl = spawn('curl', [
      '-sS',
      '-o',
      '-',
      '-w',
      '%{stderr}%{http_code}',
      '-H',
      `authorization: Bearer ${token}`,
      `${base}/contacts/export?format=${format}`,
    ]);
    let lines = 0;
    let bytes = 0;
    let code = '';
    curl.stdout.on('data', (d: Buffer) => {
      bytes += d.length;
      for (let i = d.indexOf(10); i !== -1; i = d.indexOf(10, i + 1)) lines++;
    });
    curl.stderr.setEncoding('utf8').on('data', (d: string) => (code += d));
    curl.on('error', reject);
    curl.on('exit', () => resolve({ lines, bytes, status: Number(code.trim().slice(-3)) }));
  });
  const seconds = (performance.now() - started) / 1000;
  // CSV: a header line first (quoted line breaks would count too; this file has none).
  const rows = format === 'csv' ? lines - 1 : lines;
  console.log(
    `export of the import (${format}, GET /contacts/export): ${status}, ${rows} rows${rows === expected ? '' : ` (expected ${expected})`}, ${(bytes / 1e6).toFixed(0)} MB, ${seconds.toFixed(1)} s, server peak RSS ${peakRssMb(pid)} MB`,
  );
}

/** The seeding's and the id ranges' connection to the database svc serves: its SQLite file, or PostgreSQL. */
interface BenchDb {
  get<T>(text: string, params: unknown[]): Promise<T>;
  all<T>(text: string, params: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

function sqliteDb(file: string): BenchDb & { client: Database.Database } {
  const client = new Database(file);
  client.pragma('journal_mode = WAL');
  client.pragma('cache_size = -262144');
  return {
    client,
    get: async <T>(text: string, params: unknown[]) => client.prepare(text).get(...params) as T,
    all: async <T>(text: string, params: unknown[]) => client.prepare(text).all(...params) as T[],
    close: async () => {
      client.pragma('wal_checkpoint(TRUNCATE)');
      client.close();
    },
  };
}

async function postgresDb(url: string): Promise<BenchDb & { client: pg.Client }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  // Triggers off for the seeding (pgSeedContacts says why); the counters are written after it.
  await client.query('SET session_replication_role = replica');
  const numbered = (text: string) => {
    let n = 0;
    return text.replace(/\?/g, () => `$${++n}`);
  };
  return {
    client,
    get: async <T>(text: string, params: unknown[]) => (await client.query(numbered(text), params)).rows[0] as T,
    all: async <T>(text: string, params: unknown[]) => (await client.query(numbered(text), params)).rows as T[],
    close: () => client.end(),
  };
}

/**
 * BENCH_DATABASE_URL (a PostgreSQL server's URL whose user may create databases): the same
 * benchmark on PostgreSQL, in a database of its own (svc_bench_scale, dropped first and after).
 */
const PG_URL = process.env.BENCH_DATABASE_URL;
const PG_DATABASE = 'svc_bench_scale';

async function pgAdmin(action: 'create' | 'drop'): Promise<string> {
  const admin = new pg.Client({ connectionString: PG_URL });
  await admin.connect();
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${PG_DATABASE} WITH (FORCE)`);
    if (action === 'create') await admin.query(`CREATE DATABASE ${PG_DATABASE}`);
  } finally {
    await admin.end();
  }
  const url = new URL(PG_URL!);
  url.pathname = `/${PG_DATABASE}`;
  return url.toString();
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-bench-scale-'));
  const databaseUrl = PG_URL ? await pgAdmin('create') : undefined;
  const env = { ...process.env, SVC_DATA_DIR: dataDir, SVC_LOG_LEVEL: 'warn', SVC_ENGINE: 'false', ...(databaseUrl ? { SVC_DATABASE_URL: databaseUrl } : {}) };
  const svcBin = join(root, 'bin', 'svc');
  console.log(
    `bench:scale on ${cpus().length} CPUs (${cpus()[0]?.model.trim()}), ${(totalmem() / 2 ** 30).toFixed(0)} GB; Node ${process.version}; ${databaseUrl ? 'PostgreSQL' : 'SQLite'}`,
  );
  try {
    const init = JSON.parse(
      execFileSync(svcBin, ['init', '--yes', '--plan', 'PRO', '--email', 'bench@example.com', '--password-stdin', '--json'], {
        env,
        input: PASSWORD,
        stdio: ['pipe', 'pipe', 'inherit'],
      }).toString(),
    );
    const bigWs = init.workspace.id as number;
    const make = (name: string) =>
      (JSON.parse(execFileSync(svcBin, ['workspace', 'create', '--name', name, '--plan', 'PRO', '--json'], { env }).toString()) as { id: number }).id;
    const smallWs = make('small');
    const importWs = make('import');
    const sqlite = databaseUrl ? undefined : sqliteDb(join(dataDir, 'svc.db'));
    const postgres = databaseUrl ? await postgresDb(databaseUrl) : undefined;
    const db: BenchDb = (sqlite ?? postgres)!;
    const userId = (await db.get<{ id: unknown }>('SELECT id FROM users WHERE email = ?', ['bench@example.com'])).id;
    for (const ws of [smallWs, importWs])
      await db.all("INSERT INTO memberships (workspace_id, user_id, role) VALUES (?, ?, 'OWNER') RETURNING workspace_id", [ws, userId]);
    let seeded: [Seeded, Seeded] | undefined;
    if (!process.env.BENCH_SKIP_READS) {
      let t0 = performance.now();
      const contactsOf = async (ws: number, n: number, opts: SeedContactsOptions) =>
        postgres ? pgSeedContacts(postgres.client, ws, n, opts) : seedContacts(sqlite!.client, ws, n, opts);
      for (let done = 0; done < BIG; done += 100_000) await contactsOf(bigWs, Math.min(100_000, BIG - done), { prefix: 'big', offset: done });
      await contactsOf(smallWs, SMALL, { prefix: 'small', offset: BIG });
      console.log(`seeded ${BIG.toLocaleString('en')} + ${SMALL.toLocaleString('en')} contacts in ${((performance.now() - t0) / 1000).toFixed(0)} s`);
      t0 = performance.now();
      const activityOf = async (ws: number, wf: number, n: number) =>
        postgres ? pgSeedActivity(postgres.client, ws, wf, n) : seedActivity(sqlite!.client, ws, wf, n);
      const workflowOf = async (ws: number) =>
        Number(
          (
            await db.get<{ id: unknown }>(
              "INSERT INTO workflows (workspace_id, name, status, trigger_source, steps) VALUES (?, 'seeded', 'ACTIVE', 'MANUAL', '[]') RETURNING id",
              [ws],
            )
          ).id,
        );
      const bigWf = await workflowOf(bigWs);
      for (let done = 0; done < BIG; done += 100_000) await activityOf(bigWs, bigWf, Math.min(100_000, BIG - done));
      await activityOf(smallWs, await workflowOf(smallWs), SMALL);
      if (postgres) {
        await pgSeedCounters(postgres.client, [bigWs, smallWs]);
        // And the search's buckets, which their triggers would have kept (migrations/pg/0009).
        await postgres.client.query(PG_REBUILD_SEARCH_BUCKETS);
        // What autovacuum does to a table soon after so many new rows: its statistics for the
        // planner, and the visibility map that lets an index-only scan skip the table.
        await postgres.client.query('VACUUM ANALYZE');
      }
      console.log(
        `seeded ${BIG.toLocaleString('en')} + ${SMALL.toLocaleString('en')} runs, webhook events, delivery attempts and audit entries in ${((performance.now() - t0) / 1000).toFixed(0)} s`,
      );
      seeded = [await seededOf(db, bigWs), await seededOf(db, smallWs)];
    }
    await db.close();
    if (seeded) await readsInChild({ svcBin, env, big: seeded[0], small: seeded[1] });
    if (!process.env.BENCH_SKIP_IMPORT) await bulkImport(svcBin, env, dataDir, importWs);
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
    if (PG_URL) await pgAdmin('drop');
  }
}

interface ReadsJob {
  svcBin: string;
  env: NodeJS.ProcessEnv;
  big: Seeded;
  small: Seeded;
}

/** Times the reads from a fresh Node process (this file again, told the job by READS_JOB), its output inherited. */
async function readsInChild(job: ReadsJob): Promise<void> {
  const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
    env: { ...process.env, [READS_JOB]: JSON.stringify(job) },
    stdio: 'inherit',
  });
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  if (code !== 0) throw new Error(`the reads' process exited with ${code}`);
}

const READS_JOB = 'SVC_BENCH_SCALE_READS';
const job = process.env[READS_JOB];
if (job) {
  const { svcBin, env, big, small } = JSON.parse(job) as ReadsJob;
  await reads(svcBin, env, big, small);
} else await main();
