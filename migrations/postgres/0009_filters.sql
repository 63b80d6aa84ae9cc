-- Filters (issue 19): what a followed wallet (a subscription) and a webhook endpoint narrow their
-- messages to, as the API validated and stored them (`pmw_core::filter::FilterSpec`, canonical:
-- `side`, `min_shares`, `min_collateral`, `markets`). NULL lets everything through. Writing
-- either column bumps `subs_version` (the statement triggers of 0002), so push reloads its index.
ALTER TABLE subscriptions ADD COLUMN filter jsonb
    CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object');
ALTER TABLE webhook_endpoints ADD COLUMN filter jsonb
    CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object');
