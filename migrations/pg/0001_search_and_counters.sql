-- Written by hand: drizzle-kit cannot express extensions, expression indexes with an
-- operator class it does not know, or triggers. SQLite does the same in migration 0008 with
-- an FTS5 table and triggers; here a trigram index replaces the FTS5 table, and the
-- triggers keep only the counters (SQLite's contacts_after_update exists only for FTS5).
--
-- Substring search (`GET /contacts?q=`): pg_trgm is a trusted extension, so the owner of
-- the database may create it without being a superuser.
CREATE EXTENSION IF NOT EXISTS pg_trgm;
--> statement-breakpoint
-- A search must use exactly this expression to use the index, with the workspace beside it:
--   workspace_id = $1 AND (coalesce(email, '') || E'\n' || coalesce(phone, '') || E'\n' || coalesce(first_name, '') || E'\n' || coalesce(last_name, '')) ILIKE '%' || $2 || '%'
-- The newline keeps a match inside one field, as FTS5's phrase is matched inside one column.
-- (concat_ws would read better but is only STABLE, and an index expression must be IMMUTABLE.)
CREATE INDEX "contacts_search_idx" ON "contacts" USING gin ((coalesce("email", '') || E'\n' || coalesce("phone", '') || E'\n' || coalesce("first_name", '') || E'\n' || coalesce("last_name", '')) gin_trgm_ops);
--> statement-breakpoint
-- The counters below, like SQLite's triggers, change in the same transaction as the rows
-- they count, so /billing/plan and /tags read one row instead of counting.
CREATE FUNCTION "contacts_after_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "workspace_counters" ("workspace_id", "contacts") VALUES (NEW."workspace_id", 1)
    ON CONFLICT ("workspace_id") DO UPDATE SET "contacts" = "workspace_counters"."contacts" + 1;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "contacts_after_insert" AFTER INSERT ON "contacts" FOR EACH ROW EXECUTE FUNCTION "contacts_after_insert"();
--> statement-breakpoint
CREATE FUNCTION "contacts_after_delete"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "workspace_counters" SET "contacts" = "contacts" - 1 WHERE "workspace_id" = OLD."workspace_id";
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "contacts_after_delete" AFTER DELETE ON "contacts" FOR EACH ROW EXECUTE FUNCTION "contacts_after_delete"();
--> statement-breakpoint
CREATE FUNCTION "contact_tags_after_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO "tag_counts" ("workspace_id", "tag_key", "name", "contacts") VALUES (NEW."workspace_id", NEW."tag_key", NEW."name", 1)
    ON CONFLICT ("workspace_id", "tag_key") DO UPDATE SET "contacts" = "tag_counts"."contacts" + 1;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "contact_tags_after_insert" AFTER INSERT ON "contact_tags" FOR EACH ROW EXECUTE FUNCTION "contact_tags_after_insert"();
--> statement-breakpoint
CREATE FUNCTION "contact_tags_after_delete"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE "tag_counts" SET "contacts" = "contacts" - 1 WHERE "workspace_id" = OLD."workspace_id" AND "tag_key" = OLD."tag_key";
  DELETE FROM "tag_counts" WHERE "workspace_id" = OLD."workspace_id" AND "tag_key" = OLD."tag_key" AND "contacts" <= 0;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE TRIGGER "contact_tags_after_delete" AFTER DELETE ON "contact_tags" FOR EACH ROW EXECUTE FUNCTION "contact_tags_after_delete"();
