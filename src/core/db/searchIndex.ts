import type { SqliteStore } from './store.js';

/**
 * Upkeep of SQLite's contact search index (`contacts_fts`, FTS5 trigram, contentless_delete).
 * A changed or deleted contact leaves a tombstone for its old row in the index's segments; a
 * search walks past them until the segments are rewritten. FTS5 would rewrite a segment by
 * itself once a tenth of it is tombstones ('deletemerge'), inside whichever transaction
 * crossed the line, all at once and slowly (it checks every row it copies against the
 * tombstones). Migration 0017 turns that off, and svc compacts the index here instead, in
 * steps of MERGE_PAGES pages, each its own short transaction, so that webhooks and API writes
 * go on between them: after an import, and from the server's periodic maintenance (app.ts).
 * PostgreSQL's search index (pg_trgm) needs none of this.
 */

/**
 * Tombstones are kept in hash tables on pages of their own in contacts_fts_data, at rowids from
 * 2^53 up (FTS5_TOMBSTONE_ROWID in SQLite's fts5_index.c: the segment id plus 2^16, shifted 37
 * bits); a segment's pages and the index's structure record sit below. A range of the primary
 * key: a seek, whatever the index's size. Each such page says how many tombstones it holds in
 * its bytes 4-7 (a big-endian integer, after the key size and a flag: FTS5's file format).
 */
const TOMBSTONE_PAGES = 'SELECT block FROM contacts_fts_data WHERE id >= 9007199254740992';
/**
 * Compacted when the tombstones are at least a tenth of the contacts (as FTS5's own default
 * would), and this many: a compaction rewrites the whole index, so it costs at most ten rows
 * rewritten for each contact changed.
 */
const MIN_TOMBSTONES = 1_000;
const TOMBSTONE_SHARE = 0.1;
/** Pages written per step: about 50 ms of work each on two million contacts (`npm run bench:search`, 2 vCPUs). */
const MERGE_PAGES = 500;
/** A stop for a loop that never finishes (new segments keep arriving): far above any index's needs. */
const MAX_STEPS = 100_000;

export interface SearchIndexState {
  /** Tombstones in the index (deleted or changed contacts' old rows not yet compacted away). */
  tombstones: number;
  /** Contacts of every workspace (the counters the API keeps). */
  contacts: number;
}

/** How many tombstones the index holds, next to the contacts it indexes. */
export async function searchIndexState(store: SqliteStore): Promise<SearchIndexState> {
  return store.exclusive((w) => {
    let tombstones = 0;
    for (const block of w.$client.prepare(TOMBSTONE_PAGES).pluck().iterate() as Iterable<Buffer>) {
      if (block.length >= 8) tombstones += block.readUInt32BE(4);
    }
    const { contacts } = w.$client.prepare('SELECT coalesce(sum(contacts), 0) AS contacts FROM workspace_counters').get() as { contacts: number };
    return { tombstones, contacts };
  });
}

/** Whether the index holds tombstones enough to be worth rewriting. */
export function needsCompaction(state: SearchIndexState): boolean {
  return state.tombstones >= Math.max(MIN_TOMBSTONES, state.contacts * TOMBSTONE_SHARE);
}

/**
 * Rewrites the search index into one segment without its tombstones, when it holds many (or
 * always, `force`), a step at a time: FTS5's 'merge' command, first with a negative page count
 * (every segment on one level, so that all of them are merged), then positive ones that carry
 * that merge on, until a step changes nothing (FTS5's documented way to optimize in steps).
 * `stop` is asked between steps (a server shutting down); the index is consistent after every one.
 */
export async function compactSearchIndex(store: SqliteStore, opts: { force?: boolean; stop?: () => boolean } = {}): Promise<{ steps: number }> {
  if (!opts.force && !needsCompaction(await searchIndexState(store))) return { steps: 0 };
  let steps = 0;
  while (steps < MAX_STEPS && !opts.stop?.()) {
    const pages = steps === 0 ? -MERGE_PAGES : MERGE_PAGES;
    const changed = await store.exclusive((w) => {
      const c = w.$client;
      const total = c.prepare('SELECT total_changes() AS n').pluck();
      const before = total.get() as number;
      c.prepare("INSERT INTO contacts_fts (contacts_fts, rank) VALUES ('merge', ?)").run(pages);
      return (total.get() as number) - before;
    });
    steps++;
    if (changed < 2) break;
    // Whatever waits for the writer (a batch of webhooks) goes before the next step.
    await new Promise((resolve) => setImmediate(resolve));
  }
  return { steps };
}
