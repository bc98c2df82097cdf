"""The edge, over raw sockets against a real gateway: the key before the body,
a cap on every route's body, and a deadline on every body.

A request without a valid key is answered 401 (``connection: close``) as soon
as its head is in, while the client is still trying to send 300 MB; a body
over its route's cap is a 413 before it is read (declared) or as it passes the
cap (chunked); a body that has not arrived within ``--body-timeout`` is a 408,
while other clients are served.
"""

from __future__ import annotations

import json
import resource
import select
import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.test_header_limits import closed_by_server, connect, read_response, rss_bytes
from tests.support import TEST_KEY, Gateway, base_config, run_gateway

ADMIN_KEY = "sk-admin-edge-body-0123456789"
MAX_FILE_BYTES = 4096
FILE_CAP = MAX_FILE_BYTES + 64 * 1024        # the file plus the multipart overhead
BODY_TIMEOUT_S = 1.5
HEADER_TIMEOUT_S = 1.0                       # deadlines are checked every 0.25 s
CHUNK = b"x" * 65536


def edge_config(sim_url: str) -> dict:
    return base_config(sim_url, batch={"key_prefix": f"rgbtest-{uuid.uuid4().hex[:8]}",
                                       "max_file_bytes": MAX_FILE_BYTES})


@pytest.fixture(scope="module")
def gw(sim_url: str) -> Iterator[Gateway]:
    with run_gateway(edge_config(sim_url), env={"ROUTEGATE_ADMIN_KEY": ADMIN_KEY},
                     serve_args=("--body-timeout", str(BODY_TIMEOUT_S),
                                 "--upload-timeout", str(BODY_TIMEOUT_S),
                                 "--header-timeout", str(HEADER_TIMEOUT_S))) as gateway:
        yield gateway


