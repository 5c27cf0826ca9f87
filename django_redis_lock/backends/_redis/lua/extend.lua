-- Lengthen an owner's lease by ARGV[2] ms, or set it to ARGV[2] ms from now.
-- KEYS[1] holders (see the prelude for the other keys)
-- ARGV[1] owner token  ARGV[2] ms  ARGV[3] '1' to replace the lease, '0' to add to it
-- Returns the new remaining lease in ms, or -1 if the owner holds nothing: an ended lease is
-- never revived.
--! helpers

local owner, ms = ARGV[1], tonumber(ARGV[2])
local current = lease_end(owner)
if not current then
  return -1
end
local ends = current + ms
if ARGV[3] == '1' then
  ends = now() + ms
end
redis.call('ZADD', K_holders, ends, owner)
settle()
return ends - now()
