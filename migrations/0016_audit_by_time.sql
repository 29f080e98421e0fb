-- The audit trail is listed newest first by (at, id), so that every filter (actor type, action,
-- since, until) seeks on an index ending with at instead of walking the workspace's entries
-- in id order to find rare matches: at a million entries, ?actorType=USER or a since in the
-- future read all of them, about 170 ms (issue 9, reads at scale).
--
-- Without statistics SQLite guesses that an equality on the first column of an index already
-- leaves about ten rows, so with a range on `at` from both sides (since, and the cursor) it
-- judged the workspace's index as good as the action's and took the smaller one, reading every
-- entry of the span to find one action's. The planner's documented way to know better is rows
-- in sqlite_stat1: these say what a workspace, an actor type and an action each narrow the
-- trail to (rough shares, not counts; only their order matters), for this table alone. An
-- ANALYZE run by hand later would replace them with measured ones.
DROP INDEX `audit_logs_workspace_idx`;--> statement-breakpoint
DROP INDEX `audit_logs_workspace_action_idx`;--> statement-breakpoint
CREATE INDEX `audit_logs_workspace_at_idx` ON `audit_logs` (`workspace_id`,`at`,`id`);--> statement-breakpoint
CREATE INDEX `audit_logs_action_at_idx` ON `audit_logs` (`workspace_id`,`action`,`at`,`id`);--> statement-breakpoint
CREATE INDEX `audit_logs_actor_at_idx` ON `audit_logs` (`workspace_id`,`actor_type`,`at`,`id`);--> statement-breakpoint
CREATE INDEX `audit_logs_actor_action_at_idx` ON `audit_logs` (`workspace_id`,`actor_type`,`action`,`at`,`id`);--> statement-breakpoint
ANALYZE sqlite_schema;--> statement-breakpoint
DELETE FROM sqlite_stat1 WHERE tbl = 'audit_logs';--> statement-breakpoint
INSERT INTO sqlite_stat1 (tbl, idx, stat) VALUES
  ('audit_logs', 'audit_logs_workspace_at_idx', '1000000 100000 2 1'),
  ('audit_logs', 'audit_logs_action_at_idx', '1000000 100000 5000 2 1'),
  ('audit_logs', 'audit_logs_actor_at_idx', '1000000 100000 30000 2 1'),
  ('audit_logs', 'audit_logs_actor_action_at_idx', '1000000 100000 30000 2000 2 1'),
  ('audit_logs', 'audit_logs_at_idx', '1000000 2');--> statement-breakpoint
ANALYZE sqlite_schema;
