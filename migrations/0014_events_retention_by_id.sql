-- Webhook events lose their index on received_at. Only retention read it, and every request
-- a webhook URL receives wrote an entry into it (issue 9: about 3 µs of the 26 an accepted
-- request costs in storage, npm run bench:batch). Retention now deletes the oldest ids
-- first, while the oldest is past the retention period: an event's received_at grows with
-- its id (services/retention.ts).
DROP INDEX `webhook_events_received_idx`;