CREATE TABLE `channel_settings` (
	`workspace_id` integer NOT NULL,
	`channel` text NOT NULL,
	`provider` text NOT NULL,
	`settings` text DEFAULT '{}' NOT NULL,
	`credentials` text,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	PRIMARY KEY(`workspace_id`, `channel`),
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE TABLE `delivery_attempts` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`workspace_id` integer NOT NULL,
	`channel` text NOT NULL,
	`provider` text NOT NULL,
	`to` text NOT NULL,
	`status` text DEFAULT 'QUEUED' NOT NULL,
	`attempt` integer DEFAULT 1 NOT NULL,
	`error` text,
	`provider_message_id` text,
	`run_id` integer,
	`step_index` integer,
	`template_id` integer,
	`rendered` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `delivery_attempts_workspace_idx` ON `delivery_attempts` (`workspace_id`,`id`);--> statement-breakpoint
CREATE INDEX `delivery_attempts_run_step_idx` ON `delivery_attempts` (`run_id`,`step_index`);--> statement-breakpoint
CREATE INDEX `delivery_attempts_status_idx` ON `delivery_attempts` (`workspace_id`,`status`);--> statement-breakpoint
CREATE TABLE `templates` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`workspace_id` integer NOT NULL,
	`name` text NOT NULL,
	`channel` text NOT NULL,
	`content` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `templates_workspace_idx` ON `templates` (`workspace_id`,`id`);