-- pmw:chat_labels: account $1's labels of the wallets $2 ('0x…' hex), those it has.
SELECT '0x' || encode(wallet, 'hex'), label FROM subscriptions
WHERE account_id = $1 AND label <> ''
  AND wallet = ANY (ARRAY(SELECT decode(substr(lower(w), 3), 'hex') FROM unnest($2::text[]) w))
