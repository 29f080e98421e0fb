-- The audit trail is listed newest first by (at, id), so that every filter (actor type, action,
-- since, until) seeks on an index ending with at instead of walking the workspace's entries
-- in id order to find rare matches: at a million entries, ?actorType=USER or a since in the
-- future read all of them, about 170 ms (issue 9, reads at scale).
DROP INDEX "audit_logs_workspace_idx";--> statement-breakpoint
DROP INDEX "audit_logs_workspace_action_idx";--> statement-breakpoint
CREATE INDEX "audit_logs_workspace_at_idx" ON "audit_logs" USING btree ("workspace_id","at","id");--> statement-breakpoint
CREATE INDEX "audit_logs_action_at_idx" ON "audit_logs" USING btree ("workspace_id","action","at","id");--> statement-breakpoint
CREATE INDEX "audit_logs_actor_at_idx" ON "audit_logs" USING btree ("workspace_id","actor_type","at","id");--> statement-breakpoint
CREATE INDEX "audit_logs_actor_action_at_idx" ON "audit_logs" USING btree ("workspace_id","actor_type","action","at","id");