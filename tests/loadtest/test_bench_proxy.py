"""bench_proxy's arithmetic: medians over interleaved rounds, and the verdict on issue 8's targets."""

from __future__ import annotations

from loadtest.bench_proxy import Run, median_runs, verdict


def run(target: str, rps: float, p50: float = 1.0, c: int = 32, mode: str = "nonstream") -> Run:
    return Run(target, mode, c, round(rps * 5), 5.0, p50, p50 * 3, 0)


def test_the_median_of_the_rounds_is_reported_per_target() -> None:
    runs = [run("bare-aiohttp", 3000), run("routegate", 2500),
            run("bare-aiohttp", 2000), run("routegate", 2900),
            run("bare-aiohttp", 3400), run("routegate", 3100)]
    medians = {r.target: r for r in median_runs(runs)}
    assert round(medians["bare-aiohttp"].rps) == 3000
    assert round(medians["routegate"].rps) == 2900
    assert medians["routegate"].p99_ms == 3.0


def test_verdict_uses_issue_8_targets() -> None:
    runs = [run("bare-aiohttp", 3000), run("routegate", 2690),
            run("direct", 9000, p50=0.1, c=1), run("routegate", 900, p50=1.2, c=1)]
    lines = verdict(runs)
    assert "90%" in lines[0] and "NOT met" in lines[0]          # 2,690 / 3,000 = 89.7%
    assert "1.10 ms" in lines[1] and "NOT met" in lines[1]
    runs[1] = run("routegate", 2710)
    assert "(target >= 90%: met)" in verdict(runs)[0]
