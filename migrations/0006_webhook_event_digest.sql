ALTER TABLE `webhook_events` ADD `body_size` integer;--> statement-breakpoint
ALTER TABLE `webhook_events` ADD `body_sha256` text;