-- The addresses of $1 are in pmw-live's exchange list now: their sightings stop warning.
UPDATE unlisted_emitters SET listed_ms = $2 WHERE address = ANY($1::text[]) AND listed_ms IS NULL
