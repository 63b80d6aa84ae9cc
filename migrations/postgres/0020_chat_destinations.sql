-- Chat destinations and readable alerts (issue 45, items 2 and 3).
-- A webhook endpoint's kind: `webhook` (signed JSON, as before) or a chat service. A chat
-- endpoint's `secret` holds its sealed destination (the Discord/Slack URL, or the Telegram bot
-- token and chat id) and its `url` only `scheme://host`.
ALTER TABLE webhook_endpoints ADD COLUMN kind text NOT NULL DEFAULT 'webhook'
    CHECK (kind IN ('webhook', 'discord', 'slack', 'telegram'));

-- Which chat message carried a delivery (several trades can share one digest message).
ALTER TABLE webhook_deliveries ADD COLUMN message_id text;

-- The slug of a market's event, for links to it (`https://polymarket.com/event/<slug>`).
ALTER TABLE market_names ADD COLUMN IF NOT EXISTS event_slug text;
