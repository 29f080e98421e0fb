-- Runs per workspace and month are now counted by the code that starts a run (one upsert
-- beside the INSERT), not by a trigger: a table with a trigger makes SQLite keep a statement
-- journal for every INSERT into it, and on the webhook path that journal spilled to a temp
-- file, costing a dozen pwrite calls per accepted webhook (issue 9, item 4).
DROP TRIGGER IF EXISTS `workflow_runs_after_insert`;
