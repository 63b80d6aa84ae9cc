-- pmw:chat_mark: the chat message $2 carries the claimed deliveries $1 (epoch $3); a later
-- message that carries one again (a retry) overwrites it.
UPDATE webhook_deliveries SET message_id = $2
WHERE id = ANY ($1) AND state = 'pending' AND claimed_epoch = $3
