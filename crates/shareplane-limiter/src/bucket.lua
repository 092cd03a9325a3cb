-- shareplane token buckets (SPEC.md §7): a batch of checks, each checking and spending several
-- buckets all or nothing, evaluated in order at one instant of the server's clock.
--
-- KEYS     the distinct buckets the batch names. All keys of one call must share one hash tag on
--          Redis Cluster.
-- ARGV     the number of checks, then per check: the number of its buckets, then six numbers per
--          bucket: the bucket's index in KEYS (from 1), rate (tokens/s), burst (tokens), cost
--          (tokens), ttl_ms (at least burst / rate; the script raises it if it is lower), enforce
--          (1 or 0; 0 = shadow: evaluated and reported, never refuses).
-- Reply    per check, in order: {allowed, retry_after_s, verdict_1, tokens_1, verdict_2, ...}
--          allowed: 1 or 0. retry_after_s: whole seconds after which the refill covers every
--          refusing bucket, ceil((cost - tokens) / rate); -1 when admitted or when no wait helps
--          (cost above burst, or a rate of zero). verdict_i: 0 has the tokens, 1 short of tokens,
--          2 cost above burst. tokens_i: thousandths of a token left after this check, rounded
--          down (an integer, so that no check pays for formatting a number), within ±9e15.
--
-- A batch is exactly the same checks made one after another at the same instant: a bucket is
-- refilled once (the first check that names it, at its rate), every later check sees what the
-- checks before it left, and each check is admitted only if every bucket it enforces has the
-- tokens. A batch exists because a gateway sends the checks that arrive while its previous call is
-- in flight together (crates/shareplane-limiter/src/store/batch.rs): each bucket is read and written
-- once per batch, not once per check.
--
-- The clock is the server's (TIME), never the caller's. Elapsed time is clamped at zero and the stored
-- stamp never moves backward, so a clock that steps back (or a failover to a replica whose clock is
-- behind) credits no refill until time has really passed: too little, never too much. Tokens are
-- clamped to a lower burst, never reset to full. A missing bucket starts full. Every bucket named is
-- written, admitted or not (fields `tokens` and `ts`). Its TTL is set to ttl_ms whenever less
-- than max(burst / rate, 3/4 of ttl_ms) of it is left, so after every call a bucket has at least
-- burst / rate to live, and a hot bucket pays for PEXPIRE once per quarter of its TTL rather than on
-- every call; the field `exp` holds the expiry (ms, server clock) the script last set.
--
-- An argument that is not a finite number >= 0, or a batch whose counts do not add up, fails the
-- whole call with an error and changes nothing.
--
-- Cost: this runs for the requests a gateway checks, so it is written for few Redis commands (TIME
-- once, then HMGET and HSET per bucket) and few Lua operations.
-- crates/shareplane-limiter/examples/bench_redis_cpu.rs measures it.
local call, tonumber, huge, ceil, floor, fmt =
  redis.call, tonumber, math.huge, math.ceil, math.floor, string.format
if redis.replicate_commands then redis.replicate_commands() end

local nargs = #ARGV
local m = tonumber(ARGV[1])
if m == nil or m < 1 or m ~= floor(m) then
  return redis.error_reply('ERR shareplane bucket: the first argument must count the checks')
end

local clock = call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local now_ms = now_us / 1000
-- The stamp as written: TIME's digits, so that no key pays for formatting a double.
local now_text = fmt('%s%06d', clock[1], tonumber(clock[2]))

