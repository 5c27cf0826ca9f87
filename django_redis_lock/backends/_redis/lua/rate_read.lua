-- Read a rate's list and its own server's clock in one step, for listing (windows.py): on a
-- cluster, the clock of the primary that keeps the rate, which rate.lua reads too.
-- KEYS[1] <prefix>:{=name}:r:<period ms>  the rate's list (rate.lua)
-- Returns {seconds, microseconds, entry, ...}: TIME's reply, then the list, oldest first.
local clock = redis.call('TIME')
local read = redis.call('LRANGE', KEYS[1], 0, -1)
table.insert(read, 1, clock[2])
table.insert(read, 1, clock[1])
return read
