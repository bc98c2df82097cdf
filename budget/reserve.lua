-- Reserve the worst-case cost of a batch of requests of one team, atomically
-- checking every limit of the team and of each request's key. The batch is
-- judged in order, exactly as one call per request would be: each request
-- sees the holds and rate counts of those admitted before it. The gateway
-- sends the reserves of one team and window that arrive in the same event
-- loop tick in one call (one is the common case at low load).
--
-- KEYS: 1 T:res:exp  2 T:res  3 T:reserved  4 T:d:<day>  5 T:m:<month>
--       6 T:rl:<minute>  7 T:ovr  8 T:rl:<minute - 1>
-- ARGV: 1 reservation ttl (ms; 0: a dry run, judged and not held)  2 minute-bucket ttl (s)
--       3 weight of the previous minute's bucket (the share of the last 60 s
--         that falls in it: 1 at the start of this minute, 0 at its end)
--       4..9 team limits  dh ds mh ms rpm tpm  ('' = none)
--       then eleven per request: request id, amount (nano-USD), tokens (prompt +
--       max output), key id ('' = none), key limits dh ds mh ms rpm tpm, counted
--       (1 | 0: the gateway's own work, held against budgets but not counted
--       against, or checked by, the rpm and tpm limits)
-- Reply: {team ds ms dh mh, team d m r after the batch, then seven per
--         request: ok (1|0), limit, scope, current, limit value, previous,
--         soft (1: the team is at a soft limit, + 2: the key is)}
-- (limit values -1 = none; the team's d m r are 0 when it has no daily or
-- monthly budget, soft or hard). "current" is what already counts against
-- the limit that was hit: spent + reserved for budgets, this minute's bucket
-- for rates, and "previous" the previous minute's bucket. "soft" counts the
-- request's own hold, as the figures do.
--
-- Rates are sliding windows: this minute's count plus the previous minute's
-- scaled by how much of it is still inside the last 60 s, so a burst at the
-- end of one minute and another at the start of the next cannot pass twice
-- the limit.
--
-- Every counter is read once per scope and kept here while the batch is
-- judged; holds are written with one HSET and one ZADD, counters once each.
-- A batch's holds are summed as Lua numbers: exact below 2^53 nano-USD
-- (9 million USD held by one batch).

local ttl_ms, minute_ttl = tonumber(ARGV[1]), ARGV[2]
local prev_weight = tonumber(ARGV[3]) or 0
local FIRST, STRIDE = 10, 11
local names = {'dh', 'ds', 'mh', 'ms', 'rpm', 'tpm'}