-- Per bucket index: tokens, stamp (as written), expiry read, TTL wanted, least TTL left wanted.
local tokens, stamp, exp, ttl_want, need_want = {}, {}, {}, {}, {}
local replies = {}
local p = 2
for c = 1, m do
  local nk = tonumber(ARGV[p])
  if nk == nil or nk < 1 or nk ~= floor(nk) or p + 6 * nk > nargs then
    return redis.error_reply('ERR shareplane bucket: check ' .. c .. ' does not count its buckets')
  end
  local allowed, wait, hopeless = 1, 0, false
  local reply = {1, -1}
  for k = 1, nk do
    local b = p + 6 * k - 6
    local i, rate, burst, cost, ttl = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
      tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4]), tonumber(ARGV[b + 5])
    -- `not (x >= 0 and x < huge)` is also true for NaN.
    local bad = (i == nil or KEYS[i] == nil) and 'key index'
      or (rate == nil or not (rate >= 0 and rate < huge)) and 'rate'
      or (burst == nil or not (burst >= 0 and burst < huge)) and 'burst'
      or (cost == nil or not (cost >= 0 and cost < huge)) and 'cost'
      or (ttl == nil or not (ttl >= 0 and ttl < huge)) and 'ttl_ms'
    if bad then
      return redis.error_reply('ERR shareplane bucket: ' .. bad .. ' of bucket ' .. k ..
        ' of check ' .. c .. ' must be a finite number >= 0 (a key index: of a key given)')
    end
    local floor_ms = 1
    if rate > 0 and burst > 0 then floor_ms = ceil(burst / rate * 1000) end
    ttl = ceil(ttl)
    if ttl < floor_ms then ttl = floor_ms end
    local need = 0.75 * ttl
    if need < floor_ms then need = floor_ms end
    local t = tokens[i]
    if t == nil then
      -- The first check of the batch to name the bucket reads it and credits the refill at its rate.
      local held = call('HMGET', KEYS[i], 'tokens', 'ts', 'exp')
      local ts
      t, ts, stamp[i] = tonumber(held[1]), tonumber(held[2]), held[2]
      if t == nil or ts == nil or t ~= t or ts ~= ts then
        t, ts, stamp[i] = burst, now_us, now_text
      end
      -- A stamp ahead of the clock stays as it was written.
      if now_us > ts then
        t = t + (now_us - ts) / 1000000 * rate
        stamp[i] = now_text
      end
      exp[i] = tonumber(held[3])
      ttl_want[i], need_want[i] = ttl, need
    else
      if ttl > ttl_want[i] then ttl_want[i] = ttl end
      if need > need_want[i] then need_want[i] = need end
    end
    if t > burst then t = burst end
    tokens[i] = t
    local verdict = 0
    if cost > burst then verdict = 2 elseif t < cost then verdict = 1 end
    if verdict ~= 0 and ARGV[b + 6] == '1' then
      allowed = 0
      if verdict == 2 or rate == 0 then
        hopeless = true
      else
        local w = ceil((cost - t) / rate)
        if w > wait then wait = w end
      end
    end
    reply[2 * k + 1] = verdict
  end
  reply[1] = allowed
  if allowed == 0 and not hopeless then reply[2] = wait end
  for k = 1, nk do
    local b = p + 6 * k - 6
    local i = tonumber(ARGV[b + 1])
    -- An admitted check spends every bucket that has the tokens, shadow ones included, so a shadow
    -- bucket tracks what enforcing it would have done.
    if allowed == 1 and reply[2 * k + 1] == 0 then tokens[i] = tokens[i] - tonumber(ARGV[b + 4]) end
    -- Redis makes a reply's number a 64-bit integer: keep it within what converts exactly.
    local milli = floor(tokens[i] * 1000)
    if milli > 9e15 then milli = 9e15 elseif milli < -9e15 then milli = -9e15 end
    reply[2 * k + 2] = milli
  end
  replies[c] = reply
  p = p + 1 + 6 * nk
end
if p - 1 ~= nargs then
  return redis.error_reply('ERR shareplane bucket: ' .. nargs - p + 1 .. ' arguments after the last check')
end

-- Nothing was written before this point, so a bad argument anywhere changed nothing.
for i = 1, #KEYS do
  if tokens[i] ~= nil then
    local left = fmt('%.17g', tokens[i])
    if exp[i] ~= nil and exp[i] - now_ms >= need_want[i] then
      call('HSET', KEYS[i], 'tokens', left, 'ts', stamp[i])
    else
      call('HSET', KEYS[i], 'tokens', left, 'ts', stamp[i],
        'exp', fmt('%.0f', ceil(now_ms + ttl_want[i])))
      call('PEXPIRE', KEYS[i], ttl_want[i])
    end
  end
end
return replies
