/**
 * PostgreSQL's plans at scale (issue 9). Contact search (item 3): the plans of the statements
 * pgMatches runs, asked of PostgreSQL with EXPLAIN on 20,000 seeded contacts beside another
 * workspace. The walk stops after its window (a LIMIT on the workspace's index, never the
 * whole workspace); the search below it is the trigram index's bitmap and nothing else, even
 * where the planner would rather walk: at a million contacts it had walked to matches far
 * below the cursor (q=Smith77, p50 178 ms), and without `+ 0` on the workspace and the bound
 * it takes the primary key's bitmap for the whole range below the bound, every contact in it
 * checked. The answers stay right: the ids a plain scan finds. Import (item 1): an import
 * takes the statistics afresh as it grows, so that its lookups of each batch's emails and
 * phones stay on their unique indexes (for a workspace the statistics did not know, the
 * planner read every contact of it for each batch, or for each email: a million took 509 s).
 */
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { SQL } from 'drizzle-orm';
import { PgDialect } from 'drizzle-orm/pg-core';
import pg from 'pg';
import { pgSeedContacts, pgSeedCounters } from '../../bench/seed.js';
import { contactSearch, PG_REBUILD_SEARCH_BUCKETS } from '../../src/core/db/dialect.js';
import { encodeCursor } from '../../src/core/pagination.js';
import { lookupStatement } from '../../src/core/services/contactImport.js';
import { PG_SEARCH_BUCKETS, PG_SEARCH_WALK_ROWS, searchPieces } from '../../src/core/services/contacts.js';
import { buildAsOwner, type TestServer } from '../helpers.js';
import { createDatabase, createTestDatabase, skipOutsideCIWithoutPostgres } from '../pg.js';
import { migratePg } from '../../src/core/db/pgMigrate.js';

const dialect = new PgDialect();

async function explain(client: pg.Client, statement: SQL): Promise<string> {
  const { sql: text, params } = dialect.sqlToQuery(statement);
  const { rows } = await client.query(`EXPLAIN ${text}`, params);
  return rows.map((r) => r['QUERY PLAN']).join('\n');
}

async function ids(client: pg.Client, statement: SQL): Promise<number[]> {
  const { sql: text, params } = dialect.sqlToQuery(statement);
  return (await client.query(text, params)).rows.map((r) => Number(Object.values(r)[0]));
}

/** The statement run with the planner's index and sequential scans off, as pgMatches runs it. */
async function indexedOnly<T>(client: pg.Client, fn: () => Promise<T>): Promise<T> {
  await client.query('BEGIN');
  try {
    await client.query('SET LOCAL enable_indexscan = off');
    await client.query('SET LOCAL enable_seqscan = off');
    return await fn();
  } finally {
    await client.query('ROLLBACK');
  }
}

test('PostgreSQL search: a bounded walk, then the trigram index alone, each answering what a scan finds', {
  skip: skipOutsideCIWithoutPostgres(),
}, async (t) => {
  const url = await createTestDatabase(t);
  await migratePg(url);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await searchPlans(client);
  } finally {
    await client.end();
  }
});

