SELECT service, instance, pid, started_ms, beat_ms, state->>'role', state->>'revision' FROM heartbeats ORDER BY service, instance
