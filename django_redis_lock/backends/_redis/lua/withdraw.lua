-- Undo an acquire or release whose reply the owner never read (it was interrupted, or the
-- server did not answer in time): leave the queue, drop a wake-up call, and bring the owner's
-- hold count back to the one it knows of. A lock freed that way goes to the next waiter.
-- Given an attempt id, only what that attempt registered or took is undone, so an undo that
-- arrives late never touches a hold the owner took since; and the attempt is remembered as
-- given up for UNDONE_MS, so that its acquire, if it reaches the server only now (it was
-- queued on another connection), takes nothing.
-- KEYS[1..6] holders, queue, waiters, fence, wake-up list, withdrawn attempt (the prelude's)
-- KEYS[7] the owner's own list (see waits.py)
-- ARGV[1] owner token  ARGV[2] the holds the owner keeps (0: none)  ARGV[3] how long a durable
-- fence outlives its lease (ms; 0: none)  ARGV[4] attempt id ('': whatever the owner has)
-- Returns the owner's holds left; with the owners handed the lock, if any (reply()).
local owner, keep, attempt = ARGV[1], tonumber(ARGV[2]), ARGV[4]
local UNDONE_MS = 60000
--! helpers

if attempt ~= '' then
  redis.call('SET', K_withdrawn, 1, 'PX', UNDONE_MS)
end
local registration = redis.call('HGET', K_waiters, owner)
if registration
    and (attempt == '' or string.match(registration, '^%d+ %d+ %d+ (%S*) ') == attempt) then
  leave_queue(owner)
end
local current, holds, fence, at, held_attempt, meta, limit = live(owner)
local mine = attempt == '' or (current and held_attempt == attempt)
if mine then
  unwake(owner)
  redis.call('DEL', KEYS[7])
end
holds = holds or 0
if mine and holds > keep then
  if keep > 0 then
    put(owner, record(current, keep, fence, at, limit, held_attempt, meta))
    return keep
  end
  drop(owner)
  holds = 0
elseif holds > 0 or redis.call('EXISTS', K_queue) == 0 then
  return holds
end
-- A freed slot, or a queue this owner may have headed: serve the waiters now.
purge()
handoff(tonumber(ARGV[3]), fence)
settle()
return reply(holds)
