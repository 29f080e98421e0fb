DROP INDEX "webhook_events_idempotency_idx";--> statement-breakpoint
DROP INDEX "workflow_runs_automation_idx";--> statement-breakpoint
DROP INDEX "workflow_runs_due_idx";--> statement-breakpoint
DROP INDEX "workflow_runs_ready_idx";--> statement-breakpoint
DROP INDEX "workflow_runs_finished_idx";--> statement-breakpoint
CREATE INDEX "workflow_runs_running_idx" ON "workflow_runs" USING btree ("lease_until") WHERE "workflow_runs"."status" = 'RUNNING';--> statement-breakpoint
CREATE INDEX "webhook_events_idempotency_idx" ON "webhook_events" USING btree ("workflow_id","idempotency_key") WHERE "webhook_events"."idempotency_key" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "workflow_runs_automation_idx" ON "workflow_runs" USING btree ("automation_id","id") WHERE "workflow_runs"."automation_id" IS NOT NULL;--> statement-breakpoint
CREATE INDEX "workflow_runs_due_idx" ON "workflow_runs" USING btree ("run_at") WHERE "workflow_runs"."status" = 'WAITING';--> statement-breakpoint
CREATE INDEX "workflow_runs_ready_idx" ON "workflow_runs" USING btree ("workspace_id","run_at","id") WHERE "workflow_runs"."status" = 'QUEUED';--> statement-breakpoint
CREATE INDEX "workflow_runs_finished_idx" ON "workflow_runs" USING btree ("finished_at") WHERE "workflow_runs"."finished_at" IS NOT NULL;