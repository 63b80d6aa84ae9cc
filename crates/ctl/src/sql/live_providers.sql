-- The RPC providers and their quorum as the newest pmw-live heartbeat that reports them (its
-- leader) sees them.
SELECT beat_ms, state->'providers', state->'rpc_quorum' FROM heartbeats
WHERE service = 'pmw-live' AND state ? 'providers'
ORDER BY beat_ms DESC LIMIT 1
