"""``/ui`` in headless Chromium against a real gateway under a small load: the login
(and its throttle), the session cookie, every number on the page against
``/admin/overview``, and signing out.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``.ci/run``
installs them). The screenshot is left in ``$TEST_ARTIFACTS`` (default
``build/test-artifacts/ui.png``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import httpx
import pytest
import redis

from gateway.observe.history import FLUSH_S as HISTORY_FLUSH_S
from loadtest.browser import headless_chromium
from tests.support import (
    OTHER_KEY,
    REPO,
    TEST_KEY,
    base_config,
    run_gateway,
    run_simulator,
    sim_model,
)

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ADMIN_KEY = "sk-admin-ui-test-9f8e7d6c5b4a"
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", REPO / "build" / "test-artifacts"))
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(CHROMEDRIVER is None, reason="chromium-driver not installed")


def _body(model: str, n: int, **extra: object) -> dict:
    content = "Prove that there are infinitely many primes." if n % 3 else "hi"
    return {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": content}],
            **extra}


JSON = {"response_format": {"type": "json_object"}}
STREAM = {"stream": True}
MIX = [("auto", JSON), ("fast", STREAM), ("local", STREAM), ("auto", STREAM), ("broken", {}),
       ("auto", {})]


@contextlib.contextmanager
def load(url: str, stop: threading.Event) -> Iterator[list[int]]:
    """A small steady load from two teams: escalations (invalid JSON from the
    cheapest model), fallbacks (its errors), streams, a failing model; until ``stop``."""
    done: list[int] = []

    def run(key: str, mix: list[tuple[str, dict]]) -> None:
        with httpx.Client(headers={"authorization": f"Bearer {key}"}, timeout=30) as http:
            n = 0
            while not stop.is_set():
                model, extra = mix[n % len(mix)]
                http.post(url + "/v1/chat/completions", json=_body(model, n, **extra))
                n += 1
                done.append(n)

    threads = [threading.Thread(target=run, args=(TEST_KEY, MIX)),
               threading.Thread(target=run, args=(OTHER_KEY, [("fast", STREAM)]))]
    for t in threads:
        t.start()
    try:
        yield done
    finally:
        stop.set()
        for t in threads:
            t.join(30)


def ui_config(sim: str) -> dict:
    config = base_config(sim, routing={"auto_policy": "cheapest"})
    config["models"] += [sim_model("small", 0.5, 0.1, invalid_json_rate=0.5, error_rate=0.2),
                         sim_model("medium", 0.7, 1.0), sim_model("large", 0.9, 5.0)]
    config["teams"][0]["allowed_models"] = ["small", "medium", "large", "fast", "local", "broken"]
    config["teams"][0]["budget"] = {"daily_hard_usd": 0.05}
    config["breaker"] = {"consecutive_failures": 2, "cooldown_s": 600}
    return config


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    driver = headless_chromium()
    yield driver
    driver.quit()


def _js_fixed(v: float, digits: int) -> str:
    """``Number.prototype.toFixed`` (and ``Math.round`` for 0 digits) of a figure >= 0:
    the double's exact value, a tie rounded up. Python's format rounds a tie
    to even (0.125 -> "0.12" where JavaScript shows "0.13")."""
    exact = Decimal(v).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return f"{exact:.{digits}f}"


def _expected(overview: dict) -> dict[str, str]:
    """The text each ``data-k`` cell must show, formatted as ui.js does."""
    usd = lambda v: "-" if v is None else f"${_js_fixed(v, 4)}"          # noqa: E731
    ms = lambda v: "-" if v is None else f"{_js_fixed(v * 1000, 0)} ms"  # noqa: E731
    pct = lambda v: "-" if v is None else f"{_js_fixed(v * 100, 1)}%"    # noqa: E731
    out = {}
    for r in overview["routing"]:
        k = f"routing|{r['pool']}|{r['model']}|{r['reason']}"
        out[k + "|requests"], out[k + "|share"] = str(r["requests"]), pct(r["share"])
    for m in overview["models"]:
        k = f"models|{m['pool']}|{m['model']}"
        for column in ("requests", "client_errors", "rate_limited", "errors"):
            out[f"{k}|{column}"] = str(m[column])
        out[k + "|ttft_p50_s"], out[k + "|ttft_p95_s"] = ms(m["ttft_p50_s"]), ms(m["ttft_p95_s"])
        out[k + "|tpot_p95_s"] = ms(m["tpot_p95_s"])
        out[k + "|slo_attainment"] = pct(m["slo_attainment"])
    for t in overview["teams"]:
        k = f"teams|{t['team']}"
        out[k + "|spent_today_usd"] = usd(t["spent_today_usd"])
        out[k + "|daily_limit_usd"] = usd(t["daily_limit_usd"])
        out[k + "|remaining_usd"] = usd(t["remaining_usd"])
    for kind in ("escalations", "fallbacks"):
        out.update({f"{kind}|{reason}": str(n) for reason, n in overview[kind].items()})
    out.update({f"breakers|{m}": state for m, state in overview["breakers"].items()})
    for m in overview["now"]:
        for column in ("in_flight", "queued_interactive", "queued_batch"):
            out[f"now|{m['model']}|{column}"] = str(m[column])
    return out


def _drawn(values: list) -> bool:
    return any(v is not None for v in values)


def _expected_series(history: dict) -> dict[str, set[str]]:
    """The series each chart must draw (a legend entry and a path each), as history.js
    names them: only those with a figure in the hour."""
    requests = {f"{r['model']} {r['class']}" for r in history["requests"] if _drawn(r["counts"])}
    quantiles = {kind: {f"{r['model']} {q}" for r in history[kind] if r["pool"] == "interactive"
                        for q in ("p50", "p95") if _drawn(r[f"{q}_s"])}
                 for kind in ("ttft", "tpot")}
    load = ({f"{q['model']} queued ({q['pool']})" for q in history["queue"]}
            | {f"{f['model']} in flight" for f in history["in_flight"]})
    reasons = {name for name, key in (("escalation rate", "escalation_rate"),
                                      ("fallback rate", "fallback_rate")) if _drawn(history[key])}
    return {"chart-requests": requests, "chart-ttft": quantiles["ttft"],
            "chart-tpot": quantiles["tpot"], "chart-load": load,
            "chart-spend": {t["team"] for t in history["spend"] if _drawn(t["spent_today_usd"])},
            "chart-reasons": reasons,
            "chart-cache": {f"{r['model']} prefix-cache hits" for r in history["cache_hit_rate"]
                            if _drawn(r["rate"])}}


# Read in one script, so the page's re-render every 3 s cannot replace an element
# half-way through (element by element, a loaded host took longer than that).
READ_CHARTS = """
return [...document.querySelectorAll("[id^='chart-']")].map(box => [box.id,
    [...box.querySelectorAll(".legend .key")].map(e => e.getAttribute("data-series")),
    [...box.querySelectorAll("path[data-series]")].map(e => e.getAttribute("data-series"))]);"""
READ_CELLS = """
return [...document.querySelectorAll("[data-k]")].map(e => [e.dataset.k, e.textContent.trim()]);"""


def _charts(driver) -> dict[str, tuple[set[str], set[str]]]:
    """Per chart: the legend's series and the paths' series."""
    return {name: (set(legend), set(paths))
            for name, legend, paths in driver.execute_script(READ_CHARTS)}


def waiting(driver, seconds: float) -> WebDriverWait:
    """A wait that looks again when a submit or a refresh replaced the element
    it found (a form submit loads a new document; the page re-renders every 3 s)."""
    return WebDriverWait(driver, seconds, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException))


def _shown(driver) -> dict[str, str]:
    def read(d) -> dict[str, str]:
        return dict(d.execute_script(READ_CELLS))
    return waiting(driver, 10).until(read)


def _next_refresh(driver, after: float) -> None:
    waiting(driver, 20).until(lambda d: float(
        d.find_element(By.ID, "updated").get_attribute("data-generated") or 0) > after)


def _sign_in_denied_then_throttled(driver, url: str, failures_key: str) -> None:
    """A wrong key shows #denied; ten more wrong keys from this address show #throttled."""
    key = waiting(driver, 10).until(
        lambda d: d.find_element(By.NAME, "key") if d.find_element(
            By.ID, "login").is_displayed() else None)
    assert key.get_attribute("type") == "password"
    key.send_keys("sk-not-the-admin-key")
    key.submit()
    waiting(driver, 10).until(lambda d: d.find_element(By.ID, "denied").is_displayed())
    assert "sk-" not in driver.current_url
    for n in range(10):
        httpx.post(url + "/ui/login", data={"key": f"sk-guess-{n}"})
    key = driver.find_element(By.NAME, "key")
    key.send_keys(ADMIN_KEY)      # even the right key waits out the window
    key.submit()
    waiting(driver, 10).until(lambda d: d.find_element(By.ID, "throttled").is_displayed())
    assert not driver.find_element(By.ID, "denied").is_displayed()
    store = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    store.delete(failures_key)    # the window over
    store.close()


