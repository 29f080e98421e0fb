-- The substring search index (contacts_fts) is rewritten only when a searched field really
-- changed. An UPDATE naming email, phone or a name fired the trigger even when it wrote the
-- same values, as the engine's update_contact step and PATCH /contacts do (they write every
-- field): a delete and an insert of every trigram of the contact, the largest part of an
-- update_contact step (issue 9: bench:engine's drain, about a quarter of its CPU per run).
DROP TRIGGER IF EXISTS `contacts_after_update`;
--> statement-breakpoint
CREATE TRIGGER `contacts_after_update` AFTER UPDATE OF `email`, `phone`, `first_name`, `last_name` ON `contacts`
  WHEN OLD.`email` IS NOT NEW.`email` OR OLD.`phone` IS NOT NEW.`phone`
    OR OLD.`first_name` IS NOT NEW.`first_name` OR OLD.`last_name` IS NOT NEW.`last_name`
    OR OLD.`workspace_id` IS NOT NEW.`workspace_id`
BEGIN
  DELETE FROM `contacts_fts` WHERE `rowid` = OLD.`id`;
  INSERT INTO `contacts_fts` (`rowid`, `ws`, `email`, `phone`, `first_name`, `last_name`)
    VALUES (NEW.`id`, 'w' || NEW.`workspace_id` || 'w', NEW.`email`, NEW.`phone`, NEW.`first_name`, NEW.`last_name`);
END;
