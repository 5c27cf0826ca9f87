-- The functions of every script but its fast path (semaphores, contention, waiting),
-- inserted where a script says "--! helpers", after its fast path has returned: a free lock
-- does not pay for defining them.

-- The server's time, read once and only by the paths that need it.
local clock_ms, clock_us
local function now()
  if not clock_ms then
    local clock = redis.call('TIME')
    clock_ms = ms_of(clock)
    clock_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
  end
  return clock_ms
end

-- A holder's record: "<lease end ms> <holds> <fencing token> <acquired at ms> <limit>
-- <attempt> <metadata JSON>", the limit being the most holders the hold was taken to share
-- the lock with (1: exclusive, a writer; a reader's is unbounded), and the attempt the
-- client's id of the acquire that last took or re-took the hold (so a late undo touches only
-- that attempt).
local function record(ends, holds, fence, at, limit, attempt, meta)
  return digits(ends) .. string.format(' %d %s ', holds, fence) .. digits(at)
    .. string.format(' %d %s ', limit, attempt) .. meta
end

-- Return a record's lease end, holds, fencing token (a string), acquired at, attempt, meta
-- and limit. A script reads the same records several times (readers sharing a lock have one
-- each): each text is parsed once.
local parsed = {}
local function parse(text)
  local fields = parsed[text]
  if not fields then
    local ends, holds, fence, at, limit, attempt, meta =
      string.match(text, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%S*) (.*)$')
    fields = {tonumber(ends), tonumber(holds), fence, tonumber(at), attempt, meta, tonumber(limit)}
    parsed[text] = fields
  end
  return fields[1], fields[2], fields[3], fields[4], fields[5], fields[6], fields[7]
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
    fence = math.max(fence, tonumber(redis.call('GET', K_fence) or '0') + 1)
    redis.call('SET', K_fence, digits(fence), 'PX', lease + fence_ttl)
  end
  return digits(fence)
end

-- Whether attempt id ``a`` was made after ``b``, by the same process. Ids are
-- "<process>.<sequence>" in hex (see owner.new_attempt), a Redlock try adding "~<try>" in hex;
-- an owner makes its attempts one after another, so the larger numbers are the later ones.
-- Ids of two processes, or of another form, are never later.
local function later(a, b)
  local process_a, sequence_a, try_a = string.match(a, '^(%x+)%.(%x+)~?(%x*)$')
  local process_b, sequence_b, try_b = string.match(b, '^(%x+)%.(%x+)~?(%x*)$')
  if not process_a or process_a ~= process_b then
    return false
  end
  sequence_a, sequence_b = tonumber(sequence_a, 16), tonumber(sequence_b, 16)
  if sequence_a ~= sequence_b then
    return sequence_a > sequence_b
  end
  return (tonumber(try_a, 16) or -1) > (tonumber(try_b, 16) or -1)
end

-- A lease handed to a waiter lasts this long until the waiter claims it (acquire with the
-- 'c' flag), which turns it into the lease the waiter asked for: a waiter that died, or was
-- paused, before claiming holds the others back only this long, and a claim that comes later
-- finds the grant gone and waits again.
local CLAIM_MS = 1000

local function now_us()
  now()
  return clock_us
end

-- Every holder's record, by owner (a semaphore has several; ended leases included): read
-- once per lock and script, and kept current by put(), drop() and drop_all(), through which
-- every write of a holder goes once the helpers are defined.
local cached = {}
local function records()
  local found = cached[K_holders]
  if not found then
    local all = redis.call('HGETALL', K_holders)
    found = {}
    for i = 1, #all, 2 do
      found[all[i]] = all[i + 1]
    end
    cached[K_holders] = found
  end
  return found
end

-- Record owner's hold as ``text`` (or remove it, with no text), here and in the records read.
local function put(owner, text)
  if text then
    redis.call('HSET', K_holders, owner, text)
  else
    redis.call('HDEL', K_holders, owner)
  end
  local found = cached[K_holders]
  if found then
    found[owner] = text
  end
end

-- Remove owner's hold.
local function drop(owner)
  put(owner, nil)
end

-- Remove every hold.
local function drop_all()
  redis.call('DEL', K_holders)
  cached[K_holders] = {}
end

