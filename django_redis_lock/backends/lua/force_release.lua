-- Remove every holder of a lock, or one named owner, whatever their hold counts.
-- KEYS[1] holders, KEYS[2] data (see the prelude)
-- ARGV[1] owner token, or '' for every holder
-- Returns how many live holders were removed. The fencing counter is kept.
purge()
if ARGV[1] == '' then
  local count = redis.call('ZCARD', KEYS[1])
  redis.call('DEL', KEYS[1], KEYS[2])
  return count
end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
forget(ARGV[1])
settle()
return 1
