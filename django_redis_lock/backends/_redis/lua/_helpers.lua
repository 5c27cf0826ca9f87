-- Helpers of the slower paths (semaphores, contention, waiting), inserted where a script
-- says "--! helpers", after its fast path has returned: a free lock does not pay for them.

-- A lease handed to a waiter lasts this long until the waiter claims it (acquire with the
-- 'c' flag), which turns it into the lease the waiter asked for: a waiter that died, or was
-- paused, before claiming holds the others back only this long, and a claim that comes later
-- finds the grant gone and waits again.
local CLAIM_MS = 1000

local function forget(owner)
  redis.call('HDEL', K_data, owner, owner .. '|f', owner .. '|t', owner .. '|m', owner .. '|a')
end

-- Drop holders whose lease has ended (a semaphore's keys outlive its shortest lease).
local function purge()
  local gone = redis.call('ZRANGEBYSCORE', K_holders, '-inf', now())
  for _, owner in ipairs(gone) do
    redis.call('ZREM', K_holders, owner)
    forget(owner)
  end
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
    local ends, lease, limit, attempt, meta
    if record then
      ends, lease, limit, attempt, meta = string.match(record, '^(%d+) (%d+) (%d+) (%S*) (.*)$')
    end
    if not ends or tonumber(ends) <= now() then
      leave_queue(head)
    elseif redis.call('ZCARD', K_holders) >= tonumber(limit) then
      return
    else
      leave_queue(head)
      local granted = math.min(tonumber(lease), CLAIM_MS)
      local fence = hold(head, granted, meta, fence_ttl, attempt)
      local signal = base .. 's:' .. head
      redis.call('RPUSH', signal, fence .. ' ' .. granted)
      redis.call('PEXPIRE', signal, granted)
    end
  end
end
