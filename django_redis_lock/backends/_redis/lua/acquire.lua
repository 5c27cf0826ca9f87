-- Take a lease on the lock (or one slot of a semaphore) for an owner; reentrant. An owner
-- that must wait may register in the queue, to be handed the lock at a release.
-- KEYS[1..6] holders, queue, waiters, fence, wake-up list, withdrawn attempt (the prelude's)
-- ARGV[1] owner token  ARGV[2] lease (ms)  ARGV[3] limit (holders at once: 1 for a lock or a
-- writer, unbounded for a reader; no holder is joined by more holders than its own allows)
-- ARGV[4] holder metadata (JSON)  ARGV[5] how long a durable fence outlives the lease (ms;
-- 0: no durable fence)  ARGV[6] ms the registration lives if the owner must wait ('0': do not
-- wait, and leave the queue)  ARGV[7] flags: 'f' for fair (FIFO) order, 'c' to claim a lock
-- handed to the waiting owner (its short grant becomes the full lease, without counting
-- another hold), '-' none
-- ARGV[8] the holds the owner knows it has: '' to count reentrant acquires here; a number N
-- makes the hold count N + 1 (0: a hold the owner does not know of was left by an acquire it
-- saw fail, and is taken over as its first), and N > 0 with no live hold is a lost lease
-- ARGV[9] the client's id of this attempt, recorded with the hold and the registration; an
-- attempt withdrawn already (its client gave up on it) takes nothing if it arrives late
-- Returns {1, fencing token, hold count, lease ms left} when acquired,
--         {0, ms until the earliest current lease ends} when not,
--         {-1} when the owner knew of holds (ARGV[8] > 0) but its lease has ended,
--         {-2} when the owner holds the lock under a larger limit than it asks for now (a
--              reader asking to write): a hold is never made stricter while it is held.
-- A reply that handed the lock to waiting owners carries them (see reply() in the helpers).
local owner, meta, flags, attempt = ARGV[1], ARGV[4], ARGV[7], ARGV[9]

-- The common cases, for a first, non-fair attempt not withdrawn already:
-- * nobody holds the lock (owners waiting, if any, are served at its release; a reader
--   leaves them to the slow path, which lets no reader pass a waiting writer);
-- * the lock is shared (readers, a semaphore's holders), nobody waits, the owner holds
--   nothing yet (HSETNX), and there is room for it: the holders all hold under one limit
--   (admits() in the helpers), so one of them, drawn at random, tells whether it is this
--   one's, and the count of records (ended leases included) is below it. This costs the
--   same however many holders there are.
-- The fencing token is the server's clock in microseconds (see new_fence()), above the drawn
-- holder's, and the record is the one record() writes. The arguments are compared as the
-- strings the client sent, and the record is put together from strings: turning numbers into
-- text and back costs the server more than the rest of this path.
if flags == '-' and ARGV[5] == '0' and (ARGV[8] == '' or ARGV[8] == '0') then
  local found = ARGV[3] == '1' and redis.call('EXISTS', K_holders, K_withdrawn)
    or redis.call('EXISTS', K_holders, K_withdrawn, K_queue)
  local drawn
  if found == 1 and ARGV[3] ~= '1' then
    -- Of the three keys, the one that exists is the holders' if it has fields.
    local count = redis.call('HLEN', K_holders)
    drawn = count > 0 and count < tonumber(ARGV[3])
      and redis.call('HRANDFIELD', K_holders, 1, 'WITHVALUES')[2]
    if drawn and string.match(drawn, '^%d+ %d+ %d+ %d+ (%d+) ') ~= ARGV[3] then
      drawn = nil
    end
  end
  if found == 0 or drawn then
    local clock = redis.call('TIME')
    local us = string.sub('00000' .. clock[2], -6)
    local at = clock[1] .. string.sub(us, 1, 3)
    local lease = tonumber(ARGV[2])
    local ends = tonumber(at) + lease
    local fence = clock[1] .. us
    if drawn then
      local above = tonumber(string.match(drawn, '^%d+ %d+ (%d+) '))
      if above >= tonumber(fence) then
        fence = digits(above + 1)
      end
    end
    -- Only if the owner holds nothing: a hold of its own is the slow path's to count.
    local record = digits(ends) .. ' 1 ' .. fence .. ' ' .. at .. ' ' .. ARGV[3] .. ' '
      .. attempt .. ' ' .. meta
    if redis.call('HSETNX', K_holders, owner, record) == 1 then
      if not drawn or redis.call('PTTL', K_holders) < lease then
        redis.call('PEXPIREAT', K_holders, digits(ends - 1))
      end
      return {1, fence, 1, lease}
    end
  end
end

-- The claim of a lock handed to this owner, alone on it (the common end of a wait): the grant
-- becomes the lease asked for. Only the lease end at the head of the record changes.
if (flags == 'c' or flags == 'fc') and ARGV[5] == '0' and ARGV[8] == '0' and attempt ~= ''
    and redis.call('EXISTS', K_withdrawn) == 0 and redis.call('HLEN', K_holders) == 1 then
  local text = redis.call('HGET', K_holders, owner)
  local ends, holds, fence, limit, held_attempt
  if text then
    ends, holds, fence, limit, held_attempt =
      string.match(text, '^(%d+) (%d+) (%d+) %d+ (%d+) (%S*) ')
  end
  local clock = ends and held_attempt == attempt and limit == ARGV[3] and redis.call('TIME')
  local now_ms = clock and ms_of(clock)
  if clock and tonumber(ends) > now_ms then
    local lasts = math.max(tonumber(ends), now_ms + tonumber(ARGV[2]))
    redis.call('HSET', K_holders, owner, digits(lasts) .. string.sub(text, #ends + 1))
    redis.call('PEXPIREAT', K_holders, digits(lasts - 1))
    return {1, fence, tonumber(holds), lasts - now_ms}
  end
end

local lease, limit = tonumber(ARGV[2]), tonumber(ARGV[3])
local fence_ttl, wait_ms, known = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[8])

--! helpers

local fair, claim = string.find(flags, 'f', 1, true), string.find(flags, 'c', 1, true)
if attempt ~= '' and redis.call('EXISTS', K_withdrawn) == 1 then
  return {0, 0}
end

local function take()
  local fence = hold(owner, lease, limit, meta, fence_ttl, attempt)
  settle()
  return {1, tonumber(fence), 1, lease}
end

-- The owner holds the lock already (a nested acquire, or the claim of a lock handed to it):
-- lengthen its lease, and count one more hold unless claiming.
local current, holds, fence, at, held_attempt, held_meta, held_limit = live(owner)
if current and later(held_attempt, attempt) then
  -- A try that reaches the server after a later attempt of its owner took the lock (it
  -- waited in a socket, or for its thread): its client gave it up, and its withdrawal is on
  -- its way. It takes nothing, so that the withdrawal leaves the later attempt's hold alone.
  return {0, current - now()}
end
if current and held_limit ~= limit and known == 0 then
  -- Left by an acquire the owner saw fail, and taken under another limit: no hold of the
  -- owner's to take over; it asks afresh.
  drop(owner)
  settle()
  current = nil
elseif current and limit < held_limit then
  return {-2}
end
if current then
  if not claim then
    -- A nested acquire: one hold more (a claim turns the grant into the full lease alone).
    holds = (known or holds) + 1
  end
  local ends = math.max(current, now() + lease)
  put(owner, record(ends, holds, fence, at, held_limit, attempt, held_meta))
  settle()
  return {1, tonumber(fence), holds, ends - now()}
end
purge()
if known and known > 0 then
  return {-1}
end

local function register()
  redis.call('ZADD', K_queue, 'NX', now_us(), owner)
  redis.call('HSET', K_waiters, owner,
    digits(now() + wait_ms) .. string.format(' %d %d %s %s ', lease, limit, attempt,
      fair and 'f' or '-') .. meta)
  for _, key in ipairs({K_queue, K_waiters}) do
    if redis.call('PTTL', key) < wait_ms then
      redis.call('PEXPIRE', key, wait_ms)
    end
  end
end

local waiting = redis.call('EXISTS', K_queue) == 1
-- A registration of this owner under another limit was left by an attempt it saw fail (or
-- by a process of the same owner that died): not this request's, to be handed a slot under
-- that limit or to keep its place. (Registrations exist only while the queue does.)
local registration = waiting and redis.call('HGET', K_waiters, owner)
if registration and tonumber(string.match(registration, '^%d+ %d+ (%d+) ')) ~= limit then
  leave_queue(owner)
  waiting = redis.call('EXISTS', K_queue) == 1
end
-- An owner that would share the lock queues behind a waiter of another limit as if it were
-- fair: readers never starve a writer, nor holders of one limit a waiter of another.
local queued = waiting and (fair or (limit > 1 and other_limit_waiting(owner, limit)))
if queued then
  -- Free slots go to the longest-waiting live owners, this one perhaps among them.
  if wait_ms > 0 then
    register()
  end
  handoff(fence_ttl)
  settle()
  local current, _, fence, at, _, held_meta = live(owner)
  if current then
    -- Handed to this owner just now: its lease is the one it asked for, not a grant's, and
    -- nobody is to wake it.
    woken[owner] = nil
    put(owner, record(now() + lease, 1, fence, at, limit, attempt, held_meta))
    settle()
    return reply({1, tonumber(fence), 1, lease})
  end
  waiting = redis.call('EXISTS', K_queue) == 1
end

if admits(limit) and not (queued and waiting) then
  -- A free slot, and nobody to respect: take it.
  if waiting then
    leave_queue(owner)
  end
  return reply(take())
end

if wait_ms > 0 then
  register()
else
  leave_queue(owner)
end
local earliest = lease_ends()
if not earliest then
  return reply({0, 0})
end
return reply({0, earliest - now()})
