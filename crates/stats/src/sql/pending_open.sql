-- Whether a pending fill is open now (the partial index pending_fills_open).
SELECT EXISTS (SELECT 1 FROM pending_fills WHERE status = 'open')
