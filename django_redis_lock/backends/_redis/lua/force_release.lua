-- Remove every holder of a lock, or one named owner, whatever their hold counts; the freed
-- slots go to waiting owners as at a release.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token, or '' for every holder  ARGV[2] how long a new fence outlives its
-- lease (ms)
-- Returns how many live holders were removed. The fencing counter is kept.
--! helpers

purge()
local removed = 0
if ARGV[1] == '' then
  removed = redis.call('ZCARD', K_holders)
  redis.call('DEL', K_holders, K_data)
elseif redis.call('ZREM', K_holders, ARGV[1]) == 1 then
  forget(ARGV[1])
  removed = 1
end
handoff(tonumber(ARGV[2]))
settle()
return removed
