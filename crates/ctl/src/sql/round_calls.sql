SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
WHERE strpos(query, $1) > 0
