"""Request heads are capped in size (431) and in time (slowloris), over raw sockets."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support import TEST_KEY, Gateway, base_config, run_gateway

HEADER_TIMEOUT_S = 1.0
CAP = 32 * 1024               # the default --max-header-bytes
HUGE_START = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-huge: "


@pytest.fixture(scope="module")
def gw(sim_url: str) -> Iterator[Gateway]:
    """A gateway with the default size cap and a short head deadline."""
    with run_gateway(base_config(sim_url),
                     serve_args=("--header-timeout", str(HEADER_TIMEOUT_S))) as gateway:
        yield gateway


def connect(gw: Gateway) -> socket.socket:
    url = urlsplit(gw.url)
    return socket.create_connection((url.hostname, url.port), timeout=10)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response with a content-length: status, lower-cased headers, body.

    Reads byte-exactly (an unbuffered file), so a pipelined next response stays unread.
    """
    stream = sock.makefile("rb", buffering=0)
    status_line = stream.readline()
    assert status_line, "connection closed before the response"
    headers = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    body = b""
    while len(body) < int(headers["content-length"]):
        chunk = stream.read(int(headers["content-length"]) - len(body))
        assert chunk, "connection closed mid-body"
        body += chunk
    return int(status_line.split()[1]), headers, body


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """Whether the server closes the connection within ``timeout`` (reading and dropping)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        if select.select([sock], [], [], left)[0]:
            try:
                if not sock.recv(65536):
                    return True
            except ConnectionResetError:
                return True
    return False


# --- size -------------------------------------------------------------------------------

def test_megabyte_header_gets_431_before_it_is_sent(gw: Gateway) -> None:
    sock = connect(gw)
    sock.sendall(HUGE_START)
    sent, answered, started = 0, False, time.monotonic()
    while sent < 1024 * 1024 and not answered:
        sock.sendall(b"a" * 16384)
        sent += 16384
        answered = bool(select.select([sock], [], [], 0.01)[0])
    assert answered, "the server read a 1 MB header without answering"
    assert sent < 512 * 1024, f"answered only after {sent} bytes"
    status, headers, body = read_response(sock)
    assert time.monotonic() - started < 1.0
    assert status == 431
    assert headers["connection"] == "close"
    assert headers["content-type"] == "application/json"
    assert json.loads(body) == {"error": {
        "message": f"Request line and headers exceed {CAP} bytes.",
        "type": "invalid_request_error", "param": None,
        "code": "request_header_fields_too_large"}}
    assert closed_by_server(sock, 3)


def test_header_just_under_the_cap_is_served(gw: Gateway) -> None:
    with connect(gw) as sock:
        pad = CAP - len(HUGE_START) - 200
        sock.sendall(HUGE_START + b"a" * pad + b"\r\n\r\n")
        status, _, body = read_response(sock)
    assert status == 200, body


def test_body_in_the_same_write_as_the_head_is_not_counted(gw: Gateway) -> None:
    body = b"x" * (CAP + 8192)     # head well under the cap, head + body well over it
    request = b"GET /healthz HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n" % len(body)
    with connect(gw) as sock:
        sock.sendall(request + body + b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        assert read_response(sock)[0] == 200
        assert read_response(sock)[0] == 200, "the body was not consumed as a body"


def test_oversized_pipelined_head_waits_for_the_response_in_flight(gw: Gateway) -> None:
    body = json.dumps({"model": "slowpoke", "max_tokens": 4,
                       "messages": [{"role": "user", "content": "go on"}]}).encode()
    slow = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: t\r\ncontent-type: application/json"
            b"\r\nauthorization: Bearer %s\r\ncontent-length: %d\r\n\r\n%s"
            % (TEST_KEY.encode(), len(body), body))
    with connect(gw) as sock:
        sock.sendall(slow)
        time.sleep(0.2)     # the slow answer is under way
        sock.sendall(HUGE_START + b"a" * CAP)
        status, headers, answer = read_response(sock)
        assert status == 200, answer
        assert json.loads(answer)["choices"][0]["message"]["content"]
        try:
            rest = sock.recv(65536)
        except ConnectionResetError:
            rest = b""
    assert rest == b"", "a 431 was written after the response, on a connection it did not own"


# --- time -------------------------------------------------------------------------------

def test_one_byte_at_a_time_is_dropped_after_the_deadline(gw: Gateway) -> None:
    with connect(gw) as sock:
        started = time.monotonic()
        head = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-slow: " + b"a" * 100
        for byte in head:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            if closed_by_server(sock, 0.2):
                break
        elapsed = time.monotonic() - started
    assert HEADER_TIMEOUT_S * 0.9 < elapsed < HEADER_TIMEOUT_S + 1.5, elapsed


def test_silent_connection_is_dropped(gw: Gateway) -> None:
    with connect(gw) as sock:
        started = time.monotonic()
        assert closed_by_server(sock, HEADER_TIMEOUT_S + 1.5)
    assert time.monotonic() - started > HEADER_TIMEOUT_S * 0.9


def test_keep_alive_connection_outlives_the_head_deadline(gw: Gateway) -> None:
    """Idle between requests is keep-alive's business (5 s), not the head deadline's;
    a later head that dawdles is dropped all the same."""
    with connect(gw) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        assert read_response(sock)[0] == 200
        time.sleep(HEADER_TIMEOUT_S * 1.5)
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
        assert read_response(sock)[0] == 200
        sock.sendall(b"GET /healthz HTTP/1.1\r\n")
        started = time.monotonic()
        assert closed_by_server(sock, HEADER_TIMEOUT_S + 1.5)
    assert time.monotonic() - started > HEADER_TIMEOUT_S * 0.9


def test_response_longer_than_the_head_deadline_completes(gw: Gateway) -> None:
    body = {"model": "slowpoke", "messages": [{"role": "user", "content": "go on"}],
            "max_tokens": 8, "stream": True}
    started = time.monotonic()
    with httpx.stream("POST", gw.base_url + "/chat/completions", json=body, timeout=30,
                      headers={"authorization": f"Bearer {TEST_KEY}"}) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert time.monotonic() - started > HEADER_TIMEOUT_S
    assert lines[-1] == "data: [DONE]"


# --- others are not held up ----------------------------------------------------------------

def flood_huge_headers(gw: Gateway, stop: threading.Event, sent: list[int]) -> None:
    """Open connection after connection, each sending a never-ending header."""
    while not stop.is_set():
        with connect(gw) as sock:
            sock.settimeout(0.5)
            try:
                sock.sendall(HUGE_START)
                while not stop.is_set():
                    sock.sendall(b"a" * 65536)
                    sent[0] += 65536
            except OSError:   # 431 and closed, or reading paused: start again
                pass


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def test_huge_headers_do_not_hold_up_other_clients(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=10)
    client.chat.completions.create(model="fast", messages=[{"role": "user", "content": "hi"}],
                                   max_tokens=4)
    rss_before = rss_bytes(gw.proc.pid)
    stop, sent = threading.Event(), [0]
    floods = [threading.Thread(target=flood_huge_headers, args=(gw, stop, sent))
              for _ in range(2)]
    for flood in floods:
        flood.start()
    try:
        time.sleep(0.3)
        for _ in range(5):
            started = time.monotonic()
            reply = client.chat.completions.create(
                model="fast", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
            assert time.monotonic() - started < 1.0
            assert reply.choices[0].message.content
        rss_growth = rss_bytes(gw.proc.pid) - rss_before
    finally:
        stop.set()
        for flood in floods:
            flood.join(5)
    assert sent[0] > 4 * 1024 * 1024, "the floods did not get going"
    assert rss_growth < 32 * 1024 * 1024, f"the server grew by {rss_growth >> 20} MiB"


def test_normal_and_streamed_requests_still_work(gw: Gateway) -> None:
    client = openai.OpenAI(base_url=gw.base_url, api_key=TEST_KEY, max_retries=0, timeout=10)
    hello: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
    reply = client.chat.completions.create(model="fast", messages=hello, max_tokens=8)
    assert reply.choices[0].message.content
    chunks = list(client.chat.completions.create(model="fast", messages=hello, max_tokens=8,
                                                 stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_pipelined_requests_are_each_answered(gw: Gateway) -> None:
    with connect(gw) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n" * 2)
        assert read_response(sock)[0] == 200
        assert read_response(sock)[0] == 200
