-- A queue claims its endpoint's due deliveries in ledger order: index exactly those rows
-- (pending, by endpoint, in claim order), so a claim reads a few index entries instead of every
-- delivery the endpoint ever had (delivered rows stay until retention) or every pending row of
-- every endpoint.
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (endpoint_id, block_number, log_index, id)
    WHERE state = 'pending';
