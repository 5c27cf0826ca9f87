-- Give a hit that a rate's limit refused its place among the retries: the moment it should
-- come back, no sooner than a slot frees, and a period/limit after the previous one given.
-- KEYS[1] <prefix>:{=name}:r:<period ms>:next  string: the earliest moment (us) the next
--         retry may be given; it expires a period after that moment
-- ARGV[1] us from now until a slot frees  ARGV[2] the spacing of retries (period / limit, us)
-- ARGV[3] the period (ms)
-- Returns the us from now until the retry's moment.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local at = math.max(now + tonumber(ARGV[1]), tonumber(redis.call('GET', KEYS[1]) or 0))
local after = at + tonumber(ARGV[2])
local expiry = math.ceil((after - now) / 1000) + tonumber(ARGV[3])
redis.call('SET', KEYS[1], digits(after), 'PX', expiry)
return at - now
