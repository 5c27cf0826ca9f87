-- Drop one hold of an owner; at its last hold the lock is freed, or handed to the owner that
-- has waited longest, or kept until its min_hold window ends.
-- KEYS[1..5] holders, queue, waiters, fence, wake-up list (the prelude's)
-- ARGV[1] owner token  ARGV[2] how long a durable fence outlives its lease (ms; 0: none)
-- ARGV[3] the holds the owner knows it has ('': count down here): the count becomes one less
-- ARGV[4] min_hold (ms; '0': none): a last release sooner than this after the acquire keeps
-- the hold, under the pseudo-owner "min_hold:<owner>", until that long after the acquire
-- Returns the holds left (0: released), or -1 if the owner holds nothing (never acquired,
-- already released, or its lease ended); with the owners handed the lock, if any (reply()).
local owner = ARGV[1]
if ARGV[3] == '1' and ARGV[4] == '0' and redis.call('EXISTS', K_queue) == 0 then
  -- The owner's last hold, no min_hold, nobody waiting (the common case). A lone holder is
  -- freed without reading its record.
  local fields = redis.call('HRANDFIELD', K_holders, 2)
  if #fields == 1 and fields[1] == owner then
    redis.call('DEL', K_holders)
    return 0
  end
  -- One of several (a reader, a semaphore's holder) drops its record alone, if its lease
  -- lives, whatever the number of holders: the records of leases that ended meanwhile stay
  -- until the key expires, or the next slow path drops them. The key keeps its expiry, but
  -- for one holder left, whose key must end with its lease (see the prelude).
  if #fields == 2 then
    local text = redis.call('HGET', K_holders, owner)
    local now_ms = ms_of(redis.call('TIME'))
    if text and tonumber(string.match(text, '^%d+')) > now_ms then
      redis.call('HDEL', K_holders, owner)
      if redis.call('HLEN', K_holders) == 1 then
        -- The two fields drawn were all there were: the other one is left.
        local left = redis.call('HGET', K_holders, fields[1] == owner and fields[2] or fields[1])
        local ends = tonumber(string.match(left, '^%d+'))
        if ends > now_ms then
          redis.call('PEXPIREAT', K_holders, digits(ends - 1))
        else
          redis.call('DEL', K_holders)
        end
      end
      return 0
    end
  end
end
-- Two fields at most: enough to tell a lone holder (the common case) from a semaphore's.
local sample = redis.call('HRANDFIELD', K_holders, 2, 'WITHVALUES')
local text
if #sample == 2 then
  text = sample[1] == owner and sample[2] or nil
elseif #sample > 2 then
  text = redis.call('HGET', K_holders, owner)
end
if not text then
  return -1
end
local holds = (tonumber(ARGV[3]) or tonumber(string.match(text, '^%d+ (%d+) '))) - 1
if holds <= 0 and #sample == 2 and ARGV[4] == '0'
    and redis.call('EXISTS', K_queue) == 0 then
  -- The lone holder (its key lived, so its lease did), no min_hold, nobody waiting: the
  -- common case.
  redis.call('DEL', K_holders)
  return 0
end

--! helpers

local ends, _, fence, at, attempt, meta, limit = parse(text)
-- A lone holder's key expires with its lease, so finding it proves its lease is live; among
-- several holders (a semaphore) the key outlives the shorter leases: ask the clock.
local live = #sample == 2 or ends > now()
if not live then
  return -1
end
if holds > 0 then
  put(owner, record(ends, holds, fence, at, limit, attempt, meta))
  return holds
end

drop(owner)
local window_ends = at + tonumber(ARGV[4])
if window_ends > now() then
  -- Kept for its min_hold window (measured on this server's clock, from the acquire): a
  -- pseudo-owner that no owner token can be holds it, so nobody takes the lock until the
  -- window ends, its owner neither, and its slot is handed to nobody. A window of the same
  -- owner still running (a semaphore's other slot) is never shortened.
  local pseudo = 'min_hold:' .. owner
  local kept = redis.call('HGET', K_holders, pseudo)
  window_ends = math.max(window_ends, kept and parse(kept) or 0)
  put(pseudo, record(window_ends, 0, fence, at, limit, attempt, meta))
end
if #sample > 2 then
  purge()
end
handoff(tonumber(ARGV[2]), fence)
settle()
return reply(0)
