SELECT pid, application_name, state, age(backend_xmin)::bigint,
  (extract(epoch FROM now() - xact_start) * 1000)::bigint,
  (extract(epoch FROM now() - query_start) * 1000)::bigint, left(query, 120)
FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
ORDER BY age(backend_xmin) DESC LIMIT 20
