-- Take a lease on the lock (or one slot of a semaphore) for an owner; reentrant. An owner
-- that must wait may register in the queue, to be handed the lock at a release.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token  ARGV[2] lease (ms)  ARGV[3] limit (holders at once)
-- ARGV[4] holder metadata (JSON)  ARGV[5] how long the fence outlives the lease (ms)
-- ARGV[6] ms the registration lives if the owner must wait ('0': do not wait, and leave the
-- queue)  ARGV[7] flags: 'f' for fair (FIFO) order, 'c' to claim a lock handed to the waiting
-- owner (its short grant becomes the full lease, without counting another hold), '-' none
-- ARGV[8] the holds the owner knows it has: '' to count reentrant acquires here; a number N
-- makes the hold count N + 1 (0: a hold the owner does not know of was left by an acquire it
-- saw fail, and is taken over as its first), and N > 0 with no live hold is a lost lease
-- ARGV[9] the client's id of this attempt, recorded with the hold and the registration; an
-- attempt withdrawn already (its client gave up on it) takes nothing if it arrives late
-- Returns {1, fencing token, hold count, lease ms left} when acquired,
--         {0, ms until the earliest current lease ends} when not,
--         {-1} when the owner knew of holds (ARGV[8] > 0) but its lease has ended.
local owner, lease, limit, meta = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local fence_ttl, wait_ms, flags = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]
local known, attempt = tonumber(ARGV[8]), ARGV[9]
local fair, claim = string.find(flags, 'f', 1, true), string.find(flags, 'c', 1, true)

if attempt ~= '' and redis.call('EXISTS', base .. 'x:' .. attempt) == 1 then
  return {0, 0}
end

local holders = redis.call('ZCARD', K_holders)
if holders == 0 and not fair and not claim and not (known and known > 0) then
  -- A free lock and a first, non-fair attempt (the common case): take it. It need not look
  -- at the queue: it cannot be in it, and may take a free slot before waiters.
  local fence = hold(owner, lease, meta, fence_ttl, attempt)
  expire_at(now() + lease)
  return {1, tonumber(fence), 1, lease}
end

--! helpers

local function take()
  local fence = hold(owner, lease, meta, fence_ttl, attempt)
  settle()
  return {1, tonumber(fence), 1, lease}
end

if holders > 0 then
  purge()
  local current = lease_end(owner)
  if current then
    local fence = tonumber(redis.call('HGET', K_data, owner .. '|f'))
    local holds
    if claim then
      redis.call('DEL', base .. 's:' .. owner)
      holds = tonumber(redis.call('HGET', K_data, owner))
    elseif known then
      holds = known + 1
      redis.call('HSET', K_data, owner, holds)
    else
      holds = redis.call('HINCRBY', K_data, owner, 1)
    end
    redis.call('HSET', K_data, owner .. '|a', attempt)
    local ends = math.max(current, now() + lease)
    redis.call('ZADD', K_holders, ends, owner)
    settle()
    return {1, fence, holds, ends - now()}
  end
  holders = redis.call('ZCARD', K_holders)
end
if known and known > 0 then
  return {-1}
end

local function register()
  redis.call('ZADD', K_queue, 'NX', now_us(), owner)
  redis.call('HSET', K_waiters, owner,
    string.format('%.0f %d %d %s ', now() + wait_ms, lease, limit, attempt) .. meta)
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
    -- Handed to this owner just now: its lease is the one it asked for, not a grant's.
    redis.call('DEL', base .. 's:' .. owner)
    redis.call('ZADD', K_holders, now() + lease, owner)
    settle()
    return {1, tonumber(redis.call('HGET', K_data, owner .. '|f')), 1, lease}
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
