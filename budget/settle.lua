-- Settle requests to their real cost: release each one's reservation, add
-- the cost to the windows it was admitted in, and write the ledger. The
-- gateway sends the settles of one team and window that finished together
-- in one call. Idempotent by request id: the id joins T:settled:<day>, and
-- a second settle of it changes nothing. A stable id (a batch line, which
-- may run again, on another day too) joins T:once instead, with an expiry
-- longer than any batch window, and its bill is kept in T:once:bill: a line
-- run again because its first result was lost (the replica died between its
-- settle and its record, or stalled and was taken over) is billed once, for
-- the answer it delivers. Each run has an order (a batch line's generation,
-- which Redis gives it as it starts; only the last-started run may record its
-- answer): the settle of a later run takes the earlier run's bill back from
-- the windows and the ledger it went to and bills its own, whichever settles
-- first, and so does a run's own settle after its expired hold was billed
-- what it had run up (bill_progress, common.lua); the settle of an earlier
-- run (a stalled replica resuming, a journal replayed late) changes nothing.
-- A settle whose reservation already expired (or never reached Redis: a
-- fail-open journal replay) still records the spend once.
--
-- KEYS: 1 T:res:exp  2 T:res  3 T:reserved  4 T:d:<day>  5 T:m:<month>
--       6 T:rl:<minute>  7 T:ledger:<day>  8 T:settled:<day>  9 T:once
--       10 T:once:bill
-- ARGV: 1 day ttl  2 month ttl  3 ledger ttl  4 settled ttl  5 stable id ttl
--       (all in s), then ten per request: request id, key id ('' = none),
--       model, input tokens, output tokens, cost (nano-USD), stable (1|0),
--       run order (0 unless stable), input tokens read
--       from a prompt cache, input tokens written to it
--       (model '' = only release the request's hold, if any)
-- Reply: {team d m r, then per request
--         'settled'|'unreserved'|'duplicate'|'released'|'rebilled'}

-- TPM counted the reserved tokens; correct the bucket to the real count
-- unless that minute is already gone (then nobody reads it any more).
local minute_live = redis.call('EXISTS', KEYS[6]) == 1
local function correct_tokens(r, input, output)
  if not minute_live or r.u then return end   -- u: the gateway's own work, never counted
  local delta = tostring(tonumber(input) + tonumber(output) - tonumber(r.t))
  later(KEYS[6], 'tok', delta)
  if r.k ~= '' then later(KEYS[6], 'k:' .. r.k .. ':tok', delta) end
end

local now = now_ms()
local once_ttl_ms = tonumber(ARGV[5]) * 1000
local once_swept = false
local tag = string.match(KEYS[4], '^(.*):d:[^:]*$')
local today = string.match(KEYS[4], ':d:([^:]*)$')

local function sweep_once()
  -- Expired stable ids leave, with their bills, in the first call that looks
  -- (at most 256 a call; the hash itself expires with the set).
  if once_swept then return end
  once_swept = true
  local gone = redis.call('ZRANGEBYSCORE', KEYS[9], '-inf', now, 'LIMIT', 0, 256)
  if #gone > 0 then
    redis.call('ZREM', KEYS[9], unpack(gone))
    redis.call('HDEL', KEYS[10], unpack(gone))
  end
end

local function settled_before(rid, stable)
  if redis.call('SISMEMBER', KEYS[8], rid) == 1 then return true end
  if stable ~= '1' then return false end
  sweep_once()
  return redis.call('ZSCORE', KEYS[9], rid) ~= false
end

-- Add one bill (or, with sign = negate, take it back) to a day's windows and ledger.
local function charge(day, key, model, input, output, cost, requests, sign, cached, written)
  local d, m, l = KEYS[4], KEYS[5], KEYS[7]
  if day ~= today then
    d, l = tag .. ':d:' .. day, tag .. ':ledger:' .. day
    m = tag .. ':m:' .. string.sub(day, 1, 7)
  end
  later(d, 'team', sign(cost))
  later(m, 'team', sign(cost))
  if key ~= '' then
    later(d, 'k:' .. key, sign(cost))
    later(m, 'k:' .. key, sign(cost))
  end
  later(l, model .. '|requests', requests)
  later(l, model .. '|input_tokens', sign(input))
  later(l, model .. '|output_tokens', sign(output))
  later(l, model .. '|cost_nanousd', sign(cost))
  if cached and cached ~= '0' and cached ~= '' then
    later(l, model .. '|cached_tokens', sign(cached))
  end
  if written and written ~= '0' and written ~= '' then
    later(l, model .. '|cache_write_tokens', sign(written))
  end
end

local function same(amount) return amount end

local function mark_settled(rid, key, model, input, output, cost, stable, at, cached, written)
  if stable == '1' then
    redis.call('ZADD', KEYS[9], now + once_ttl_ms, rid)
    redis.call('PEXPIRE', KEYS[9], once_ttl_ms)
    redis.call('HSET', KEYS[10], rid, table.concat({at, today, key, model, input, output, cost, cached or '0',
                                                written or '0'}, '|'))
    redis.call('PEXPIRE', KEYS[10], once_ttl_ms)
  else
    redis.call('SADD', KEYS[8], rid)
  end
end

-- A stable id settled before: bill this run instead if it is the later one.
local function rebill(rid, key, model, input, output, cost, at, cached, written)
  local kept = redis.call('HGET', KEYS[10], rid)
  if not kept then return false end          -- settled before bills were kept
  local p = kept_fields(kept)
  if rank(at) == 0 or rank(at) < rank(p[1]) then return false end
  take_back(p, today)
  charge(today, key, model, input, output, cost, '1', same, cached, written)
  mark_settled(rid, key, model, input, output, cost, '1', at, cached, written)
  drop_attempts(rid, at, today)
  return true
end

local function settle_one(rid, key, model, input, output, cost, stable, at, cached, written)
  if model == '' then
    -- Release only: a reserve whose reply the gateway never got, for a
    -- request it then refused. Nothing is billed or counted.
    take_reservation(rid, later)
    return 'released'
  end
  if stable == '1' and superseded(rid, at) then
    -- An escalation's attempt of a run a later run replaced: not this line's bill.
    take_reservation(rid, later)
    return 'duplicate'
  end
  if settled_before(rid, stable) then
    -- A reserve retried after its settle left a stray hold: release it now
    -- rather than at its expiry. Nothing is billed twice.
    local r = take_reservation(rid, later)
    if stable == '1' and rebill(rid, key, model, input, output, cost, at, cached, written) then
      if r then correct_tokens(r, input, output) end
      return 'rebilled'
    end
    return 'duplicate'
  end
  local r = take_reservation(rid, later)
  local state = 'unreserved'
  if r then
    state = 'settled'
    correct_tokens(r, input, output)
  end
  charge(today, key, model, input, output, cost, '1', same, cached, written)
  mark_settled(rid, key, model, input, output, cost, stable, at, cached, written)
  if stable == '1' then drop_attempts(rid, at, today) end
  return state
end

purge_expired(now)
local states = {}
local billed = false
for i = 6, #ARGV, 10 do
  local state = settle_one(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4],
                           ARGV[i + 5], ARGV[i + 6], ARGV[i + 7], ARGV[i + 8], ARGV[i + 9])
  billed = billed or state == 'settled' or state == 'unreserved' or state == 'rebilled'
  states[#states + 1] = state
end
write_sums()
if billed then
  redis.call('EXPIRE', KEYS[4], ARGV[1])
  redis.call('EXPIRE', KEYS[5], ARGV[2])
  redis.call('EXPIRE', KEYS[7], ARGV[3])
  redis.call('EXPIRE', KEYS[8], ARGV[4])
end

local t = figures(KEYS[4], KEYS[5], 'team')
local reply = {t[1], t[2], t[3]}
for _, state in ipairs(states) do reply[#reply + 1] = state end
return reply