async function searchPlans(client: pg.Client): Promise<void> {
  await client.query("INSERT INTO workspaces (id, name) VALUES (1, 'big'), (2, 'other')");
  // Triggers off while seeding (pgSeedContacts says why), the counters written after.
  await client.query('SET session_replication_role = replica');
  await pgSeedContacts(client, 1, 20_000, { prefix: 'big' });
  await pgSeedContacts(client, 2, 2_000, { prefix: 'other', offset: 20_000 });
  await pgSeedCounters(client, [1, 2]);
  await client.query('SET session_replication_role = DEFAULT');
  await client.query('ANALYZE contacts');
  const scan = async (ws: number, q: string, below: number) =>
    (
      await client.query(
        `SELECT id FROM contacts WHERE workspace_id = $1 AND id < $2 AND concat_ws(E'\\n', email, phone, first_name, last_name) ILIKE $3 ORDER BY id DESC`,
        [ws, below, `%${q}%`],
      )
    ).rows.map((r) => Number(r.id));
  const top = Number((await client.query('SELECT max(id) AS id FROM contacts WHERE workspace_id = 1')).rows[0].id) + 1;

  for (const q of ['Smith1234', 'user77@', 'smith7', 'nobody']) {
    // The walk: PG_SEARCH_WALK_ROWS of the workspace's contacts along its index, then matched.
    const walk = contactSearch.pgWalk(1, q, top, PG_SEARCH_WALK_ROWS, 51);
    const walkPlan = await explain(client, walk);
    assert.match(walkPlan, /Limit/, walkPlan);
    assert.match(walkPlan, /Index Scan Backward using contacts_(workspace_idx|pkey)/, walkPlan);
    const [row] = (await client.query(dialect.sqlToQuery(walk).sql, dialect.sqlToQuery(walk).params)).rows;
    assert.equal(Number(row.n), PG_SEARCH_WALK_ROWS);
    const window = (await scan(1, '', top)).slice(0, PG_SEARCH_WALK_ROWS);
    assert.equal(Number(row.end), window.at(-1));
    const inWindow = (await scan(1, q, top)).filter((id) => id >= Number(row.end)).slice(0, 51);
    assert.deepEqual((row.ids ?? []).map(Number), inWindow, `walk q=${q}`);

    // Below it: the trigram index's bitmap, the workspace and the bound checked on each match.
    for (const below of [top, Number(row.end), top - 15_000]) {
      const indexed = contactSearch.pgIndexed(1, q, below, 51);
      const plan = await indexedOnly(client, () => explain(client, indexed));
      assert.match(plan, /Bitmap Index Scan on contacts_search_idx/, plan);
      assert.doesNotMatch(plan, /contacts_workspace_idx|contacts_pkey|Seq Scan/, plan);
      const found = await indexedOnly(client, () => ids(client, indexed));
      assert.deepEqual(found, (await scan(1, q, below)).slice(0, 51), `q=${q} below ${below}`);
    }
  }

  // The index looking up a part of q (contacts.ts, pgLookUpPart), q itself checked on each
  // contact it finds: the same answers; parts that other contacts hold too ("r77" is in
  // user770@, user177@ and more), one that only a contact not matching q holds.
  for (const [q, part] of [
    ['user77@', 'r77'],
    ['Smith1234', 'h1234'],
    ['SMITH1234', 'H12'],
    ['user123@big.example', 'r123@'],
    ['user123@big.examplf', 'r123@'],
  ]) {
    for (const below of [top, top - 15_000]) {
      const indexed = contactSearch.pgIndexed(1, q!, below, 51, part);
      const plan = await indexedOnly(client, () => explain(client, indexed));
      assert.match(plan, /Bitmap Index Scan on contacts_search_idx/, plan);
      assert.match(plan, /strpos/, plan);
      assert.doesNotMatch(plan, /contacts_workspace_idx|contacts_pkey|Seq Scan/, plan);
      const found = await indexedOnly(client, () => ids(client, indexed));
      assert.deepEqual(found, (await scan(1, q!, below)).slice(0, 51), `q=${q} looking up ${part} below ${below}`);
    }
  }
  // How many of the newest contacts hold each piece, as counted one by one.
  const pieces = ['use', 'r19', '9@b', 'Smi', 'zzz', '%', '_'];
  const sampled = (
    await client.query(dialect.sqlToQuery(contactSearch.pgSample(1, pieces, 256)).sql, dialect.sqlToQuery(contactSearch.pgSample(1, pieces, 256)).params)
  ).rows[0];
  const newest = (
    await client.query(
      "SELECT email || E'\\n' || coalesce(phone, '') || E'\\n' || first_name || E'\\n' || last_name AS t FROM contacts WHERE workspace_id = 1 ORDER BY id DESC LIMIT 256",
    )
  ).rows.map((r) => String(r.t).toLowerCase());
  assert.equal(Number(sampled.n), 256);
  assert.deepEqual(
    sampled.hits.map(Number),
    pieces.map((p) => newest.filter((t) => t.includes(p.toLowerCase())).length),
  );
  assert.ok(Number(sampled.hits[0]) === 256 && Number(sampled.hits[4]) === 0);
}

