-- The contact search index (contacts_fts, FTS5, contentless_delete) no longer rewrites a
-- segment on its own when a tenth of its rows were deleted or changed ('deletemerge', FTS5's
-- default 10): svc compacts it itself, in small steps (src/core/db/searchIndex.ts), after an
-- import and from the server's periodic maintenance. Left to FTS5, that rewrite happened inside
-- whichever transaction crossed the line, all at once: re-importing 200,000 of a million
-- contacts with new names spent most of its time there (checking every row of the merged
-- segments against the deleted ones), and held the one writer for seconds at a time.
INSERT INTO `contacts_fts` (`contacts_fts`, `rank`) VALUES ('deletemerge', 100);
