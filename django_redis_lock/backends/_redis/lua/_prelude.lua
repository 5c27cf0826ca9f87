-- Shared by every script (prepended at load time; see also _helpers.lua).
-- Only KEYS[1] (the holders key) is passed; the other keys of the lock are derived from it and
-- carry the same hash tag {=name}, so all of them live in one Redis Cluster slot:
--   <prefix>:{=name}:h   holders  hash: owner -> its record (see record() below); the key
--                                 expires when the longest lease ends, so a lone holder's
--                                 key exists exactly as long as its lease
--   <prefix>:{=name}:q   queue    sorted set: waiting owner -> arrival (us), FIFO order
--   <prefix>:{=name}:w   waiters  hash: owner -> "<registration end ms> <lease ms> <limit>
--                                 <attempt> <meta>"
--   <prefix>:{=name}:s:<owner>    list: "<fencing token> <lease ms>" pushed when the lock is
--                                 handed to a waiting owner (the owner's wake-up call, which
--                                 it answers by claiming the hold within CLAIM_MS)
--   <prefix>:{=name}:x:<attempt>  string: an attempt withdrawn by its client, so that its
--                                 acquire takes nothing if it reaches the server late
--   <prefix>:{=name}:f   fence    string: the last fencing token issued, kept fencing_ttl
--                                 after the lease; only with fencing_ttl > 0 (opt-in)
-- Time comes from the server's clock, so clients' clocks never matter. A released lock
-- leaves no key behind (but a durable fence, when asked for).
local K_holders = KEYS[1]
local base = string.sub(K_holders, 1, -2)

-- The server's time, read once and only by the paths that need it.
local clock_ms, clock_us
local function now()
  if not clock_ms then
    local clock = redis.call('TIME')
    clock_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    clock_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  end
  return clock_ms
end

-- A holder's record: "<lease end ms> <holds> <fencing token> <acquired at ms> <attempt>
-- <metadata JSON>", the attempt being the client's id of the acquire that last took or re-took
-- the hold (so a late undo touches only that attempt).
local function record(ends, holds, fence, at, attempt, meta)
  return string.format('%.0f %d %s %.0f %s ', ends, holds, fence, at, attempt) .. meta
end

-- Return a record's lease end, holds, fencing token (a string), acquired at, attempt, meta.
local function parse(text)
  local ends, holds, fence, at, attempt, meta =
    string.match(text, '^(%d+) (%d+) (%d+) (%d+) (%S*) (.*)$')
  return tonumber(ends), tonumber(holds), fence, tonumber(at), attempt, meta
end

-- A new fencing token for a lease of ``lease`` ms (as a string): the server's clock in
-- microseconds, so tokens grow strictly per name with no key kept once the lock is free; above
-- ``above`` (a token still live on the name), and, with fencing_ttl > 0, one more than the
-- durable counter, which then also covers a clock stepped back.
local function new_fence(fence_ttl, lease, above)
  now()
  local fence = clock_us
  if above then
    fence = math.max(fence, tonumber(above) + 1)
  end
  if fence_ttl > 0 then
    local K_fence = base .. 'f'
    fence = math.max(fence, tonumber(redis.call('GET', K_fence) or '0') + 1)
    redis.call('SET', K_fence, string.format('%.0f', fence), 'PX', lease + fence_ttl)
  end
  return string.format('%.0f', fence)
end
