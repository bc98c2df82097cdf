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

# KEYS: meta, results, runs. ARGV: custom_id, value, counter (completed|failed),
# input tokens, output tokens, the run's generation.
# Reply: {added (1, 0, -1 once sealed, -2 when a later run started), done, total}
RECORD = """
if tonumber(redis.call('HGET', KEYS[1], 'inflight') or '0') > 0 then
  redis.call('HINCRBY', KEYS[1], 'inflight', -1)
end
if redis.call('HGET', KEYS[1], 'sealed') == '1' then return {-1, 0, 0} end
if redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0
    and redis.call('HGET', KEYS[3], ARGV[1]) ~= ARGV[6] then
  return {-2, 0, 0}
end
local added = redis.call('HSETNX', KEYS[2], ARGV[1], ARGV[2])
if added == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[3], 1)
  redis.call('HINCRBY', KEYS[1], 'input_tokens', ARGV[4])
  redis.call('HINCRBY', KEYS[1], 'output_tokens', ARGV[5])
end
local c = redis.call('HMGET', KEYS[1], 'completed', 'failed', 'total')
return {added, tonumber(c[1] or '0') + tonumber(c[2] or '0'), tonumber(c[3] or '0')}
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

# KEYS: meta, finalizer lock, results, runs. ARGV: lock token, now, output file id,
# error file id.
FINISH = """
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
local s = redis.call('HGET', KEYS[1], 'status')
if s ~= 'finalizing' and s ~= 'cancelling' then return 0 end
local target = redis.call('HGET', KEYS[1], 'target')
redis.call('HSET', KEYS[1], 'status', target, target .. '_at', ARGV[2],
           'output_file_id', ARGV[3], 'error_file_id', ARGV[4])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
"""

# KEYS: lock. ARGV: token. Deletes the lock only if we still hold it.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
