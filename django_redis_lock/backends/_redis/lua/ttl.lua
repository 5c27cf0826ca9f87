-- Read how long a lease has left, without changing anything.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token, or '' for the longest lease of any holder
-- Returns the remaining lease in ms, or -1 if the owner (or anyone) holds nothing.
local ends
if ARGV[1] == '' then
  local longest = redis.call('ZRANGE', K_holders, -1, -1, 'WITHSCORES')
  if #longest > 0 then
    ends = tonumber(longest[2])
  end
else
  ends = lease_end(ARGV[1])
end
if not ends or ends <= now() then
  return -1
end
return ends - now()
