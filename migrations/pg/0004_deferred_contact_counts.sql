-- Written by hand, like 0001 and 0003 (drizzle-kit cannot express triggers). A new contact
-- counts itself in its workspace's row of workspace_counters, the one row every new contact
-- of a workspace writes: as a plain AFTER trigger it held that row's lock from its INSERT
-- until its transaction's COMMIT, through every statement the client sent in between, so
-- webhooks creating contacts on several connections waited for each other (36 ms per INSERT
-- at 430 new contacts/s in bench:cluster). As a deferred constraint trigger it runs at
-- COMMIT: the row is held for the commit only. The count is the same; only a read of
-- workspace_counters inside the creating transaction, which svc never makes, would differ.
DROP TRIGGER "contacts_after_insert" ON "contacts";
--> statement-breakpoint
CREATE CONSTRAINT TRIGGER "contacts_after_insert" AFTER INSERT ON "contacts" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "contacts_after_insert"();
