-- Renew this replica's leases on its holds, and record what each request has
-- run up so far. A replica renews every few seconds while it lives; one that
-- dies stops, its holds expire within budget.reservation_ttl_s, and the next
-- reserve or settle of the team frees them and bills their progress
-- (purge_expired in common.lua).
--
-- KEYS: 1 T:res:exp  2 T:res  3 T:reserved
-- ARGV: 1 lease (ms), then two per request: request id, progress (JSON
--       {d, m, k, i, o, c} or '' for none yet)
-- Reply: the number of holds renewed (a hold already gone is not revived).

local ttl_ms = tonumber(ARGV[1])
local now = now_ms()
purge_expired(now)
local renewed = 0
for i = 2, #ARGV, 2 do
  local id, progress = ARGV[i], ARGV[i + 1]
  -- (ZSCORE, not ZADD XX CH: a renewal in the millisecond of the reserve changes no
  -- score, and CH would count it as gone)
  if redis.call('ZSCORE', KEYS[1], id) then
    redis.call('ZADD', KEYS[1], now + ttl_ms, id)
    renewed = renewed + 1
    if progress ~= '' then
      local raw = redis.call('HGET', KEYS[2], id)
      if raw then
        local r = cjson.decode(raw)
        r.p = cjson.decode(progress)
        redis.call('HSET', KEYS[2], id, cjson.encode(r))
      end
    end
  end
end
if renewed > 0 and redis.call('PTTL', KEYS[1]) < ttl_ms + 30000 then
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl_ms + 60000) end
end
return renewed
