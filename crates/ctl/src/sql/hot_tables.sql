SELECT relname::text, n_live_tup, n_dead_tup, n_tup_upd, n_tup_hot_upd,
  pg_relation_size(relid), pg_total_relation_size(relid),
  (extract(epoch FROM now() - last_autovacuum) * 1000)::bigint
FROM pg_stat_user_tables WHERE relname = ANY($1) ORDER BY relname
