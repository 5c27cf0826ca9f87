-- Drop one hold of an owner; at its last hold the lock is freed, or handed to the owner that
-- has waited longest.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token  ARGV[2] how long a new fence outlives its lease (ms)
-- ARGV[3] the holds the owner knows it has ('': count down here): the count becomes one less
-- Returns the holds left (0: released), or -1 if the owner holds nothing (never acquired,
-- already released, or its lease ended).
local owner = ARGV[1]
local score = redis.call('ZSCORE', K_holders, owner)
if not score then
  return -1
end
-- A lone holder's keys expire with its lease, so finding it proves its lease is live; among
-- several holders (a semaphore) the keys outlive the shorter leases: ask the clock.
local holders = redis.call('ZCARD', K_holders)
if holders > 1 and tonumber(score) <= now() then
  return -1
end
local holds
if ARGV[3] == '' then
  holds = redis.call('HINCRBY', K_data, owner, -1)
else
  holds = tonumber(ARGV[3]) - 1
  if holds > 0 then
    redis.call('HSET', K_data, owner, holds)
  end
end
if holds > 0 then
  return holds
end
if holders == 1 and redis.call('EXISTS', K_queue) == 0 then
  -- The last holder and nobody waiting (the common case): only the fence is left.
  redis.call('DEL', K_holders, K_data)
  return 0
end

--! helpers

redis.call('ZREM', K_holders, owner)
forget(owner)
purge()
handoff(tonumber(ARGV[2]))
settle()
return 0
