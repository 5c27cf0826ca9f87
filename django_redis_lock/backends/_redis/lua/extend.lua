-- Lengthen an owner's lease by ARGV[2] ms, or set it to ARGV[2] ms from now; record ARGV[4]
-- as the hold's metadata in place of the one it had, unless it is ''.
-- KEYS[1] holders (the prelude's)
-- ARGV[1] owner token  ARGV[2] ms  ARGV[3] '1' to replace the lease, '0' to add to it
-- ARGV[4] holder metadata JSON to record, or '' to keep the hold's
-- Returns the new remaining lease in ms, or -1 if the owner holds nothing: an ended lease is
-- never revived, and nothing is recorded for it.
--! helpers

local owner, ms = ARGV[1], tonumber(ARGV[2])
local current, holds, fence, at, attempt, meta, limit = live(owner)
if not current then
  return -1
end
if ARGV[4] ~= '' then
  meta = ARGV[4]
end
local ends = current + ms
if ARGV[3] == '1' then
  ends = now() + ms
end
put(owner, record(ends, holds, fence, at, limit, attempt, meta))
if redis.call('HLEN', K_holders) == 1 then
  redis.call('PEXPIREAT', K_holders, ends - 1)  -- a lone holder: its lease is the key's
else
  settle()
end
return ends - now()
