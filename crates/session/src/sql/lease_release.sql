-- A closed session's lease (holder $1, session $2).
DELETE FROM session_leases WHERE holder = $1 AND session_id = $2
