-- pmw:watermark: the ingest watermark (the highest block whose trades are all stored).
SELECT /* pmw:watermark */ block_number FROM ingest_cursor WHERE id = 1
