-- Void the predecessor's WS claims still open: never re-claimed, clients resume by cursor.
UPDATE ws_claims SET state = 'voided', done_ms = $3 WHERE slot = $1 AND epoch < $2 AND state = 'claimed'
