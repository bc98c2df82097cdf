"""The admin side of the edge against real gateways and the real Redis: /ui
sessions that expire and end, the throttle on wrong admin keys (shared by
replicas), the admin key's config checks, a cached /readyz, and the team key
in the headers the Anthropic and Azure SDKs send (issue 18).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from tests.support import REPO, TEST_KEY, Gateway, base_config, child_env, run_gateway

ADMIN_KEY = "sk-admin-edge-0123456789abcdef"
COOKIE = "routegate_ui"
ASK = {"model": "fast", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


class CountingUpstream(BaseHTTPRequestHandler):
    """A real HTTP upstream that answers ``GET /v1/models`` and counts the calls."""

    hits = 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # http.server's naming
        with self.lock:
            type(self).hits += 1
        body = b'{"object": "list", "data": []}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), CountingUpstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def config(sim_url: str, upstream: str) -> dict:
    config = base_config(sim_url, metrics={"require_admin_key": True},
                         batch={"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}"})
    config["models"].append({"name": "counted", "backend": "openai_compat", "base_url": upstream,
                             "upstream_model": "x",
                             "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}})
    return config


@pytest.fixture(scope="module")
def gw(config: dict) -> Iterator[Gateway]:
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as gateway:
        yield gateway


@pytest.fixture
def store(config: dict) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    yield client
    client.delete(f"{config['budget']['key_prefix']}:admin-failures:127.0.0.1")
    client.close()


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def login(gw: Gateway, key: str = ADMIN_KEY, **headers: str) -> httpx.Response:
    return httpx.post(gw.url + "/ui/login", data={"key": key}, headers=headers)


def overview(gw: Gateway, sid: str) -> int:
    return httpx.get(gw.url + "/admin/overview", cookies={COOKIE: sid}).status_code


def session_keys(store: redis.Redis, config: dict) -> list[bytes]:
    return list(store.scan_iter(f"{config['budget']['key_prefix']}:ui-session:*"))


# --- /ui sessions -----------------------------------------------------------------------

def test_a_session_is_random_lives_in_redis_and_ends_at_logout(
        gw: Gateway, config: dict, store: redis.Redis) -> None:
    first, second = login(gw), login(gw)
    assert first.status_code == second.status_code == 303
    sid, other = first.cookies[COOKIE], second.cookies[COOKIE]
    assert sid != other and len(sid) >= 43                    # 256 random bits each
    set_cookie = first.headers["set-cookie"].lower()
    assert "httponly" in set_cookie and "samesite=strict" in set_cookie
    assert "max-age=43200" in set_cookie
    assert overview(gw, sid) == 200 and overview(gw, other) == 200
    # Redis holds the ids hashed, for 12 hours.
    keys = session_keys(store, config)
    assert len(keys) == 2
    assert not any(sid.encode() in k or other.encode() in k for k in keys)
    assert all(43_190 <= store.ttl(k) <= 43_200 for k in keys)
    logout = httpx.post(gw.url + "/ui/logout", cookies={COOKIE: sid})
    assert logout.status_code == 303
    assert f'{COOKIE}=""' in logout.headers["set-cookie"]
    assert overview(gw, sid) == 401                           # the old cookie opens nothing
    assert overview(gw, other) == 200                         # another session lives on
    assert len(session_keys(store, config)) == 1
    # Neither a made-up id nor the old fixed HMAC of the admin key is a session.
    old_style = hmac.new(ADMIN_KEY.encode(), b"routegate-ui-session", hashlib.sha256).hexdigest()
    assert overview(gw, old_style) == 401 and overview(gw, "x" * 43) == 401
    httpx.post(gw.url + "/ui/logout", cookies={COOKIE: other})
    assert session_keys(store, config) == []


def test_an_expired_session_opens_nothing(gw: Gateway, config: dict, store: redis.Redis) -> None:
    sid = login(gw).cookies[COOKIE]
    assert overview(gw, sid) == 200
    (key,) = session_keys(store, config)
    store.pexpire(key, 300)          # the 12 hours, shortened
    time.sleep(0.4)
    assert overview(gw, sid) == 401


def test_a_changed_admin_key_ends_sessions_and_a_short_one_is_warned_about(
        config: dict, store: redis.Redis) -> None:
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as before:
        sid = login(before).cookies[COOKIE]
        assert overview(before, sid) == 200
        assert "ROUTEGATE_ADMIN_KEY is only" not in before.log()
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": "b"}) as after:
        assert overview(after, sid) == 401
        assert httpx.get(after.url + "/admin/teams", headers=bearer("b")).status_code == 200
        assert "ROUTEGATE_ADMIN_KEY is only 1 characters long" in after.log()
    for key in session_keys(store, config):
        store.delete(key)


def test_an_empty_admin_key_env_is_a_config_error(tmp_path: Path, config: dict) -> None:
    path = tmp_path / "routegate.yaml"
    path.write_text(yaml.safe_dump({**config, "admin_key_env": "", "data_dir": str(tmp_path)}))
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config", str(path),
                           "--port", "1"], env=child_env(), cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert "admin_key_env" in done.stderr


# --- the throttle -------------------------------------------------------------------------

def test_wrong_admin_keys_are_throttled_per_address_across_replicas(
        gw: Gateway, config: dict, store: redis.Redis) -> None:
    with run_gateway(config, env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY}) as replica:
        # Ten wrong keys, spread over two replicas: each is an honest 401.
        statuses = [httpx.get((gw, replica)[i % 2].url + "/admin/teams",
                              headers=bearer(f"sk-guess-{i}")).status_code for i in range(10)]
        assert statuses == [401] * 10
        # The eleventh is refused as a guess too many, on either replica.
        r = httpx.get(gw.url + "/admin/teams", headers=bearer("sk-guess-10"))
        assert r.status_code == 429
        assert r.json()["error"]["code"] == "rate_limit_exceeded"
        assert r.json()["error"]["type"] == "rate_limit_error"
        assert 1 <= int(r.headers["retry-after"]) <= 60
        assert r.headers["connection"] == "close"
        # Now even the right key waits: a right guess must not slip through.
        assert httpx.get(replica.url + "/admin/teams", headers=bearer(ADMIN_KEY)).status_code == 429
        assert httpx.get(gw.url + "/metrics", headers=bearer(ADMIN_KEY)).status_code == 429
        form = login(gw, "sk-guess-11", accept="text/html,application/xhtml+xml")
        assert form.status_code == 303 and form.headers["location"] == "/ui#throttled"
        assert 1 <= int(form.headers["retry-after"]) <= 60
        assert login(replica).status_code == 429          # a script that does not ask for HTML
        started = time.monotonic()
        assert {httpx.get(gw.url + "/admin/teams", headers=bearer(f"sk-{i}")).status_code
                for i in range(30)} == {429}
        assert time.monotonic() - started < 10
        # The window over (here: its key removed), the right key works again.
        store.delete(f"{config['budget']['key_prefix']}:admin-failures:127.0.0.1")
        assert httpx.get(replica.url + "/admin/teams", headers=bearer(ADMIN_KEY)).status_code == 200
        assert login(gw).headers["location"] == "/ui"


def test_a_rotated_x_forwarded_for_is_not_a_new_address(gw: Gateway, store: redis.Redis,
                                                        config: dict) -> None:
    """From a peer no --trusted-proxies names, x-forwarded-for is ignored: eleven
    guesses each claiming a new address are eleven from the TCP peer, and throttled."""
    statuses = [httpx.get(gw.url + "/admin/teams", timeout=10,
                          headers={**bearer(f"sk-guess-{i}"),
                                   "x-forwarded-for": f"198.51.100.{i}"}).status_code
                for i in range(11)]
    assert statuses == [401] * 10 + [429]
    assert store.exists(f"{config['budget']['key_prefix']}:admin-failures:127.0.0.1")
    assert not store.keys(f"{config['budget']['key_prefix']}:admin-failures:198.51.100.*")
    store.delete(f"{config['budget']['key_prefix']}:admin-failures:127.0.0.1")


def test_a_request_without_a_key_is_not_a_guess(gw: Gateway, store: redis.Redis) -> None:
    for _ in range(15):
        assert httpx.get(gw.url + "/admin/teams").status_code == 401
        assert httpx.get(gw.url + "/metrics").status_code == 401
    assert httpx.get(gw.url + "/admin/teams", headers=bearer(ADMIN_KEY)).status_code == 200


# --- /readyz ------------------------------------------------------------------------------

def test_a_flood_of_readyz_probes_each_upstream_once(gw: Gateway) -> None:
    async def flood(n: int) -> set[int]:
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
            replies = await asyncio.gather(*(client.get("/readyz") for _ in range(n)))
        return {r.status_code for r in replies}

    time.sleep(2.1)                      # any earlier probe has gone stale
    before = CountingUpstream.hits
    started = time.monotonic()
    assert asyncio.run(flood(100)) == {200}
    assert time.monotonic() - started < 2.0, "the flood outlasted the cache; cannot judge"
    assert CountingUpstream.hits - before == 1
    time.sleep(2.1)                      # stale again: the next request probes once more
    ready = httpx.get(gw.url + "/readyz").json()
    assert ready["upstreams"]["counted"] is True and ready["breakers"]["counted"] == "closed"
    assert CountingUpstream.hits - before == 2


# --- issue 18: the Anthropic and Azure key headers ------------------------------------------

@pytest.mark.parametrize("header", ["authorization", "x-api-key", "api-key"])
def test_a_team_key_works_in_each_sdk_header(gw: Gateway, header: str) -> None:
    headers = {header: f"Bearer {TEST_KEY}" if header == "authorization" else TEST_KEY}
    r = httpx.post(gw.base_url + "/chat/completions", json=ASK, headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"]
    assert httpx.get(gw.base_url + "/models", headers=headers).status_code == 200
    usage = httpx.get(gw.base_url + "/usage", headers=headers)
    assert usage.status_code == 200 and usage.json()["team"] == "test"


@pytest.mark.parametrize("header", ["x-api-key", "api-key"])
def test_a_wrong_key_in_those_headers_is_401_and_admin_wants_a_bearer(
        gw: Gateway, header: str) -> None:
    r = httpx.post(gw.base_url + "/chat/completions", json=ASK, headers={header: "sk-wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    r = httpx.get(gw.url + "/admin/teams", headers={header: ADMIN_KEY})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_admin_key"
