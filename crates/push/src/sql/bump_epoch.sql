-- A new leader: bump PushEpoch (every write of the previous epoch now fails its fence).
INSERT INTO push_epoch (slot, epoch, leader, acquired_ms) VALUES ($1, 1, $2, $3)
ON CONFLICT (slot) DO UPDATE
SET epoch = push_epoch.epoch + 1, leader = EXCLUDED.leader, acquired_ms = EXCLUDED.acquired_ms
RETURNING epoch
