"""Traces: Azure rows scaled to an offered load, named mixes, JSONL round trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadtest.traces import (
    TRACES_DIR,
    TraceRequest,
    load_azure,
    merge,
    mix_trace,
    ramp,
    read_jsonl,
    scale,
    with_pool,
    with_quality,
    write_jsonl,
)

# A bursty toy trace: three requests close together, then a long gap, repeated.
TOY = [TraceRequest(t, 100 + i, 10 + i) for i, t in enumerate([0.0, 0.1, 0.2, 5.0, 5.1, 5.2, 10.0])]


def test_scale_fills_the_window_at_the_offered_rate() -> None:
    trace = scale(TOY, rps=2.0, duration_s=3.0)
    assert len(trace) == 6
    assert trace[0].t == 0.0 and all(0 <= r.t < 3.0 for r in trace)
    assert [r.t for r in trace] == sorted(r.t for r in trace)


def test_scale_keeps_bursts() -> None:
    trace = scale(TOY, rps=1.0, duration_s=6.0)
    gaps = [b.t - a.t for a, b in zip(trace, trace[1:], strict=False)]
    # within a burst the gap is 1/48 of the gap between bursts, at any load
    assert gaps[2] / gaps[0] == pytest.approx(4.8 / 0.1)


def test_scale_wraps_around_and_caps_outputs() -> None:
    trace = scale(TOY, rps=10.0, duration_s=2.0, offset=5, max_output=12)
    assert len(trace) == 20
    assert trace[0].prompt_tokens == 105 and trace[2].prompt_tokens == 100   # wrapped
    assert max(r.output_tokens for r in trace) == 12


def test_scale_of_nothing() -> None:
    assert scale(TOY, rps=0, duration_s=10) == []


@pytest.mark.skipif(not (TRACES_DIR / "azure_llm_2023_conv.csv").exists(), reason="no traces")
def test_azure_chat_trace_is_read_as_published() -> None:
    rows = load_azure("conv")
    assert len(rows) == 19366
    assert rows[0].t == 0.0 and 3400 < rows[-1].t < 3600
    assert sorted(r.prompt_tokens for r in rows)[len(rows) // 2] == pytest.approx(1020, abs=5)


def test_mix_trace_is_poisson_at_the_rate() -> None:
    trace = mix_trace("chat:0.5,rag:0.5", rps=20, duration_s=50, seed=3)
    assert 900 < len(trace) < 1100
    rag = [r for r in trace if r.kind == "rag"]
    assert rag and all(5 <= r.passages <= 20 for r in rag)
    assert mix_trace("agent", rps=5, duration_s=10, seed=1) == mix_trace("agent", 5, 10, seed=1)
    with pytest.raises(ValueError, match="unknown mix"):
        mix_trace("nope", 1, 1)


def test_ramp_merge_pool_and_quality() -> None:
    steps = ramp([1, 2], step_s=10, make=lambda rps, s: scale(TOY, rps, s))
    assert len(steps) == 30 and 10 <= steps[10].t < 20
    both = merge(scale(TOY, 1, 5), with_pool(scale(TOY, 1, 5), "batch"))
    assert {r.pool for r in both} == {"interactive", "batch"} and len(both) == 10
    asked = with_quality(scale(TOY, 10, 10), {0.6: 1, 0.9: 1}, seed=0)
    assert {r.quality for r in asked} == {0.6, 0.9}


def test_jsonl_round_trip(tmp_path: Path) -> None:
    trace = mix_trace("long_output", rps=2, duration_s=5, seed=2)
    write_jsonl(trace, tmp_path / "t.jsonl")
    assert read_jsonl(tmp_path / "t.jsonl") == trace
    (tmp_path / "bad.jsonl").write_text('{"t": 0, "prompt_tokens": 1}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        read_jsonl(tmp_path / "bad.jsonl")
