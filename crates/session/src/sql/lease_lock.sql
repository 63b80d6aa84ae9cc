-- Serialise the session-cap check of account $1 across every serving process: the account's
-- row lock (NO KEY UPDATE: the API's foreign-key checks are not blocked) is held until the
-- lease is inserted and the transaction commits.
SELECT 1 FROM accounts WHERE id = $1 FOR NO KEY UPDATE
