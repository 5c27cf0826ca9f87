-- Drop one hold of an owner; at its last hold the lock is freed, or handed to the owner that
-- has waited longest.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token  ARGV[2] how long a durable fence outlives its lease (ms; 0: none)
-- ARGV[3] the holds the owner knows it has ('': count down here): the count becomes one less
-- Returns the holds left (0: released), or -1 if the owner holds nothing (never acquired,
-- already released, or its lease ended).
local owner = ARGV[1]
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
if holds <= 0 and #sample == 2 and redis.call('EXISTS', base .. 'q') == 0 then
  -- The lone holder (its key lived, so its lease did), nobody waiting: the common case.
  redis.call('DEL', K_holders)
  return 0
end

--! helpers

local ends, _, fence, at, attempt, meta = parse(text)
-- A lone holder's key expires with its lease, so finding it proves its lease is live; among
-- several holders (a semaphore) the key outlives the shorter leases: ask the clock.
local live = #sample == 2 or ends > now()
if not live then
  return -1
end
if holds > 0 then
  redis.call('HSET', K_holders, owner, record(ends, holds, fence, at, attempt, meta))
  return holds
end

redis.call('HDEL', K_holders, owner)
if #sample > 2 then
  purge()
end
handoff(tonumber(ARGV[2]), fence)
settle()
return 0
