-- Written by hand, as 0001 and 0008 (drizzle-kit cannot express triggers with transition tables).
-- Which stretches of a workspace's contacts can hold a search's matches, so that a search whose
-- matches lie far below the cursor seeks to them instead of reading them all (issue 9, reads at
-- scale). The trigram index (contacts_search_idx) finds a `q`'s matches but holds no order:
-- below its walk of 2,000, a page read every match and sorted them, 111,111 for `q=Smith7` at a
-- million contacts (p50 56-77 ms). Here a row says that some contact of the workspace whose id
-- lies in [bucket * 2048, (bucket + 1) * 2048) has this trigram in its searched text, as
-- pg_trgm's show_trgm gives them (the words' three-character pieces, and their padded ends):
-- a bucket holding every piece of a `q` may hold a match, one lacking any cannot. The pieces
-- of a `q` looked up are those of its runs of ASCII letters and digits (a word's inner pieces,
-- which every text holding `q` has among its own). A page asks for its next candidate buckets
-- below the cursor, newest first (one index range per piece), and reads each along the
-- primary key, `q` checked on each contact (contacts.ts, pgMatches). show_trgm, in C, made
-- them several times faster than three-character substrings cut in SQL.
--
-- The rows are a superset: added when a contact is written, never removed (a renamed or deleted
-- contact's pieces only make its bucket a candidate that a page reads in vain). No unique key:
-- two writers adding the same piece at once must not wait for each other, so a row is added
-- when it is not seen, and the rare duplicate is harmless.
CREATE TABLE "contact_search_buckets" (
	"workspace_id" bigint NOT NULL,
	"trigram" text NOT NULL,
	"bucket" integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX "contact_search_buckets_idx" ON "contact_search_buckets" ("workspace_id", "trigram", "bucket");
--> statement-breakpoint
CREATE FUNCTION "contact_search_buckets_after_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "contact_search_buckets" ("workspace_id", "trigram", "bucket")
  SELECT p."workspace_id", p."trigram", p."bucket"
    FROM (SELECT DISTINCT n."workspace_id", t AS "trigram", (n."id" >> 11)::integer AS "bucket"
            FROM "new_rows" n CROSS JOIN LATERAL unnest(show_trgm(n."search_text")) AS t) p
   WHERE NOT EXISTS (SELECT 1 FROM "contact_search_buckets" b WHERE b."workspace_id" = p."workspace_id" AND b."trigram" = p."trigram" AND b."bucket" = p."bucket");
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "contact_search_buckets_after_insert" AFTER INSERT ON "contacts" REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT EXECUTE FUNCTION "contact_search_buckets_after_insert"();
--> statement-breakpoint
-- An update adds the pieces of the contacts whose searched text changed (most updates change
-- attributes or tags alone).
CREATE FUNCTION "contact_search_buckets_after_update"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "contact_search_buckets" ("workspace_id", "trigram", "bucket")
  SELECT p."workspace_id", p."trigram", p."bucket"
    FROM (SELECT DISTINCT n."workspace_id", t AS "trigram", (n."id" >> 11)::integer AS "bucket"
            FROM "new_rows" n JOIN "old_rows" o ON o."id" = n."id" CROSS JOIN LATERAL unnest(show_trgm(n."search_text")) AS t
           WHERE n."search_text" IS DISTINCT FROM o."search_text" OR n."workspace_id" IS DISTINCT FROM o."workspace_id") p
   WHERE NOT EXISTS (SELECT 1 FROM "contact_search_buckets" b WHERE b."workspace_id" = p."workspace_id" AND b."trigram" = p."trigram" AND b."bucket" = p."bucket");
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "contact_search_buckets_after_update" AFTER UPDATE ON "contacts" REFERENCING OLD TABLE AS "old_rows" NEW TABLE AS "new_rows" FOR EACH STATEMENT EXECUTE FUNCTION "contact_search_buckets_after_update"();
--> statement-breakpoint
-- The contacts already there.
INSERT INTO "contact_search_buckets" ("workspace_id", "trigram", "bucket")
SELECT DISTINCT c."workspace_id", t, (c."id" >> 11)::integer
  FROM "contacts" c CROSS JOIN LATERAL unnest(show_trgm(c."search_text")) AS t;
