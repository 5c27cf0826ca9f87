-- Shared by every script (prepended at load time). Layout of one lock's keys, all sharing
-- the hash tag {name} so they live in one Redis Cluster slot:
--   KEYS[1] holders  sorted set: member = owner token, score = lease end (ms, server clock)
--   KEYS[2] data     hash: "<owner>" = hold count, "<owner>|f" = fencing token,
--                    "<owner>|t" = acquired at (ms), "<owner>|m" = holder metadata (JSON)
-- Time comes from the server's clock, so clients' clocks never matter.
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local function forget(owner)
  redis.call('HDEL', KEYS[2], owner, owner .. '|f', owner .. '|t', owner .. '|m')
end

-- Drop holders whose lease has ended (a semaphore's keys outlive its shortest lease).
local function purge()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms)
  for _, owner in ipairs(gone) do
    redis.call('ZREM', KEYS[1], owner)
    forget(owner)
  end
end

-- Make both keys expire with the longest remaining lease, or delete them when none is left.
local function settle()
  local longest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #longest == 0 then
    redis.call('DEL', KEYS[1], KEYS[2])
  else
    local ms = math.max(1, tonumber(longest[2]) - now_ms)
    redis.call('PEXPIRE', KEYS[1], ms)
    redis.call('PEXPIRE', KEYS[2], ms)
  end
end

local function lease_end(owner)
  local score = redis.call('ZSCORE', KEYS[1], owner)
  if score and tonumber(score) > now_ms then
    return tonumber(score)
  end
  return nil
end
