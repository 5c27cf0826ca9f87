-- Shared by every script (prepended at load time). The functions are in _helpers.lua, which
-- each script inserts after its fast path, so a free lock does not pay for defining them.
-- Every key a script touches is passed in KEYS, in this order, as many as the script needs
-- (its header says how many; ``KEY_COUNTS`` in scripts.py). All of them carry the
-- hash tag {=name}, so a lock lives in one Redis Cluster slot:
--   KEYS[1] <prefix>:{=name}:h   holders  hash: owner -> its record (see record() below);
--                                 the key expires when the longest lease ends, so a lone
--                                 holder's key exists exactly as long as its lease
--   KEYS[2] <prefix>:{=name}:q   queue    sorted set: waiting owner -> arrival (us), FIFO
--   KEYS[3] <prefix>:{=name}:w   waiters  hash: owner -> "<registration end ms> <lease ms>
--                                 <limit> <attempt> <'f' fair, '-' not> <meta>"; its arrival
--                                 is its score in the queue
--   KEYS[4] <prefix>:{=name}:f   fence    string: the last fencing token issued, kept
--                                 fencing_ttl after the lease; only with fencing_ttl > 0
--   KEYS[5] <prefix>:{=name}:s   wake-up list: "<fencing token> <grant ms> <owner>", the
--                                 call of a lone waiter a script handed the lock to, which the
--                                 owner answers by claiming the hold within CLAIM_MS. Every
--                                 waiter blocks on it and on its own list (KEYS[7]): the calls
--                                 of waiters handed the lock among others go back to the
--                                 client, which pushes each to its owner's list (reply() in
--                                 _helpers.lua)
--   KEYS[6] <prefix>:{=name}:x:<attempt>  string: an attempt withdrawn by its client, so that
--                                 its acquire takes nothing if it reaches the server late
--   KEYS[7] <prefix>:{=name}:s:<owner>  list: the owner's own, given to withdraw.lua only,
--                                 which drops a call left there
-- Time comes from the server's clock, so clients' clocks never matter. A released lock
-- leaves no key behind (but a durable fence, when asked for).
local K_holders, K_queue, K_waiters, K_fence, K_wake, K_withdrawn =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

-- A whole number (a time in ms or us, a token) as its decimal digits. string.format's '%.0f'
-- costs the server more than the rest of a fast path, and its '%d' is 32 bits wide on some
-- builds: the number is written in two parts that each fit.
local function digits(n)
  if n < 1000000000 then
    return string.format('%d', n)
  end
  local high = math.floor(n / 1000000000)
  return string.format('%d%09d', high, n - high * 1000000000)
end

-- The server's clock in whole milliseconds, from the reply of TIME.
local function ms_of(clock)
  return tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
end
