"""The label store: a stream of labels per team, and the served records feedback attaches to.

    store = LabelStore(redis, "rg", settings)
    await store.write([Write(team, request_id, sketch_bytes, text, labels, served_model)])
    status, detail = await store.feedback("acme", request_id, 0.8)
    # ok | unknown | already (detail: the model that answered) | throttled (detail: retry s)
    async for label in store.read("acme", since_s=7 * 86400): ...

A label is a stream entry ``{m: model, s: score, src: source, rid: request id,
k: sketch, [p: prompt text]}``; its id is its time. The stream keeps the
newest ``keep_labels`` (XADD's approximate MAXLEN) and none older than
``keep_days`` (XTRIM MINID, at most once a minute per team and replica, an
expiry on the stream for a team gone quiet, and a bound on every read).

A served record (a hash with the model, the sketch, and the text when kept)
lives ``feedback_window_s``: feedback on it becomes a label exactly once, in
one script, and the record remembers that it was given (a second answer is
"already"). A request of another team, or an expired one, is "unknown". A
request running long (past the request deadline) is marked while it runs:
feedback on it before its record is there is "running", and is asked again.

"unknown" and "already" are misses, counted per team in a fixed window
(``learning.feedback_miss_window_s``) in the same script: once a team has
``feedback_max_misses`` in the window, all its feedback is "throttled"
until the window ends, on every replica alike. An unknown id that will be
asked again (``count_miss=False``) is not counted: only its last try is.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from core.learning_config import LearningSettings
from labelling.keys import LabelKeys

SOURCES = ("escalation", "feedback", "shadow")
PAGE = 1000
TRIM_EVERY_S = 60.0

# KEYS: served record, labels stream, the team's miss count, the request's running mark.
# ARGV: score, maxlen, the stream's ttl (s), the oldest id to keep (keep_days ago), max
# misses, the miss window (ms), 1 to count this lookup as a miss if it is unknown, 1 to
# count it if it is running.
# Reply: {status, detail}: ok | unknown (no such record) | already (feedback given), with
# the model; running (no record yet, the request is still running: a miss only if
# ARGV[8] says so);
# throttled, with the miss window's ms left.
FEEDBACK = """
local misses = tonumber(redis.call('GET', KEYS[3]) or '0')
if misses >= tonumber(ARGV[5]) then
  local left = redis.call('PTTL', KEYS[3])
  if left < 0 then   -- a count with no expiry (restored, copied): it must still end
    redis.call('PEXPIRE', KEYS[3], ARGV[6])
    left = tonumber(ARGV[6])
  end
  return {'throttled', tostring(left)}
end
local r = redis.call('HMGET', KEYS[1], 'm', 'k', 'p', 'done', 'rid')
if not r[1] and redis.call('EXISTS', KEYS[4]) == 1 then
  -- Still running: a miss only on a last try (ARGV[8]), the answer not sent yet.
  if ARGV[8] == '1' and redis.call('INCR', KEYS[3]) == 1 then
    redis.call('PEXPIRE', KEYS[3], ARGV[6])
  end
  return {'running', ''}
end
if not r[1] or r[4] then
  -- "already" is final; "unknown" may be asked again, and then counts on its last try.
  if (r[1] or ARGV[7] == '1') and redis.call('INCR', KEYS[3]) == 1 then
    redis.call('PEXPIRE', KEYS[3], ARGV[6])
  end
  if not r[1] then return {'unknown', ''} end
  return {'already', r[1]}
end
redis.call('HSET', KEYS[1], 'done', ARGV[1])
local args = {'XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*',
              'm', r[1], 's', ARGV[1], 'src', 'feedback', 'rid', r[5], 'k', r[2]}
if r[3] then
  table.insert(args, 'p')
  table.insert(args, r[3])
