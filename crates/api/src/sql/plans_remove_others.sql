DELETE FROM plans WHERE NOT (name = ANY($1))
