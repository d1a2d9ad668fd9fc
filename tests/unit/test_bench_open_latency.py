"""The open-latency bench's page section: a row per round, then the medians."""

from __future__ import annotations

from bench.open_latency import report


def test_each_round_is_a_row_and_the_last_row_holds_the_medians() -> None:
    rounds = [{"latency_p50_ms": p50, "latency_p99_ms": p50 * 1.5, "sustained_per_second": rate,
               "last_after_start": 2.0, "controller_cpu_s": 0.5}
              for p50, rate in ((800.0, 90.0), (1000.0, 100.0), (700.0, 95.0))]
    text = report(["## head", ""], rounds, 200)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| round")]
    assert rows[:3] == ["| 1 | 800 | 1200 | 90.0 | 2.00 | 0.50 |", "| 2 | 1000 | 1500 | 100.0 | 2.00 | 0.50 |",
                        "| 3 | 700 | 1050 | 95.0 | 2.00 | 0.50 |"]
    assert rows[3] == "| median | 800 | 1200 | 95.0 | 2.00 | 0.50 |"
    assert text.startswith("## head\n") and "200 Jobs" in text
