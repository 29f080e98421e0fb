// npm run bench:search [contacts]: what renaming contacts costs SQLite's search index (FTS5),
// as svc has it and as it could be. For each variant, a fresh migrated database gets two
// workspaces of `contacts` contacts (default 1,000,000; bench/seed.ts), then every contact of
// the second is renamed by single-row UPDATEs, 2,000 to a transaction (as the API's and the
// engine's updates write, and imports did before 4847d86; the triggers rewrite each one's
// index entry, a new index segment per statement); then the index is compacted
// (src/core/db/searchIndex.ts; not before-0017, which had no compaction) and a search for one renamed contact is timed, newest first as
// svc lists contacts and, for comparison, oldest first. BENCH_VARIANTS picks among:
// - `svc`: the index as migrated (contentless_delete; tombstones, which FTS5 leaves to svc's
//   compaction since migration 0017);
// - `before-0017`: the same with FTS5's default deletemerge (10), as before migration 0017;
// - `no-tombstones`: a contentless index without contentless_delete, whose triggers delete a
//   row's entry by its old values (a candidate: no tombstones to check rows against).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openDatabase } from '../src/core/db/connection.js';
import { migrate } from '../src/core/db/migrate.js';
import { compactSearchIndex, searchIndexState } from '../src/core/db/searchIndex.js';
import { openSqliteStore } from '../src/core/db/store.js';
import { seedContacts } from './seed.js';

const N = Number(process.argv[2] ?? process.env.BENCH_CONTACTS ?? 1_000_000);
const VARIANTS = (process.env.BENCH_VARIANTS ?? 'svc,before-0017,no-tombstones').split(',');
const BATCH = 2_000;

if (!Number.isInteger(N) || N < BATCH) {
  console.error(`usage: npm run bench:search [contacts]   (default 1000000, at least ${BATCH})`);
  process.exit(2);
}

/** The candidate's index and triggers, in place of migration 0008/0013's (same columns, same rows). */
const NO_TOMBSTONES = `
DROP TRIGGER contacts_after_insert; DROP TRIGGER contacts_after_update; DROP TRIGGER contacts_after_delete; DROP TABLE contacts_fts;
CREATE VIRTUAL TABLE contacts_fts USING fts5(ws, email, phone, first_name, last_name, tokenize = 'trigram', content = '');
INSERT INTO contacts_fts (contacts_fts, rank) VALUES ('automerge', 16);
CREATE TRIGGER contacts_after_insert AFTER INSERT ON contacts BEGIN
  INSERT INTO contacts_fts (rowid, ws, email, phone, first_name, last_name) VALUES (NEW.id, 'w' || NEW.workspace_id || 'w', NEW.email, NEW.phone, NEW.first_name, NEW.last_name);
  INSERT INTO workspace_counters (workspace_id, contacts) VALUES (NEW.workspace_id, 1) ON CONFLICT (workspace_id) DO UPDATE SET contacts = contacts + 1;
END;
CREATE TRIGGER contacts_after_update AFTER UPDATE OF workspace_id, email, phone, first_name, last_name ON contacts
  WHEN OLD.email IS NOT NEW.email OR OLD.phone IS NOT NEW.phone OR OLD.first_name IS NOT NEW.first_name OR OLD.last_name IS NOT NEW.last_name OR OLD.workspace_id IS NOT NEW.workspace_id
BEGIN
  INSERT INTO contacts_fts (contacts_fts, rowid, ws, email, phone, first_name, last_name) VALUES ('delete', OLD.id, 'w' || OLD.workspace_id || 'w', OLD.email, OLD.phone, OLD.first_name, OLD.last_name);
  INSERT INTO contacts_fts (rowid, ws, email, phone, first_name, last_name) VALUES (NEW.id, 'w' || NEW.workspace_id || 'w', NEW.email, NEW.phone, NEW.first_name, NEW.last_name);
END;
CREATE TRIGGER contacts_after_delete AFTER DELETE ON contacts BEGIN
  INSERT INTO contacts_fts (contacts_fts, rowid, ws, email, phone, first_name, last_name) VALUES ('delete', OLD.id, 'w' || OLD.workspace_id || 'w', OLD.email, OLD.phone, OLD.first_name, OLD.last_name);
  UPDATE workspace_counters SET contacts = contacts - 1 WHERE workspace_id = OLD.workspace_id;
END;`;

