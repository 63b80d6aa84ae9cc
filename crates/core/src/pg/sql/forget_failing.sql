-- End endpoint $1's run of failed attempts (a success, or a disabling or re-enabling).
DELETE FROM webhook_failing WHERE endpoint_id = $1
