-- Tag counts without a hot row in the engine's commits. The engine's group commits set
-- svc.defer_tag_counts for their transaction, skip these triggers, and add up each batch's
-- changes to tag_counts themselves just before COMMIT, one statement per tag in a fixed order
-- (engine/committer.ts). Every other write still counts through the triggers.
CREATE OR REPLACE FUNCTION "contact_tags_after_insert"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('svc.defer_tag_counts', true) = 'on' THEN
    RETURN NULL;
  END IF;
  INSERT INTO "tag_counts" ("workspace_id", "tag_key", "name", "contacts") VALUES (NEW."workspace_id", NEW."tag_key", NEW."name", 1)
    ON CONFLICT ("workspace_id", "tag_key") DO UPDATE SET "contacts" = "tag_counts"."contacts" + 1;
  RETURN NULL;
END;
$$;
--> statement-breakpoint
CREATE OR REPLACE FUNCTION "contact_tags_after_delete"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF current_setting('svc.defer_tag_counts', true) = 'on' THEN
    RETURN NULL;
  END IF;
  UPDATE "tag_counts" SET "contacts" = "contacts" - 1 WHERE "workspace_id" = OLD."workspace_id" AND "tag_key" = OLD."tag_key";
  DELETE FROM "tag_counts" WHERE "workspace_id" = OLD."workspace_id" AND "tag_key" = OLD."tag_key" AND "contacts" <= 0;
  RETURN NULL;
END;
$$;
