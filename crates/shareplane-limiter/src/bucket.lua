-- shareplane token buckets (SPEC.md §7): several buckets checked and spent in one all-or-nothing call.
--
-- KEYS[i]  the bucket of limit i. All keys of one call must share one hash tag on Redis Cluster.
-- ARGV     five numbers per key, in key order: rate (tokens/s), burst (tokens), cost (tokens),
--          ttl_ms (at least burst / rate; the script raises it if it is lower), enforce (1 or 0;
--          0 = shadow: evaluated and reported, never refuses).
-- Reply    {allowed, retry_after_s, verdict_1, tokens_1, verdict_2, tokens_2, ...}
--          allowed: 1 or 0. retry_after_s: whole seconds after which the refill covers every
--          refusing bucket, ceil((cost - tokens) / rate); -1 when admitted or when no wait helps
--          (cost above burst, or a rate of zero). verdict_i: 0 has the tokens, 1 short of tokens,
--          2 cost above burst. tokens_i: tokens left after this call, as a decimal string.
--
-- The clock is the server's (TIME), never the caller's. Elapsed time is clamped at zero and the stored
-- stamp never moves backward, so a clock that steps back (or a failover to a replica whose clock is
-- behind) credits no refill until time has really passed: too little, never too much. Tokens are
-- clamped to a lower burst, never reset to full. A missing bucket starts full. Every key is written
-- on every call, admitted or not (fields `tokens` and `ts`). Its TTL is set to ttl_ms whenever less
-- than max(burst / rate, 3/4 of ttl_ms) of it is left, so after every call a bucket has at least
-- burst / rate to live, and a hot bucket pays for PEXPIRE once per quarter of its TTL rather than on
-- every call; the field `exp` holds the expiry (ms, server clock) the script last set.
--
-- Cost: this runs for every request a gateway checks, so it is written for few Redis commands
-- (TIME once, then HMGET and HSET per key) and few Lua operations (locals, no closures or tables
-- per key beyond one flat array). crates/shareplane-limiter/examples/bench_redis_cpu.rs measures it.
local call, tonumber, huge, ceil, fmt = redis.call, tonumber, math.huge, math.ceil, string.format
if redis.replicate_commands then redis.replicate_commands() end

local n = #KEYS
if n == 0 or #ARGV ~= 5 * n then
  return redis.error_reply('ERR shareplane bucket: expected 5 arguments per key')
end

local clock = call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now_ms = now_us / 1000
-- The stamp as written: TIME's digits, so that no key pays for formatting a double.
local now_text = fmt('%s%06d', clock[1], tonumber(clock[2]))

-- Per key, slots 5i-4 to 5i of `s`: tokens, stamp (as written), verdict, ttl (0: leave the TTL
-- alone), cost.
local s = {}
local allowed, wait, hopeless = 1, 0, false
for i = 1, n do
  local b = 5 * i - 5
  local rate, burst, cost, ttl = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
    tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  -- `not (x >= 0 and x < huge)` is also true for NaN.
  local bad = (rate == nil or not (rate >= 0 and rate < huge)) and 'rate'
    or (burst == nil or not (burst >= 0 and burst < huge)) and 'burst'
    or (cost == nil or not (cost >= 0 and cost < huge)) and 'cost'
    or (ttl == nil or not (ttl >= 0 and ttl < huge)) and 'ttl_ms'
  if bad then
    return redis.error_reply('ERR shareplane bucket: ' .. bad .. ' of key ' .. i ..
      ' must be a finite number >= 0')
  end
  local floor_ms = 1
  if rate > 0 and burst > 0 then floor_ms = ceil(burst / rate * 1000) end
  ttl = ceil(ttl)
  if ttl < floor_ms then ttl = floor_ms end

  local held = call('HMGET', KEYS[i], 'tokens', 'ts', 'exp')
  local t, ts, stamp = tonumber(held[1]), tonumber(held[2]), held[2]
  if t == nil or ts == nil or t ~= t or ts ~= ts then
    t, ts, stamp = burst, now_us, now_text
  end
  -- A stamp ahead of the clock stays as it was written.
  local tokens = t
  if now_us > ts then
    tokens = t + (now_us - ts) / 1000000 * rate
    stamp = now_text
  end
  if tokens > burst then tokens = burst end

  local verdict = 0
  if cost > burst then verdict = 2 elseif tokens < cost then verdict = 1 end
  if verdict ~= 0 and ARGV[b + 5] == '1' then
    allowed = 0
    if verdict == 2 or rate == 0 then
      hopeless = true
    else
      local w = ceil((cost - tokens) / rate)
      if w > wait then wait = w end
    end
  end
  local exp, need = tonumber(held[3]), 0.75 * ttl
  if need < floor_ms then need = floor_ms end
  if exp ~= nil and exp - now_ms >= need then ttl = 0 end
  local o = 5 * i - 5
  s[o + 1], s[o + 2], s[o + 3], s[o + 4], s[o + 5] = tokens, stamp, verdict, ttl, cost
end

local reply = {allowed, -1}
if allowed == 0 and not hopeless then reply[2] = wait end
for i = 1, n do
  local o = 5 * i - 5
  local tokens, verdict, ttl = s[o + 1], s[o + 3], s[o + 4]
  -- An admitted call spends every bucket that has the tokens, shadow ones included, so a shadow
  -- bucket tracks what enforcing it would have done.
  if allowed == 1 and verdict == 0 then tokens = tokens - s[o + 5] end
  local left = fmt('%.17g', tokens)
  if ttl == 0 then
    call('HSET', KEYS[i], 'tokens', left, 'ts', s[o + 2])
  else
    call('HSET', KEYS[i], 'tokens', left, 'ts', s[o + 2],
      'exp', fmt('%.0f', ceil(now_ms + ttl)))
    call('PEXPIRE', KEYS[i], ttl)
  end
  reply[2 * i + 1] = verdict
  reply[2 * i + 2] = left
end
return reply