-- Config limits from the caller, replaced field by field by admin overrides
-- stored in Redis, so an /admin change applies on every replica at once.
-- One HMGET reads the team's overrides and those of every key in the batch.
local fields, key_at = {}, {}
for i, n in ipairs(names) do fields[i] = 'team:' .. n end
for i = FIRST, #ARGV, STRIDE do
  local key = ARGV[i + 3]
  if key ~= '' and not key_at[key] then
    key_at[key] = #fields
    for _, n in ipairs(names) do fields[#fields + 1] = 'k:' .. key .. ':' .. n end
  end
end
local ovr = redis.call('HMGET', KEYS[7], unpack(fields))
local function limits(at, argv_at)
  local out = {}
  for j, n in ipairs(names) do out[n] = tonumber(ovr[at + j] or ARGV[argv_at + j - 1]) or false end
  return out
end

-- A scope (the team, or one key) while the batch is judged. Its spend is
-- read only when it has a budget to judge it against (the reply's figures
-- feed the soft-limit flag and the fail-open cap, both about budgets), its
-- rate buckets only when it has that rate limit.
local function scope(field, prefix, lim)
  local s = {lim = lim, field = field, prefix = prefix, held = 0, reqs = 0, toks = 0}
  if lim.dh or lim.ds or lim.mh or lim.ms then
    s.day = redis.call('HGET', KEYS[4], field) or '0'
    s.month = redis.call('HGET', KEYS[5], field) or '0'
    s.reserved = num(redis.call('HGET', KEYS[3], field))
  end
  for _, rate in ipairs({'req', 'tok'}) do
    if lim[rate == 'req' and 'rpm' or 'tpm'] then
      s[rate] = num(redis.call('HGET', KEYS[6], prefix .. rate))
      s[rate .. '_prev'] = num(redis.call('HGET', KEYS[8], prefix .. rate))
    end
  end
  return s
end

local function check(s, amount, tokens, counted)
  local lim = s.lim
  if s.day then
    local res = s.reserved + s.held
    local day, month = num(s.day) + res, num(s.month) + res
    if lim.dh and day + amount > lim.dh then return {'daily', day, lim.dh, 0} end
    if lim.mh and month + amount > lim.mh then return {'monthly', month, lim.mh, 0} end
  end
  if not counted then return nil end
  for _, rate in ipairs({{'rpm', 'req', 1, 'reqs'}, {'tpm', 'tok', tokens, 'toks'}}) do
    local name, now_n, prev_n = rate[1], s[rate[2]], s[rate[2] .. '_prev']
    if lim[name] then
      now_n = now_n + s[rate[4]]
      if now_n + prev_n * prev_weight + rate[3] > lim[name] then
        return {name, now_n, lim[name], prev_n}
      end
    end
  end
  return nil
end

local function admit(s, amount, tokens, counted)
  s.held = s.held + amount
  if counted then
    s.reqs = s.reqs + 1
    s.toks = s.toks + tokens
  end
end

local function soft(s)
  if not s or not s.day then return false end
  local res, lim = s.reserved + s.held, s.lim
  return (lim.ds and num(s.day) + res >= lim.ds) or (lim.ms and num(s.month) + res >= lim.ms)
end

local function v(x) return x or -1 end

local now = now_ms()
purge_expired(now)
local team = scope('team', '', limits(0, 4))
local keys = {}
local holds, expiries, scopes = {}, {}, {team}
-- A request id already held (a reserve retried after a lost reply) keeps
-- its hold and is not counted twice.
local ids = {}
for i = FIRST, #ARGV, STRIDE do ids[#ids + 1] = ARGV[i] end
local taken = {}
for n, raw in ipairs(redis.call('HMGET', KEYS[2], unpack(ids))) do
  if raw then taken[ids[n]] = true end
end

local reply = {v(team.lim.ds), v(team.lim.ms), v(team.lim.dh), v(team.lim.mh), '0', '0', '0'}
for n, id in ipairs(ids) do
  local i = FIRST + (n - 1) * STRIDE
  local amount, tokens, key = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local amount_n, tokens_n = tonumber(amount), tonumber(tokens)
  local counted = ARGV[i + 10] ~= '0'
  local k = nil
  if key ~= '' then
    k = keys[key]
    if not k then
      k = scope('k:' .. key, 'k:' .. key .. ':', limits(key_at[key], i + 4))
      keys[key] = k
      scopes[#scopes + 1] = k
    end
  end
  local verdict = {1, '', '', 0, 0, 0}
  if not taken[id] then
    local hit, where = check(team, amount_n, tokens_n, counted), 'team'
    if not hit and k then hit, where = check(k, amount_n, tokens_n, counted), 'key' end
    if hit then
      verdict = {0, hit[1], where, hit[2], hit[3], hit[4]}
    else
      admit(team, amount_n, tokens_n, counted)
      if k then admit(k, amount_n, tokens_n, counted) end
      taken[id] = true
      holds[#holds + 1] = id
      holds[#holds + 1] = cjson.encode({a = amount, t = tokens, k = key,
                                        u = (not counted) and 1 or nil})
      expiries[#expiries + 1] = now + ttl_ms
      expiries[#expiries + 1] = id
    end
  end
  local at = #reply
  for j = 1, 6 do reply[at + j] = verdict[j] end
  reply[at + 7] = (soft(team) and 1 or 0) + (soft(k) and 2 or 0)
end
if team.day then
  reply[5], reply[6] = team.day, team.month
  reply[7] = string.format('%.0f', team.reserved + team.held)
end

-- A dry run (ttl 0: a large body's check before it is read) judges and holds nothing.
if ttl_ms == 0 then return reply end

if #holds > 0 then
  redis.call('HSET', KEYS[2], unpack(holds))
  redis.call('ZADD', KEYS[1], unpack(expiries))
  -- A new minute bucket gets its expiry once, when its first requests land.
  if redis.call('HINCRBY', KEYS[6], 'req', team.reqs) == team.reqs then
    redis.call('EXPIRE', KEYS[6], minute_ttl)
  end
  for _, s in ipairs(scopes) do
    later(KEYS[3], s.field, string.format('%.0f', s.held))
    if s ~= team then later(KEYS[6], s.prefix .. 'req', tostring(s.reqs)) end
    later(KEYS[6], s.prefix .. 'tok', string.format('%.0f', s.toks))
  end
  write_sums()
  -- The three reservation keys outlive their last reservation by a minute,
  -- so a team that goes quiet leaves nothing behind; they expire together,
  -- so the counter never outlives (or dies before) what it counts. They are
  -- renewed together whenever the set's remaining life falls under the
  -- reservation ttl plus 30 s: every hold still has 30 s of margin, and a
  -- busy team pays one PTTL per reserve instead of three EXPIREs.
  if redis.call('PTTL', KEYS[1]) < ttl_ms + 30000 then
    for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl_ms + 60000) end
  end
end
return reply
