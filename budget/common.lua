-- Shared head of reserve.lua and settle.lua; budget/scripts.py prepends it.
-- Both scripts pass KEYS[1] = T:res:exp (ZSET id -> expiry ms),
-- KEYS[2] = T:res (HASH id -> reservation), KEYS[3] = T:reserved (HASH).
--
-- Amounts stay strings whenever they go back into Redis: Lua formats large
-- numbers with an exponent ("1e+15"), which HINCRBY would refuse.

-- TIME is non-deterministic; effects replication (default since Redis 5)
-- makes that safe. The call is a no-op there and kept for older servers.
if redis.replicate_commands then redis.replicate_commands() end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function add(key, field, amount)
  if amount ~= '0' then redis.call('HINCRBY', key, field, amount) end
end

local function negate(amount)
  if string.sub(amount, 1, 1) == '-' then return string.sub(amount, 2) end
  return '-' .. amount
end

-- Remove one reservation and give its amount back to the outstanding
-- counters (through ``inc``, default ``add``). Returns the decoded
-- reservation, or nil if there was none.
local function take_reservation(id, inc)
  inc = inc or add
  local raw = redis.call('HGET', KEYS[2], id)
  if not raw then return nil end
  local r = cjson.decode(raw)
  inc(KEYS[3], 'team', negate(r.a))
  if r.k ~= '' then inc(KEYS[3], 'k:' .. r.k, negate(r.a)) end
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  return r
end

-- What a dead replica's request had run up (its lease renewals record it in the
-- hold as p = {d = day, m = model, k = key, i = input, o = output, c = nano-USD})
-- is billed when its hold expires, once: the id is marked settled, so a settle
-- that arrives after all (a replica that was only cut off) is a duplicate.
local TAG = string.match(KEYS[1], '^(.*):res:exp$')
local function bill_progress(id, p)
  local day = p.d
  local d, m = TAG .. ':d:' .. day, TAG .. ':m:' .. string.sub(day, 1, 7)
  local l, settled = TAG .. ':ledger:' .. day, TAG .. ':settled:' .. day
  if redis.call('SISMEMBER', settled, id) == 1 then return end
  local cost = string.format('%.0f', tonumber(p.c))
  add(d, 'team', cost)
  add(m, 'team', cost)
  if p.k ~= '' then
    add(d, 'k:' .. p.k, cost)
    add(m, 'k:' .. p.k, cost)
  end
  add(l, p.m .. '|requests', '1')
  add(l, p.m .. '|input_tokens', string.format('%.0f', tonumber(p.i)))
  add(l, p.m .. '|output_tokens', string.format('%.0f', tonumber(p.o)))
  add(l, p.m .. '|cost_nanousd', cost)
  redis.call('SADD', settled, id)
  for key, ttl in pairs({[d] = DAY_TTL_S, [m] = MONTH_TTL_S, [l] = LEDGER_TTL_S,
                         [settled] = SETTLED_TTL_S}) do
    if redis.call('TTL', key) < 0 then redis.call('EXPIRE', key, ttl) end
  end
end

-- Reservations of replicas that died (or lost their connection) before
-- settling expire here: every reserve and settle of the team first releases
-- those whose lease has passed, by the Redis clock, so no replica's clock
-- matters, and bills what their requests had run up. Bounded per call so one
-- call never stalls Redis; a backlog drains over the next calls.
local function purge_expired(now)
  local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 256)
  for _, id in ipairs(ids) do
    local r = take_reservation(id)
    if not r then
      redis.call('ZREM', KEYS[1], id)
    elseif type(r.p) == 'table' then
      bill_progress(id, r.p)
    end
  end
end

local function num(value)
  return tonumber(value or '0') or 0
end

-- Spent today, spent this month and outstanding reservations of one scope,
-- as the strings Redis holds: returning Lua numbers would round sums above
-- 2^53 nano-USD (9 million USD); comparisons use num() on them.
local function figures(day_key, month_key, field)
  return {
    redis.call('HGET', day_key, field) or '0',
    redis.call('HGET', month_key, field) or '0',
    redis.call('HGET', KEYS[3], field) or '0',
  }
end

-- The counters a batch adds to (holds, spend, the ledger, rate buckets) are
-- summed per hash field with later() and written once each by write_sums():
-- a busy team's batch adds to the same few fields over and over, and each
-- redis.call costs more than the sum. Lua numbers are exact integers below
-- 2^53; a field whose running sum would pass 2^52 nano-USD (4.5 million USD)
-- is written out at once.
local sums, order = {}, {}
local LIMIT = 2 ^ 52
local function flush_one(key, field)
  local n = sums[key][field]
  if n ~= 0 then redis.call('HINCRBY', key, field, string.format('%.0f', n)) end
  sums[key][field] = 0
end
local function later(key, field, amount)
  if amount == '0' then return end
  local fields = sums[key]
  if not fields then
    fields = {}
    sums[key] = fields
  end
  if fields[field] == nil then
    fields[field] = 0
    order[#order + 1] = {key, field}
  end
  local n = tonumber(amount)
  if math.abs(n) >= LIMIT or math.abs(fields[field] + n) >= LIMIT then
    flush_one(key, field)
    redis.call('HINCRBY', key, field, amount)
  else
    fields[field] = fields[field] + n
  end
end
local function write_sums()
  for _, kf in ipairs(order) do flush_one(kf[1], kf[2]) end
end
