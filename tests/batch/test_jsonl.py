"""Input-file checks and line offsets: pure functions, no Redis."""

from __future__ import annotations

import io

import orjson

from batch.jsonl import check_input, scan_lines
from batch.lifecycle import assemble

CAP = 65536


def request(custom_id: str, **over: object) -> bytes:
    line: dict[str, object] = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
            "body": {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}}
    line.update(over)
    return orjson.dumps(line)


def test_offsets_skip_blank_lines_and_match_the_bytes() -> None:
    data = request("a") + b"\n\n  \n" + request("b") + b"\r\n" + request("c")
    lines = list(scan_lines(io.BytesIO(data)))
    assert [line.number for line in lines] == [1, 4, 5]
    for line in lines:
        assert data[line.offset:line.offset + line.length] == line.raw
        assert orjson.loads(line.raw)["custom_id"] in "abc"


def test_a_valid_file_counts_its_requests() -> None:
    data = b"\n".join(request(f"r{i}") for i in range(10)) + b"\n"
    report = check_input(io.BytesIO(data), max_lines=100, max_line_bytes=CAP)
    assert (report.lines, report.errors) == (10, [])


def test_each_kind_of_bad_line_is_named_with_its_number() -> None:
    lines = [request("ok"), b"{not json", b"[1, 2]", request(""), request("m", method="GET"),
             request("u", url="/v1/embeddings"), request("b", body="text"), request("ok")]
    report = check_input(io.BytesIO(b"\n".join(lines)), max_lines=100, max_line_bytes=CAP)
    assert report.error_count == 7
    assert report.errors[0] == "line 2: not valid JSON"
    assert report.errors[1] == "line 3: not a JSON object"
    assert report.errors[2].startswith("line 4: custom_id")
    assert report.errors[3].startswith("line 5: method")
    assert report.errors[4].startswith("line 6: url")  # only the first five are listed


def test_duplicate_custom_id_names_both_lines() -> None:
    report = check_input(io.BytesIO(request("x") + b"\n" + request("y") + b"\n" + request("x")),
                         max_lines=10, max_line_bytes=CAP)
    assert report.errors == ["line 3: custom_id 'x' is already used on line 1"]


def test_line_limit_stops_counting_early() -> None:
    data = b"\n".join(request(f"r{i}") for i in range(50))
    assert check_input(io.BytesIO(data), max_lines=20, max_line_bytes=CAP).lines == 21


def test_a_line_longer_than_the_request_cap_is_named_and_the_rest_still_checked() -> None:
    long = request("big", body={"model": "fast", "messages": [
        {"role": "user", "content": "x" * 5000}]})
    lines = [request("a"), long, request("a"), long + b"\r", request("b")]
    report = check_input(io.BytesIO(b"\n".join(lines)), max_lines=10, max_line_bytes=4096)
    assert report.lines == 5
    assert report.errors == [
        f"line 2: {len(long)} bytes, longer than the 4096-byte limit on a request (max_body_bytes)",
        "line 3: custom_id 'a' is already used on line 1",
        f"line 4: {len(long)} bytes, longer than the 4096-byte limit on a request (max_body_bytes)"]


def test_a_line_of_exactly_the_cap_passes() -> None:
    line = request("r")
    for data in (line + b"\n" + line, line + b"\r\n" + line + b"\r\n"):
        report = check_input(io.BytesIO(data), max_lines=10, max_line_bytes=len(line))
        assert (report.lines, report.error_count) == (2, 1), data  # only the duplicate id
    over = check_input(io.BytesIO(line + b"\n"), max_lines=10, max_line_bytes=len(line) - 1)
    assert over.errors == [f"line 1: {len(line)} bytes, longer than the {len(line) - 1}-byte "
                           "limit on a request (max_body_bytes)"]


def test_assemble_orders_results_by_input_line() -> None:
    results = {"b": b"1\to\t{\"b\":1}", "a": b"0\te\t{\"a\":1}", "c": b"2\to\t{\"c\":1}"}
    output, errors = assemble(results, [b"{\"unrun\":1}"])
    assert output == b"{\"b\":1}\n{\"c\":1}\n"
    assert errors == b"{\"a\":1}\n{\"unrun\":1}\n"
