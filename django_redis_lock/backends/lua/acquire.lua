-- Take a lease on the lock (or one slot of a semaphore) for an owner; reentrant. An owner
-- that must wait may register in the queue, to be handed the lock at a release.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token  ARGV[2] lease (ms)  ARGV[3] limit (holders at once)
-- ARGV[4] holder metadata (JSON)  ARGV[5] how long the fence outlives the lease (ms)
-- ARGV[6] ms the registration lives if the owner must wait ('0': do not wait, and leave the
-- queue)  ARGV[7] flags: 'f' for fair (FIFO) order, 'c' if the owner is waiting already (a
-- lease it holds now was handed to it: claim it without counting another hold), '-' none
-- Returns {1, fencing token, hold count, lease ms left} when acquired,
--         {0, ms until the earliest current lease ends} when not.
local owner, lease, limit, meta = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local fence_ttl, wait_ms = tonumber(ARGV[5]), tonumber(ARGV[6])
local fair, claim = string.find(ARGV[7], 'f', 1, true), string.find(ARGV[7], 'c', 1, true)

local holders = redis.call('ZCARD', K_holders)
if holders == 0 and not fair and not claim then
  -- A free lock and a first, non-fair attempt (the common case): take it. It need not look
  -- at the queue: it cannot be in it, and may take a free slot before waiters.
  local fence = hold(owner, lease, meta, fence_ttl)
  expire_at(now() + lease)
  return {1, tonumber(fence), 1, lease}
end

--! helpers

local function take()
  local fence = hold(owner, lease, meta, fence_ttl)
  settle()
  return {1, tonumber(fence), 1, lease}
end

if holders > 0 then
  purge()
  local current = lease_end(owner)
  if current then
    local fence = tonumber(redis.call('HGET', K_data, owner .. '|f'))
    if claim then
      redis.call('DEL', base .. 's:' .. owner)
      return {1, fence, tonumber(redis.call('HGET', K_data, owner)), current - now()}
    end
    local holds = redis.call('HINCRBY', K_data, owner, 1)
    local ends = math.max(current, now() + lease)
    redis.call('ZADD', K_holders, ends, owner)
    settle()
    return {1, fence, holds, ends - now()}
  end
  holders = redis.call('ZCARD', K_holders)
end

local function register()
  redis.call('ZADD', K_queue, 'NX', now_us(), owner)
  redis.call('HSET', K_waiters, owner,
    string.format('%.0f %d %d ', now() + wait_ms, lease, limit) .. meta)
  for _, key in ipairs({K_queue, K_waiters}) do
    if redis.call('PTTL', key) < wait_ms then
      redis.call('PEXPIRE', key, wait_ms)
    end
  end
end

local waiting = redis.call('EXISTS', K_queue) == 1
if fair and waiting then
  -- Free slots go to the longest-waiting live owners, this one perhaps among them.
  if wait_ms > 0 then
    register()
  end
  handoff(fence_ttl)
  settle()
  local current = lease_end(owner)
  if current then
    redis.call('DEL', base .. 's:' .. owner)
    return {1, tonumber(redis.call('HGET', K_data, owner .. '|f')), 1, current - now()}
  end
  waiting = redis.call('EXISTS', K_queue) == 1
  holders = redis.call('ZCARD', K_holders)
end

if holders < limit and not (fair and waiting) then
  -- A free slot, and nobody to respect: take it (the common, uncontended case).
  if waiting then
    leave_queue(owner)
  end
  return take()
end

if wait_ms > 0 then
  register()
else
  leave_queue(owner)
end
local earliest = redis.call('ZRANGE', K_holders, 0, 0, 'WITHSCORES')
if #earliest == 0 then
  return {0, 0}
end
return {0, tonumber(earliest[2]) - now()}