def test_operator_page(browser) -> None:
    driver = browser
    with run_simulator() as sim:
        config = ui_config(sim)
        failures_key = f"{config['budget']['key_prefix']}:admin-failures:127.0.0.1"
        with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as gw:
            stop = threading.Event()
            with load(gw.url, stop) as done:
                driver.get(gw.url + "/ui")
                _sign_in_denied_then_throttled(driver, gw.url, failures_key)
                key = driver.find_element(By.NAME, "key")
                key.send_keys(ADMIN_KEY)
                key.submit()
                waiting(driver, 10).until(lambda d: d.find_element(By.ID, "app").is_displayed())
                assert ADMIN_KEY not in driver.current_url
                cookie = driver.get_cookie("routegate_ui")
                assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
                assert ADMIN_KEY not in cookie["value"]
                assert driver.execute_script("return document.cookie") == ""
                # It refreshes by itself while requests keep coming.
                first = float(driver.find_element(By.ID, "updated").get_attribute("data-generated"))
                _next_refresh(driver, first)
                assert len(done) > 0
            # Load over: wait out the live figures' cache and the history's last write,
            # then one more refresh.
            time.sleep(max(5.5, HISTORY_FLUSH_S + 1))
            _next_refresh(driver, time.time())
            overview = httpx.get(gw.url + "/admin/overview",
                                 headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
            shown, expected = _shown(driver), _expected(overview)
            assert shown == expected
            assert any(k.startswith("routing|") for k in shown)
            assert shown["breakers|broken"] == "open"
            assert {"teams|test|spent_today_usd", "teams|other|spent_today_usd"} <= set(shown)
            assert any(k.startswith("escalations|") for k in shown)
            assert any(k.startswith("fallbacks|") for k in shown)
            # The last hour's charts, from /admin/history (Redis), series by series.
            history = httpx.get(gw.url + "/admin/history",
                                headers={"authorization": f"Bearer {ADMIN_KEY}"}).json()
            assert len(history["minutes"]) == 60
            heading, saved = driver.execute_script(
                'return [document.querySelector("#history h2").textContent,'
                ' document.getElementById("cache-saved").textContent];')
            assert heading.startswith("The last hour, per minute")
            assert saved.startswith("Saved by caches in the last hour: $")
            charts, wanted = _charts(driver), _expected_series(history)
            assert {name: legend for name, (legend, _) in charts.items()} == wanted
            assert all(legend == paths for legend, paths in charts.values())
            for chart in ("chart-requests", "chart-ttft", "chart-tpot", "chart-spend",
                          "chart-reasons"):
                assert wanted[chart], chart            # the load drew each of these
            assert {"fast 2xx", "broken 5xx"} <= wanted["chart-requests"]
            # A long batch id is cut to fit: the batches' table stays inside its box.
            fits = driver.execute_script("""
                const o = arguments[0];
                render({...o, batches: [{id: "batch_" + "0123456789abcdef".repeat(6),
                        team: "test", status: "in_progress", total: 9, completed: 1, failed: 0}]});
                const box = document.querySelector("#batches").closest("section");
                return [box.scrollWidth <= box.clientWidth,
                        document.querySelector("#batches .id").title.length];""", overview)
            assert fits == [True, 6 + 96]
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(str(ARTIFACTS / "ui.png"))
            # Without the cookie the JSON is closed.
            assert httpx.get(gw.url + "/admin/overview").status_code == 401
            # Signing out ends the session itself: the old cookie opens nothing.
            with_cookie = {"routegate_ui": cookie["value"]}
            assert httpx.get(gw.url + "/admin/overview", cookies=with_cookie).status_code == 200
            driver.find_element(By.CSS_SELECTOR, "form[action='/ui/logout'] button").click()
            waiting(driver, 10).until(lambda d: d.find_element(By.ID, "login").is_displayed())
            assert driver.get_cookie("routegate_ui") is None
            assert httpx.get(gw.url + "/admin/overview", cookies=with_cookie).status_code == 401
