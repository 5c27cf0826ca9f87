-- Remove every holder of a lock, or one named owner, whatever their hold counts; the freed
-- slots go to waiting owners as at a release.
-- KEYS[1..5] holders, queue, waiters, fence, wake-up list (the prelude's)
-- ARGV[1] owner token, or '' for every holder  ARGV[2] how long a durable fence outlives its
-- lease (ms; 0: none)
-- Returns how many live holders were removed, with the owners handed the lock, if any
-- (reply()). A durable fencing counter is kept.
--! helpers

local removed = purge()
if ARGV[1] == '' then
  drop_all()
elseif live(ARGV[1]) then
  drop(ARGV[1])
  removed = 1
else
  removed = 0
end
handoff(tonumber(ARGV[2]))
settle()
return reply(removed)
