CREATE TABLE `run_month_counts` (
	`workspace_id` integer NOT NULL,
	`month` text NOT NULL,
	`runs` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`workspace_id`, `month`),
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `tag_counts` (
	`workspace_id` integer NOT NULL,
	`tag_key` text NOT NULL,
	`name` text NOT NULL,
	`contacts` integer DEFAULT 0 NOT NULL,
	PRIMARY KEY(`workspace_id`, `tag_key`),
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `workspace_counters` (
	`workspace_id` integer PRIMARY KEY NOT NULL,
	`contacts` integer DEFAULT 0 NOT NULL,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
DROP INDEX `contact_tags_workspace_tag_idx`;--> statement-breakpoint
CREATE INDEX `contact_tags_workspace_tag_contact_idx` ON `contact_tags` (`workspace_id`,`tag_key`,`contact_id`);--> statement-breakpoint
CREATE INDEX `audit_logs_workspace_action_idx` ON `audit_logs` (`workspace_id`,`action`);--> statement-breakpoint
CREATE INDEX `contacts_workspace_idx` ON `contacts` (`workspace_id`,`id`);--> statement-breakpoint
CREATE INDEX `workflow_runs_workspace_idx` ON `workflow_runs` (`workspace_id`,`id`);--> statement-breakpoint
CREATE INDEX `workflow_runs_workspace_status_idx` ON `workflow_runs` (`workspace_id`,`status`,`id`);--> statement-breakpoint
CREATE INDEX `workflow_runs_contact_idx` ON `workflow_runs` (`contact_id`,`id`);--> statement-breakpoint
-- Written by hand from here on: drizzle-kit cannot express FTS5 tables or triggers.
-- Substring search (`GET /contacts?q=`) goes through an FTS5 trigram index. It is
-- contentless (the text lives in contacts only) and keeps each row's workspace in the `ws`
-- column as 'w<id>w', so a search walks its own workspace's matches, never another's.
CREATE VIRTUAL TABLE `contacts_fts` USING fts5(`ws`, `email`, `phone`, `first_name`, `last_name`, tokenize = 'trigram', content = '', contentless_delete = 1);
--> statement-breakpoint
INSERT INTO `contacts_fts` (`rowid`, `ws`, `email`, `phone`, `first_name`, `last_name`)
  SELECT `id`, 'w' || `workspace_id` || 'w', `email`, `phone`, `first_name`, `last_name` FROM `contacts`;
--> statement-breakpoint
INSERT INTO `workspace_counters` (`workspace_id`, `contacts`) SELECT `workspace_id`, count(*) FROM `contacts` GROUP BY `workspace_id`;
--> statement-breakpoint
INSERT INTO `tag_counts` (`workspace_id`, `tag_key`, `name`, `contacts`)
  SELECT `workspace_id`, `tag_key`, min(`name`), count(*) FROM `contact_tags` GROUP BY `workspace_id`, `tag_key`;
--> statement-breakpoint
INSERT INTO `run_month_counts` (`workspace_id`, `month`, `runs`)
  SELECT `workspace_id`, substr(`created_at`, 1, 7), count(*) FROM `workflow_runs` GROUP BY `workspace_id`, substr(`created_at`, 1, 7);
--> statement-breakpoint
CREATE TRIGGER `contacts_after_insert` AFTER INSERT ON `contacts` BEGIN
  INSERT INTO `contacts_fts` (`rowid`, `ws`, `email`, `phone`, `first_name`, `last_name`)
    VALUES (NEW.`id`, 'w' || NEW.`workspace_id` || 'w', NEW.`email`, NEW.`phone`, NEW.`first_name`, NEW.`last_name`);
  INSERT INTO `workspace_counters` (`workspace_id`, `contacts`) VALUES (NEW.`workspace_id`, 1)
    ON CONFLICT (`workspace_id`) DO UPDATE SET `contacts` = `contacts` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `contacts_after_update` AFTER UPDATE OF `email`, `phone`, `first_name`, `last_name` ON `contacts` BEGIN
  DELETE FROM `contacts_fts` WHERE `rowid` = OLD.`id`;
  INSERT INTO `contacts_fts` (`rowid`, `ws`, `email`, `phone`, `first_name`, `last_name`)
    VALUES (NEW.`id`, 'w' || NEW.`workspace_id` || 'w', NEW.`email`, NEW.`phone`, NEW.`first_name`, NEW.`last_name`);
END;
--> statement-breakpoint
CREATE TRIGGER `contacts_after_delete` AFTER DELETE ON `contacts` BEGIN
  DELETE FROM `contacts_fts` WHERE `rowid` = OLD.`id`;
  UPDATE `workspace_counters` SET `contacts` = `contacts` - 1 WHERE `workspace_id` = OLD.`workspace_id`;
END;
--> statement-breakpoint
CREATE TRIGGER `contact_tags_after_insert` AFTER INSERT ON `contact_tags` BEGIN
  INSERT INTO `tag_counts` (`workspace_id`, `tag_key`, `name`, `contacts`) VALUES (NEW.`workspace_id`, NEW.`tag_key`, NEW.`name`, 1)
    ON CONFLICT (`workspace_id`, `tag_key`) DO UPDATE SET `contacts` = `contacts` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `contact_tags_after_delete` AFTER DELETE ON `contact_tags` BEGIN
  UPDATE `tag_counts` SET `contacts` = `contacts` - 1 WHERE `workspace_id` = OLD.`workspace_id` AND `tag_key` = OLD.`tag_key`;
  DELETE FROM `tag_counts` WHERE `workspace_id` = OLD.`workspace_id` AND `tag_key` = OLD.`tag_key` AND `contacts` <= 0;
END;
--> statement-breakpoint
CREATE TRIGGER `workflow_runs_after_insert` AFTER INSERT ON `workflow_runs` BEGIN
  INSERT INTO `run_month_counts` (`workspace_id`, `month`, `runs`) VALUES (NEW.`workspace_id`, substr(NEW.`created_at`, 1, 7), 1)
    ON CONFLICT (`workspace_id`, `month`) DO UPDATE SET `runs` = `runs` + 1;
END;
