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
-- clamped to a lower burst, never reset to full. A missing bucket starts full. Every key is written,
-- with its TTL, on every call, admitted or not.
if redis.replicate_commands then redis.replicate_commands() end

local n = #KEYS
if n == 0 or #ARGV ~= 5 * n then
  return redis.error_reply('ERR shareplane bucket: expected 5 arguments per key')
end

local function number(i, name)
  local x = tonumber(ARGV[i])
  if x == nil or x ~= x or x < 0 or x == math.huge then
    return nil, redis.error_reply('ERR shareplane bucket: ' .. name .. ' of key ' ..
      math.floor((i - 1) / 5 + 1) .. ' must be a finite number >= 0')
  end
  return x
end

local clock = redis.call('TIME')
local now_us = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local rate, burst, cost, ttl, enforce, tokens, stamp, verdict = {}, {}, {}, {}, {}, {}, {}, {}
local allowed, wait, hopeless = 1, 0, false
for i = 1, n do
  local b, err = 5 * (i - 1), nil
  rate[i], err = number(b + 1, 'rate'); if err then return err end
  burst[i], err = number(b + 2, 'burst'); if err then return err end
  cost[i], err = number(b + 3, 'cost'); if err then return err end
  ttl[i], err = number(b + 4, 'ttl_ms'); if err then return err end
  enforce[i] = ARGV[b + 5] == '1'
  if rate[i] > 0 then ttl[i] = math.max(ttl[i], math.ceil(burst[i] / rate[i] * 1000)) end
  ttl[i] = math.max(1, math.ceil(ttl[i]))

  local held = redis.call('HMGET', KEYS[i], 'tokens', 'ts')
  local t, ts = tonumber(held[1]), tonumber(held[2])
  if t == nil or ts == nil or t ~= t or ts ~= ts then
    t, ts = burst[i], now_us
  end
  local elapsed_s = math.max(0, now_us - ts) / 1000000
  tokens[i] = math.min(burst[i], t + elapsed_s * rate[i])
  stamp[i] = math.max(ts, now_us)

  if cost[i] > burst[i] then
    verdict[i] = 2
  elseif tokens[i] < cost[i] then
    verdict[i] = 1
  else
    verdict[i] = 0
  end
  if enforce[i] and verdict[i] ~= 0 then
    allowed = 0
    if verdict[i] == 2 or rate[i] == 0 then
      hopeless = true
    else
      wait = math.max(wait, math.ceil((cost[i] - tokens[i]) / rate[i]))
    end
  end
end

local reply = {allowed, -1}
if allowed == 0 and not hopeless then reply[2] = wait end
for i = 1, n do
  -- An admitted call spends every bucket that has the tokens, shadow ones included, so a shadow
  -- bucket tracks what enforcing it would have done.
  if allowed == 1 and verdict[i] == 0 then tokens[i] = tokens[i] - cost[i] end
  redis.call('HSET', KEYS[i], 'tokens', string.format('%.17g', tokens[i]),
    'ts', string.format('%.0f', stamp[i]))
  redis.call('PEXPIRE', KEYS[i], ttl[i])
  reply[2 * i + 1] = verdict[i]
  reply[2 * i + 2] = string.format('%.6f', tokens[i])
end
return reply