test('PostgreSQL import: the statistics are taken afresh as an import grows, so each lookup stays on its unique index', {
  skip: skipOutsideCIWithoutPostgres(),
}, async (t) => {
  // A workspace of 30,000 contacts beside the one importing, which the statistics do not know.
  await onOwnDatabase(t, async (s, token, client) => {
    await client.query("INSERT INTO workspaces (id, name) VALUES (1000, 'other')");
    await client.query('SET session_replication_role = replica');
    await pgSeedContacts(client, 1000, 30_000, { prefix: 'other' });
    await client.query('SET session_replication_role = DEFAULT');
    await client.query('ANALYZE contacts');
    const analyses = async () => Number((await client.query("SELECT analyze_count FROM pg_stat_user_tables WHERE relname = 'contacts'")).rows[0].analyze_count);
    const before = await analyses();

    const rows = Array.from({ length: 6_000 }, (_, i) => JSON.stringify({ email: `new${i}@example.com`, phone: `+1613${2_000_000 + i}` }));
    const res = await s.request('POST', '/contacts/import', { token, raw: `${rows.join('\n')}\n`, headers: { 'content-type': 'application/x-ndjson' } });
    assert.ok(res.status === 200 || res.status === 202, res.text);
    let job = res.body;
    while (job.status === 'RUNNING') {
      await new Promise((r) => setTimeout(r, 50));
      job = (await s.request('GET', `/contacts/imports/${job.id}`, { token })).body;
    }
    assert.deepEqual([job.status, job.created, job.errorCount], ['COMPLETED', 6_000, 0]);
    // The trigram index's pending list was moved into the index at the end of the import (no
    // page left for a search to read through), where contacts written otherwise leave one.
    const pendingPages = async () => Number((await client.query("SELECT gin_clean_pending_list('contacts_search_idx') AS n")).rows[0].n);
    assert.equal(await pendingPages(), 0);
    await client.query(
      "INSERT INTO contacts (workspace_id, email, created_at, updated_at) SELECT 1000, 'late' || i || '@example.com', '2026-01-01', '2026-01-01' FROM generate_series(1, 200) i",
    );
    assert.ok((await pendingPages()) > 0);
    // ANALYZE after the first 2,000 created and after 4,000 (the statistics' counters are flushed within a second).
    for (let i = 0; (await analyses()) < before + 2 && i < 50; i++) await new Promise((r) => setTimeout(r, 100));
    assert.equal(await analyses(), before + 2);

    const numbered = (text: string) => {
      let n = 0;
      return text.replace(/\?/g, () => `$${++n}`);
    };
    for (const [column, values] of [
      ['email', Array.from({ length: 500 }, (_, i) => `new${i * 12}@example.com`).concat('nobody@example.com')],
      ['phone', Array.from({ length: 500 }, (_, i) => `+1613${2_000_000 + i * 12}`)],
    ] as const) {
      const { text, params } = lookupStatement('pg', s.workspaceId, column, [...values]);
      const { rows: plan } = await client.query(`EXPLAIN ${numbered(text)}`, params);
      const shown = plan.map((r) => r['QUERY PLAN']).join('\n');
      assert.match(shown, new RegExp(`Index Scan using contacts_workspace_${column}_unique`), shown);
      assert.doesNotMatch(shown, /Seq Scan on contacts|Bitmap|contacts_workspace_idx/, shown);
      const found = (await client.query(numbered(text), params)).rows;
      assert.deepEqual(found.map((r) => r[column]).sort(), values.filter((v) => !v.startsWith('nobody')).sort());
    }
  });
});

