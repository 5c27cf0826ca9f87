-- Shared by every script (prepended at load time; see also _helpers.lua).
-- Only KEYS[1] (the holders key) is passed; the other keys of the lock are derived from it and
-- carry the same hash tag {=name}, so all of them live in one Redis Cluster slot:
--   <prefix>:{=name}:h   holders  sorted set: owner -> lease end (ms, server clock)
--   <prefix>:{=name}:d   data     hash: "<owner>" hold count, "<owner>|f" fencing token,
--                                 "<owner>|t" acquired at (ms), "<owner>|m" metadata (JSON),
--                                 "<owner>|a" the client's id of the attempt that last took or
--                                 re-took the hold (so a late undo touches only that attempt)
--   <prefix>:{=name}:f   fence    string: the last fencing token issued for the name
--   <prefix>:{=name}:q   queue    sorted set: waiting owner -> arrival (us), FIFO order
--   <prefix>:{=name}:w   waiters  hash: owner -> "<registration end ms> <lease ms> <limit>
--                                 <attempt> <meta>"
--   <prefix>:{=name}:s:<owner>    list: "<fencing token> <lease ms>" pushed when the lock is
--                                 handed to a waiting owner (the owner's wake-up call, which
--                                 it answers by claiming the hold within CLAIM_MS)
--   <prefix>:{=name}:x:<attempt>  string: an attempt withdrawn by its client, so that its
--                                 acquire takes nothing if it reaches the server late
-- Time comes from the server's clock, so clients' clocks never matter.
local base = string.sub(KEYS[1], 1, -2)
local K_holders, K_data, K_fence = KEYS[1], base .. 'd', base .. 'f'
local K_queue, K_waiters = base .. 'q', base .. 'w'

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
local function now_us()
  now()
  return clock_us
end

-- Make the holders and data keys expire exactly when a lease ending at ms (server clock)
-- ends: an absolute time, so a key never outlives the lease it stands for.
local function expire_at(ms)
  redis.call('PEXPIREAT', K_holders, ms - 1)
  redis.call('PEXPIREAT', K_data, ms - 1)
end

local function lease_end(owner)
  local score = redis.call('ZSCORE', K_holders, owner)
  if score and tonumber(score) > now() then
    return tonumber(score)
  end
  return nil
end

-- Make owner a holder with one hold; return its fencing token (as a string). Tokens grow
-- strictly per name: one more than the last, and never behind the server's clock in
-- microseconds, so they keep growing even after the counter itself has expired.
local function hold(owner, lease, meta, fence_ttl, attempt)
  local fence = math.max(tonumber(redis.call('GET', K_fence) or '0') + 1, now_us())
  fence = string.format('%.0f', fence)
  redis.call('SET', K_fence, fence, 'PX', lease + fence_ttl)
  redis.call('ZADD', K_holders, now() + lease, owner)
  redis.call('HSET', K_data, owner, 1, owner .. '|f', fence, owner .. '|t', now(),
    owner .. '|m', meta, owner .. '|a', attempt)
  return fence
end
