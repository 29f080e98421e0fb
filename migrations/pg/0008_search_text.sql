-- Written by hand, as 0001 (drizzle-kit cannot express an index with pg_trgm's operator class).
-- The searched text of a contact is now stored, lower-cased once when the row is written,
-- instead of computed and case-folded again for every row a search checks. A search checks
-- each contact of its walk (the 2,000 below its cursor) and every match the trigram index
-- returns (the index is lossy: each candidate is rechecked), and ILIKE folded the case of
-- both sides on each check (lower() of the whole text, about 1 µs a row here) where LIKE on
-- text already folded compares bytes: at a million contacts `q=Smith77` (11,111 matches)
-- spent 16 of its 20 ms in that recheck (issue 9, reads at scale).
-- The expression is ILIKE's own: for a multi-byte encoding PostgreSQL's ILIKE is LIKE over
-- lower() of both sides, so `search_text LIKE lower(pattern)` matches exactly what it did.
-- The column is PostgreSQL's alone (SQLite's FTS5 index holds the text folded by itself);
-- no query outside dialect.ts reads it, and drizzle's schema does not declare it, so no
-- SELECT of contacts carries it.
ALTER TABLE "contacts" ADD COLUMN "search_text" text GENERATED ALWAYS AS (lower(coalesce("email", '') || E'\n' || coalesce("phone", '') || E'\n' || coalesce("first_name", '') || E'\n' || coalesce("last_name", ''))) STORED;
--> statement-breakpoint
DROP INDEX "contacts_search_idx";
--> statement-breakpoint
CREATE INDEX "contacts_search_idx" ON "contacts" USING gin ("search_text" gin_trgm_ops);
