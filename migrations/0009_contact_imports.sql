CREATE TABLE `contact_imports` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`workspace_id` integer NOT NULL,
	`status` text DEFAULT 'RUNNING' NOT NULL,
	`format` text NOT NULL,
	`mode` text NOT NULL,
	`created` integer DEFAULT 0 NOT NULL,
	`updated` integer DEFAULT 0 NOT NULL,
	`skipped` integer DEFAULT 0 NOT NULL,
	`error_count` integer DEFAULT 0 NOT NULL,
	`errors` text DEFAULT '[]' NOT NULL,
	`lines` integer DEFAULT 0 NOT NULL,
	`bytes_read` integer DEFAULT 0 NOT NULL,
	`bytes_total` integer,
	`failure_code` text,
	`failure_detail` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`heartbeat_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`finished_at` text,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `contact_imports_workspace_idx` ON `contact_imports` (`workspace_id`,`id`);--> statement-breakpoint
CREATE INDEX `contact_imports_status_idx` ON `contact_imports` (`status`);