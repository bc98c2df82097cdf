"""Warm prefixes: which model holds a conversation's prefix, found by every replica."""

from __future__ import annotations

import asyncio
import copy
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx
import orjson
import pytest
import redis.asyncio as aioredis

from budget.keys import KeySpace
from gateway.pipeline import warm as warm_module
from gateway.pipeline.prompt_prefix import head_length, prefix_chain
from gateway.pipeline.warm import MIN_SHARED_TOKENS, Warm, WarmPrefixes
from loadtest.servers import Gateway
from loadtest.warm_sync import row, two_replicas

T = TypeVar("T")
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def body(*messages: str, tools: list | None = None) -> dict:
    out: dict = {"messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": m}
                              for i, m in enumerate(messages)]}
    if tools:
        out["tools"] = tools
    return out


def test_a_turn_that_appends_to_a_prompt_contains_its_hash() -> None:
    first = prefix_chain(body("task", tools=TOOLS))
    later = prefix_chain(body("task", "call", "result", tools=TOOLS))
    assert later[: len(first)] == first and len(later) == 3
    assert prefix_chain(body("task"))[0] != first[0]            # the tools are read first
    assert prefix_chain(body("other", "call", tools=TOOLS))[0] != first[0]


def test_a_moved_cache_breakpoint_leaves_the_chain_as_it_was() -> None:
    """Clients mark the newest message with ``cache_control`` each turn (the chat door's
    form for Anthropic and Bedrock upstreams): the marker is not what the model reads,
    so the earlier turn's hash is still found; a lone text part hashes as its text."""
    def part(text: str, marked: bool) -> list[dict]:
        return [{"type": "text", "text": text,
                 **({"cache_control": {"type": "ephemeral"}} if marked else {})}]
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    first = {"tools": [{**tool, "cache_control": {"type": "ephemeral"}}], "messages": [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": part("question", True)}]}
    second = {"tools": [tool], "messages": [
        {"role": "system", "content": part("rules", False)},
        {"role": "user", "content": part("question", False)},
        {"role": "assistant", "content": "answer"},
        {"role": "user", "content": part("more", True)}]}
    sent = copy.deepcopy((first, second))
    assert prefix_chain(second)[:2] == prefix_chain(first)
    assert (first, second) == sent            # the body that goes upstream keeps its marks
    two_parts = {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
    assert prefix_chain(two_parts) != prefix_chain(body("a"))


def test_the_longest_warm_prefix_is_found_and_expires() -> None:
    warm = WarmPrefixes(ttl_s=60)
    chain = prefix_chain(body("a", "b", "c", "d"))
    warm.remember("t", chain[1], Warm("medium", 0, 500, time.time()))
    warm.remember("t", chain[2], Warm("large", 1, 900, time.time()))
    assert warm.find("t", chain) == warm.find("t", chain[:3])
    assert warm.find("t", chain).model == "large"           # type: ignore[union-attr]
    assert warm.find("t", chain[:2]).model == "medium"      # type: ignore[union-attr]
    assert warm.find("other", chain) is None                # per team
    warm.remember("t", chain[3], Warm("small", 0, 1000, time.time() - 120))
    assert warm.find("t", chain).model == "large"           # type: ignore[union-attr]


def test_a_sessions_head_is_remembered_for_the_sessions_that_share_it() -> None:
    """A served prompt's head (its tools and leading system messages) is remembered
    beside the whole prompt when it is long enough, so another session that starts
    with it finds the model that holds it; a short head, or a prompt that is all head
    or has none, adds nothing."""
    def prompt(system: str, user: str) -> dict:
        return {"tools": TOOLS, "messages": [{"role": "system", "content": system},
                                             {"role": "developer", "content": "Be brief."},
                                             {"role": "user", "content": user}]}
    one, other = prompt("rules", "first task"), prompt("rules", "second task")
    k = head_length(one["messages"])
    assert k == 2 and head_length(other["messages"]) == 2
    assert head_length(one["messages"][:2]) == 0 and head_length(body("a", "b")) == 0
    assert head_length(body("a")["messages"]) == 0 and head_length(None) == 0
    chain, its = prefix_chain(one), prefix_chain(other)
    assert chain[:k] == its[:k] and chain[-1] != its[-1]
    assert prefix_chain({**other, "tools": []})[k - 1] != chain[k - 1]   # the tools are in it
    warm, now = WarmPrefixes(ttl_s=60), time.time()
    served = Warm("large", 1, 3000, now)
    warm.served("t", chain, (chain[k - 1], {"o200k_base": MIN_SHARED_TOKENS - 1}), served,
                "o200k_base")
    assert warm.find("t", its) is None                         # too short to count
    warm.served("t", chain, (chain[k - 1], {"o200k_base": 2000, "cl100k_base": 10}), served,
                "o200k_base")
    models = ("small", "medium", "large")
    assert warm.by_model("t", its) == {}                       # the head not looked up
    assert warm.by_model("t", its, its[k - 1], models) == {"large": Warm("large", 1, 2000, now)}
    assert warm.find("t", chain) == served                     # the whole prompt first
    warm.served("t", chain, None, served, "o200k_base")        # no head: only the prompt
    assert warm.by_model("u", its, its[k - 1], models) == {}
    # Another session with that head on another model: both models hold it.
    third = prefix_chain(prompt("rules", "third task"))
    warm.served("t", third, (third[k - 1], {"o200k_base": 2000}), Warm("small", 0, 2600, now),
                "o200k_base")
    assert warm.by_model("t", its, its[k - 1], models) == {
        "large": Warm("large", 1, 2000, now), "small": Warm("small", 0, 2000, now)}
    # The whole prompt a model served outranks its head; a longer head entry, a shorter one.
    warm.remember("t", its[0], Warm("small", 0, 900, now))
    assert warm.by_model("t", its, its[k - 1], models)["small"].tokens == 2000
    warm.remember("t", its[-1], Warm("small", 0, 3100, now))
    assert warm.by_model("t", its, its[k - 1], models)["small"].tokens == 3100


def test_a_prompt_counted_with_its_head_counts_as_it_did() -> None:
    """Counting the head beside the prompt splits one pass over the text: the prompt's
    count is the one routing and the reservation had, the head's its messages' and
    tools' share of it."""
    from classifiers.length import TOKENS_PER_REPLY, counter_for
    from gateway.pipeline.features import count_prompt, count_with_head
    from gateway.pipeline.request import ModelRequest

    messages: list[dict] = [
        {"role": "system", "content": "You plan releases. " * 40},
        {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": "Plan it.", "name": "ana"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    for tools in (None, TOOLS):
        body: dict = {"messages": messages, **({"tools": tools} if tools else {})}
        req = ModelRequest(body, "auto", messages, False, False, 64, 1, None, bool(tools),
                           False, extra_prompt_tokens=7)
        for enc in ("o200k_base", "cl100k_base"):
            counter = counter_for(enc)
            total, head = count_with_head(req, counter, 2)
            assert total == count_prompt(req, counter)
            assert head == (counter.count_messages(messages[:2]) - TOKENS_PER_REPLY
                            + (count_prompt(req, counter) - counter.count_messages(messages)
                               - 7))


def sim_model(name: str, ability: float, price: float, cached_share: float = 0.1) -> dict:
    """An in-process simulated model with a prefix cache, priced ``price`` per Mtok."""
    return {"name": name, "backend": "simulated", "ability": ability,
            "price": {"input_per_mtok": price, "output_per_mtok": 2 * price,
                      "cached_input_per_mtok": price * cached_share},
            "context_window": 16384, "max_output_tokens": 512,
            "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000, "seed": 7,
                         "output_tokens_mean": 8, "prefix_cache": True}}


def warm_config(*models: dict) -> dict:
    from loadtest.servers import TEST_KEY, hashed
    return {"models": list(models),
            "teams": [{"name": "test", "keys": [hashed(TEST_KEY)], "quality": 0.1}],
            "redis_url": "redis://127.0.0.1:6379/0", "metrics": {"enabled": False},
            "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
            "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}", "worker_in_serve": False}}


def rules(seed: int) -> str:
    """An agent's system prompt of about 1,500 tokens."""
    rng = random.Random(seed)
    return "agent rules. " + " ".join(rng.choice(["cache", "tool", "plan"]) for _ in range(1500))


def ask(url: str, model: str, system: str, task: str) -> tuple[str, int, int]:
    """One session's first turn: the model that served it, its cached and prompt tokens."""
    from loadtest.servers import TEST_KEY
    r = httpx.post(url + "/v1/chat/completions", timeout=60,
                   headers={"authorization": f"Bearer {TEST_KEY}"},
                   json={"model": model, "max_tokens": 16, "messages": [
                       {"role": "system", "content": system},
                       {"role": "user", "content": task}]})
    r.raise_for_status()
    usage = r.json()["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return (r.headers["x-routegate-model"], details.get("cached_tokens") or 0,
            usage["prompt_tokens"])


@pytest.mark.parametrize("shared, kept", [(True, "warm-a"), (False, "warm-b")])
def test_a_new_session_is_priced_warm_where_its_shared_system_prompt_is(shared: bool,
                                                                        kept: str) -> None:
    """Two in-process simulated models with a prefix cache: a session's first turn asks
    ``auto:0.9``, which only the dearer ``warm-a`` meets. Another session's first turn,
    plain ``auto``, stays on ``warm-a`` when it starts with the same system prompt (its
    upstream reads that from the first session's cache, and says so) and goes to the
    cheaper ``warm-b`` when its system prompt is its own."""
    from loadtest.servers import run_gateway

    config = warm_config(sim_model("warm-a", 0.97, 1.0), sim_model("warm-b", 0.75, 0.9))
    with run_gateway(config) as gw:
        first, _, _ = ask(gw.url, "auto:0.9", rules(3), "Plan the release.")
        second, cached, prompt = ask(gw.url, "auto", rules(3 if shared else 4),
                                     "Write the changelog for it, with every section.")
    assert first == "warm-a"
    assert second == kept
    assert (cached > 0.8 * prompt) == shared


def test_a_shared_head_stays_warm_on_every_model_that_served_it() -> None:
    """Three sessions of one agent. The first needs ``warm-a``; the second, with a long
    task of its own, is cheaper on ``warm-b`` (no cache discount) even with the head
    warm on ``warm-a``; the third, short, is cheapest on ``warm-a``, which still holds
    the head, and reads it from there. A record of only the head's last model (``warm-b``)
    priced ``warm-a`` cold and sent the third to ``warm-b``."""
    from loadtest.servers import run_gateway

    config = warm_config(sim_model("warm-a", 0.97, 1.0),
                         sim_model("warm-b", 0.75, 0.3, cached_share=1.0))
    task = "Write the changelog for it. " + " ".join(["section"] * 1000)
    with run_gateway(config) as gw:
        first, _, _ = ask(gw.url, "auto:0.9", rules(3), "Plan the release.")
        second, _, _ = ask(gw.url, "auto", rules(3), task)
        third, cached, prompt = ask(gw.url, "auto", rules(3), "Tag the release.")
    assert (first, second, third) == ("warm-a", "warm-b", "warm-a")
    assert cached > 0.8 * prompt


Sync = Callable[[WarmPrefixes], Awaitable[None]]


def on_two_replicas(script: Callable[[WarmPrefixes, WarmPrefixes, Sync], Awaitable[T]]) -> T:
    """``script(one, two, sync)``: two replicas' records (team ``t``) sharing a fresh key
    space in the real Redis; ``await sync(replica)`` is one sync of that replica."""
    tags = KeySpace(f"rgtest-{uuid.uuid4().hex[:8]}", "UTC")

    async def run() -> T:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")

        async def sync(replica: WarmPrefixes) -> None:      # a push (unpublished) and a poll
            await replica.write(client, tags.tag)
            await replica.read(client, tags.tag, ["t"])
            await replica.trim(client, tags.tag)
        try:
            return await script(WarmPrefixes(ttl_s=60), WarmPrefixes(ttl_s=60), sync)
        finally:
            await client.delete(f"{tags.tag('t')}:warm", f"{tags.tag('t')}:warm:at")
            await client.aclose()
    return asyncio.run(run())


def test_replicas_share_the_record_through_redis() -> None:
    chain = prefix_chain(body("a", "b"))

    async def script(one: WarmPrefixes, two: WarmPrefixes, sync: Sync
                     ) -> tuple[Warm | None, Warm | None]:
        one.remember("t", chain[-1], Warm("large", 2, 700, time.time()))
        before = two.find("t", chain)
        await sync(one)
        await sync(two)
        return before, two.find("t", chain)
    before, after = on_two_replicas(script)
    assert before is None
    assert after is not None and (after.model, after.replica, after.tokens) == ("large", 2, 700)


def test_a_replica_finds_what_another_wrote_after_it_had_read_newer_entries() -> None:
    """An entry reaches Redis up to a sync after it was served, stamped with when it was
    served: a replica that has meanwhile read newer entries (its own, or a third one's)
    still finds it, and a prefix served again later is taken in its newer form."""
    old, mine = prefix_chain(body("old session")), prefix_chain(body("another session"))
    now = time.time()

    async def script(one: WarmPrefixes, two: WarmPrefixes, sync: Sync
                     ) -> tuple[Warm | None, Warm | None]:
        two.remember("t", old[-1], Warm("medium", 0, 300, now - 0.3))   # not yet synced
        one.remember("t", mine[-1], Warm("large", 0, 500, now - 0.1))
        await sync(one)                 # one has read up to now - 0.1
        await sync(two)                 # two writes its older entry only now
        await sync(one)
        first = one.find("t", old)
        two.remember("t", old[-1], Warm("large", 1, 300, time.time()))  # served again
        await sync(two)
        await sync(one)
        return first, one.find("t", old)
    first, again = on_two_replicas(script)
    assert first is not None and (first.model, first.tokens) == ("medium", 300)
    assert again is not None and (again.model, again.replica) == ("large", 1)


def test_a_read_past_its_bound_keeps_the_newest_entries(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica reads at most MAX_PER_TEAM entries a sync: the newest, so that a busy
    team's reads still move forward."""
    chains = [prefix_chain(body(f"session {i}")) for i in range(5)]
    now = time.time()

    async def script(one: WarmPrefixes, two: WarmPrefixes, sync: Sync) -> list[bool]:
        for i, chain in enumerate(chains):
            one.remember("t", chain[-1], Warm("small", 0, 100, now - 1 + i / 10))
        await sync(one)                                  # all five in Redis
        monkeypatch.setattr(warm_module, "MAX_PER_TEAM", 2)
        await sync(two)
        return [two.find("t", chain) is not None for chain in chains]
    assert on_two_replicas(script) == [False, False, False, True, True]


def test_a_second_gateway_process_finds_the_warm_prefix_the_first_served() -> None:
    """End to end: two ``routegate serve`` processes on one Redis. Each session's first
    turn is served by replica A on ``warm-a``; its second turn, a quarter of a second
    later (an agent's tool ran), goes to replica B, which unaware of A's turn would send
    it to the cheaper ``warm-b`` (the code that only polled Redis every 0.5 s did so
    for every session up to 0.3 s). B keeps it on ``warm-a``, whose simulator,
    counting for itself, reads the prompt from cache."""
    async def sessions(a: Gateway, b: Gateway) -> dict:
        async with httpx.AsyncClient(timeout=60) as client:
            return await row(client, a, b, 0.25, 4, random.Random(11))

    with two_replicas() as (a, b):
        got = asyncio.run(sessions(a, b))
    assert got["first_on_a"] == 4
    assert got["second_warm"] == 4 and got["second_cached"] == 4
    assert got["cached_share"] > 0.9


class Sharing:
    """Two replicas' records (``one``, ``two``) running their sharing tasks: each
    ``(client, subscriber)`` its own, as the gateway wires them (``WarmPrefixes.run``)."""

    def __init__(self, wiring: list[tuple[object, Callable[[], object]]], tag_of: Callable,
                 teams: Callable[[], frozenset[str]], channel: str) -> None:
        self.one, self.two = WarmPrefixes(ttl_s=60), WarmPrefixes(ttl_s=60)
        self.tasks = [asyncio.create_task(r.run(client, tag_of, teams, channel, subscribe, name))
                      for r, (client, subscribe), name in zip(
                          (self.one, self.two), wiring, ("one", "two"), strict=True)]

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def until(done: Callable[[], Awaitable[bool] | bool], seconds: float,
                every: float = 0.01) -> bool:
    """Ask ``done()`` every ``every`` s for at most ``seconds``: whether it came."""
    deadline = time.monotonic() + seconds
    while True:
        got = done()
        if not isinstance(got, bool):
            got = await got
        if got or time.monotonic() > deadline:
            return got
        await asyncio.sleep(every)


async def subscribed(node: aioredis.Redis, channel: str, n: int = 2) -> bool:
    return (await node.pubsub_numsub(channel))[0][1] == n


async def on_cluster(url: str, tmp_path: Path, subscriber_of: Callable, node_url: str
                     ) -> tuple[Sharing, list]:
    """Two replicas opened on a Redis Cluster as the gateway opens them (``subscriber_of
    (handle)``: where each subscribes), once both listen on the node ``node_url``."""
    from budget.redis_client import open_redis

    handles = [await open_redis(url, tmp_path) for _ in range(2)]
    replicas = Sharing([(h.client, subscriber_of(h)) for h in handles],
                       KeySpace("rgtest", "UTC").tag, lambda: frozenset({"t"}), "rgtest:warm")
    node = aioredis.Redis.from_url(node_url)
    await until(lambda: subscribed(node, "rgtest:warm"), 5)
    await node.aclose()
    return replicas, handles


async def closed(replicas: Sharing, handles: list) -> None:
    await replicas.close()
    for handle in handles:
        await handle.close()


def test_a_served_prefix_is_pushed_to_the_other_replicas_before_any_poll(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The record's push: two replicas running their sharing tasks on the real Redis, the
    poll an hour away. What one serves reaches the other through the subscription; a
    replica skips its own messages."""
    monkeypatch.setattr(warm_module, "POLL_S", 3600.0)
    tags = KeySpace(f"rgtest-{uuid.uuid4().hex[:8]}", "UTC")
    channel, chain = f"{tags.tag('t')}:warm-test", prefix_chain(body("pushed", "turn"))

    async def run() -> tuple[Warm | None, int]:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        def subscribe() -> aioredis.Redis:
            return aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        replicas = Sharing([(client, subscribe)] * 2, tags.tag, lambda: frozenset({"t"}), channel)
        one, two = replicas.one, replicas.two
        try:
            await until(lambda: subscribed(client, channel), 5)
            one.remember("t", chain[-1], Warm("large", 3, 800, time.time()))
            await until(lambda: two.find("t", chain) is not None, 5)
            own = one.take(orjson.dumps({"from": "one", "entries": [
                ("t", b"x".hex(), "small", 0, 1, time.time())]}), frozenset({"t"}), "one")
            return two.find("t", chain), own
        finally:
            await replicas.close()
            await client.delete(f"{tags.tag('t')}:warm", f"{tags.tag('t')}:warm:at")
            await client.aclose()
    found, own = asyncio.run(run())
    assert found is not None and (found.model, found.replica, found.tokens) == ("large", 3, 800)
    assert own == 0


def test_a_team_a_reload_adds_is_shared_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """The teams are read at each message and poll (``AppState.team_names`` after a
    config reload), not fixed when the task starts: a team added later is pushed and
    taken in, and one no longer served is skipped."""
    monkeypatch.setattr(warm_module, "POLL_S", 3600.0)
    tags = KeySpace(f"rgtest-{uuid.uuid4().hex[:8]}", "UTC")
    channel = f"{tags.tag('t')}:warm-test"
    late, gone = prefix_chain(body("late", "team")), prefix_chain(body("gone", "team"))
    served = {"t"}

    async def run() -> tuple[Warm | None, Warm | None]:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        def subscribe() -> aioredis.Redis:
            return aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        replicas = Sharing([(client, subscribe)] * 2, tags.tag, lambda: frozenset(served),
                           channel)
        one, two = replicas.one, replicas.two
        try:
            await until(lambda: subscribed(client, channel), 5)
            served.add("u")                           # the reload
            served.discard("t")
            one.remember("t", gone[-1], Warm("large", 0, 100, time.time()))
            one.remember("u", late[-1], Warm("large", 2, 900, time.time()))
            await until(lambda: two.find("u", late) is not None, 5)
            return two.find("u", late), two.find("t", gone)
        finally:
            await replicas.close()
            await client.delete(*(f"{tags.tag(t)}:warm{s}" for t in "tu" for s in ("", ":at")))
            await client.aclose()
    found, skipped = asyncio.run(run())
    assert found is not None and (found.model, found.replica, found.tokens) == ("large", 2, 900)
    assert skipped is None


def test_the_push_reaches_a_replica_of_a_redis_cluster(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a Redis Cluster the PUBLISH goes on its own (a cluster's pipeline refuses it) and
    reaches every node, so each replica's subscription, on the node its url names, hears
    it: two replicas opened as the gateway opens them, the poll an hour away."""
    from functools import partial

    from budget.redis_client import subscriber
    from tests.budget.servers import RedisClusterNodes

    chain = prefix_chain(body("clustered", "turn"))

    async def run(nodes: RedisClusterNodes) -> Warm | None:
        replicas, handles = await on_cluster(nodes.url, tmp_path,
                                             lambda h: partial(subscriber, h.url),
                                             nodes.nodes[0].url)   # the url's: both there
        one, two = replicas.one, replicas.two
        try:
            one.remember("t", chain[-1], Warm("large", 1, 600, time.time()))
            await until(lambda: two.find("t", chain) is not None, 5)
            return two.find("t", chain)
        finally:
            await closed(replicas, handles)

    monkeypatch.setattr(warm_module, "POLL_S", 3600.0)
    with RedisClusterNodes(tmp_path / "cluster") as nodes:
        found = asyncio.run(run(nodes))
    assert found is not None and (found.model, found.replica, found.tokens) == ("large", 1, 600)


def test_a_subscription_lost_with_its_cluster_node_is_taken_up_on_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three masters with a replica each; both replicas of the gateway subscribe on the
    node their url names, which is then killed and failed over. Each resubscribes on
    another node the cluster client knows, so a push still arrives, the poll an hour
    away (on the dead node alone, it never would)."""
    import subprocess

    from budget.redis_client import subscribers
    from tests.budget.servers import REDIS_CLI, RedisClusterNodes

    monkeypatch.setattr(warm_module, "POLL_S", 3600.0)
    monkeypatch.setattr(warm_module, "RETRY_S", 0.2)
    chain = prefix_chain(body("failed", "over"))

    def failed_over(port: int, dead: int) -> bool:
        """``port``'s node sees ``dead`` failed and every slot served again."""
        def ask(*command: str) -> str:
            return subprocess.run([REDIS_CLI, "-p", str(port), *command],
                                  capture_output=True, text=True, timeout=5).stdout
        gone = any(f":{dead}@" in line and "fail" in line.split()[2]
                   for line in ask("cluster", "nodes").splitlines())
        return gone and "cluster_state:ok" in ask("cluster", "info")

    async def run(nodes: RedisClusterNodes) -> Warm | None:
        replicas, handles = await on_cluster(nodes.url, tmp_path, subscribers,
                                             nodes.nodes[0].url)
        one, two = replicas.one, replicas.two
        try:
            nodes.nodes[0].kill()
            if not await until(lambda: asyncio.to_thread(failed_over, nodes.nodes[1].port,
                                                         nodes.nodes[0].port), 30, 0.1):
                raise AssertionError("no failover within 30 s:\n" + subprocess.run(
                    [REDIS_CLI, "-p", str(nodes.nodes[1].port), "cluster", "nodes"],
                    capture_output=True, text=True, timeout=5).stdout)
            one.remember("t", chain[-1], Warm("large", 1, 600, time.time()))
            await until(lambda: two.find("t", chain) is not None, 10)
            return two.find("t", chain)
        finally:
            await closed(replicas, handles)

    with RedisClusterNodes(tmp_path / "cluster", n=6, replicas=1) as nodes:
        found = asyncio.run(run(nodes))
    assert found is not None and (found.model, found.replica, found.tokens) == ("large", 1, 600)


def test_what_a_replica_served_while_redis_was_down_is_written_once_it_is_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails keeps its entries for the next one (bounded: the newest
    MAX_PER_TEAM a team, within the record's lifetime): a real Redis killed before the
    push and started again on its port; the other replica then reads what was served."""
    from tests.budget.servers import RedisServer

    tags = KeySpace("rgtest", "UTC")
    served = [prefix_chain(body(f"while down {i}"))[-1] for i in range(4)]

    async def run(server: RedisServer) -> tuple[bool, list[bool]]:
        client = aioredis.Redis.from_url(server.url, socket_connect_timeout=1)
        one, two = WarmPrefixes(ttl_s=60), WarmPrefixes(ttl_s=60)
        try:
            server.kill()
            for i, h in enumerate(served[:3]):
                one.remember("t", h, Warm("large", 0, 100 + i, time.time() - 10 + i))
            failed = False
            try:
                await one.write(client, tags.tag)
            except Exception:
                failed = True
            one.remember("t", served[3], Warm("large", 0, 103, time.time()))
            server.start()
            await one.write(client, tags.tag)
            await two.read(client, tags.tag, ["t"])
            return failed, [two.find("t", [h]) is not None for h in served]
        finally:
            await client.aclose()

    monkeypatch.setattr(warm_module, "MAX_PER_TEAM", 3)      # the oldest of four is dropped
    with RedisServer(tmp_path / "redis") as server:
        failed, found = asyncio.run(run(server))
    assert failed
    assert found == [False, True, True, True]


@pytest.mark.parametrize("data", [
    b"not json", b"[]", b'{"from": "x"}', b'{"from": "x", "entries": 5}',
    b'{"from": "x", "entries": [["t", "zz", "m", 0, 1, 1e12]]}',
    b'{"from": "x", "entries": [[["t"], "00", "m", 0, 1, 1e12]]}',
    b'{"from": "x", "entries": [["other", "00", "m", 0, 1, 1e12]]}',
    b'{"from": "x", "entries": [["t", "00", "m", 0, 1, 1.0]]}',
    b'{"from": "x", "entries": [["t", "00", "m", "many", 1, 1e12]]}',
    b'{"from": "x", "entries": [["t", "00", "m", 0, 1]]}',
    12,
])
def test_a_published_message_that_does_not_fit_is_skipped(data: object) -> None:
    """Another replica's message is read with care: wrong shapes, unknown teams and
    entries older than the record's lifetime are skipped, never raised."""
    warm = WarmPrefixes(ttl_s=60)
    assert warm.take(data, frozenset({"t"}), "me") == 0
    assert warm.take(b'{"from": "x", "entries": [["t", "00", "m", 0, 1, %f]]}' % time.time(),
                     frozenset({"t"}), "me") == 1


@pytest.mark.parametrize("backend, extra, kind", [
    ("openai_compat", {"base_url": "http://127.0.0.1:1"}, "automatic"),
    ("azure_openai", {"base_url": "http://127.0.0.1:1", "upstream_model": "d"}, "automatic"),
    ("anthropic", {}, "breakpoints"),
    ("bedrock", {"region": "us-east-1", "upstream_model": "m"}, "breakpoints"),
    ("simulated", {}, "automatic"),
    ("simulated", {"simulate": {"prefix_cache": False}}, "none"),
    ("openai_compat", {"base_url": "http://127.0.0.1:1", "prefix_cache": "none"}, "none"),
])
def test_which_upstreams_read_a_prefix_from_their_cache(backend: str, extra: dict,
                                                        kind: str) -> None:
    """A warm prefix is priced cached only where the upstream caches: any prefix (vLLM,
    llama.cpp, OpenAI, Azure), only at the request's breakpoints (Anthropic, Bedrock), or
    never; ``prefix_cache`` overrides the backend's default."""
    from core.model_config import ModelConfig, ModelFacts
    from gateway.pipeline.features import RequestFeatures

    facts = ModelFacts.of(ModelConfig.model_validate(
        {"name": "m", "backend": backend, "price": {"input_per_mtok": 1, "output_per_mtok": 1},
         **extra}))
    assert facts.prefix_cache == kind
    cached = {}
    for marked in (False, True):
        features = RequestFeatures({facts.tokenizer: 1000}, 10, None,  # type: ignore[arg-type]
                                   warm={"m": Warm("m", 0, 800)}, breakpoints=marked)
        cached[marked] = features.cached_tokens(facts)
    assert cached == {"automatic": {False: 800, True: 800},
                      "breakpoints": {False: 0, True: 800}, "none": {False: 0, True: 0}}[kind]
    # The Messages door's own body goes to an anthropic model only; the others get the
    # chat form, which keeps no breakpoint of it
    door = RequestFeatures({facts.tokenizer: 1000}, 10, None,  # type: ignore[arg-type]
                           warm={"m": Warm("m", 0, 800)}, native_breakpoints=True)
    if kind == "breakpoints":
        assert door.cached_tokens(facts) == (800 if backend == "anthropic" else 0)


def test_a_breakpoint_is_found_wherever_a_client_marks_one() -> None:
    from gateway.pipeline.prompt_prefix import has_breakpoints
    mark = {"cache_control": {"type": "ephemeral"}}
    assert not has_breakpoints(body("a", "b"))
    assert has_breakpoints({"messages": [], **mark})                        # Anthropic's top level
    assert has_breakpoints({"system": [{"type": "text", "text": "s", **mark}], "messages": []})
    assert has_breakpoints({"tools": [{"name": "f", **mark}], "messages": []})
    assert has_breakpoints({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b", **mark}]}]})
    assert not has_breakpoints({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "cache_control"}]}], "system": "cache_control"})


@pytest.mark.parametrize("prefix_cache, kept", [(True, "warm-a"), (False, "warm-b")])
def test_a_prefix_is_priced_warm_only_on_an_upstream_that_caches(prefix_cache: bool,
                                                                 kept: str) -> None:
    """Two in-process simulated models: ``warm-a`` (dearer) serves a session's first turn,
    asked ``auto:0.9``; the second, plain ``auto``, stays there only when ``warm-a``'s
    upstream keeps a prefix cache (``simulate.prefix_cache``), whose count the simulator
    reports; without one it goes to the cheaper ``warm-b``, as routing blind would."""
    from loadtest.servers import TEST_KEY, hashed, run_gateway

    def model(name: str, ability: float, price: float, **sim: object) -> dict:
        return {"name": name, "backend": "simulated", "ability": ability,
                "price": {"input_per_mtok": price, "output_per_mtok": 2 * price,
                          "cached_input_per_mtok": price / 10},
                "context_window": 16384, "max_output_tokens": 512,
                "simulate": {"tpot_ms": 1, "prefill_tokens_per_s": 1_000_000, "seed": 7,
                             "output_tokens_mean": 8, **sim}}
    config = {"models": [model("warm-a", 0.97, 1.0, prefix_cache=prefix_cache),
                         model("warm-b", 0.75, 0.9)],
              "teams": [{"name": "test", "keys": [hashed(TEST_KEY)], "quality": 0.1}],
              "redis_url": "redis://127.0.0.1:6379/0", "metrics": {"enabled": False},
              "budget": {"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"},
              "batch": {"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}", "worker_in_serve": False}}
    rng = random.Random(3)
    rules = "session rules. " + " ".join(rng.choice(["cache", "prefix", "agent"])
                                         for _ in range(1200))

    def ask(url: str, model: str, messages: list) -> tuple[str, int, str]:
        r = httpx.post(url + "/v1/chat/completions", timeout=60,
                       headers={"authorization": f"Bearer {TEST_KEY}"},
                       json={"model": model, "messages": messages, "max_tokens": 16})
        r.raise_for_status()
        details = r.json()["usage"].get("prompt_tokens_details") or {}
        return (r.headers["x-routegate-model"], details.get("cached_tokens") or 0,
                r.json()["choices"][0]["message"]["content"] or "")

    with run_gateway(config) as gw:
        first = [{"role": "system", "content": rules}, {"role": "user", "content": "Summarise."}]
        model_1, _, said = ask(gw.url, "auto:0.9", first)
        second = [*first, {"role": "assistant", "content": said},
                  {"role": "user", "content": "Shorter."}]
        model_2, cached, _ = ask(gw.url, "auto", second)
    assert model_1 == "warm-a"
    assert model_2 == kept
    assert (cached > 1000) == prefix_cache


def test_a_12_turn_agent_session_on_the_demo_fleet_stays_on_its_warm_model() -> None:
    """The demo config, ``model: auto``, four tools and growing tool results: at most
    two switches of model (it was six to eight before cache-aware routing), and the
    later turns are read from the upstream's prefix cache."""

    import yaml

    from loadtest.agent_sessions import _tool, _turn
    from loadtest.prompts import PromptBuilder
    from tests.support import REPO, run_gateway

    config = yaml.safe_load((REPO / "config" / "routegate.yaml").read_text())
    config.update(redis_url="redis://127.0.0.1:6379/0",
                  budget={"key_prefix": f"rgtest-{uuid.uuid4().hex[:8]}"})
    builder, rng = PromptBuilder(), random.Random(5)
    tools = [_tool(rng, i, builder) for i in range(4)]

    async def session(url: str) -> list:
        messages: list = [{"role": "system", "content": "You are a coding agent. "
                           + builder.body(1500)},
                          {"role": "user", "content": "Fix the failing test. " + builder.body(80)}]
        turns = []
        async with httpx.AsyncClient(timeout=120) as client:
            for i in range(12):
                turn, message = await _turn(client, url, "sk-routegate-demo", {
                    "model": "auto", "messages": messages, "tools": tools, "max_tokens": 120,
                    "tool_choice": "required" if i < 11 else "auto", "stream": True,
                    "stream_options": {"include_usage": True}})
                assert turn.ok
                turns.append(turn)
                call_id = (message.get("tool_calls") or [{}])[0].get("id") or f"call_{i}"
                messages += [message, {"role": "tool", "tool_call_id": call_id,
                                       "content": builder.body(rng.randint(200, 1500))}]
        return turns
    with run_gateway(config) as gw:
        turns = asyncio.run(session(gw.url))
    models = [t.model for t in turns]
    switches = sum(a != b for a, b in zip(models, models[1:], strict=False))
    print("models:", models, "cached:", [t.cached for t in turns])
    assert switches <= 2, models
    assert all(t.cached > 0.5 * t.prompt for t in turns[6:])


def test_a_busy_team_cannot_push_another_teams_prefixes_out() -> None:
    """Each team keeps its own newest entries; past the replica's bound in all, the
    largest team gives up its oldest."""
    warm, now = WarmPrefixes(ttl_s=60, max_local=30, max_per_team=20), time.time()
    quiet = prefix_chain(body("quiet session"))
    warm.remember("quiet", quiet[-1], Warm("small", 0, 900, now))
    for n in range(100):
        warm.remember("busy", prefix_chain(body(f"busy {n}"))[-1], Warm("large", 0, 50, now))
    assert warm.find("quiet", quiet) == Warm("small", 0, 900, now)
    assert warm.find("busy", prefix_chain(body("busy 99"))) is not None
    assert warm.find("busy", prefix_chain(body("busy 79"))) is None     # past its 20
    for n in range(15):
        warm.remember("third", prefix_chain(body(f"third {n}"))[-1], Warm("medium", 0, 50, now))
    assert warm.find("quiet", quiet) is not None and warm._size == 30
    assert warm.find("busy", prefix_chain(body("busy 80"))) is None     # the largest gave way
    assert warm.find("third", prefix_chain(body("third 0"))) is not None


def test_a_replica_whose_clock_runs_ahead_hides_no_one_elses_entries() -> None:
    """An entry stamped 30 s in the future (a writer's clock ahead) is read, and the
    reader's next reads still find what a replica with a right clock writes after it."""
    tags = KeySpace(f"rgtest-{uuid.uuid4().hex[:8]}", "UTC")

    async def run() -> tuple[bool, bool]:
        client = aioredis.Redis.from_url("redis://127.0.0.1:6379/0")
        ahead, right, reader = WarmPrefixes(300), WarmPrefixes(300), WarmPrefixes(300)
        early, late = prefix_chain(body("fast clock")), prefix_chain(body("right clock"))
        try:
            ahead.remember("t", early[-1], Warm("small", 0, 100, time.time() + 30))
            await ahead.write(client, tags.tag)
            await reader.read(client, tags.tag, ["t"])
            right.remember("t", late[-1], Warm("large", 0, 900, time.time()))
            await right.write(client, tags.tag)
            await reader.read(client, tags.tag, ["t"])
            return reader.find("t", early) is not None, reader.find("t", late) is not None
        finally:
            await client.delete(f"{tags.tag('t')}:warm", f"{tags.tag('t')}:warm:at")
            await client.aclose()

    assert asyncio.run(run()) == (True, True)


def test_what_is_past_its_ttl_leaves_the_record_at_each_poll() -> None:
    warm, now = WarmPrefixes(ttl_s=60), time.time()
    for n in range(5):
        warm.remember("old", prefix_chain(body(f"old {n}"))[-1], Warm("small", 0, 10, now - 61))
    fresh = prefix_chain(body("fresh"))
    warm.remember("t", fresh[-1], Warm("large", 0, 10, now))
    warm.expire()
    assert warm._size == 1 and set(warm._known) == {"t"}
    assert warm.find("t", fresh) is not None