test('PostgreSQL search: matches far below the cursor are found through the candidate buckets, kept by triggers as contacts are written', {
  skip: skipOutsideCIWithoutPostgres(),
}, async (t) => {
  await onOwnDatabase(t, searchBuckets);
});

/** A server on a PostgreSQL database of its own (dropped after the server closes), and a client of that database. */
async function onOwnDatabase(t: TestContext, fn: (s: TestServer, token: string, client: pg.Client) => Promise<void>): Promise<void> {
  const database = await createDatabase();
  const { s, token } = await buildAsOwner(t, { env: { SVC_DATABASE_URL: database.url } });
  t.after(database.drop);
  const client = new pg.Client({ connectionString: s.config.databaseUrl! });
  await client.connect();
  try {
    await fn(s, token, client);
  } finally {
    await client.end();
  }
}

async function searchBuckets(s: TestServer, token: string, client: pg.Client): Promise<void> {
  const ws = s.workspaceId;
  // 12,000 contacts in one statement, the triggers on (one run of the INSERT trigger): a
  // stretch of 300 zebrafish far below the newest, two more alone higher up, and a name only
  // unicode folding finds; another workspace's zebrafish, newer than all, beside them.
  await client.query(
    `INSERT INTO contacts (workspace_id, email, first_name, last_name, created_at, updated_at)
     SELECT $1, 'p' || i || '@ex.test', 'Person' || i,
            CASE WHEN i BETWEEN 1000 AND 1299 OR i IN (5000, 9000) THEN 'Zebrafish' || i WHEN i = 700 THEN 'ÉMILE' ELSE 'Doe' || i END, '2026-01-01', '2026-01-01'
       FROM generate_series(0, 11999) AS i ORDER BY i`,
    [ws],
  );
  await client.query("INSERT INTO workspaces (id, name) VALUES (1000, 'other')");
  await client.query(
    "INSERT INTO contacts (workspace_id, email, last_name, created_at, updated_at) SELECT 1000, 'o' || i || '@ex.test', 'Zebrafish' || i, '2026-01-01', '2026-01-01' FROM generate_series(1, 3000) AS i",
  );
  await client.query('ANALYZE contacts');
  const scan = async (q: string, below: number) =>
    (
      await client.query(
        `SELECT id FROM contacts WHERE workspace_id = $1 AND id < $2 AND lower(concat_ws(E'\\n', email, phone, first_name, last_name)) LIKE '%' || lower($3) || '%' ORDER BY id DESC LIMIT 50`,
        [ws, below, q],
      )
    ).rows.map((r) => Number(r.id));
  const newest = async () => Number((await client.query('SELECT max(id) AS id FROM contacts WHERE workspace_id = $1', [ws])).rows[0].id);
  const lo = Number((await client.query('SELECT min(id) AS id FROM contacts WHERE workspace_id = $1', [ws])).rows[0].id);
  const page = async (q: string, below: number | null) => {
    const cursor = below === null ? '' : `&cursor=${encodeCursor(below)}`;
    const res = await s.request('GET', `/contacts?q=${encodeURIComponent(q)}${cursor}`, { token });
    assert.equal(res.status, 200, res.text);
    return (res.body.data as { id: number }[]).map((c) => c.id);
  };
  const check = async (q: string) => {
    const hi = await newest();
    for (let below = hi + 1; below > lo; below -= 1499) assert.deepEqual(await page(q, below), await scan(q, below), `q=${q} below ${below}`);
    assert.deepEqual(await page(q, null), await scan(q, hi + 1), `q=${q}, first page`);
  };
  // Each contact's pieces are in its bucket (ids / 2048), none spanning two fields.
  const pieces = async (id: number) =>
    (await client.query('SELECT trigram FROM contact_search_buckets WHERE workspace_id = $1 AND bucket = $2 >> 11', [ws, id])).rows.map(
      (r) => r.trigram as string,
    );
  const zebra = lo + 1100;
  assert.ok((await pieces(zebra)).includes('ebr'));
  assert.ok(!(await pieces(zebra)).some((p) => p.includes('\n')));
  for (const q of ['zebrafish', 'Zebrafish12', 'ÉMI', 'nobody', 'p11999@', 'son1']) await check(q);

  // Through the API: a new contact, a rename (its new pieces added) and a deletion (its
  // bucket stays a candidate, read in vain) keep the answers a scan's.
  const created = await s.request('POST', '/contacts', { token, body: { email: 'new@ex.test', lastName: 'Quetzal' } });
  assert.equal(created.status, 201, created.text);
  const renamed = await s.request('PATCH', `/contacts/${lo + 1200}`, { token, body: { lastName: 'Quetzalcoatl' } });
  assert.equal(renamed.status, 200, renamed.text);
  assert.equal((await s.request('DELETE', `/contacts/${lo + 9000}`, { token })).status, 204);
  for (const q of ['quetzal', 'zebrafish', 'zebrafish9000']) await check(q);

  // The page below the walk reads its first candidate buckets along the primary key, the
  // pieces looked up in their own index (never the trigram index: it reads whole lists).
  const plan = await explain(client, contactSearch.pgBuckets(ws, 'zebrafish', searchPieces('zebrafish'), (await newest()) - 2000, 51, PG_SEARCH_BUCKETS));
  assert.match(
    plan,
    /Scan using contact_search_buckets_idx on contact_search_buckets[^\n]*\n\s*Index Cond: \(\(workspace_id = '\d+'::bigint\) AND \(trigram = p\.trigram\)/,
    plan,
  );
  assert.match(plan, /Index Scan Backward using contacts_pkey/, plan);
  assert.doesNotMatch(plan, /contacts_search_idx|Seq Scan on contacts/, plan);

  // svc db copy's rebuild (its copy disables the triggers) makes the same rows.
  const before = (await client.query('SELECT DISTINCT workspace_id, trigram, bucket FROM contact_search_buckets ORDER BY 1, 2, 3')).rows;
  await client.query(PG_REBUILD_SEARCH_BUCKETS);
  const fresh = (await client.query('SELECT DISTINCT workspace_id, trigram, bucket FROM contact_search_buckets ORDER BY 1, 2, 3')).rows;
  const key = (r: Record<string, unknown>) => `${r.workspace_id}/${r.trigram}/${r.bucket}`;
  const rebuilt = new Set(fresh.map(key));
  // The rebuild has every piece of the contacts now there; the rows kept by triggers those too, and the deleted contact's.
  assert.ok(fresh.every((r) => before.some((b) => key(b) === key(r))));
  assert.ok(
    before.length > fresh.length &&
      before.filter((b) => !rebuilt.has(key(b))).every((b) => Number(b.bucket) === (lo + 9000) >> 11 || Number(b.bucket) === (lo + 1200) >> 11),
  );
}

test('the pieces a PostgreSQL search looks up in its buckets are trigrams every matching text holds', () => {
  assert.deepEqual(searchPieces('Smith7'), ['smi', 'mit', 'ith', 'th7']);
  // Runs of ASCII letters and digits only: other characters end a run (pg_trgm splits words
  // there, or folds and stores them its own way).
  assert.deepEqual(searchPieces('ada.lovelace@x'), ['ada', 'lov', 'ove', 'vel', 'ela', 'lac', 'ace']);
  assert.deepEqual(searchPieces('émile'), ['mil', 'ile']);
  for (const none of ['@x.co', 'ÉMI', '12', 'a-b-c', 'K\u212Aelvin'.slice(0, 2)]) assert.deepEqual(searchPieces(none), [], none);
  // At most 16, spread along q, the first and the last among them.
  const long = searchPieces('abcdefghijklmnopqrstuvwxyz0123456789');
  assert.equal(long.length, 16);
  assert.deepEqual([long[0], long.at(-1)], ['abc', '789']);
  assert.ok(long.every((p) => 'abcdefghijklmnopqrstuvwxyz0123456789'.includes(p)));
});
