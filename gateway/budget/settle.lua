-- Settle one request to its real cost: release its reservation, add the
-- cost to the windows it was admitted in, and write the ledger. Idempotent
-- by request id: the id joins T:settled:<day>, and a second settle of it
-- changes nothing. A settle whose reservation already expired (or never
-- reached Redis: a fail-open journal replay) still records the spend once.
--
-- KEYS: 1 T:res:exp  2 T:res  3 T:reserved  4 T:d:<day>  5 T:m:<month>
--       6 T:rl:<minute>  7 T:ledger:<day>  8 T:settled:<day>
-- ARGV: 1 request id  2 key id ('' = none)  3 model  4 input tokens
--       5 output tokens  6 cost (nano-USD)  7 day ttl  8 month ttl
--       9 ledger ttl  10 settled ttl (all ttl in s)
-- Reply: {state ('settled'|'unreserved'|'duplicate'), team d m r, key d m r}

local rid, key, model = ARGV[1], ARGV[2], ARGV[3]
local input, output, cost = ARGV[4], ARGV[5], ARGV[6]

local function spend(field)
  add(KEYS[4], field, cost)
  add(KEYS[5], field, cost)
end

-- TPM counted the reserved tokens; correct the bucket to the real count
-- unless that minute is already gone (then nobody reads it any more).
local function correct_tokens(r)
  if redis.call('EXISTS', KEYS[6]) == 0 then return end
  local delta = tostring(tonumber(input) + tonumber(output) - tonumber(r.t))
  add(KEYS[6], 'tok', delta)
  if r.k ~= '' then add(KEYS[6], 'k:' .. r.k .. ':tok', delta) end
end

purge_expired(now_ms())
local state = 'duplicate'
if redis.call('SISMEMBER', KEYS[8], rid) == 1 then
  -- A reserve retried after its settle left a stray hold: release it now
  -- rather than at its expiry. Nothing is billed again.
  take_reservation(rid)
else
  local r = take_reservation(rid)
  state = 'unreserved'
  if r then
    state = 'settled'
    correct_tokens(r)
  end
  spend('team')
  if key ~= '' then spend('k:' .. key) end
  redis.call('EXPIRE', KEYS[4], ARGV[7])
  redis.call('EXPIRE', KEYS[5], ARGV[8])
  redis.call('HINCRBY', KEYS[7], model .. '|requests', 1)
  add(KEYS[7], model .. '|input_tokens', input)
  add(KEYS[7], model .. '|output_tokens', output)
  add(KEYS[7], model .. '|cost_nanousd', cost)
  redis.call('EXPIRE', KEYS[7], ARGV[9])
  redis.call('SADD', KEYS[8], rid)
  redis.call('EXPIRE', KEYS[8], ARGV[10])
end

local t = figures(KEYS[4], KEYS[5], 'team')
local k = {'0', '0', '0'}
if key ~= '' then k = figures(KEYS[4], KEYS[5], 'k:' .. key) end
return {state, t[1], t[2], t[3], k[1], k[2], k[3]}
