"""Issue 22: shadow answers. A share of a team's routed requests is answered again by a
stronger model after the client has its answer, compared (exactly, or by a judge with
positions swapped), billed to the team within its bound, and kept as labels."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest
from openai.types.shared_params import ResponseFormatJSONObject

from budget.nanousd import cost_nanousd
from classifiers.length import counter_for
from labelling.compare import checkable, exact_scores, final_number, judge_messages, verdict
from tests.gateway.test_escalation import cascade_config
from tests.labelling.test_traffic_labels import labels_of
from tests.support import OTHER_KEY, TEST_KEY, Gateway, clear_of_minute_turn, run_gateway

RATE = 0.25
JSON_FORMAT: ResponseFormatJSONObject = {"type": "json_object"}


def test_checkable_answers_are_compared_exactly() -> None:
    fmt = {"response_format": JSON_FORMAT}
    both, served_wrong, shadow_wrong = (1.0, 1.0), (0.0, 1.0), (1.0, 0.0)
    assert exact_scores(fmt, {"content": '{"a": 1, "b": [2]}'},
                        {"content": '{"b": [2],  "a": 1}'}) == both
    assert exact_scores(fmt, {"content": '{"a": 1}'}, {"content": '{"a": 2}'}) == served_wrong
    assert exact_scores(fmt, {"content": "not json"}, {"content": '{"a": 2}'}) == served_wrong
    assert exact_scores(fmt, {"content": '{"a": 2}'}, {"content": '{"a": '}) == shadow_wrong
    assert exact_scores(fmt, {"content": "no"}, {"content": "neither"}) is None
    call = {"function": {"name": "f", "arguments": '{"x": 1}'}}
    broken = {"function": {"name": "f", "arguments": '{"x": '}}
    assert exact_scores({}, {"tool_calls": [call]}, {"tool_calls": [call]}) == both
    assert exact_scores({}, {"tool_calls": [call]}, {"content": "x = 1"}) == shadow_wrong
    assert exact_scores({}, {"tool_calls": [call]}, {"tool_calls": [broken]}) == shadow_wrong
    assert exact_scores({}, {"content": "so the answer is 1,200."},
                        {"content": "#### 1200"}) == both
    assert exact_scores({}, {"content": "\\boxed{7}"}, {"content": "Answer: 8"}) == served_wrong
    assert exact_scores({}, {"content": "Paris."}, {"content": "It is Paris"}) is None
    assert final_number("the answer is nan") is None
    # Without a judge, only an answer of such a form is worth a shadow.
    assert checkable(fmt, {"content": "not json"}) and checkable({}, {"tool_calls": [call]})
    assert checkable({}, {"content": "#### 1200"})
    assert not checkable({}, {"content": "Paris."}) and not checkable({}, {})


def test_the_judge_reply_is_read_strictly() -> None:
    assert [verdict(r) for r in ("A", " b.", "T", "**A**", "Both", "", None)] == [
        1.0, 0.0, 0.5, 1.0, None, None, None]
    messages = judge_messages("q" * 10_000, "first", "second")
    assert len(messages[1]["content"]) < 7000 and "Answer A:\nfirst" in messages[1]["content"]


@pytest.fixture(scope="module")
def shadowed(sim_url: str):
    config = cascade_config(sim_url)
    config["models"][-1]["simulate"]["tpot_ms"] = 150       # large: a slow second opinion
    config["models"].append({"name": "judgebot", "backend": "openai_compat",
                             "base_url": sim_url, "upstream_model": "judge", "ability": 0.3,
                             "price": {"input_per_mtok": 3.0, "output_per_mtok": 6.0}})
    shadow = {"rate": RATE, "model": "large", "judge": "judgebot"}
    config["teams"][0].update(shadow=shadow,
                              allowed_models=["small", "medium", "large", "judgebot"])
    config["teams"][1].update(shadow=shadow,
                              allowed_models=["small", "medium", "large", "judgebot"])
    with run_gateway(config) as gw:
        yield gw, config


def ledger(gw: Gateway, key: str) -> dict[str, dict]:
    r = httpx.get(gw.base_url + "/usage", headers={"authorization": f"Bearer {key}"})
    return {row["model"]: row for row in r.json()["ledger"]}


def wait_for(config: dict, team: str, n: int) -> list:
    for _ in range(200):
        found = [x for x in labels_of(config, team) if x.source == "shadow"]
        if len(found) >= n:
            return found
        time.sleep(0.1)
    return found


def test_json_answers_are_shadowed_at_the_rate_compared_exactly_and_billed(shadowed) -> None:
    gw, config = shadowed
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
    served = []
    for i in range(20):
        raw = client.chat.completions.with_raw_response.create(
            model="auto", response_format=JSON_FORMAT,
            messages=[{"role": "user", "content": f"Fact {i} about Oslo, as JSON."}])
        served.append(raw.headers["x-routegate-model"])
        if i == 3:       # the first shadow's model takes seconds: the client never waits
            assert not [x for x in labels_of(config, "test") if x.source == "shadow"]
    assert set(served) == {"small"}
    labels = wait_for(config, "test", 10)
    assert len(labels) == 10                     # 20 x 0.25 shadows, two labels each
    by_request: dict[str, dict[str, float]] = {}
    for label in labels:
        by_request.setdefault(label.request_id, {})[label.model] = label.score
    assert len(by_request) == 5
    for scores in by_request.values():          # the stronger one is the reference
        assert scores["large"] == 1.0 and scores["small"] in (0.0, 1.0)
    rows = ledger(gw, TEST_KEY)
    assert rows["large"]["requests"] == 5 and "judgebot" not in rows
    # The bound: rate x traffic x (shadow price / served price); prompts and answers
    # are the same size here, and the shadow runs at the batch pool's price (0.5x).
    bound = RATE * rows["small"]["cost_nanousd"] * (5.0 / 0.1)
    assert 0 < rows["large"]["cost_nanousd"] <= bound
    print(f"shadow spend {rows['large']['cost_nanousd']} nano-USD, bound {bound:.0f}")


def test_free_form_answers_go_to_the_judge_twice_with_positions_swapped(shadowed) -> None:
    gw, config = shadowed
    client = openai.OpenAI(base_url=gw.base_url, api_key=OTHER_KEY, max_retries=0, timeout=30)
    for i in range(8):
        client.chat.completions.create(model="auto", messages=[
            {"role": "user", "content": f"Tell me about Bergen, part {i}."}])
    labels = wait_for(config, "other", 4)
    assert len(labels) == 4
    pairs: dict[str, dict[str, float]] = {}
    for label in labels:
        pairs.setdefault(label.request_id, {})[label.model] = label.score
    for scores in pairs.values():       # the judge's taste is fixed: both orders agree
        assert scores["small"] + scores["large"] == pytest.approx(1.0)
        assert scores["small"] in (0.0, 0.5, 1.0)
    rows = ledger(gw, OTHER_KEY)
    assert rows["large"]["requests"] == 2 and rows["judgebot"]["requests"] == 4
    metrics = httpx.get(gw.url + "/metrics").text.splitlines()
    compared = [line for line in metrics if line.startswith('routegate_shadows_total{result="compared"}')]
    assert compared and float(compared[0].split()[-1]) >= 2


def test_streamed_answers_are_shadowed_at_the_rate_from_their_events(shadowed) -> None:
    """A stream is sampled as a JSON answer is: every 1/rate-th, its answer put
    together from the events the relay kept, compared once the client has it all."""
    gw, config = shadowed
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
    before = {x.request_id for x in labels_of(config, "test") if x.source == "shadow"}
    ids, texts = [], []
    for i in range(8):
        raw = client.chat.completions.with_raw_response.create(
            model="auto", response_format=JSON_FORMAT, stream=True,
            messages=[{"role": "user", "content": f"Fact {i} about Lagos, as JSON."}])
        ids.append(raw.headers["x-routegate-request-id"])
        texts.append("".join(c.choices[0].delta.content or "" for c in raw.parse()
                             if c.choices))
        assert raw.headers["x-routegate-model"] == "small"
    assert all(texts)
    labels = wait_for(config, "test", len(before) * 2 + 4)
    new = [x for x in labels if x.request_id not in before]
    assert len(new) == 4                              # 8 x 0.25 streams, two labels each
    assert {x.request_id for x in new} <= set(ids)
    assert {x.model for x in new} == {"small", "large"}
    assert all(x.score in (0.0, 1.0) for x in new)    # compared exactly: JSON


def test_a_shadow_naming_an_unknown_model_is_a_config_error() -> None:
    from core.config import ConfigError, parse_config

    price = {"input_per_mtok": 1, "output_per_mtok": 1}

    def team(shadow: dict, **more: object) -> dict:
        return {"models": [{"name": "m", "price": price},
                           {"name": "i", "price": price, "pools": ["interactive"]}],
                "teams": [{"name": "t", "keys": ["sha256:" + "1" * 64], "shadow": shadow,
                           **more}]}
    ok = {"rate": 0.1, "model": "m", "judge": "m"}
    assert parse_config(team(ok)).teams[0].shadow is not None
    for bad, more, what in (
            ({"rate": 0.1, "model": "nope"}, {}, "shadow.model names undefined"),
            ({"rate": 0.1, "model": "m", "judge": "nope"}, {}, "shadow.judge names undefined"),
            ({"rate": 0.1, "model": "i"}, {}, "in the batch pool"),
            (ok, {"allowed_models": ["i"]}, "not in its allowed_models"),
            (ok, {"allowed_pools": ["interactive"]}, "allowed_pools exclude"),
            ({"rate": 0.9, "model": "m"}, {}, "rate"), ({"rate": 0, "model": "m"}, {}, "rate")):
        with pytest.raises(ConfigError) as err:
            parse_config(team(bad, **more))
        assert what in str(err.value.errors)


def test_answers_through_the_responses_and_anthropic_doors_are_shadowed_too(shadowed) -> None:
    """The doors translate to one chat request, so the shadow, its comparison and
    its bill are the same whichever door a routed request came through."""
    gw, config = shadowed
    before = {x.request_id for x in labels_of(config, "test") if x.source == "shadow"}
    openai_client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0,
                                  timeout=30)
    ids = []
    for i in range(4):
        raw = openai_client.responses.with_raw_response.create(
            model="auto", input=f"Fact {i} about Turku, as JSON.",
            text={"format": {"type": "json_object"}})
        assert raw.headers["x-routegate-model"] == "small" and raw.parse().output_text
        ids.append(raw.headers["x-routegate-request-id"])
    claude = anthropic.Anthropic(base_url=gw.url, api_key=TEST_KEY, max_retries=0, timeout=30)
    for i in range(4):
        raw_message = claude.messages.with_raw_response.create(
            model="auto", max_tokens=64,
            messages=[{"role": "user", "content": f"Fact {i} about Tromso."}])
        assert raw_message.headers["x-routegate-model"] == "small"
        assert raw_message.parse().content
        ids.append(raw_message.headers["x-routegate-request-id"])
    labels = wait_for(config, "test", len(before) * 2 + 4)
    new = [x for x in labels if x.request_id not in before]
    assert len(new) == 4                              # 8 x 0.25 answers, two labels each
    shadowed_ids = {x.request_id for x in new}
    assert shadowed_ids & set(ids[:4]) and shadowed_ids & set(ids[4:])   # one per door
    assert {x.model for x in new} == {"small", "large"}


def test_a_verbose_shadow_stays_within_the_bound_and_a_cut_answer_is_no_label(
        sim_url: str) -> None:
    """The client allows 2,000 tokens, the served model writes about 12 and the
    shadow model about 300: the shadow may write twice what was served (at least
    32), so its spend stays within rate x traffic x (shadow price / served
    price) plus one shadow's worst case; its answers, cut short, are not judged
    and label nothing."""
    from budget.nanousd import cost_nanousd
    from tests.gateway.test_escalation import PRICES

    rate, n = 0.5, 12
    config = cascade_config(sim_url)
    config["models"][-1]["simulate"]["output_tokens_mean"] = 300
    config["models"].append({"name": "judgebot", "backend": "openai_compat",
                             "base_url": sim_url, "upstream_model": "judge", "ability": 0.3,
                             "price": {"input_per_mtok": 3.0, "output_per_mtok": 6.0}})
    config["teams"][0].update(shadow={"rate": rate, "model": "large", "judge": "judgebot"},
                              allowed_models=["small", "medium", "large", "judgebot"])
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
        for i in range(n):
            client.chat.completions.create(
                model="auto", max_tokens=2000,
                messages=[{"role": "user", "content": f"Tell me about Perth, part {i}."}])
        for _ in range(100):
            rows = ledger(gw, TEST_KEY)
            if rows.get("large", {}).get("requests", 0) >= n * rate:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        rows = ledger(gw, TEST_KEY)
        metrics = httpx.get(gw.url + "/metrics").text
    small, large = rows["small"], rows["large"]
    # Each cut shadow is counted as cut on /metrics, not as a failure.
    assert f'routegate_shadows_total{{result="cut"}} {n * rate:.1f}' in metrics
    assert 'routegate_shadows_total{result="failed"} 0.0' in metrics
    assert small["requests"] == n and large["requests"] == n * rate
    earned = rate * cost_nanousd(small["input_tokens"], small["output_tokens"], *PRICES["large"])
    prompt = small["input_tokens"] // n
    price_in, price_out = (0.5 * p for p in PRICES["large"])                  # batch price
    one = cost_nanousd(prompt + 1, 32, price_in, price_out)
    print(f"shadow spend {large['cost_nanousd']} nano-USD, earned {earned:.0f} + one {one}")
    assert large["output_tokens"] <= 32 * large["requests"]      # cut at the cap, not 2,000
    assert 0 < large["cost_nanousd"] <= earned + one
    assert "judgebot" not in rows                                # a cut answer is not judged
    assert not [x for x in labels_of(config, "test") if x.source == "shadow"]


def test_shadows_do_not_spend_the_clients_rate_limit(sim_url: str) -> None:
    """rpm is the team's clients' limit: with rpm 12 and half its requests shadowed
    and judged, all 12 of its own requests are still answered (the review that
    found it: 6 of 12 got a 429), and the shadows are billed."""
    config = cascade_config(sim_url)
    config["models"].append({"name": "judgebot", "backend": "openai_compat",
                             "base_url": sim_url, "upstream_model": "judge", "ability": 0.3,
                             "price": {"input_per_mtok": 3.0, "output_per_mtok": 6.0}})
    config["teams"][0].update(shadow={"rate": 0.5, "model": "large", "judge": "judgebot"},
                              allowed_models=["small", "medium", "large", "judgebot"],
                              budget={"rpm": 12})
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
        clear_of_minute_turn(20)
        for i in range(12):
            client.chat.completions.create(model="auto", messages=[
                {"role": "user", "content": f"Tell me about Quito, part {i}."}])
            time.sleep(0.05)                    # let the shadows start in between
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="auto", messages=[
                {"role": "user", "content": "One more."}])
        for _ in range(100):
            if ledger(gw, TEST_KEY).get("large", {}).get("requests", 0) >= 6:
                break
            time.sleep(0.1)
        rows = ledger(gw, TEST_KEY)
    assert rows["small"]["requests"] == 12 and rows["large"]["requests"] == 6
    assert rows["judgebot"]["requests"] >= 2


def test_a_shadow_cut_off_by_shutdown_bills_what_it_consumed(sim_url: str) -> None:
    """The gateway stops while a shadow is still being written: the shadow is
    cancelled, and its prompt, already sent upstream, is billed to the team (it
    used to be released unbilled)."""
    from tests.support import stop

    config = cascade_config(sim_url)
    config["models"][-1]["simulate"].update(tpot_ms=200, output_tokens_mean=200)
    config["teams"][0].update(shadow={"rate": 0.5, "model": "large"})
    with run_gateway(config) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
        for i in range(2):                     # the second is the one shadowed
            client.chat.completions.create(model="auto", response_format=JSON_FORMAT, messages=[
                {"role": "user", "content": f"Fact {i} about Lima, as JSON."}])
        time.sleep(1.0)                        # the shadow is decoding at 200 ms a token
        assert "large" not in ledger(gw, TEST_KEY)
        stop(gw.proc)
        assert "shadow of request" not in gw.log()            # cancelled, not failed
    with run_gateway(config) as again:         # the same Redis and prefix: its ledger
        rows = ledger(again, TEST_KEY)
    # Cancelled mid-answer, with no usage: its prompt at our count, at the batch price.
    prompt = counter_for("o200k_base").count_messages(
        [{"role": "user", "content": "Fact 1 about Lima, as JSON."}])
    assert (rows["large"]["requests"], rows["large"]["input_tokens"],
            rows["large"]["output_tokens"]) == (1, prompt, 0)
    assert rows["large"]["cost_nanousd"] == cost_nanousd(prompt, 0, 5.0 * 0.5, 10.0 * 0.5)


def test_one_team_takes_at_most_its_share_of_the_shadow_slots() -> None:
    """The in-flight slots are shared by every team: one team's burst takes at
    most MAX_IN_FLIGHT_PER_TEAM of them; the rest are skipped and counted."""
    import asyncio
    from types import SimpleNamespace

    from core.config import Price
    from gateway.pipeline import shadow as mod

    async def scenario() -> tuple[int, int, int]:
        release = asyncio.Event()

        class Held(mod.Shadows):
            async def _run(self, *args: object) -> None:
                await release.wait()

        model = SimpleNamespace(price=Price(input_per_mtok=1.0, output_per_mtok=1.0))
        config = SimpleNamespace(pools=SimpleNamespace(batch=SimpleNamespace(price_multiplier=0.5)))
        gw = SimpleNamespace(models={"large": model}, labels=object(), config=config,
                             soft_limited=lambda caller: False)
        shadows = Held(gw)  # type: ignore[arg-type]

        def caller(team: str) -> SimpleNamespace:
            cfg = SimpleNamespace(rate=0.5, model="large", judge="j")
            return SimpleNamespace(team=SimpleNamespace(name=team, shadow=cfg),
                                   team_name=team, shadow=cfg)

        req = SimpleNamespace(routed=True, operation=mod.CHAT, stream=False, max_tokens=None,
                              body={}, messages=[])
        for i in range(40):
            o = SimpleNamespace(status=200, model="small", prompt_tokens=10,
                                completion_tokens=10, request_id=f"r{i}")
            shadows.offer(o, req, caller("busy" if i < 36 else "quiet"), {"choices": []})  # type: ignore[arg-type]
        await asyncio.sleep(0)
        counts = dict(shadows._running)
        release.set()
        await asyncio.gather(*shadows._tasks)
        return counts.get("busy", 0), counts.get("quiet", 0), shadows.skipped

    busy, quiet, skipped = asyncio.run(scenario())
    assert busy == mod.MAX_IN_FLIGHT_PER_TEAM and quiet == 2 and skipped == 18 - busy
