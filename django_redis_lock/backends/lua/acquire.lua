-- Take a lease on the lock (or one slot of a semaphore) for an owner; reentrant.
-- KEYS[1] holders, KEYS[2] data (see the prelude); KEYS[3] fence: the last fencing token
-- ARGV[1] owner token  ARGV[2] lease (ms)  ARGV[3] limit (holders at once)
-- ARGV[4] holder metadata (JSON)  ARGV[5] how long the fence outlives the lease (ms)
-- Returns {1, fencing token, hold count} when acquired,
--         {0, ms until the earliest current lease ends} when not.
local owner, lease, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])

-- A free lock (the common case) skips the purge, reentrancy and limit checks below.
local holders = redis.call('ZCARD', KEYS[1])
if holders > 0 then
  purge()
  local current = lease_end(owner)
  if current then
    local holds = redis.call('HINCRBY', KEYS[2], owner, 1)
    redis.call('ZADD', KEYS[1], math.max(current, now_ms + lease), owner)
    settle()
    return {1, tonumber(redis.call('HGET', KEYS[2], owner .. '|f')), holds}
  end
  holders = redis.call('ZCARD', KEYS[1])
  if holders >= limit then
    local earliest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    return {0, tonumber(earliest[2]) - now_ms}
  end
end

-- Strictly increasing per name: one more than the last token, and never behind the server's
-- clock in microseconds, so tokens keep growing even after the counter itself has expired.
local fence = math.max(tonumber(redis.call('GET', KEYS[3]) or '0') + 1, now_us)
fence = string.format('%.0f', fence)
redis.call('SET', KEYS[3], fence, 'PX', lease + tonumber(ARGV[5]))
redis.call('ZADD', KEYS[1], now_ms + lease, owner)
redis.call('HSET', KEYS[2], owner, 1, owner .. '|f', fence, owner .. '|t', now_ms,
  owner .. '|m', ARGV[4])
if holders == 0 then
  redis.call('PEXPIRE', KEYS[1], lease)
  redis.call('PEXPIRE', KEYS[2], lease)
else
  settle()
end
return {1, tonumber(fence), 1}
