-- Read how long a lease has left, without changing anything.
-- KEYS[1] holders (the prelude's)
-- ARGV[1] owner token, or '' for the longest lease of any holder
-- Returns the remaining lease in ms, or -1 if the owner (or anyone) holds nothing.
--! helpers

local ends
if ARGV[1] == '' then
  local _, latest = lease_ends()
  ends = latest
else
  ends = live(ARGV[1])
end
if not ends or ends <= now() then
  return -1
end
return ends - now()
