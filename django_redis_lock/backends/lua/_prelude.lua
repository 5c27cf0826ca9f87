-- Shared by every script (prepended at load time).
-- Only KEYS[1] (the holders key) is passed; the other keys of the lock are derived from it and
-- carry the same hash tag {name}, so all of them live in one Redis Cluster slot:
--   <prefix>:{name}:h   holders  sorted set: owner -> lease end (ms, server clock)
--   <prefix>:{name}:d   data     hash: "<owner>" hold count, "<owner>|f" fencing token,
--                                "<owner>|t" acquired at (ms), "<owner>|m" metadata (JSON)
--   <prefix>:{name}:f   fence    string: the last fencing token issued for the name
--   <prefix>:{name}:q   queue    sorted set: waiting owner -> arrival (us), FIFO order
--   <prefix>:{name}:w   waiters  hash: owner -> "<registration end ms> <lease ms> <limit> <meta>"
--   <prefix>:{name}:s:<owner>    list: "<fencing token> <lease ms>" pushed when the lock is
--                                handed to a waiting owner (the owner's wake-up call)
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

-- A handed-over lease covers the waiter's registration plus this margin, no more: a waiter
-- that died while queued holds the others back only that long.
local CLAIM_MS = 1000

local function forget(owner)
  redis.call('HDEL', K_data, owner, owner .. '|f', owner .. '|t', owner .. '|m')
end

-- Drop holders whose lease has ended (a semaphore's keys outlive its shortest lease).
local function purge()
  local gone = redis.call('ZRANGEBYSCORE', K_holders, '-inf', now())
  for _, owner in ipairs(gone) do
    redis.call('ZREM', K_holders, owner)
    forget(owner)
  end
end

-- Make the holders and data keys expire exactly when a lease ending at ms (server clock)
-- ends: an absolute time, so a key never outlives the lease it stands for.
local function expire_at(ms)
  redis.call('PEXPIREAT', K_holders, ms - 1)
  redis.call('PEXPIREAT', K_data, ms - 1)
end

-- Make holders and data expire with the longest remaining lease, or delete them if none.
local function settle()
  local longest = redis.call('ZRANGE', K_holders, -1, -1, 'WITHSCORES')
  if #longest == 0 then
    redis.call('DEL', K_holders, K_data)
  else
    expire_at(tonumber(longest[2]))
  end
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
local function hold(owner, lease, meta, fence_ttl)
  local fence = math.max(tonumber(redis.call('GET', K_fence) or '0') + 1, now_us())
  fence = string.format('%.0f', fence)
  redis.call('SET', K_fence, fence, 'PX', lease + fence_ttl)
  redis.call('ZADD', K_holders, now() + lease, owner)
  redis.call('HSET', K_data, owner, 1, owner .. '|f', fence, owner .. '|t', now(),
    owner .. '|m', meta)
  return fence
end

local function leave_queue(owner)
  redis.call('ZREM', K_queue, owner)
  redis.call('HDEL', K_waiters, owner)
end

-- Hand free slots to the longest-waiting owners whose registration is still live, and push
-- each one its wake-up call: the waiter's wake-up is its acquisition, with no race against
-- newcomers. Waiters that gave up or died (registration ended) are dropped on the way.
local function handoff(fence_ttl)
  while true do
    local head = redis.call('ZRANGE', K_queue, 0, 0)[1]
    if not head then
      return
    end
    local record = redis.call('HGET', K_waiters, head)
    local ends, lease, limit, meta
    if record then
      ends, lease, limit, meta = string.match(record, '^(%d+) (%d+) (%d+) (.*)$')
    end
    if not ends or tonumber(ends) <= now() then
      leave_queue(head)
    elseif redis.call('ZCARD', K_holders) >= tonumber(limit) then
      return
    else
      leave_queue(head)
      local granted = math.min(tonumber(lease), tonumber(ends) - now() + CLAIM_MS)
      local fence = hold(head, granted, meta, fence_ttl)
      local signal = base .. 's:' .. head
      redis.call('RPUSH', signal, fence .. ' ' .. granted)
      redis.call('PEXPIRE', signal, granted)
    end
  end
end
