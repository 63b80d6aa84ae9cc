-- The distinct condition ids account $1 follows through its market subscriptions other than
-- kind $2, name $3 (what the plan's market cap counts besides the one being written).
SELECT ARRAY(SELECT DISTINCT c FROM market_subscriptions m, unnest(m.conditions) c
             WHERE m.account_id = $1 AND NOT (m.kind = $2 AND m.market = $3))
