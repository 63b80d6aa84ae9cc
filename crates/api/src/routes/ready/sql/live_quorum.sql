-- The RPC providers' quorum as the freshest pmw-live writer heartbeat reports it.
SELECT state->'rpc_quorum' FROM heartbeats
WHERE service = 'pmw-live' AND state->>'state' = 'ingesting' ORDER BY beat_ms DESC LIMIT 1
