-- Lock account $1's row for the rest of the transaction (no row: no such account), so key
-- creations of one account run one after another and each counts the keys committed before it.
SELECT 1 FROM accounts WHERE id = $1 FOR UPDATE
