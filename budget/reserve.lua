-- Reserve the worst-case cost of one request, atomically checking every
-- limit of the team and (optionally) of its key.
--
-- KEYS: 1 T:res:exp  2 T:res  3 T:reserved  4 T:d:<day>  5 T:m:<month>
--       6 T:rl:<minute>  7 T:ovr  8 T:rl:<minute - 1>
-- ARGV: 1 request id  2 amount (nano-USD)  3 tokens (prompt + max output)
--       4 key id ('' = none)  5 reservation ttl (ms)  6 minute-bucket ttl (s)
--       7..12  team limits  dh ds mh ms rpm tpm  ('' = none)
--       13..18 key limits   dh ds mh ms rpm tpm
--       19 weight of the previous minute's bucket (the share of the last 60 s
--          that falls in it: 1 at the start of this minute, 0 at its end)
-- Reply: {ok (1|0), limit, scope, current, limit value,
--         team d m r, key d m r, team ds ms dh mh, key ds ms dh mh, previous}
-- (a scope's d m r are 0 when it has no daily or monthly budget, soft or hard)
-- (limit values -1 = none). "current" is what already counts against the
-- limit that was hit: spent + reserved for budgets, this minute's bucket for
-- rates, and "previous" the previous minute's bucket.
--
-- Rates are sliding windows: this minute's count plus the previous minute's
-- scaled by how much of it is still inside the last 60 s, so a burst at the
-- end of one minute and another at the start of the next cannot pass twice
-- the limit.

local rid, amount, tokens, key = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local prev_weight = tonumber(ARGV[19]) or 0
local amount_n, tokens_n = tonumber(amount), tonumber(tokens)
local names = {'dh', 'ds', 'mh', 'ms', 'rpm', 'tpm'}

-- Config limits from the caller, replaced field by field by admin overrides
-- stored in Redis, so an /admin change applies on every replica at once. One
-- HMGET reads both scopes' overrides (each redis.call costs more than its
-- command): returns the team's limits and the key's ({} without a key).
local function limits()
  local fields = {}
  for i, n in ipairs(names) do fields[i] = 'team:' .. n end
  if key ~= '' then
    for i, n in ipairs(names) do fields[6 + i] = 'k:' .. key .. ':' .. n end
  end
  local ovr = redis.call('HMGET', KEYS[7], unpack(fields))
  local team_out, key_out = {}, {}
  for i, n in ipairs(names) do
    team_out[n] = tonumber(ovr[i] or ARGV[6 + i]) or false
    if key ~= '' then key_out[n] = tonumber(ovr[6 + i] or ARGV[12 + i]) or false end
  end
  return team_out, key_out
end

local function check(lim, fig, rate_prefix)
  local day, month, reserved = num(fig[1]), num(fig[2]), num(fig[3])
  if lim.dh and day + reserved + amount_n > lim.dh then
    return {'daily', day + reserved, lim.dh, 0}
  end
  if lim.mh and month + reserved + amount_n > lim.mh then
    return {'monthly', month + reserved, lim.mh, 0}
  end
  for _, rate in ipairs({{'rpm', 'req', 1}, {'tpm', 'tok', tokens_n}}) do
    local name, field, need = rate[1], rate_prefix .. rate[2], rate[3]
    if lim[name] then
      local now_n = num(redis.call('HGET', KEYS[6], field))
      local prev_n = num(redis.call('HGET', KEYS[8], field))
      if now_n + prev_n * prev_weight + need > lim[name] then
        return {name, now_n, lim[name], prev_n}
      end
    end
  end
  return nil
end

local function record(now)
  add(KEYS[3], 'team', amount)
  -- A new minute bucket gets its expiry once, when its first request lands.
  if redis.call('HINCRBY', KEYS[6], 'req', 1) == 1 then
    redis.call('EXPIRE', KEYS[6], ARGV[6])
  end
  add(KEYS[6], 'tok', tokens)
  if key ~= '' then
    add(KEYS[3], 'k:' .. key, amount)
    redis.call('HINCRBY', KEYS[6], 'k:' .. key .. ':req', 1)
    add(KEYS[6], 'k:' .. key .. ':tok', tokens)
  end
  local ttl_ms = tonumber(ARGV[5])
  redis.call('ZADD', KEYS[1], now + ttl_ms, rid)
  -- The three reservation keys outlive their last reservation by a minute,
  -- so a team that goes quiet leaves nothing behind; they expire together,
  -- so the counter never outlives (or dies before) what it counts. They are
  -- renewed together whenever the set's remaining life falls under the
  -- reservation ttl plus 30 s: every hold still has 30 s of margin, and a
  -- busy team pays one PTTL per reserve instead of three EXPIREs.
  local keep_ms = ttl_ms + 60000
  if redis.call('PTTL', KEYS[1]) < ttl_ms + 30000 then
    for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], keep_ms) end
  end
end

local function v(x) return x or -1 end

-- A scope's spend is read only when it has a budget to judge it against (the
-- reply's figures feed the soft-limit flag and the fail-open cap, both about
-- budgets): most keys have none of their own, and some teams none at all.
local NONE = {'0', '0', '0'}
local function has_budget(lim) return lim.dh or lim.ds or lim.mh or lim.ms end
local function spend(lim, field)
  if not has_budget(lim) then return NONE end
  return figures(KEYS[4], KEYS[5], field)
end

local now = now_ms()
purge_expired(now)
local team_lim, key_lim = limits()
local key_fig = NONE

local verdict = {1, '', '', 0, 0, 0}
local t, key_read = nil, false
-- The reservation is written first, and only if absent: a retried reserve
-- (lost reply) finds its own and is not counted twice; a refused one is
-- taken out again below.
if redis.call('HSETNX', KEYS[2], rid, cjson.encode({a = amount, t = tokens, k = key})) == 1 then
  t = spend(team_lim, 'team')
  local hit = check(team_lim, t, '')
  local scope = 'team'
  if not hit and key ~= '' then
    key_fig = spend(key_lim, 'k:' .. key)
    key_read = true
    hit = check(key_lim, key_fig, 'k:' .. key .. ':')
    scope = 'key'
  end
  if hit then
    redis.call('HDEL', KEYS[2], rid)
    verdict = {0, hit[1], scope, hit[2], hit[3], hit[4]}
  else
    record(now)
    -- Only the holds changed since the figures were read.
    if t ~= NONE then t[3] = redis.call('HGET', KEYS[3], 'team') or '0' end
    if key_fig ~= NONE then key_fig[3] = redis.call('HGET', KEYS[3], 'k:' .. key) or '0' end
  end
end

if not t then t = spend(team_lim, 'team') end
if key ~= '' and not key_read then key_fig = spend(key_lim, 'k:' .. key) end
return {
  verdict[1], verdict[2], verdict[3], verdict[4], verdict[5],
  t[1], t[2], t[3], key_fig[1], key_fig[2], key_fig[3],
  v(team_lim.ds), v(team_lim.ms), v(team_lim.dh), v(team_lim.mh),
  v(key_lim.ds), v(key_lim.ms), v(key_lim.dh), v(key_lim.mh), verdict[6],
}
