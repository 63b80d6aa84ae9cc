SELECT delivery_id, attempt, kind, block_number, log_index, t_attempt_ms, duration_ms,
  status_code, outcome, error FROM delivery_log
WHERE endpoint_id = ? AND (? OR (t_attempt_ms, delivery_id, attempt) < (?, ?, ?))
ORDER BY t_attempt_ms DESC, delivery_id DESC, attempt DESC LIMIT ?
