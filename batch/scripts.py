"""The Lua scripts: each a single round trip on the keys of one batch.

``START_LINE`` is the gate a worker passes before a line runs (nothing new
starts once a batch is cancelled, expired or finalizing), and numbers the run
(its generation); ``RECORD`` writes a line's result exactly once (HSETNX keyed
by custom_id), only from the line's last-started run, and counts it. A run
taken over from a stalled worker is thus the one whose answer is kept, and its
generation, carried into the run's budget reservation, makes its bill the one
that stands (``budget/settle.lua``);
``TRANSITION`` moves a batch between states only from the states named;
``FINISH`` writes the terminal state, but only for the holder of the
finalizer lock.
"""

from __future__ import annotations

# KEYS: meta, results, runs. ARGV: now (s), custom_id.
# Reply: {go | done (already recorded) | wait (still validating) | stop | expired | gone,
#         the run's generation (1, 2, ... for go; else 0)}
START_LINE = """
local s = redis.call('HMGET', KEYS[1], 'status', 'expires_at')
if not s[1] then return {'gone', 0} end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 then return {'done', 0} end
if s[1] == 'validating' then return {'wait', 0} end
if s[1] ~= 'in_progress' then return {'stop', 0} end
if tonumber(ARGV[1]) >= tonumber(s[2]) then return {'expired', 0} end
redis.call('HINCRBY', KEYS[1], 'inflight', 1)
return {'go', redis.call('HINCRBY', KEYS[3], ARGV[2], 1)}
"""

# KEYS: meta, results, runs, fallbacks. ARGV: custom_id, value, counter
# (completed|failed), input tokens, output tokens, the run's generation, whether
# a failure billed nothing (1: a refusal before any upstream call, or 503).
# Reply: {added (1, 0, -1 once sealed, -2 when a later run started), done, total}
# A run refused because a later one started keeps a good answer as the line's
# fallback (the latest such run's: its bill is the one kept while the later run
# bills nothing): recorded instead of the later run's unbilled failure, or at
# SEAL if that run never records (the batch was cancelled or expired meanwhile).
# A fallback is "<generation> <input> <output> <result>"; the line's recording
# drops it.
RECORD = """
if tonumber(redis.call('HGET', KEYS[1], 'inflight') or '0') > 0 then
  redis.call('HINCRBY', KEYS[1], 'inflight', -1)
end
if redis.call('HGET', KEYS[1], 'sealed') == '1' then return {-1, 0, 0} end
local value, counter, input, output = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  local kept = redis.call('HGET', KEYS[4], ARGV[1])
  if redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[6] then
    if counter == 'completed' and (not kept
        or tonumber(string.match(kept, '^(%d+)')) < tonumber(ARGV[6])) then
      redis.call('HSET', KEYS[4], ARGV[1], table.concat({ARGV[6], input, output, value}, ' '))
    end
    return {-2, 0, 0}
  end
  if counter == 'failed' and ARGV[7] == '1' and kept then
    local _, i, o, v = string.match(kept, '^(%d+) (%d+) (%d+) (.*)$')
    if v then value, counter, input, output = v, 'completed', i, o end
  end
end
local added = redis.call('HSETNX', KEYS[2], ARGV[1], value)
if added == 1 then
  redis.call('HDEL', KEYS[4], ARGV[1])
  redis.call('HINCRBY', KEYS[1], counter, 1)
  redis.call('HINCRBY', KEYS[1], 'input_tokens', input)
  redis.call('HINCRBY', KEYS[1], 'output_tokens', output)
end
local c = redis.call('HMGET', KEYS[1], 'completed', 'failed', 'total')
return {added, tonumber(c[1] or '0') + tonumber(c[2] or '0'), tonumber(c[3] or '0')}
"""

# KEYS: meta, results, fallbacks. Refuse every later result; a line that has no
# result but a fallback (its last run never recorded) gets the fallback.
SEAL = """
local kept = redis.call('HGETALL', KEYS[3])
for n = 1, #kept, 2 do
  local cid = kept[n]
  if redis.call('HEXISTS', KEYS[2], cid) == 0 then
    local _, i, o, v = string.match(kept[n + 1], '^(%d+) (%d+) (%d+) (.*)$')
    if v then
      redis.call('HSET', KEYS[2], cid, v)
      redis.call('HINCRBY', KEYS[1], 'completed', 1)
      redis.call('HINCRBY', KEYS[1], 'input_tokens', i)
      redis.call('HINCRBY', KEYS[1], 'output_tokens', o)
    end
  end
end
redis.call('HSET', KEYS[1], 'sealed', '1')
return 1
"""

# KEYS: meta. A line that started but will not be recorded (its worker stops).
ABANDON = """
if tonumber(redis.call('HGET', KEYS[1], 'inflight') or '0') > 0 then
  redis.call('HINCRBY', KEYS[1], 'inflight', -1)
end
return 1
"""

# KEYS: meta. ARGV: comma-separated from-states, to-state, then field/value pairs.
# Reply: the previous state, or false when the batch was in none of them.
TRANSITION = """
local s = redis.call('HGET', KEYS[1], 'status')
if not s then return false end
for st in string.gmatch(ARGV[1], '[^,]+') do
  if st == s then
    redis.call('HSET', KEYS[1], 'status', ARGV[2])
    for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
    return s
  end
end
return false
"""

# KEYS: meta, finalizer lock, results, runs, fallbacks. ARGV: lock token, now, output
# file id, error file id.
FINISH = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local s = redis.call('HGET', KEYS[1], 'status')
if s ~= 'finalizing' and s ~= 'cancelling' then return 0 end
local target = redis.call('HGET', KEYS[1], 'target')
redis.call('HSET', KEYS[1], 'status', target, target .. '_at', ARGV[2],
           'output_file_id', ARGV[3], 'error_file_id', ARGV[4])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return 1
"""

# KEYS: lock. ARGV: token. Deletes the lock only if we still hold it.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
