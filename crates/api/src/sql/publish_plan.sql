INSERT INTO plans (name, max_ws_sessions, is_default, updated_ms) VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO UPDATE SET max_ws_sessions = EXCLUDED.max_ws_sessions,
is_default = EXCLUDED.is_default, updated_ms = EXCLUDED.updated_ms