def request_head(method: str, path: str, *, length: int | None = None,
                 auth: str | None = None, chunked: bool = False,
                 content_type: str = "application/json") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: t", f"content-type: {content_type}"]
    if auth is not None:
        lines.append(f"authorization: {auth}")
    if length is not None:
        lines.append(f"content-length: {length}")
    if chunked:
        lines.append("transfer-encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def readable(sock: socket.socket, wait_s: float = 0.01) -> bool:
    return bool(select.select([sock], [], [], wait_s)[0])


def push_until_answered(sock: socket.socket, chunk: bytes, most: int) -> int:
    """Send ``chunk`` after ``chunk`` until the server answers (or stops taking
    bytes); return how many bytes went out."""
    sent = 0
    while sent < most and not readable(sock):
        try:
            sock.sendall(chunk)
        except OSError:       # the server closed: its answer is already here
            break
        sent += len(chunk)
    return sent


def error_of(body: bytes) -> dict:
    data = json.loads(body)
    assert set(data) == {"error"} and set(data["error"]) == {"message", "type", "param", "code"}
    return data["error"]


# --- the key before the body -----------------------------------------------------------

REFUSING_ROUTES = [("POST", "/v1/batches"), ("POST", "/v1/files"),
                   ("PUT", "/admin/teams/test/limits"), ("POST", "/v1/chat/completions"),
                   ("POST", "/admin/reload")]


@pytest.mark.parametrize(("method", "path"), REFUSING_ROUTES)
@pytest.mark.parametrize("auth", [None, "Bearer sk-not-a-key"], ids=["no-key", "wrong-key"])
def test_a_huge_body_without_a_valid_key_is_refused_before_it_is_read(
        gw: Gateway, method: str, path: str, auth: str | None) -> None:
    rss_before = rss_bytes(gw.proc.pid)
    with connect(gw) as sock:
        started = time.monotonic()
        sock.sendall(request_head(method, path, length=300_000_000, auth=auth))
        sent = push_until_answered(sock, CHUNK, 64 * 1024 * 1024)
        status, headers, body = read_response(sock)
        answered_s = time.monotonic() - started
        assert status == 401, body
        assert headers["connection"] == "close"
        assert headers["x-request-id"]
        assert error_of(body)["type"] == "authentication_error"
        assert closed_by_server(sock, 3)
    # Answered from the head: only what sat in socket buffers went out.
    assert sent < 8 * 1024 * 1024, f"{sent} bytes went out before the 401"
    assert answered_s < 1.0
    growth = rss_bytes(gw.proc.pid) - rss_before
    assert growth < 8 * 1024 * 1024, f"the gateway grew by {growth >> 20} MiB"


def test_a_client_that_sends_before_it_reads_still_gets_the_401(gw: Gateway) -> None:
    """httpx writes the whole body before it reads; the gateway closes after its
    401 without reading, and httpx reads the 401 all the same."""
    r = httpx.post(gw.base_url + "/batches", content=b"x" * (32 * 1024 * 1024), timeout=30)
    assert r.status_code == 401
    assert r.headers["connection"] == "close"
    assert error_of(r.content)["code"] == "missing_api_key"


# --- caps ---------------------------------------------------------------------------------

CAPPED = [  # method, path, authorization, the route's cap
    ("POST", "/v1/batches", f"Bearer {TEST_KEY}", 64 * 1024),
    ("PUT", "/admin/teams/test/limits", f"Bearer {ADMIN_KEY}", 64 * 1024),
    ("POST", "/ui/login", None, 4 * 1024),
    ("POST", "/v1/files", f"Bearer {TEST_KEY}", FILE_CAP),
    ("POST", "/v1/chat/completions", f"Bearer {TEST_KEY}", 65536),   # max_body_bytes
    ("GET", "/healthz", None, 64 * 1024),
    ("POST", "/v1/no-such-route", None, 64 * 1024),
]


@pytest.mark.parametrize(("method", "path", "auth", "cap"), CAPPED)
def test_a_declared_body_over_the_cap_is_413_before_it_is_read(
        gw: Gateway, method: str, path: str, auth: str | None, cap: int) -> None:
    with connect(gw) as sock:
        sock.sendall(request_head(method, path, length=cap + 1, auth=auth))
        assert readable(sock, 2.0), "no answer to the head alone"
        status, headers, body = read_response(sock)
        assert status == 413, body
        assert headers["connection"] == "close"
        assert error_of(body)["code"] == "request_too_large"
        assert closed_by_server(sock, 3)


@pytest.mark.parametrize(("method", "path", "auth", "cap"),
                         [c for c in CAPPED if c[1] in ("/v1/batches", "/ui/login", "/v1/files")])
def test_a_chunked_body_is_413_as_soon_as_it_passes_the_cap(
        gw: Gateway, method: str, path: str, auth: str | None, cap: int) -> None:
    with connect(gw) as sock:
        upload = path == "/v1/files"
        sock.sendall(request_head(method, path, auth=auth, chunked=True,
                                  content_type="multipart/form-data; boundary=b"
                                  if upload else "application/json"))
        if upload:
            part = b'--b\r\ncontent-disposition: form-data; name="file"; filename="a.jsonl"\r\n\r\n'
            sock.sendall(b"%x\r\n%s\r\n" % (len(part), part))
        piece = b"%x\r\n%s\r\n" % (4096, b"y" * 4096)
        sent = push_until_answered(sock, piece, cap + 8 * 1024 * 1024)
        status, headers, body = read_response(sock)
        assert status == 413, body
        assert error_of(body)["code"] == "request_too_large"
        assert closed_by_server(sock, 3)
    assert sent < cap + 8 * 1024 * 1024, f"{sent} bytes went out before the 413"


def test_bodies_within_the_caps_still_reach_their_routes(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=30)
    with pytest.raises(openai.NotFoundError) as info:       # parsed, then looked up
        client.batches.create(input_file_id="file-nope", endpoint="/v1/chat/completions",
                              completion_window="24h", metadata={"pad": "a" * 400})
    assert info.value.body["param"] == "input_file_id"      # type: ignore[index]
    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    r = httpx.put(gw.url + "/admin/teams/test/limits", json={"rpm": 5000}, headers=admin)
    assert r.status_code == 200 and r.json()["override"] == {"rpm": 5000}
    assert httpx.delete(gw.url + "/admin/teams/test/limits", headers=admin).status_code == 200
    r = httpx.post(gw.url + "/ui/login", data={"key": ADMIN_KEY})
    assert r.status_code == 303 and r.headers["location"] == "/ui"
    with pytest.raises(openai.APIStatusError) as big:      # files.py's own cap, past the edge
        client.files.create(file=("big.jsonl", b"x" * (MAX_FILE_BYTES + 1)), purpose="batch")
    assert big.value.status_code == 413


# --- deadlines ----------------------------------------------------------------------------

SLOW = [  # route, authorization: each gets its head and a few body bytes, then nothing
    ("POST", "/v1/chat/completions", f"Bearer {TEST_KEY}"),
    ("POST", "/v1/batches", f"Bearer {TEST_KEY}"),
    ("PUT", "/admin/teams/test/limits", f"Bearer {ADMIN_KEY}"),
    ("POST", "/ui/login", None),
    ("POST", "/v1/files", f"Bearer {TEST_KEY}"),
]


def open_slow(gw: Gateway, method: str, path: str, auth: str | None, body_bytes: int) -> socket.socket:
    sock = connect(gw)
    kind = "multipart/form-data; boundary=b" if path == "/v1/files" else "application/json"
    sock.sendall(request_head(method, path, length=1000, auth=auth, content_type=kind)
                 + b"-" * body_bytes)
    return sock


def wait_all_answered(socks: list[socket.socket], timeout: float) -> dict[socket.socket, float]:
    """When each socket became readable (seconds from now), within ``timeout``."""
    started, when = time.monotonic(), {}
    pending = list(socks)
    while pending and time.monotonic() - started < timeout:
        for sock in select.select(pending, [], [], 0.05)[0]:
            when[sock] = time.monotonic() - started
            pending.remove(sock)
    return when


def request_log(gw: Gateway) -> list[dict]:
    path = Path(gw.config_path).parent / "data" / "logs" / "requests.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_slow_bodies_are_cut_at_the_deadline_while_others_are_served(gw: Gateway) -> None:
    unauthenticated = [open_slow(gw, "POST", "/v1/batches" if i % 2 else "/v1/chat/completions",
                                 None, 4) for i in range(100)]
    slow = [open_slow(gw, *SLOW[i % len(SLOW)], body_bytes=i % 3) for i in range(100)]
    opened = time.monotonic()
    try:
        # Refused at once: no key, so the body is not waited for.
        answered = wait_all_answered(unauthenticated, 2.0)
        assert len(answered) == len(unauthenticated)
        for sock in unauthenticated:
            status, headers, _ = read_response(sock)
            assert status == 401 and headers["connection"] == "close"
            assert closed_by_server(sock, 2)
        # Meanwhile the gateway serves everyone else.
        client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=5)
        started = time.monotonic()
        reply = client.chat.completions.create(
            model="fast", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert reply.choices[0].message.content
        assert time.monotonic() - started < 1.0
        assert time.monotonic() - opened < BODY_TIMEOUT_S, "too slow to test the deadline"
        assert not any(readable(sock, 0) for sock in slow), "a slow body was cut early"
        # Then each slow body is cut, with a 408, within a check period of its deadline.
        answered = wait_all_answered(slow, BODY_TIMEOUT_S + 3)
        assert len(answered) == len(slow)
        for sock in slow:
            status, headers, body = read_response(sock)
            assert status == 408, body
            assert headers["connection"] == "close"
            assert error_of(body) == {
                "message": f"The request body did not arrive within {BODY_TIMEOUT_S:g} s.",
                "type": "invalid_request_error", "param": None, "code": "request_timeout"}
            assert closed_by_server(sock, 3)
        late = time.monotonic() - opened
        assert late < BODY_TIMEOUT_S + 2.0, f"cut only after {late:.2f} s"
    finally:
        for sock in unauthenticated + slow:
            sock.close()
    # The chat route reports its slow bodies as 408s, not as clients that left
    # (the app hears of the cut when the socket closes, a linger after the 408).
    expected = sum(1 for i in range(100) if SLOW[i % len(SLOW)][1] == "/v1/chat/completions")
    deadline = time.monotonic() + 5
    cut: list[dict] = []
    while len(cut) < expected and time.monotonic() < deadline:
        time.sleep(0.2)
        cut = [e for e in request_log(gw) if e.get("status") == 408]
    assert len(cut) == expected
    assert {e["error_code"] for e in cut} == {"request_timeout"}


def test_a_dripping_body_does_not_move_the_deadline(gw: Gateway) -> None:
    with connect(gw) as sock:
        sock.sendall(request_head("POST", "/v1/batches", length=1000, auth=f"Bearer {TEST_KEY}"))
        started = time.monotonic()
        while not readable(sock, 0.2):
            sock.sendall(b" ")
        cut_after = time.monotonic() - started
        status, _, _ = read_response(sock)
    assert status == 408
    assert BODY_TIMEOUT_S * 0.9 < cut_after < BODY_TIMEOUT_S + 1.0, cut_after


def test_a_response_longer_than_the_body_deadline_completes(gw: Gateway) -> None:
    # ignore_eos: exactly 10 tokens at 200 ms (about 2 s); a random shorter answer
    # could end inside the deadline and prove nothing (it did once, in 1.0 s).
    body = {"model": "slowpoke", "messages": [{"role": "user", "content": "go on"}],
            "max_tokens": 10, "stream": True, "ignore_eos": True}
    started = time.monotonic()
    with httpx.stream("POST", gw.base_url + "/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {TEST_KEY}"}) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert time.monotonic() - started > BODY_TIMEOUT_S
    assert lines[-1] == "data: [DONE]"


# --- descriptors --------------------------------------------------------------------------

def test_the_open_file_limit_is_raised_at_start_up(sim_url: str) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 256)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))    # the gateway inherits it
    try:
        with run_gateway(base_config(sim_url)) as gateway:
            limits = Path(f"/proc/{gateway.proc.pid}/limits").read_text()
            log = gateway.log()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    row = next(line for line in limits.splitlines() if line.startswith("Max open files"))
    assert row.split()[3] == str(hard), row
    assert f"open files: soft limit {hard} (was {low})" in log
