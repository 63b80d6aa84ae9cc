SELECT count(*) FROM ws_tickets WHERE account_id = $1
