-- Settle requests to their real cost: release each one's reservation, add
-- the cost to the windows it was admitted in, and write the ledger. The
-- gateway sends the settles of one team and window that finished together
-- in one call. Idempotent by request id: the id joins T:settled:<day>, and
-- a second settle of it changes nothing. A stable id (a batch line, which
-- may run again on another day) joins T:once instead, with an expiry longer
-- than any batch window, so it settles once whatever day it runs again on.
-- A settle whose reservation already expired (or never reached Redis: a
-- fail-open journal replay) still records the spend once.
--
-- KEYS: 1 T:res:exp  2 T:res  3 T:reserved  4 T:d:<day>  5 T:m:<month>
--       6 T:rl:<minute>  7 T:ledger:<day>  8 T:settled:<day>  9 T:once
-- ARGV: 1 day ttl  2 month ttl  3 ledger ttl  4 settled ttl  5 stable id ttl
--       (all in s), then seven per request: request id, key id ('' = none),
--       model, input tokens, output tokens, cost (nano-USD), stable (1|0)
--       (model '' = only release the request's hold, if any)
-- Reply: {team d m r, then per request 'settled'|'unreserved'|'duplicate'|'released'}

-- TPM counted the reserved tokens; correct the bucket to the real count
-- unless that minute is already gone (then nobody reads it any more).
local minute_live = redis.call('EXISTS', KEYS[6]) == 1
local function correct_tokens(r, input, output)
  if not minute_live then return end
  local delta = tostring(tonumber(input) + tonumber(output) - tonumber(r.t))
  later(KEYS[6], 'tok', delta)
  if r.k ~= '' then later(KEYS[6], 'k:' .. r.k .. ':tok', delta) end
end

local now = now_ms()
local once_ttl_ms = tonumber(ARGV[5]) * 1000
local once_swept = false
local function settled_before(rid, stable)
  if redis.call('SISMEMBER', KEYS[8], rid) == 1 then return true end
  if stable ~= '1' then return false end
  if not once_swept then   -- expired stable ids leave once, in the first call that looks
    redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', now)
    once_swept = true
  end
  return redis.call('ZSCORE', KEYS[9], rid) ~= false
end

local function mark_settled(rid, stable)
  if stable == '1' then
    redis.call('ZADD', KEYS[9], now + once_ttl_ms, rid)
    redis.call('PEXPIRE', KEYS[9], once_ttl_ms)
  else
    redis.call('SADD', KEYS[8], rid)
  end
end

local function settle_one(rid, key, model, input, output, cost, stable)
  if model == '' then
    -- Release only: a reserve whose reply the gateway never got, for a
    -- request it then refused. Nothing is billed or counted.
    take_reservation(rid, later)
    return 'released'
  end
  if settled_before(rid, stable) then
    -- A reserve retried after its settle left a stray hold: release it now
    -- rather than at its expiry. Nothing is billed again.
    take_reservation(rid, later)
    return 'duplicate'
  end
  local r = take_reservation(rid, later)
  local state = 'unreserved'
  if r then
    state = 'settled'
    correct_tokens(r, input, output)
  end
  later(KEYS[4], 'team', cost)
  later(KEYS[5], 'team', cost)
  if key ~= '' then
    later(KEYS[4], 'k:' .. key, cost)
    later(KEYS[5], 'k:' .. key, cost)
  end
  later(KEYS[7], model .. '|requests', '1')
  later(KEYS[7], model .. '|input_tokens', input)
  later(KEYS[7], model .. '|output_tokens', output)
  later(KEYS[7], model .. '|cost_nanousd', cost)
  mark_settled(rid, stable)
  return state
end

purge_expired(now)
local states = {}
local billed = false
for i = 6, #ARGV, 7 do
  local state = settle_one(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4],
                           ARGV[i + 5], ARGV[i + 6])
  billed = billed or state == 'settled' or state == 'unreserved'
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
