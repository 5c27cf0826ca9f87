-- Undo an acquire or release whose reply the owner never read (it was interrupted: a task
-- cancelled, a KeyboardInterrupt): leave the queue, drop a wake-up call, and bring the owner's
-- hold count back to the one it knows of. A lock freed that way goes to the next waiter.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token  ARGV[2] the holds the owner keeps (0: none)  ARGV[3] how long a new
-- fence outlives its lease (ms)
-- Returns the owner's holds left.
local owner, keep = ARGV[1], tonumber(ARGV[2])
--! helpers

leave_queue(owner)
redis.call('DEL', base .. 's:' .. owner)
local holds = 0
if lease_end(owner) then
  holds = tonumber(redis.call('HGET', K_data, owner))
end
if holds <= keep and (holds > 0 or redis.call('EXISTS', K_queue) == 0) then
  return holds
end
if holds > keep then
  if keep > 0 then
    redis.call('HSET', K_data, owner, keep)
    return keep
  end
  redis.call('ZREM', K_holders, owner)
  forget(owner)
  holds = 0
end
-- A freed slot, or a queue this owner may have headed: serve the waiters now.
purge()
handoff(tonumber(ARGV[3]))
settle()
return holds
