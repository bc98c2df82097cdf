"""Issue 48's bar on everyday prompts: the report half of ``lab/data/everyday_prompts.jsonl``
(never fitted on: the selection half trained the demo fleet's classifier; but probes read
it while designing, see lab/everyday.py), routed by the demo config as ``model: auto``
is served."""

from __future__ import annotations

from collections import Counter

import pytest

from lab.everyday import CONFIG, half_of, label_lines, read_prompts, route_table, router_for


@pytest.fixture(scope="module")
def report() -> dict[str, Counter]:
    rows = read_prompts(half="report")
    assert sum(r["tier"] == "small" for r in rows) >= 100
    assert sum(r["tier"] == "large" for r in rows) >= 100
    return route_table(rows, router_for(CONFIG, None))[1]


def test_nine_in_ten_trivial_prompts_of_the_report_half_go_small(report) -> None:
    went = report["small"]
    assert went["small"] >= 0.9 * sum(went.values()), went


def test_three_in_four_hard_prompts_of_the_report_half_go_large(report) -> None:
    went = report["large"]
    assert went["large"] >= 0.75 * sum(went.values()), went


def test_the_halves_split_every_tier_and_labels_follow_the_fleets_intent() -> None:
    rows = read_prompts()
    assert len(rows) >= 500 and {half_of(r["prompt"]) for r in rows} == {"select", "report"}
    select = read_prompts(half="select")
    assert not {r["prompt"] for r in select} & {r["prompt"] for r in read_prompts(half="report")}
    lines = label_lines([{"tier": "medium", "prompt": "x"}])
    assert [line.split('"score": ')[1].rstrip("}") for line in lines] == ["0.0", "1.0", "1.0"]
