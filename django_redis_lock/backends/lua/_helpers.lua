-- Helpers of the slower paths (semaphores, contention, waiting), inserted where a script
-- says "--! helpers", after its fast path has returned: a free lock does not pay for them.

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
