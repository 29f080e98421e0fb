-- The contact search index (contacts_fts, FTS5) merges a level's segments once 16 of them
-- are there instead of FTS5's default 4: each contact's trigrams are rewritten by fewer
-- merges on their way up the levels. A search reads at most 15 segments a level instead of 3
-- (over fewer levels). See README, "Reads at scale and bulk import" (`npm run bench:scale`):
-- imports are faster; searches over a million are as fast as before but for a rare tag
-- beside a common q, which walks more segments.
INSERT INTO `contacts_fts` (`contacts_fts`, `rank`) VALUES ('automerge', 16);
