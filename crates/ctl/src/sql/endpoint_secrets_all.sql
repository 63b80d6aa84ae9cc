-- Every webhook endpoint's stored secrets, locked until the re-seal commits.
SELECT id, secret, previous_secret FROM webhook_endpoints ORDER BY id FOR UPDATE