-- Drop holders whose lease has ended (a semaphore's key outlives its shortest lease); return
-- how many are left.
local function purge()
  local left = 0
  for owner, text in pairs(records()) do
    if parse(text) <= now() then
      drop(owner)
    else
      left = left + 1
    end
  end
  return left
end

-- Return the record of owner's live hold, parsed (see parse()), or nil.
local function live(owner)
  local text = redis.call('HGET', K_holders, owner)
  if text and parse(text) > now() then
    return parse(text)
  end
  return nil
end

-- Return the earliest and the latest lease end among the holders (nil if none).
local function lease_ends()
  local earliest, latest
  for _, text in pairs(records()) do
    local ends = parse(text)
    earliest, latest = math.min(earliest or ends, ends), math.max(latest or ends, ends)
  end
  return earliest, latest
end

-- Make the holders key expire when its longest lease ends, or delete it if none is left.
local function settle()
  local _, latest = lease_ends()
  if latest and latest > now() then
    redis.call('PEXPIREAT', K_holders, latest - 1)
  else
    drop_all()
  end
end

-- Whether one more owner, taken to share the lock with ``limit`` holders at most, may join the
-- holders: they all hold under that same limit, and fewer of them than it. A writer (limit 1)
-- is thus alone, and readers (unbounded) share the lock with readers only; and as the holders
-- of a lock all have one limit, one of them tells it (the fast paths of acquire.lua).
local function admits(limit)
  local count = 0
  for _, text in pairs(records()) do
    local _, _, _, _, _, _, held_limit = parse(text)
    if held_limit ~= limit then
      return false
    end
    count = count + 1
  end
  return count < limit
end

-- Whether a live waiter other than owner asks for another limit than ``limit`` (a writer,
-- where a reader asks): a newcomer does not pass it, so readers never starve a writer, nor
-- holders of one limit a waiter of another (holders share only under one limit, admits()).
local function other_limit_waiting(owner, limit)
  local all = redis.call('HGETALL', K_waiters)
  for i = 1, #all, 2 do
    local ends, _, waiting_limit = string.match(all[i + 1], '^(%d+) (%d+) (%d+) ')
    if all[i] ~= owner and ends and tonumber(ends) > now() and tonumber(waiting_limit) ~= limit then
      return true
    end
  end
  return false
end

-- Make owner a holder with one hold; return its fencing token (as a string), above every
-- token the other holders have and ``above`` (a token just released, or nil).
local function hold(owner, lease, limit, meta, fence_ttl, attempt, above)
  for _, text in pairs(records()) do
    local _, _, fence = parse(text)
    if not above or tonumber(fence) > tonumber(above) then
      above = fence
    end
  end
  local fence = new_fence(fence_ttl, lease, above)
  put(owner, record(now() + lease, 1, fence, now(), limit, attempt, meta))
  return fence
end

local function leave_queue(owner)
  redis.call('ZREM', K_queue, owner)
  redis.call('HDEL', K_waiters, owner)
end

-- The wake-up calls of the owners handed the lock by this script: "<fencing token> <grant ms>
-- <owner>", sent by reply().
local woken = {}

-- Hand free slots to the longest-waiting owners whose registration is still live, and note
-- each one to be woken: the waiter's wake-up is its acquisition, with no race against
-- newcomers. Waiters that gave up or died (registration ended) are dropped on the way.
-- ``above``: the token of a hold just released, which the next one's must exceed.
local function handoff(fence_ttl, above)
  while true do
    local head = redis.call('ZRANGE', K_queue, 0, 0)[1]
    if not head then
      return
    end
    local text = redis.call('HGET', K_waiters, head)
    local ends, lease, limit, attempt, meta
    if text then
      ends, lease, limit, attempt, meta = string.match(text, '^(%d+) (%d+) (%d+) (%S*) (.*)$')
      -- The fair flag, then the holder's metadata (JSON, never starting with 'f' or '-').
      meta = meta and (string.match(meta, '^[f-] (.*)$') or meta)
    end
    if not ends or tonumber(ends) <= now() then
      leave_queue(head)
    elseif not admits(tonumber(limit)) then
      return
    else
      leave_queue(head)
      local granted = math.min(tonumber(lease), CLAIM_MS)
      local fence = hold(head, granted, tonumber(limit), meta, fence_ttl, attempt, above)
      woken[head] = fence .. ' ' .. granted .. ' ' .. head
      woken[#woken + 1] = head
    end
  end
end

-- Drop owner's wake-up calls: those this script would push, and those pushed already.
local function unwake(owner)
  woken[owner] = nil
  for _, call in ipairs(redis.call('LRANGE', K_wake, 0, -1)) do
    if string.match(call, '^%d+ %d+ (.*)$') == owner then
      redis.call('LREM', K_wake, 0, call)
    end
  end
end

-- Return the script's reply ``value``, with the wake-up calls of the owners it handed the lock
-- to. A lone waiter (nobody else queued) is woken here: its call goes to the wake-up list, on
-- which the waiter blocked longest is the only one waiting. Among several waiters, the order
-- in which they blocked may differ from the queue's (one registered first, another blocked
-- first), so the calls go back to the client, {'wake', value, owner, call, ...}, which pushes
-- each to its owner's own list (waits.py).
local function reply(value)
  local calls = {'wake', value}
  for _, owner in ipairs(woken) do
    if woken[owner] then
      calls[#calls + 1] = owner
      calls[#calls + 1] = woken[owner]
    end
  end
  if #calls == 2 then
    return value
  end
  if #calls == 4 and redis.call('EXISTS', K_queue) == 0 then
    redis.call('RPUSH', K_wake, calls[4])
    redis.call('PEXPIRE', K_wake, CLAIM_MS)
    return value
  end
  return calls
end
