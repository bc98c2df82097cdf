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
-- A stable id's (a batch line's; p.s = its run's order, p.x = how long its bill
-- is kept, s) is kept as settle.lua keeps a settle's, in T:once and T:once:bill:
-- it replaces the bill of an earlier run, and a later run's settle, or its own
-- run's, replaces it.
local TAG = string.match(KEYS[1], '^(.*):res:exp$')

-- A stable id's run order, as settle.lua and bill_progress compare them: a batch
-- line's generation (1, 2, ...), or the wall clock (ms) that versions before
-- generations sent, which every generation outranks and which order among
-- themselves; 0 (an older journal line's) outranks nothing.
local function rank(at)
  local n = tonumber(at) or 0
  if n >= 1e11 then return n / 1e14 end     -- a wall clock: in (0, 1)
  return n
end

local function minus(amount)     -- negate(), but '0' for zero ("-0" is no integer to Redis)
  if tonumber(amount) == 0 then return '0' end
  return negate(amount)
end

local function kept_fields(kept)
  local p = {}
  for part in string.gmatch(kept .. '|', '([^|]*)|') do p[#p + 1] = part end
  return p
end

local function add_bill(day, key, model, input, output, cost, requests)
  local d, m = TAG .. ':d:' .. day, TAG .. ':m:' .. string.sub(day, 1, 7)
  local l = TAG .. ':ledger:' .. day
  add(d, 'team', cost)
  add(m, 'team', cost)
  if key ~= '' then
    add(d, 'k:' .. key, cost)
    add(m, 'k:' .. key, cost)
  end
  add(l, model .. '|requests', requests)
  add(l, model .. '|input_tokens', input)
  add(l, model .. '|output_tokens', output)
  add(l, model .. '|cost_nanousd', cost)
  return d, m, l
end

-- Take a kept bill (its fields) back from the day and ledger it went to, if they
-- are still kept (``day``: the caller's, whose keys may not exist yet). Model '':
-- an attempt's bill already taken back, nothing left to take.
local function take_back(k, day)
  if k[4] == '' then return end
  if k[2] ~= day and redis.call('EXISTS', TAG .. ':ledger:' .. k[2]) == 0 then return end
  local _, _, l = add_bill(k[2], k[3], k[4], minus(k[5]), minus(k[6]), minus(k[7]), '-1')
  add(l, k[4] .. '|cached_tokens', minus(k[8] or '0'))
  add(l, k[4] .. '|cache_write_tokens', minus(k[9] or '0'))
end

-- An escalation's refused answers bill under "<id>.<n>" (n = 1, 2, ...), each its
-- own stable id but part of its run's bill. A later run's bill of the id takes back
-- an earlier run's attempts (drop_attempts), leaving each kept at the later run's
-- order with nothing billed, so that a late settle of it changes nothing; and an
-- attempt of a run whose bill a later run's replaced is not billed (superseded).
-- A request bills at most routing.max_attempts (<= 16) fallbacks, each with at
-- most escalation.max_steps (<= 8) steps: never 64 lines.
local MAX_ATTEMPTS = 64
local BILLS = TAG .. ':once:bill'

local function superseded(rid, at)
  local base = string.match(rid, '^(.+)%.%d+$')
  if not base then return false end
  local kept = redis.call('HGET', BILLS, base)
  return kept ~= false and rank(kept_fields(kept)[1]) > rank(at)
end

-- Every attempt kept, whatever its number (one whose settle is still in the journal
-- leaves a gap), in one call.
local function drop_attempts(rid, at, day)
  local ids = {}
  for n = 1, MAX_ATTEMPTS do ids[n] = rid .. '.' .. n end
  local kept = redis.call('HMGET', BILLS, unpack(ids))
  for n = 1, MAX_ATTEMPTS do
    if kept[n] then
      local k = kept_fields(kept[n])
      if rank(k[1]) < rank(at) then
        take_back(k, day)
        redis.call('HSET', BILLS, ids[n],
                   table.concat({at, k[2], k[3], '', '0', '0', '0', '0', '0'}, '|'))
      end
    end
  end
end

local function bill_progress(id, p, now)
  local day = p.d
  local settled = TAG .. ':settled:' .. day
  if redis.call('SISMEMBER', settled, id) == 1 then return end
  local once, bills = TAG .. ':once', BILLS
  if p.s ~= nil and redis.call('ZSCORE', once, id) then
    local kept = redis.call('HGET', bills, id)
    if not kept then return end
    local k = kept_fields(kept)
    if rank(p.s) <= rank(k[1]) then return end
    take_back(k, day)
  end
  local cost = string.format('%.0f', tonumber(p.c))
  local input, output = string.format('%.0f', tonumber(p.i)), string.format('%.0f', tonumber(p.o))
  local d, m, l = add_bill(day, p.k, p.m, input, output, cost, '1')
  local ttls = {[d] = DAY_TTL_S, [m] = MONTH_TTL_S, [l] = LEDGER_TTL_S}
  if p.s ~= nil then
    local ttl_ms = math.max(tonumber(p.x) or 0, 3600) * 1000
    redis.call('ZADD', once, now + ttl_ms, id)
    redis.call('PEXPIRE', once, ttl_ms)
    redis.call('HSET', bills, id, table.concat({string.format('%.0f', tonumber(p.s)), day, p.k,
                                                p.m, input, output, cost, '0', '0'}, '|'))
    redis.call('PEXPIRE', bills, ttl_ms)
    drop_attempts(id, p.s, day)
  else
    redis.call('SADD', settled, id)
    ttls[settled] = SETTLED_TTL_S
  end
  for key, ttl in pairs(ttls) do
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
      bill_progress(id, r.p, now)
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
