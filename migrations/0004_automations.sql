CREATE TABLE `automations` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`workspace_id` integer NOT NULL,
	`name` text NOT NULL,
	`status` text DEFAULT 'DRAFT' NOT NULL,
	`graph` text NOT NULL,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade
);
--> statement-breakpoint
CREATE INDEX `automations_workspace_idx` ON `automations` (`workspace_id`,`id`);--> statement-breakpoint
PRAGMA foreign_keys=OFF;--> statement-breakpoint
CREATE TABLE `__new_workflow_runs` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`workspace_id` integer NOT NULL,
	`workflow_id` integer,
	`automation_id` integer,
	`contact_id` integer,
	`status` text DEFAULT 'QUEUED' NOT NULL,
	`definition` text NOT NULL,
	`step_states` text DEFAULT '[]' NOT NULL,
	`trigger` text NOT NULL,
	`run_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`lease_owner` text,
	`lease_until` text,
	`created_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`updated_at` text DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')) NOT NULL,
	`finished_at` text,
	FOREIGN KEY (`workspace_id`) REFERENCES `workspaces`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`workflow_id`) REFERENCES `workflows`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`automation_id`) REFERENCES `automations`(`id`) ON UPDATE no action ON DELETE cascade,
	FOREIGN KEY (`contact_id`) REFERENCES `contacts`(`id`) ON UPDATE no action ON DELETE set null
);
--> statement-breakpoint
-- automation_id is new: drizzle-kit listed it in the SELECT too, which the old table lacks.
INSERT INTO `__new_workflow_runs`("id", "workspace_id", "workflow_id", "contact_id", "status", "definition", "step_states", "trigger", "run_at", "lease_owner", "lease_until", "created_at", "updated_at", "finished_at") SELECT "id", "workspace_id", "workflow_id", "contact_id", "status", "definition", "step_states", "trigger", "run_at", "lease_owner", "lease_until", "created_at", "updated_at", "finished_at" FROM `workflow_runs`;--> statement-breakpoint
DROP TABLE `workflow_runs`;--> statement-breakpoint
ALTER TABLE `__new_workflow_runs` RENAME TO `workflow_runs`;--> statement-breakpoint
PRAGMA foreign_keys=ON;--> statement-breakpoint
CREATE INDEX `workflow_runs_workflow_idx` ON `workflow_runs` (`workflow_id`,`id`);--> statement-breakpoint
CREATE INDEX `workflow_runs_automation_idx` ON `workflow_runs` (`automation_id`,`id`);--> statement-breakpoint
CREATE INDEX `workflow_runs_due_idx` ON `workflow_runs` (`status`,`run_at`);