-- shareplane repayment: what a gateway's local fallback admitted while Redis did not answer,
-- charged to the buckets once Redis answers again, so that the fallback and Redis spend one budget.
--
-- KEYS[i]  the bucket of limit i (the same keys as bucket.lua).
-- ARGV     four numbers per key, in key order: rate (tokens/s), burst (tokens), owed (tokens the
--          fallback admitted), ttl_ms (raised to at least burst / rate, as in bucket.lua).
-- Reply    {tokens_1, tokens_2, ...}: tokens left after the repayment, as decimal strings; below
--          zero when the fallback admitted more than the bucket had (bucket.lua then refuses until
--          the refill has paid the rest).
--
-- The refill since the bucket's stamp is credited before the debt is taken and the burst clamp
-- comes after it: the fallback spent tokens while the bucket sat unvisited, and charging them after
-- a full bucket was clamped would refuse room that a single bucket would have had. A missing bucket
-- starts full, as in bucket.lua. The clock is the server's; the stamp never moves backward. The
-- TTL is set on every repayment, and `exp` with it (see bucket.lua).
if redis.replicate_commands then redis.replicate_commands() end

local n = #KEYS
if n == 0 or #ARGV ~= 4 * n then
  return redis.error_reply('ERR shareplane repay: expected 4 arguments per key')
end

local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local reply = {}
for i = 1, n do
  local b = 4 * (i - 1)
  local rate, burst, owed, ttl = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]),
    tonumber(ARGV[b + 3]), tonumber(ARGV[b + 4])
  for _, x in ipairs({rate, burst, owed, ttl}) do
    if x == nil or x ~= x or x < 0 or x == math.huge then
      return redis.error_reply('ERR shareplane repay: arguments of key ' .. i ..
        ' must be finite numbers >= 0')
    end
  end
  if rate > 0 then ttl = math.max(ttl, math.ceil(burst / rate * 1000)) end
  ttl = math.max(1, math.ceil(ttl))
  local held = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local t, ts = tonumber(held[1]), tonumber(held[2])
  if t == nil or ts == nil or t ~= t or ts ~= ts then
    t, ts = burst, now_us
  end
  local elapsed_s = math.max(0, now_us - ts) / 1000000
  local tokens = math.min(burst, t + elapsed_s * rate - owed)
  redis.call('HSET', KEYS[i], 'tokens', string.format('%.17g', tokens),
    'ts', string.format('%.0f', math.max(ts, now_us)),
    'exp', string.format('%.0f', math.ceil(now_us / 1000 + ttl)))
  redis.call('PEXPIRE', KEYS[i], ttl)
  reply[i] = string.format('%.6f', tokens)
end
return reply
