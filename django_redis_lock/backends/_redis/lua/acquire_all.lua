-- Take a lease on every one of several locks for one owner, or on none of them, in one atomic
-- step: lock_all's acquire on one server (on Redis Cluster, when the locks share a slot). It
-- only takes what an acquire would take at once; a lock held by another owner makes it take
-- nothing, and what it cannot settle (a lost lease, a hold under another limit, fair order
-- with owners queued, a withdrawn attempt) it leaves to the caller, who then acquires the
-- locks one by one, in order, waiting as acquire.lua does.
-- KEYS[6i-5..6i] holders, queue, waiters, fence, wake-up list and withdrawn attempt of lock i
-- (the prelude's)
-- ARGV[1] owner token  ARGV[2] lease (ms)  ARGV[3] holder metadata (JSON)  ARGV[4] how long a
-- durable fence outlives the lease (ms; 0: none)  ARGV[5] 'f' for fair order, '-' not
-- ARGV[6] the client's id of this attempt, recorded with each hold (for withdraw.lua)
-- ARGV[6 + i] the holds the owner knows it has of lock i (as acquire.lua's ARGV[8])
-- Returns {1, token 1, holds 1, lease ms 1, token 2, ...} when every lock was taken,
--         {0, i, ms until the earliest lease of lock i ends} when lock i is held by another
--              owner (nothing was taken),
--         {-1, i} when lock i is left to an acquire of its own (nothing was taken).
--! helpers

local owner, lease, meta = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local fence_ttl, fair, attempt = tonumber(ARGV[4]), ARGV[5] == 'f', ARGV[6]

-- Point the helpers (and the prelude's keys) at lock i.
local function on(i)
  local first = 6 * i - 5
  K_holders, K_queue, K_waiters, K_fence, K_wake, K_withdrawn = unpack(KEYS, first, first + 5)
end
local locks = #KEYS / 6

-- First every lock is looked at, and nothing written but ended leases dropped.
local current = {}
for i = 1, locks do
  on(i)
  local known = tonumber(ARGV[6 + i])
  if redis.call('EXISTS', K_withdrawn) == 1 then
    return {-1, i}
  end
  local ends, _, _, _, held_attempt, _, held_limit = live(owner)
  if ends and later(held_attempt, attempt) then
    -- A try that reaches the server after a later attempt of its owner took this lock (as in
    -- acquire.lua): it takes nothing, so that its withdrawal leaves the later hold alone.
    return {0, i, ends - now()}
  end
  if ends then
    if held_limit ~= 1 then
      return {-1, i}
    end
    current[i] = ends
  else
    if known > 0 then
      return {-1, i}  -- a lost lease: its own acquire reports it
    end
    purge()
    if fair and redis.call('EXISTS', K_queue) == 1 then
      return {-1, i}
    end
    if not admits(1) then
      local earliest = lease_ends()
      return {0, i, earliest and earliest - now() or 0}
    end
  end
end

-- Then every lock is taken.
local reply = {1}
for i = 1, locks do
  on(i)
  local holds, ends, fence = 1, now() + lease, nil
  if current[i] then
    -- A reentrant acquire, as in acquire.lua: one more hold, a lease of at least ``lease``.
    local _, _, held_fence, at, _, held_meta = live(owner)
    holds, ends, fence = tonumber(ARGV[6 + i]) + 1, math.max(current[i], ends), held_fence
    put(owner, record(ends, holds, fence, at, 1, attempt, held_meta))
  else
    if redis.call('EXISTS', K_queue) == 1 then
      leave_queue(owner)
    end
    fence = hold(owner, lease, 1, meta, fence_ttl, attempt)
  end
  settle()
  reply[#reply + 1] = tonumber(fence)
  reply[#reply + 1] = holds
  reply[#reply + 1] = ends - now()
end
return reply