end
redis.call(unpack(args))
-- As a write does: trimmed to keep_days, and gone keep_days after the last label.
redis.call('XTRIM', KEYS[2], 'MINID', '~', ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return {'ok', r[1]}
"""


@dataclass(frozen=True, slots=True)
class Label:
    at_s: float                 # when it was recorded
    model: str
    score: float
    source: str
    request_id: str
    sketch: bytes               # classifiers.sketch.PromptSketch.to_bytes()
    text: str | None = None     # only with logging.prompts


@dataclass(slots=True)
class Write:
    """What one request leaves: its labels, and its served record for feedback."""
    team: str
    request_id: str
    sketch: bytes
    text: str | None = None
    labels: list[tuple[str, float, str]] = field(default_factory=list)   # (model, score, source)
    served_model: str | None = None       # remember for feedback (the team has it on)


def _text(raw: Any) -> str:
    return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)


class LabelStore:
    def __init__(self, redis: Any, prefix: str, settings: LearningSettings) -> None:
        self._redis = redis
        self.keys = LabelKeys(prefix)
        self._settings = settings
        self._feedback = redis.register_script(FEEDBACK)
        self._trimmed: dict[str, float] = {}
        self._keep_s = int(settings.keep_days * 86400) + 1     # the stream's ttl

    async def write(self, writes: list[Write]) -> None:
        """One pipelined round trip for all of them."""
        s = self._settings
        pipe = self._redis.pipeline(transaction=False)
        now = time.time()
        for w in writes:
            extra = {"p": w.text} if w.text is not None else {}
            for model, score, source in w.labels:
                pipe.xadd(self.keys.labels(w.team), {"m": model, "s": repr(score), "src": source,
                                                     "rid": w.request_id, "k": w.sketch, **extra},
                          maxlen=s.keep_labels, approximate=True)
            if w.served_model is not None:
                key = self.keys.served(w.team, w.request_id)
                pipe.hset(key, mapping={"m": w.served_model, "k": w.sketch,
                                        "rid": w.request_id, **extra})
                pipe.expire(key, s.feedback_window_s)
            if w.labels and now - self._trimmed.get(w.team, 0.0) > TRIM_EVERY_S:
                self._trimmed[w.team] = now
                oldest_ms = int((now - s.keep_days * 86400) * 1000)
                pipe.xtrim(self.keys.labels(w.team), minid=f"{oldest_ms}-0", approximate=True)
        # A team that stops sending: its stream goes keep_days after its last label.
        for team in {w.team for w in writes if w.labels}:
            pipe.expire(self.keys.labels(team), self._keep_s)
        await pipe.execute()

    async def feedback(self, team: str, request_id: str, score: float, *,
                       count_miss: bool = True, count_running: bool = False
                       ) -> tuple[str, str]:
        """(status, detail): ``ok``, ``unknown`` or ``already`` with the model that
        answered, or ``throttled`` with the seconds until the team's miss window ends."""
        s = self._settings
        keys = [self.keys.served(team, request_id), self.keys.labels(team),
                self.keys.misses(team), self.keys.running(team, request_id)]
        oldest_ms = int((time.time() - s.keep_days * 86400) * 1000)
        status, detail = await self._feedback(
            keys=keys, args=[repr(score), s.keep_labels, self._keep_s, f"{oldest_ms}-0",
                             s.feedback_max_misses, s.feedback_miss_window_s * 1000,
                             int(count_miss), int(count_running)])
        status = _text(status)
        if status == "throttled":      # ms left; none (-1, -2): the whole window
            left_ms = int(_text(detail))
            return status, str(math.ceil(left_ms / 1000) if left_ms > 0
                               else s.feedback_miss_window_s)
        return status, _text(detail)

    async def mark_running(self, requests: list[tuple[str, str]], ttl_s: int, *,
                           ended: list[tuple[str, str]], ended_ttl_s: int) -> None:
        """Mark (team, request id) pairs as still running for ``ttl_s``, and cut
        the marks of ``ended`` ones to ``ended_ttl_s``; one round trip."""
        pipe = self._redis.pipeline(transaction=False)
        for team, request_id in requests:
            pipe.set(self.keys.running(team, request_id), b"1", ex=ttl_s)
        for team, request_id in ended:
            pipe.expire(self.keys.running(team, request_id), ended_ttl_s)
        await pipe.execute()

    async def read(self, team: str, since_s: float | None = None, *,
                   limit: int | None = None) -> AsyncIterator[Label]:
        """The team's labels, oldest first, from ``since_s`` seconds ago (None: all
        kept), never older than ``keep_days`` (trimming is approximate)."""
        kept_s = self._settings.keep_days * 86400
        since_s = kept_s if since_s is None else min(since_s, kept_s)
        start = f"{int((time.time() - since_s) * 1000)}-0"
        seen = 0
        while limit is None or seen < limit:
            page = await self._redis.xrange(self.keys.labels(team), min=start, max="+",
                                            count=PAGE)
            for entry_id, fields in page:
                label = _label_of(entry_id, fields)
                if label is not None:
                    if limit is not None and seen >= limit:
                        return
                    seen += 1
                    yield label
            if len(page) < PAGE:
                return
            start = "(" + _text(page[-1][0])

    async def count(self, team: str) -> int:
        return int(await self._redis.xlen(self.keys.labels(team)))


def _label_of(entry_id: Any, fields: dict[Any, Any]) -> Label | None:
    """One stream entry, or None if it is not a label this version understands."""
    f = {_text(k): v for k, v in fields.items()}
    try:
        score = float(_text(f["s"]))
        sketch = f["k"]
        at_ms = int(_text(entry_id).split("-", 1)[0])
    except (KeyError, ValueError):
        return None
    if not 0.0 <= score <= 1.0 or not isinstance(sketch, bytes):
        return None
    text = _text(f["p"]) if "p" in f else None
    return Label(at_ms / 1000, _text(f.get("m", b"")), score, _text(f.get("src", b"")),
                 _text(f.get("rid", b"")), sketch, text)
