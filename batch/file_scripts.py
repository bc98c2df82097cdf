"""The Lua scripts of file storage: each one round trip on the keys of one team.

``RESERVE`` holds room for an upload in the team's quota before its bytes are
stored, so two uploads never both pass on the same headroom; ``COMMIT``
registers a stored file and turns its hold into used bytes; ``UNRESERVE``
gives an abandoned hold back. A hold that is never committed or given back
(its replica died) lapses at its deadline.

``HOLD`` and ``RELEASE`` count the batches reading a file (``held_by:<batch
id>`` fields of the file's hash, so a deleted or expired file can no longer be
taken); ``HIDE`` takes a file out of its team's view; ``PURGE`` forgets a hidden
file nobody holds and frees its bytes, once its blob is gone.
"""

from __future__ import annotations

# KEYS: storage, reservations. ARGV: now, deadline, member (<file id>:<bytes>), bytes, quota.
# Reply: {1 if held, bytes used or held before this one}.
RESERVE = """
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, 100)
for _, m in ipairs(lapsed) do
  redis.call('ZREM', KEYS[2], m)
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(string.match(m, ':(%d+)$')))
end
local s = redis.call('HMGET', KEYS[1], 'used', 'reserved')
local taken = tonumber(s[1] or '0') + tonumber(s[2] or '0')
if taken + tonumber(ARGV[4]) > tonumber(ARGV[5]) then return {0, taken} end
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('HINCRBY', KEYS[1], 'reserved', ARGV[4])
return {1, taken}
"""

# KEYS: storage, reservations. ARGV: member, bytes.
UNRESERVE = """
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[2]))
end
return 1
"""

# KEYS: storage, reservations, file, team files. ARGV: member ('' when nothing was
# reserved: a batch's output), bytes, created (us), file id, then field/value pairs.
COMMIT = """
if ARGV[1] ~= '' and redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'reserved', -tonumber(ARGV[2]))
end
redis.call('HINCRBY', KEYS[1], 'used', ARGV[2])
for i = 5, #ARGV, 2 do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]) end
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[4])
return 1
"""

# KEYS: file. ARGV: batch id, now. Reply: 1 if the batch now holds the file, 0 if
# the file is gone, deleted or expired.
HOLD = """
local f = redis.call('HMGET', KEYS[1], 'id', 'deleted', 'expires_at')
if not f[1] or f[2] == '1' then return 0 end
if f[3] and f[3] ~= '' and tonumber(f[3]) <= tonumber(ARGV[2]) then return 0 end
if redis.call('HSETNX', KEYS[1], 'held_by:' .. ARGV[1], '1') == 1 then
  redis.call('HINCRBY', KEYS[1], 'holders', 1)
end
return 1
"""

# KEYS: file. ARGV: batch id. Reply: 1 if the file is hidden and now held by
# nobody (its bytes can go), else 0.
RELEASE = """
if redis.call('HDEL', KEYS[1], 'held_by:' .. ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'holders', -1)
end
local f = redis.call('HMGET', KEYS[1], 'deleted', 'holders')
if f[1] == '1' and tonumber(f[2] or '0') <= 0 then return 1 end
return 0
"""

# KEYS: file, team files. ARGV: file id. Reply: the batches holding it, or -1 if
# there is no such file.
HIDE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
redis.call('HSET', KEYS[1], 'deleted', '1')
redis.call('ZREM', KEYS[2], ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'holders') or '0')
"""

# KEYS: file, storage. Reply: the bytes freed; -1 if the file is already gone; -2
# if it is visible or held (not to be forgotten).
PURGE = """
local f = redis.call('HMGET', KEYS[1], 'id', 'bytes', 'deleted', 'holders')
if not f[1] then return -1 end
if f[3] ~= '1' or tonumber(f[4] or '0') > 0 then return -2 end
redis.call('DEL', KEYS[1])
redis.call('HINCRBY', KEYS[2], 'used', -tonumber(f[2] or '0'))
return tonumber(f[2] or '0')
"""
