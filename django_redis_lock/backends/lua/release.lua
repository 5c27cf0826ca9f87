-- Drop one hold of an owner; the lock is freed when its last hold is dropped.
-- KEYS[1] holders, KEYS[2] data (see the prelude)
-- ARGV[1] owner token
-- Returns the holds left (0: released), or -1 if the owner holds nothing (never acquired,
-- already released, or its lease ended).
local owner = ARGV[1]
if not lease_end(owner) then
  return -1
end
local holds = redis.call('HINCRBY', KEYS[2], owner, -1)
if holds > 0 then
  return holds
end
if redis.call('ZCARD', KEYS[1]) == 1 then
  -- The last holder (the common case): nothing of the lock is left but its fence.
  redis.call('DEL', KEYS[1], KEYS[2])
  return 0
end
redis.call('ZREM', KEYS[1], owner)
forget(owner)
purge()
settle()
return 0
