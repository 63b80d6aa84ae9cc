-- The id a new webhook endpoint will have: its secret is sealed bound to it before the insert.
SELECT nextval(pg_get_serial_sequence('webhook_endpoints', 'id'))