const seconds = (since: number) => ((performance.now() - since) / 1000).toFixed(1);

console.log(`search index: two workspaces of ${N.toLocaleString('en')} contacts, the second's renamed ${BATCH.toLocaleString('en')} to a transaction`);
for (const variant of VARIANTS) {
  const dir = mkdtempSync(join(tmpdir(), 'svc-bench-search-'));
  try {
    const file = join(dir, 'svc.db');
    const setup = openDatabase(file);
    migrate(setup);
    const c = setup.$client;
    if (variant === 'before-0017') c.exec("INSERT INTO contacts_fts (contacts_fts, rank) VALUES ('deletemerge', 10)");
    else if (variant === 'no-tombstones') c.exec(NO_TOMBSTONES);
    else if (variant !== 'svc') throw new Error(`unknown variant ${variant}`);
    for (const name of ['a', 'b']) c.prepare('INSERT INTO workspaces (name, plan) VALUES (?, ?)').run(name, 'PRO');
    const [a, b] = (c.prepare('SELECT id FROM workspaces ORDER BY id DESC LIMIT 2').pluck().all() as number[]).reverse() as [number, number];
    seedContacts(c, a, N, { prefix: 'a' });
    seedContacts(c, b, N, { prefix: 'b' });
    setup.$client.close();

    const store = openSqliteStore(file);
    const w = store.writer.$client;
    // As an import writes: a 16 MiB page cache, single-row UPDATEs in transactions of 2,000.
    w.pragma('cache_size = -16384');
    const ids = w.prepare('SELECT id FROM contacts WHERE workspace_id = ? ORDER BY id').pluck().all(b) as number[];
    const rename = w.prepare('UPDATE contacts SET last_name = ?, updated_at = ? WHERE id = ? AND workspace_id = ?');
    const renameAll = w.transaction((part: number[], at: string) => {
      for (const id of part) rename.run(`Lovelace${id}`, at, id, b);
    });
    let t = performance.now();
    for (let i = 0; i < ids.length; i += BATCH) renameAll(ids.slice(i, i + BATCH), new Date().toISOString());
    const renamed = seconds(t);
    const left = await searchIndexState(store);
    t = performance.now();
    // Before migration 0017 nothing compacted the index: FTS5 merged as it went.
    const { steps } = variant === 'before-0017' ? { steps: 0 } : await compactSearchIndex(store, { force: true });
    const compacted = seconds(t);
    const search = (order: 'DESC' | 'ASC') => {
      const q = store.writer.$client.prepare(`SELECT rowid FROM contacts_fts WHERE contacts_fts MATCH ? ORDER BY rowid ${order} LIMIT 51`);
      const times: number[] = [];
      for (let k = 0; k < 100; k++) {
        const id = ids[(k * 7919) % ids.length]!;
        const t0 = performance.now();
        const found = q.all(`ws : "w${b}w" AND {email phone first_name last_name} : "Lovelace${id}"`) as { rowid: number }[];
        times.push(performance.now() - t0);
        if (!found.some((r) => r.rowid === id)) throw new Error(`${variant}: Lovelace${id} not found`);
      }
      times.sort((x, y) => x - y);
      return `p50 ${times[50]!.toFixed(1)} / p99 ${times[99]!.toFixed(1)} ms`;
    };
    console.log(
      `${variant.padEnd(14)} renamed in ${renamed} s (tombstones left ${left.tombstones.toLocaleString('en')}); compacted in ${compacted} s (${steps} steps); a renamed contact's search, newest first ${search('DESC')}, oldest first ${search('ASC')}`,
    );
    await store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
