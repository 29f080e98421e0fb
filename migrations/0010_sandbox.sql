CREATE TABLE `sandbox_requests` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`workspace_id` integer NOT NULL,
	`run_id` integer,
	`step_index` integer,
	`method` text NOT NULL,
	`url` text NOT NULL,
	`headers` text DEFAULT '{}' NOT NULL,
	`body` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `sandbox_requests_workspace_idx` ON `sandbox_requests` (`workspace_id`,`id`);--> statement-breakpoint
CREATE INDEX `sandbox_requests_created_idx` ON `sandbox_requests` (`created_at`);--> statement-breakpoint
ALTER TABLE `workspaces` ADD `sandbox_of` integer REFERENCES workspaces(id) ON DELETE cascade;--> statement-breakpoint
CREATE UNIQUE INDEX `workspaces_sandbox_of_unique` ON `workspaces` (`sandbox_of`);