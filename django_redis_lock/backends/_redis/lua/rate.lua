-- Admit one hit to a rate limit if every one of its rates has room (see backends/_rate_limits.py).
-- KEYS[i] <prefix>:{=name}:r:<period ms>  list, one per rate: the buckets of hits in the
--         rate's window, oldest first, each "<latest hit us> <cumulative weight> <limit>".
--         The first entry is the base, a bucket that has left the window already (or
--         "0 0 <limit>"): the weight in the window is the last entry's cumulative weight less
--         the base's. The key expires a period after the latest hit.
-- ARGV[1] the hit's weight; then, for rate i, ARGV[3i - 1] its limit, ARGV[3i] its period (us),
--         ARGV[3i + 1] its granule (us): hits in one granule-long slice of time share a bucket
-- Returns {1, seconds, microseconds}: admitted, at that time on the server's clock;
--         {0, us until every rate has room for the hit, the index of the rate that waits longest}
-- Times are the server's clock in microseconds (TIME's own precision), exact in Lua's numbers.
-- So are the cumulative weights: past REBASE_ABOVE, every entry's is counted from the base's
-- again (a weight in the window is at most a limit, 10^12), so none ever nears 2^53.
local REBASE_ABOVE = 1125899906842624 -- 2^50
local cost = tonumber(ARGV[1])
local clock = redis.call('TIME')
-- A bucket has left the window when a period has passed since its latest hit.
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local function parsed(entry)
  local latest, total = string.match(entry, '^(%d+) (%d+)')
  return tonumber(latest), tonumber(total)
end

local wait, waiting = 0, 0
local tops = {}
for i, key in ipairs(KEYS) do
  local limit, period = tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  -- Drop the buckets that left the window: the newest of them becomes the base.
  local second = redis.call('LINDEX', key, 1)
  while second and parsed(second) + period <= now do
    redis.call('LPOP', key)
    second = redis.call('LINDEX', key, 1)
  end
  local base, top = 0, 0
  local first = redis.call('LINDEX', key, 0)
  if first then
    local _, base_total = parsed(first)
    local last = redis.call('LINDEX', key, -1)
    local top_latest, top_total = parsed(last)
    if top_total > REBASE_ABOVE then
      for at, entry in ipairs(redis.call('LRANGE', key, 0, -1)) do
        local latest, total = parsed(entry)
        redis.call('LSET', key, at - 1, digits(latest) .. ' ' .. digits(total - base_total)
          .. ' ' .. string.match(entry, '(%d+)$'))
      end
      top_total, base_total = top_total - base_total, 0
    end
    base, top = base_total, top_total
    -- A list of the base alone takes a new bucket: a hit merged into the base is not counted.
    tops[i] = {top_latest, top_total, second ~= false}
  end
  if top - base + cost > limit then
    -- The hit waits until enough of the oldest buckets have left the window.
    local needed = top + cost - limit
    for _, entry in ipairs(redis.call('LRANGE', key, 1, -1)) do
      local latest, total = parsed(entry)
      if total >= needed then
        if latest + period - now > wait then
          wait, waiting = latest + period - now, i
        end
        break
      end
    end
  end
end
if waiting > 0 then
  return {0, wait, waiting}
end

for i, key in ipairs(KEYS) do
  local limit, period, granule = ARGV[3 * i - 1], tonumber(ARGV[3 * i]), tonumber(ARGV[3 * i + 1])
  local top = tops[i]
  if not top then
    redis.call('RPUSH', key, '0 0 ' .. limit, digits(now) .. ' ' .. cost .. ' ' .. limit)
    top = {now, 0}
  else
    -- A clock that stepped back never makes a hit older than the latest one recorded.
    local latest = math.max(now, top[1])
    local entry = digits(latest) .. ' ' .. digits(top[2] + cost) .. ' ' .. limit
    if top[3] and math.floor(top[1] / granule) == math.floor(latest / granule) then
      redis.call('LSET', key, -1, entry)
    else
      redis.call('RPUSH', key, entry)
    end
    top = {latest, 0}
  end
  redis.call('PEXPIRE', key, math.ceil((top[1] + period - now) / 1000))
end
return {1, tonumber(clock[1]), tonumber(clock[2])}
