CREATE INDEX `audit_logs_at_idx` ON `audit_logs` (`at`);--> statement-breakpoint
CREATE INDEX `delivery_attempts_created_idx` ON `delivery_attempts` (`created_at`);--> statement-breakpoint
CREATE INDEX `sessions_expires_idx` ON `sessions` (`expires_at`);--> statement-breakpoint
CREATE INDEX `workflow_runs_finished_idx` ON `workflow_runs` (`finished_at`);