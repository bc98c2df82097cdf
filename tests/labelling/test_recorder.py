"""The recorder's bounds and the store's reads, on the real Redis."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from core.learning_config import LearningSettings
from labelling.recorder import Recorder
from labelling.store import LabelStore

MESSAGES = [{"role": "user", "content": "What is the capital of Japan?"}]
SKETCH = b"sketch"      # the store keeps a sketch's bytes as they are


Test = Callable[[tuple[LabelStore, LearningSettings]], Awaitable[None]]


def on_redis(test: Test) -> Callable[[], None]:
    """Run ``test`` on a fresh loop with a store under a prefix of its own."""
    async def run() -> None:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        settings = LearningSettings(max_pending=100, keep_labels=100)
        try:
            await test((LabelStore(client, f"rglab-{uuid.uuid4().hex[:8]}", settings), settings))
        finally:
            await client.aclose()

    def sync() -> None:
        asyncio.run(run())
    sync.__name__ = test.__name__
    return sync


@on_redis
async def test_past_max_pending_the_newest_are_dropped_and_counted(store) -> None:
    labels, settings = store
    recorder = Recorder(labels, settings)
    for i in range(130):
        recorder.observe("t", f"req_{i}", MESSAGES, labels=[("small", 0.0, "escalation")])
    assert recorder.dropped == 30
    assert await recorder.flush() == 100 and recorder.written == 100
    assert [x.request_id async for x in labels.read("t", limit=3)] == ["req_0", "req_1", "req_2"]
    recorder.observe("t", "req_nothing", MESSAGES)           # no labels, no feedback: nothing
    assert await recorder.flush() == 0


@on_redis
async def test_the_stream_keeps_about_keep_labels_and_reads_in_pages(store) -> None:
    labels, settings = store
    recorder = Recorder(labels, settings)
    for round_ in range(5):
        for i in range(100):
            recorder.observe("t", f"req_{round_}_{i}", MESSAGES, labels=[("m", 1.0, "escalation")])
        await recorder.flush()
    kept = await labels.count("t")
    assert 100 <= kept < 500            # XADD MAXLEN ~: trimmed in whole nodes
    read = [x async for x in labels.read("t")]
    assert len(read) == kept and read[-1].request_id == "req_4_99"
    assert [x async for x in labels.read("t", since_s=0.0)] == []   # nothing newer than now
    assert await labels.count("another-team") == 0


@on_redis
async def test_a_redis_that_fails_loses_the_flush_not_the_loop(store) -> None:
    labels, settings = store
    broken = aioredis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    recorder = Recorder(LabelStore(broken, "rglab-x", settings), settings)
    recorder.observe("t", "req_1", MESSAGES, labels=[("m", 1.0, "escalation")])
    assert await recorder.flush() == 0 and recorder.lost == 1
    await broken.aclose()


@on_redis
async def test_a_request_labelled_twice_counts_once_for_learn(store) -> None:
    """A batch line that runs again after a crash keeps its request id (the line's)
    and labels its prompt again: learn counts that prompt's label once."""
    from classifiers.sketch import sketch_of
    from labelling.store import Write
    from labelling.traffic import traffic_labels

    labels, _ = store
    team = "acme"
    line = Write(team, "batch_1-line-7", sketch_of("Sum 2 and 3").to_bytes(),
                 labels=[("small", 0.0, "escalation"), ("medium", 1.0, "escalation")])
    other = Write(team, "req-2", sketch_of("Name a colour").to_bytes(),
                  labels=[("small", 1.0, "escalation")])
    await labels.write([line, other])
    await labels.write([line])                         # the line ran again
    learned, summary = await traffic_labels(labels, team, since_s=3600)
    assert summary["repeated"] == 2 and summary["by_source"] == {"escalation": 3}
    assert len(learned) == 3 and len(learned.prompts) == 2


@on_redis
async def test_feedback_finds_an_answer_another_replica_records_a_second_later(store) -> None:
    """The answering replica, busy, flushes its served record only after a second:
    feedback sent through another replica at once still finds it."""
    from classifiers.sketch import sketch_of
    from labelling.store import Write

    labels, settings = store
    recorder = Recorder(labels, settings)        # this replica: nothing of its own waits
    record = Write("acme", "req_late", sketch_of("Name a colour").to_bytes(),
                   served_model="small")

    async def other_replica() -> None:
        await asyncio.sleep(1.0)
        await labels.write([record])

    writer = asyncio.create_task(other_replica())
    status, model = await recorder.feedback("acme", "req_late", 1.0)
    await writer
    assert (status, model) == ("ok", "small")
    assert await recorder.feedback("acme", "req_never", 1.0) == ("unknown", "")


@on_redis
async def test_every_label_and_every_feedback_renews_the_streams_expiry(store) -> None:
    """The stream goes keep_days after its *last* label, whichever path wrote it:
    feedback after an escalation label must not leave the earlier expiry to
    delete it, and a team with feedback only gets an expiry too."""
    from classifiers.sketch import sketch_of
    from labelling.store import Write

    labels, settings = store
    redis, key = labels._redis, labels.keys.labels("acme")
    keep_s = int(settings.keep_days * 86400) + 1
    sketch = sketch_of("Name a colour").to_bytes()
    await labels.write([Write("acme", "req_a", sketch, labels=[("small", 0.0, "escalation")])])
    await redis.expire(key, 5)                  # as if that label were keep_days - 5 s old
    await labels.write([Write("acme", "req_b", sketch, labels=[("small", 1.0, "escalation")])])
    assert await redis.ttl(key) > keep_s - 5    # within TRIM_EVERY_S of the first: renewed
    await redis.expire(key, 5)
    await labels.write([Write("acme", "req_c", sketch, served_model="small")])
    assert await labels.feedback("acme", "req_c", 0.5) == ("ok", "small")
    assert await redis.ttl(key) > keep_s - 5
    assert [x.request_id async for x in labels.read("acme")] == ["req_a", "req_b", "req_c"]
    only = labels.keys.labels("quiet")          # a team that only ever gives feedback
    await labels.write([Write("quiet", "req_q", sketch, served_model="small")])
    assert await labels.feedback("quiet", "req_q", 1.0) == ("ok", "small")
    assert 0 < await redis.ttl(only) <= keep_s
    await redis.delete(key, only)


@on_redis
async def test_an_id_not_issued_a_moment_ago_is_answered_without_waiting(store) -> None:
    """Only a team's first MAX_WAITING lookups of unknown ids wait for a record on its
    way; the next, and any asked not to wait, are answered while those still wait."""
    from labelling.recorder import MAX_WAITING

    labels, settings = store
    recorder = Recorder(labels, settings)
    waiting = [asyncio.create_task(recorder.feedback("acme", f"req_w{i}", 1.0))
               for i in range(MAX_WAITING)]
    await asyncio.sleep(0.1)                     # each has asked once and sleeps
    assert not any(task.done() for task in waiting)
    assert await recorder.feedback("acme", "req_extra", 1.0) == ("unknown", "")
    assert await recorder.feedback("other", "req_x", 1.0, wait=False) == ("unknown", "")
    assert not any(task.done() for task in waiting)    # both answered while those wait
    other = asyncio.create_task(recorder.feedback("other", "req_y", 1.0))   # its own cap
    await asyncio.sleep(0.1)
    assert not other.done()
    assert [await t for t in waiting] == [("unknown", "")] * MAX_WAITING
    assert await other == ("unknown", "")
    assert not recorder._waiting                 # every wait let go of its place
    # Each miss counted once, however many times it was asked.
    assert int(await labels._redis.get(labels.keys.misses("acme"))) == MAX_WAITING + 1
    assert int(await labels._redis.get(labels.keys.misses("other"))) == 2


@on_redis
async def test_lookups_started_together_wait_no_more_than_the_cap(store) -> None:
    """The cap holds for lookups that all arrive before any has reached Redis."""
    from labelling.recorder import MAX_WAITING

    labels, settings = store
    recorder = Recorder(labels, settings)
    recorder.observe("acme", "req_pending", [{"role": "user", "content": "hi"}],
                     served_model="small")            # each lookup flushes it first
    tasks = [asyncio.create_task(recorder.feedback("acme", f"req_t{i}", 1.0))
             for i in range(4 * MAX_WAITING)]
    await asyncio.sleep(0.2)
    assert sum(not task.done() for task in tasks) == MAX_WAITING
    assert all(status == "unknown" for status, _ in await asyncio.gather(*tasks))
    assert not recorder._waiting


@on_redis
async def test_a_miss_count_that_lost_its_expiry_still_ends(store) -> None:
    """A count put back without its TTL (a restore, a copy) throttles only for one window."""
    labels, settings = store
    key = labels.keys.misses("acme")
    await labels._redis.set(key, settings.feedback_max_misses)      # no expiry
    status, left = await labels.feedback("acme", "req_x", 1.0)
    window_ms = settings.feedback_miss_window_s * 1000
    assert status == "throttled" and 0 < int(left) <= settings.feedback_miss_window_s
    assert 0 < await labels._redis.pttl(key) <= window_ms


@on_redis
async def test_a_long_prompt_has_one_digest_from_traffic_and_from_a_label_file(store) -> None:
    """``learn`` knows the prompts an artifact was fitted on by digest, from either
    source: a prompt past MAX_PROMPT_CHARS is kept the same way on both (its head and
    tail), and sketched as the gateway sketches the whole prompt."""
    import orjson

    from classifiers.labels import MAX_PROMPT_CHARS, parse_labels
    from classifiers.sketch import PromptSketch, sketch_of_messages
    from labelling.recorder import _finish

    labels, settings = store
    messages = [{"role": "user", "content": "why " * (MAX_PROMPT_CHARS // 2)}]
    recorder = Recorder(labels, settings)
    recorder.observe("acme", "req_long", messages, served_model="small")
    from_traffic = PromptSketch.from_bytes(_finish(recorder._pending[0]).sketch).digest
    lines = [orjson.dumps({"messages": messages, "model": m, "score": 1.0})
             for m in ("small", "large")]
    from_file = parse_labels(lines).prompts[0]
    assert from_traffic == from_file.digest
    served = sketch_of_messages(messages)
    assert (from_file.feats.dense == served.feats.dense).all()
    assert (from_file.feats.indices == served.feats.indices).all()
    assert (from_file.shape == served.shape).all()


@on_redis
async def test_feedback_on_a_long_stream_as_it_ends_waits_for_its_record(store) -> None:
    """A request that runs past the deadline (a long stream) is marked while it runs:
    feedback sent through another replica as it ends, when its id is too old to be
    waited for by its time alone (``wait=False``), waits for its record. Without the
    mark that feedback was a 404 at once."""
    from labelling.running import ENDED_TTL_S, MARK_TTL_S
    from labelling.store import Write

    labels, settings = store
    serving = Recorder(labels, settings, running_after_s=0.2)    # the replica streaming it
    other = Recorder(labels, settings)                           # the one given the feedback
    marks, redis = serving.running, labels._redis
    now = time.time()
    marks.opened("acme", "req_long", started_s=now)
    marks.opened("acme", "req_short", started_s=now)
    assert await marks.sync() == 0                               # not running long yet
    await asyncio.sleep(0.3)
    marks.closed("req_short")                                    # ended before: never marked
    assert await marks.sync() == 1
    assert await marks.sync() == 0                               # renewed later, not each loop
    mark = labels.keys.running("acme", "req_long")
    assert MARK_TTL_S - 5 < await redis.ttl(mark) <= MARK_TTL_S
    assert not await redis.exists(labels.keys.running("acme", "req_short"))
    assert await labels.feedback("acme", "req_long", 1.0) == ("running", "")
    assert not await redis.exists(labels.keys.misses("acme"))   # running: not a miss

    async def ends_and_flushes() -> None:
        await asyncio.sleep(0.6)
        marks.closed("req_long")
        await labels.write([Write("acme", "req_long", SKETCH, served_model="large")])
        await marks.sync()                                       # its mark is cut short

    ending = asyncio.create_task(ends_and_flushes())
    assert await other.feedback("acme", "req_long", 0.5, wait=False) == ("ok", "large")
    await ending
    assert 0 < await redis.ttl(mark) <= ENDED_TTL_S
    assert not marks._open and not marks._marked and not marks._ended
    assert not other._waiting and not other._waiting_running


@on_redis
async def test_a_request_still_running_after_the_wait_is_a_miss_and_waits_apart(store) -> None:
    """Polling feedback on a stream that is still running: each poll waits 1.75 s in
    places of its own (MAX_RUNNING_WAITING), so a fresh answer's feedback still
    waits for its record; a poll that finds it still running at the end is a 404
    and counts as a miss. A request whose end was never reported stops being marked."""
    from labelling.recorder import MAX_RUNNING_WAITING
    from labelling.store import Write

    labels, settings = store
    serving, other = Recorder(labels, settings, running_after_s=0.1), Recorder(labels, settings)
    serving.running.opened("acme", "req_endless", started_s=time.time() - 1)
    assert await serving.running.sync() == 1
    polls = [asyncio.create_task(other.feedback("acme", "req_endless", 0.5, wait=False))
             for _ in range(3 * MAX_RUNNING_WAITING)]
    await asyncio.sleep(0.1)
    assert sum(not p.done() for p in polls) == MAX_RUNNING_WAITING
    fresh = asyncio.create_task(other.feedback("acme", "req_fresh", 1.0))   # a fresh id

    async def flushed_later() -> None:
        await asyncio.sleep(0.3)
        await labels.write([Write("acme", "req_fresh", SKETCH, served_model="small")])

    await flushed_later()
    assert await fresh == ("ok", "small")
    assert all(status == "unknown" for status, _ in await asyncio.gather(*polls))
    assert int(await labels._redis.get(labels.keys.misses("acme"))) == MAX_RUNNING_WAITING
    assert not other._waiting and not other._waiting_running
    serving.running.max_age_s = 0.5                              # never reported as ended
    assert await serving.running.sync() == 0                     # dropped, its mark cut
    assert not serving.running._open and not serving.running._marked
    assert not serving.running._ended
    assert 0 < await labels._redis.ttl(labels.keys.running("acme", "req_endless")) <= 5
