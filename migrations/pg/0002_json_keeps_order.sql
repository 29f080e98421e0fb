ALTER TABLE "audit_logs" ALTER COLUMN "metadata" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "audit_logs" ALTER COLUMN "metadata" SET DEFAULT '{}'::json;--> statement-breakpoint
ALTER TABLE "automations" ALTER COLUMN "graph" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "channel_settings" ALTER COLUMN "settings" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "channel_settings" ALTER COLUMN "settings" SET DEFAULT '{}'::json;--> statement-breakpoint
ALTER TABLE "contact_imports" ALTER COLUMN "errors" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "contact_imports" ALTER COLUMN "errors" SET DEFAULT '[]'::json;--> statement-breakpoint
ALTER TABLE "contacts" ALTER COLUMN "attributes" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "contacts" ALTER COLUMN "attributes" SET DEFAULT '{}'::json;--> statement-breakpoint
ALTER TABLE "delivery_attempts" ALTER COLUMN "rendered" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "sandbox_requests" ALTER COLUMN "headers" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "sandbox_requests" ALTER COLUMN "headers" SET DEFAULT '{}'::json;--> statement-breakpoint
ALTER TABLE "templates" ALTER COLUMN "content" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "workflow_runs" ALTER COLUMN "definition" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "workflow_runs" ALTER COLUMN "step_states" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "workflow_runs" ALTER COLUMN "step_states" SET DEFAULT '[]'::json;--> statement-breakpoint
ALTER TABLE "workflow_runs" ALTER COLUMN "trigger" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "workflows" ALTER COLUMN "steps" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "workflows" ALTER COLUMN "steps" SET DEFAULT '[]'::json;--> statement-breakpoint
ALTER TABLE "workflows" ALTER COLUMN "contact_defaults" SET DATA TYPE json;--> statement-breakpoint
ALTER TABLE "workflows" ALTER COLUMN "contact_defaults" SET DEFAULT '{}'::json;