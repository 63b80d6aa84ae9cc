SELECT service, instance, pid, started_ms, beat_ms, state->>'role', state->>'revision', state->>'secret_keys' FROM heartbeats ORDER BY service, instance
